"""Growing a fitted TF-IDF vocabulary by a learn's new documents (:meth:`TfidfFeaturizer.extended
<xmtc.features.tfidf.TfidfFeaturizer.extended>`).

Separate from the estimator (:mod:`xmtc.features.tfidf`) because only the models that learn after training
(:mod:`xmtc.models.learning`) ever grow a vocabulary: a fit and a transform never come here. Growing keeps every
old feature's id and idf and appends, after them, what a fit on all the documents would keep of the new n-grams.
The trie arithmetic is :mod:`xmtc.features.ngram_trie`'s (``node_map``, ``lacking``, ``appended``); the record of
the n-grams the earlier documents held too rarely (or too often) to keep, and their counts, is
:mod:`xmtc.features.rare_ngrams`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from .ngram_trie import appended, lacking, node_map
from .rare_ngrams import counted_on, feature_hashes
from .tfidf_kernels import as_text_list

__all__ = ["extended"]


def extended(featurizer, texts: Sequence[str], n_docs_before: int | None = None) -> tuple[object, int]:
    """A copy of the fitted TfidfFeaturizer ``featurizer`` whose vocabulary also holds what a fit on all the
    documents would keep of the n-grams of ``texts`` (a learn's new documents) that it lacks: counted in ``texts``
    plus, for n-grams the earlier documents held too rarely (or too often) to keep, the count remembered from them
    (the featurizer keeps the n-grams seen in fewer than ``min_df`` texts or more than ``max_df``, by 64-bit hash,
    :data:`~xmtc.features.rare_ngrams.RARE_MAX` at most), kept by ``min_df`` / ``max_df`` on all ``N`` documents,
    appended as features ``n_features_, n_features_ + 1, ...`` in alphabetical order, each with the idf of that
    fit: ``ln((N + s) / (df + s)) + 1`` (``s`` = 1 with ``smooth_idf``).

    ``N`` is the earlier documents (``n_docs_``, else ``n_docs_before``) plus ``len(texts)``. Every old
    feature keeps its id and its idf, so a text without new n-grams gets the row it got before, and one with
    some differs only by the row norm; weights trained on the old features stay valid, and those of the new
    ones start at 0. The remembered counts take in the n-grams of ``texts`` that stay below ``min_df``, for
    the next learn. ``max_features`` caps the grown vocabulary: the new n-grams in most documents fill what
    room it leaves. Returns ``(featurizer, n_added)``; ``featurizer`` is not changed. A featurizer saved without
    the rare n-grams (before they were kept) counts the new n-grams in ``texts`` alone."""
    featurizer._check_fitted()
    texts = as_text_list(texts)
    min_n, max_n, pattern = featurizer._frozen[0], featurizer._frozen[1], featurizer._frozen[2]
    before = featurizer.n_docs_ if featurizer.n_docs_ is not None else n_docs_before
    if before is None:
        raise ConfigError("extended() needs the number of documents the vocabulary was counted on")
    n_docs = int(before) + len(texts)
    if not texts:
        return featurizer, 0
    cls = type(featurizer)
    fresh = cls(**{**featurizer.get_params(), "max_features": None, "min_df": 1, "max_df": 1.0})
    fresh.n_threads = featurizer.n_threads
    try:
        X_fresh = fresh.fit_transform(texts)
    except ConfigError:  # no text holds a token
        return featurizer, 0
    df = np.bincount(X_fresh.indices, minlength=fresh.n_features_).astype(np.int64)
    old, new = featurizer._trie(), fresh._trie()
    maps = node_map(old, featurizer._uni_index, new)  # each node of the fresh trie as a node of this one (or -1)
    cand = np.flatnonzero(lacking(old, new, maps, fresh.n_features_))  # the fresh features this one lacks
    low, high = featurizer._df_bounds(n_docs)
    room = None if featurizer.max_features is None else max(featurizer.max_features - featurizer.n_features_, 0)
    kept, new_df, record = counted_on(featurizer._rare, feature_hashes(new, fresh.n_features_)[cand], df[cand],
                                      low, high, room)
    if kept.size == 0:
        grown = _copy_vocabulary(featurizer)
    else:
        new_id = np.full(fresh.n_features_ + 1, -1, dtype=np.int64)  # fresh feature -> grown id (-1 sentinel)
        new_id[cand[kept]] = featurizer.n_features_ + np.arange(kept.size)
        grown = cls(**featurizer.get_params())
        grown.n_threads = featurizer.n_threads
        grown.idf_ = np.concatenate([featurizer.idf_, featurizer._idf(new_df, n_docs)])
        grown.n_features_ = int(featurizer.n_features_ + kept.size)
        grown._set_trie(appended(old, new, maps, new_id))
        grown._ready(min_n, max_n, pattern, featurizer._analyzer)
    grown._rare, grown.n_docs_ = record, n_docs
    return grown, int(kept.size)


def _copy_vocabulary(featurizer):
    """A copy of ``featurizer`` sharing its (never modified) vocabulary arrays."""
    other = type(featurizer)(**featurizer.get_params())
    other.n_threads = featurizer.n_threads
    other.idf_, other.n_features_ = featurizer.idf_, featurizer.n_features_
    other._set_trie(featurizer._trie())
    other._ready(featurizer._frozen[0], featurizer._frozen[1], featurizer._frozen[2], featurizer._analyzer)
    other._rare, other.n_docs_ = featurizer._rare, featurizer.n_docs_
    return other
