"""Balanced hierarchical (spherical) k-means: label embeddings -> :class:`~xmtc.index.tree.LabelTree`.

Shape of the tree. With ``B = branching`` and ``m = max_leaf_size`` the tree has the fewest cluster
levels ``D`` with ``ceil(L / B^D) <= m`` (``D = ceil(log_B(L / m))``): every cluster splits into
``min(B, size)`` balanced parts per level, so level ``t`` has ``B^t`` nodes whenever ``L >= B^D``
(always when ``m >= B``), e.g. 25,147 labels, B=16, m=100 -> 16 -> 256 -> 25,147. With
``L <= m`` the tree is flat (depth 0, ``chain == [ones((L, 1))]``). When ``B^D > L`` (only possible
with ``m < B``), clusters smaller than ``B`` split into singletons, so no node is ever empty.

How a B-way split is made (as PECOS does it): recursive balanced 2-means. A cluster of ``n`` labels
to be cut into ``k`` parts is split in two, the left half receiving the first ``ceil(k/2)`` of the
``k`` balanced part sizes (``n // k`` or ``n // k + 1``), and each half is cut again, so the final
``k`` parts differ in size by at most one. A balanced 2-means split ranks the labels by
``x . (c1/|c1| - c2/|c2|)`` (difference of cosine similarities to the two centroids) and cuts the
ranking at the target size; centroids are recomputed from the two halves (``c2 = total - c1``, so
only the left half is summed) until the split stops changing or ``max_iter`` rounds have passed.
With ``spherical=False`` the same ranking uses the difference of the means (Euclidean k-means: the
squared-norm terms are constant within one split and do not change the ranking).

Why it is fast: every round costs one pass over the cluster's non-zeros (scores) and one over
half of them (centroid), with centroids held dense over the feature space in per-thread scratch
that is cleared through the cluster's support only. All clusters of one binary level are split in
parallel (C threads, ``xmtc/csrc/kmeans.c``); while a level has fewer clusters than threads, the
scoring pass of each cluster is itself split across threads.

Determinism: initial centroids are two distinct random members of each cluster, drawn in Python
from ``numpy.random.default_rng(seed)`` in a fixed order; each cluster's arithmetic runs in a fixed
order whatever the thread count, and ties in the ranking keep the current label order. So the same
input and seed give the same tree for any ``n_threads``.

Labels whose embedding is all zero (no positive instance in PIFA) score 0 against any centroid
difference and fill whatever room the balanced cut leaves; duplicate embeddings tie and are split
by their order, so neither can produce an empty or unbalanced cluster.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import native
from ..errors import ConfigError
from ..native import ptr
from .pifa import normalize_rows
from .tree import LabelTree, level_splits, tree_depth

__all__ = ["build_label_tree", "tree_depth"]


# ------------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------------
def _as_embedding(label_emb, spherical: bool) -> sp.csr_matrix:
    if sp.issparse(label_emb):
        E = sp.csr_matrix(label_emb, dtype=np.float32)
    else:
        A = np.asarray(label_emb)
        if A.ndim != 2:
            raise ConfigError(f"label embeddings must be a 2-D matrix, got shape {A.shape}")
        E = sp.csr_matrix(A.astype(np.float32, copy=False))
    if E.shape[0] == 0:
        raise ConfigError("cannot build a label tree for 0 labels")
    if not np.all(np.isfinite(E.data)):
        raise ConfigError("label embeddings contain NaN or infinite values")
    E = normalize_rows(E) if spherical else E.copy()
    E.sum_duplicates()
    E.sort_indices()
    return E


def _int_param(name: str, value, minimum: int) -> int:
    """``value`` as an int if it is a whole number >= minimum; anything else (None, text, NaN) is a ConfigError."""
    try:
        ok = int(value) == value and value >= minimum
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def build_label_tree(label_emb, *, branching: int = 16, max_leaf_size: int = 100, seed: int = 0,
                     max_iter: int = 20, n_threads: int | None = None, spherical: bool = True,
                     shape: str = "full") -> LabelTree:
    """Cluster labels into a balanced tree by recursive balanced (spherical) k-means; see the module doc.

    ``label_emb`` is csr or dense ``(L, d)`` (e.g. :func:`xmtc.index.pifa.pifa`); rows are
    L2-normalised first when ``spherical``. ``n_threads=None`` uses every CPU the process may use.
    ``shape`` says how many children each level's nodes get (:func:`~xmtc.index.tree.level_splits`):
    ``full`` (``branching`` at every level) or ``binary`` (PECOS's leaf count, a power of two).
    """
    branching = _int_param("branching", branching, 2)
    max_leaf_size = _int_param("max_leaf_size", max_leaf_size, 1)
    max_iter = _int_param("max_iter", max_iter, 1)
    E = _as_embedding(label_emb, spherical)
    L, d = E.shape
    splits = level_splits(L, branching, max_leaf_size, shape)
    depth = len(splits)
    if depth == 0:
        return LabelTree.from_parents([np.zeros(L, dtype=np.int32)])

    indptr = E.indptr.astype(np.int64, copy=False)
    indices = E.indices.astype(np.int32, copy=False)
    data = E.data
    rng = np.random.default_rng(seed)
    perm = np.arange(L, dtype=np.int64)
    bounds = [np.array([0, L], dtype=np.int64)]  # bounds[t]: level-t clusters are perm[b[i]:b[i+1]]
    n_threads = native.resolve_threads(n_threads)
    kern = native.lib()
    for level in range(depth):
        starts, ends = bounds[-1][:-1], bounds[-1][1:]
        parts = np.minimum(splits[level], ends - starts)
        while np.any(parts > 1):
            split = parts > 1
            s, e, k = starts[split], ends[split], parts[split]
            n = e - s
            k_left = (k + 1) // 2
            n_left = k_left * (n // k) + np.minimum(n % k, k_left)
            i1 = rng.integers(0, n)
            i2 = (i1 + 1 + rng.integers(0, n - 1)) % n
            native.check(kern.xmtc_kmeans_split_level(
                ptr(indptr, np.int64), ptr(indices, np.int32), ptr(data, np.float32), d, ptr(perm, np.int64),
                ptr(s, np.int64), ptr(e, np.int64), ptr(n_left, np.int64), ptr(i1, np.int64), ptr(i2, np.int64),
                s.size, max_iter, int(bool(spherical)), n_threads), "k-means")
            # children replace their parent segment, left part first
            new_starts = np.concatenate([starts, s + n_left])
            new_ends = np.concatenate([ends, e])
            new_parts = np.concatenate([parts, k - k_left])
            new_ends[np.flatnonzero(split)] = s + n_left
            new_parts[np.flatnonzero(split)] = k_left
            order = np.argsort(new_starts, kind="stable")
            starts, ends, parts = new_starts[order], new_ends[order], new_parts[order]
        bounds.append(np.append(starts, L).astype(np.int64))

    parents = []
    for t in range(1, depth + 1):
        parents.append(np.searchsorted(bounds[t - 1], bounds[t][:-1], side="right") - 1)
    leaf_of_position = np.searchsorted(bounds[depth], np.arange(L), side="right") - 1
    leaf = np.empty(L, dtype=np.int64)
    leaf[perm] = leaf_of_position
    parents.append(leaf)
    return LabelTree.from_parents(parents)
