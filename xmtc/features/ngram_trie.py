"""The vocabulary of a TF-IDF featurizer as a trie of integer pairs: built from a fit's kept n-grams, named, and
grown by the n-grams of another trie.

Why a trie and not strings: a fit counts n-grams as integers (the id of the n-gram at token i is the interned
pair (id of the (n-1)-gram at i, unigram id at i+n-1), :mod:`xmtc.features.tfidf_kernels`), and the vocabulary
stays in that form: the unigrams a kept feature needs (their texts) and, per order n >= 2, a sorted int64 array
of keys ``parent * n_unigrams + unigram`` whose positions are the order-n node ids. Per order a feature map gives
each node's feature id (-1: a node that is only the prefix of a feature). Transform looks n-grams up with
``searchsorted``; the texts of features are rebuilt from the trie on demand. It is compact, loads without pickle
(:mod:`xmtc.features.tfidf_arrays` checks it) and never holds a string per n-gram.

Here, on the arrays alone (the estimator is :class:`xmtc.features.tfidf.TfidfFeaturizer`):

* :func:`alphabetical_order` numbers a fit's features as sklearn does, by n-gram text;
* :func:`pruned` keeps the nodes the features need, renumbered;
* :func:`node_texts` spells out every node;
* :func:`node_map`, :func:`lacking` and :func:`appended` grow a trie by the features of another one fitted on a
  learn's new texts (``TfidfFeaturizer.extended``): every old node and feature keeps its id, the added features
  follow the old ones.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

__all__ = ["Trie", "alphabetical_order", "appended", "lacking", "node_map", "node_texts", "pruned"]

_AT_MOST_SPACE = re.compile(r"[\x00- ]")


class Trie(NamedTuple):
    """A vocabulary: unigram texts, their feature ids, and per order n >= 2 the sorted keys and feature ids."""

    strings: list[str]
    uni_feature: np.ndarray
    ngram_keys: list[np.ndarray]
    ngram_feature: list[np.ndarray]

    @property
    def feature_maps(self) -> list[np.ndarray]:
        """Per order (unigrams first), each node's feature id, -1 for none."""
        return [self.uni_feature, *self.ngram_feature]


def alphabetical_order(level, local, keys, rank, uni_strings, n_uni) -> np.ndarray:
    """Permutation putting candidates (order n, id) in sklearn's order: sorted by n-gram text.

    Alphabetical order of n-grams equals the lexicographic order of their tuples of unigram ranks whenever tokens
    contain no character <= U+0020 (true for ``\\w``); otherwise the strings themselves are sorted."""
    max_n = int(level.max()) if len(level) else 1
    cols = np.full((max_n, len(level)), -1, np.int64)  # unigram ids, -1 pads shorter n-grams
    for n in range(1, max_n + 1):
        sel = np.flatnonzero(level == n)
        j = local[sel]
        for pos in range(n - 1, 0, -1):
            cols[pos, sel] = keys[pos][j] % n_uni
            j = keys[pos][j] // n_uni
        cols[0, sel] = j
    if "" not in uni_strings and _AT_MOST_SPACE.search("".join(uni_strings)) is None:
        ranked = np.where(cols >= 0, rank[cols], -1)
        return np.lexsort(ranked[::-1])
    names = _join_columns(cols, uni_strings)  # rare: tokens with control characters
    return np.array(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)


def _join_columns(cols: np.ndarray, uni_strings: list[str]) -> list[str]:
    """N-gram texts from a (max_n, k) array of unigram ids padded with -1."""
    names = [uni_strings[u] for u in cols[0].tolist()]
    for row in cols[1:]:
        names = [a + " " + uni_strings[u] if u >= 0 else a for a, u in zip(names, row.tolist())]
    return names


