"""A fitted TF-IDF vocabulary read by text: each feature's n-gram spelled out, and the feature of an n-gram.

The vocabulary is a trie of integer pairs (:mod:`xmtc.features.ngram_trie`), never strings, so both directions
are worked out from it: the names spell out every node once (:func:`~xmtc.features.ngram_trie.node_texts`; the
featurizer keeps them after the first call), a lookup follows one n-gram's path down the trie with
``searchsorted``. Separate from the estimator (:mod:`xmtc.features.tfidf`) because neither a fit nor a transform
needs them: they serve the callers that show features by name (explanations, :mod:`xmtc.models.explain`).
"""

from __future__ import annotations

import numpy as np

from .ngram_trie import Trie, node_texts

__all__ = ["feature_id", "feature_texts"]


def feature_texts(trie: Trie, n_features: int) -> list[str]:
    """The text of each of the ``n_features`` features of ``trie`` (tokens joined by one space), by feature id."""
    names: list[str] = [""] * n_features
    fmaps = [trie.uni_feature, *trie.ngram_feature]
    for level, fmap in zip(node_texts(trie.strings, trie.ngram_keys), fmaps):
        for i in np.flatnonzero(fmap >= 0).tolist():
            names[fmap[i]] = level[i]
    return names


def feature_id(trie: Trie, uni_index: dict[str, int], term: str) -> int | None:
    """The feature id of an n-gram given as its text (tokens joined by one space), None if not a feature of
    ``trie``; ``uni_index``: each unigram's position in ``trie.strings``."""
    parts = term.split(" ") if trie.ngram_keys else [term]
    n_uni = len(trie.strings)
    node = uni_index.get(parts[0], -1)
    for n, part in enumerate(parts[1:], start=2):
        u = uni_index.get(part, -1)
        if node < 0 or u < 0 or n - 2 >= len(trie.ngram_keys):
            return None
        keys = trie.ngram_keys[n - 2]
        key = node * n_uni + u
        j = int(np.searchsorted(keys, key))
        node = j if j < len(keys) and keys[j] == key else -1
    if node < 0:
        return None
    f = (trie.uni_feature if len(parts) == 1 else trie.ngram_feature[len(parts) - 2])[node]
    return int(f) if f >= 0 else None