def pruned(featmap, keys, rank, uni_strings, n_uni) -> Trie:
    """Keep only the n-grams the features need, renumbered: unigrams alphabetically, order n by key.

    ``featmap[n-1]`` is the feature id of each order-n node of the fit's trie ``keys`` (plus a -1 sentinel),
    ``rank`` each unigram's alphabetical rank."""
    max_n = len(keys)
    need = [featmap[n][:-1] >= 0 for n in range(max_n)]
    for n in range(max_n - 1, 0, -1):  # an n-gram's parent (n-1)-gram and last unigram are needed
        j = np.flatnonzero(need[n])
        need[n - 1][keys[n][j] // n_uni] = True
        need[0][keys[n][j] % n_uni] = True
    uni_keep = np.flatnonzero(need[0])
    uni_keep = uni_keep[np.argsort(rank[uni_keep], kind="stable")]
    new_uni = np.full(n_uni, -1, np.int64)
    new_uni[uni_keep] = np.arange(len(uni_keep))
    n_new = len(uni_keep)
    ngram_keys, ngram_feature = [], []
    new_prev = new_uni
    for n in range(1, max_n):
        j = np.flatnonzero(need[n])
        new_key = new_prev[keys[n][j] // n_uni] * n_new + new_uni[keys[n][j] % n_uni]
        order = np.argsort(new_key, kind="stable")
        ngram_keys.append(new_key[order])
        ngram_feature.append(featmap[n][j[order]])
        new_prev = np.full(len(keys[n]), -1, np.int64)
        new_prev[j[order]] = np.arange(len(j))
    return Trie([uni_strings[u] for u in uni_keep.tolist()], featmap[0][uni_keep], ngram_keys, ngram_feature)


def node_texts(uni_strings: list[str], ngram_keys: list[np.ndarray]) -> list[list[str]]:
    """Text of every trie node, per order (nodes that are only prefixes included)."""
    levels = [uni_strings]
    n_uni = len(uni_strings)
    for keys in ngram_keys:
        parent = levels[-1]
        levels.append([parent[p] + " " + uni_strings[u]
                       for p, u in zip((keys // n_uni).tolist(), (keys % n_uni).tolist())])
    return levels


def node_map(old: Trie, uni_index: dict[str, int], other: Trie) -> list[np.ndarray]:
    """Per order, each node of ``other`` as a node of ``old`` (``uni_index``: its unigram ids by text), -1 where
    ``old`` lacks it."""
    n_uni, f_uni = len(old.strings), len(other.strings)
    get = uni_index.get
    uni_map = np.array([get(s, -1) for s in other.strings], dtype=np.int64)
    maps = [uni_map]
    for fkeys, okeys in zip(other.ngram_keys, old.ngram_keys):
        parent, last = maps[-1][fkeys // f_uni], uni_map[fkeys % f_uni]
        key = np.where((parent >= 0) & (last >= 0), parent * n_uni + last, -1)
        j = np.minimum(np.searchsorted(okeys, key), max(len(okeys) - 1, 0))
        found = (key >= 0) & (okeys[j] == key) if len(okeys) else np.zeros(len(fkeys), dtype=bool)
        maps.append(np.where(found, j, -1))
    return maps


def lacking(old: Trie, other: Trie, maps: list[np.ndarray], n_features: int) -> np.ndarray:
    """Per feature of ``other`` (``n_features`` of them), whether ``old`` lacks it as a feature (``maps``:
    :func:`node_map`)."""
    lacks = np.zeros(n_features, dtype=bool)
    for f, m, old_f in zip(other.feature_maps, maps, old.feature_maps):
        known = np.zeros(len(f), dtype=bool)
        known[m >= 0] = old_f[m[m >= 0]] >= 0
        lacks[f[(f >= 0) & ~known]] = True
    return lacks


def appended(old: Trie, other: Trie, maps: list[np.ndarray], new_id: np.ndarray) -> Trie:
    """``old`` with some features of ``other`` added: ``new_id`` is each feature of ``other``'s id in the grown
    vocabulary, -1 for one not added (plus a trailing -1). The nodes they need (their own and every prefix's, as
    :func:`pruned` keeps them) are appended; every old node and feature keeps its id (``maps``: :func:`node_map`)."""
    n_uni, f_uni = len(old.strings), len(other.strings)
    feat_of = [new_id[f] for f in other.feature_maps]  # per order, per node of other: its added feature or -1
    need = [fo >= 0 for fo in feat_of]
    for n in range(len(other.ngram_keys), 0, -1):
        j = np.flatnonzero(need[n])
        need[n - 1][other.ngram_keys[n - 1][j] // f_uni] = True
        need[0][other.ngram_keys[n - 1][j] % f_uni] = True
    # unigrams: the old ones keep their ids, the added ones follow
    uni_map = maps[0]
    add_uni = np.flatnonzero(need[0] & (uni_map < 0))
    uni_to = uni_map.copy()
    uni_to[add_uni] = n_uni + np.arange(add_uni.size)
    n_uni2 = n_uni + add_uni.size
    strings = old.strings + [other.strings[u] for u in add_uni.tolist()]
    uni_feature = np.concatenate([old.uni_feature, np.full(add_uni.size, -1, dtype=np.int64)])
    hit = feat_of[0] >= 0
    uni_feature[uni_to[hit]] = feat_of[0][hit]
    ngram_keys, ngram_feature = [], []
    old_to, other_to = np.arange(n_uni, dtype=np.int64), uni_to  # node ids of the order below, old and other
    for n in range(2, len(other.ngram_keys) + 2):
        okeys, fkeys = old.ngram_keys[n - 2], other.ngram_keys[n - 2]
        add = np.flatnonzero(need[n - 1] & (maps[n - 1] < 0))
        keys = np.concatenate([old_to[okeys // n_uni] * n_uni2 + okeys % n_uni,
                               other_to[fkeys[add] // f_uni] * n_uni2 + uni_to[fkeys[add] % f_uni]])
        order = np.argsort(keys, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        feature = np.concatenate([old.ngram_feature[n - 2], np.full(add.size, -1, dtype=np.int64)])[order]
        old_to = position[:okeys.size]
        other_to = np.full(fkeys.size, -1, dtype=np.int64)
        other_to[maps[n - 1] >= 0] = old_to[maps[n - 1][maps[n - 1] >= 0]]
        other_to[add] = position[okeys.size:]
        hit = feat_of[n - 1] >= 0
        feature[other_to[hit]] = feat_of[n - 1][hit]
        ngram_keys.append(keys[order])
        ngram_feature.append(feature)
    return Trie(strings, uni_feature, ngram_keys, ngram_feature)
