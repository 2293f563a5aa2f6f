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
parallel (numba ``prange``); while a level has fewer clusters than threads, the scoring pass of
each cluster is itself split across threads.

Determinism: initial centroids are two distinct random members of each cluster, drawn in Python
from ``numpy.random.default_rng(seed)`` in a fixed order; each cluster's arithmetic runs in a fixed
order whatever the thread count, and ties in the ranking keep the current label order. So the same
input and seed give the same tree for any ``n_threads``.

Labels whose embedding is all zero (no positive instance in PIFA) score 0 against any centroid
difference and fill whatever room the balanced cut leaves; duplicate embeddings tie and are split
by their order, so neither can produce an empty or unbalanced cluster.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from ..errors import ConfigError
from .pifa import normalize_rows
from .tree import LabelTree, tree_depth

__all__ = ["build_label_tree", "tree_depth"]


# ------------------------------------------------------------------------------------------------------
# numba kernels
# ------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _score_rows(indptr, indices, data, rows, w, scores):
    for i in range(rows.shape[0]):
        r = rows[i]
        s = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            s += data[k] * w[indices[k]]
        scores[i] = s


@njit(cache=True, nogil=True, parallel=True)
def _score_rows_parallel(indptr, indices, data, rows, w, scores):
    for i in prange(rows.shape[0]):
        r = rows[i]
        s = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            s += data[k] * w[indices[k]]
        scores[i] = s


@njit(cache=True, nogil=True)
def _split_one(indptr, indices, data, rows, n_left, i1, i2, max_iter, spherical, parallel_scores,
               total, c1, w, mark):
    """Balanced 2-means on ``rows``; returns them reordered, left part first (each part keeps its order).

    ``total``, ``c1``, ``w`` (float64, d) and ``mark`` (uint8, d) are zero on entry and on exit.
    """
    n = rows.shape[0]
    nnz = 0
    for i in range(n):
        nnz += indptr[rows[i] + 1] - indptr[rows[i]]
    support = np.empty(nnz, dtype=np.int32)
    n_sup = 0
    for i in range(n):
        r = rows[i]
        for k in range(indptr[r], indptr[r + 1]):
            j = indices[k]
            if mark[j] == 0:
                mark[j] = 1
                support[n_sup] = j
                n_sup += 1
            total[j] += data[k]
    support = support[:n_sup]

    # initial centroids: two distinct members (difference of their unit directions / of themselves)
    for side in range(2):
        r = rows[i1] if side == 0 else rows[i2]
        sign = 1.0 if side == 0 else -1.0
        norm = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            norm += np.float64(data[k]) * data[k]
        scale = sign
        if spherical:
            scale = sign / np.sqrt(norm) if norm > 0 else 0.0
        for k in range(indptr[r], indptr[r + 1]):
            w[indices[k]] += scale * data[k]

    scores = np.empty(n, dtype=np.float64)
    left = np.zeros(n, dtype=np.bool_)
    new_left = np.zeros(n, dtype=np.bool_)
    n_right = n - n_left
    for it in range(max_iter):
        if parallel_scores:
            _score_rows_parallel(indptr, indices, data, rows, w, scores)
        else:
            _score_rows(indptr, indices, data, rows, w, scores)
        order = np.argsort(-scores, kind="mergesort")
        new_left[:] = False
        for i in range(n_left):
            new_left[order[i]] = True
        changed = it == 0
        if not changed:
            for i in range(n):
                if new_left[i] != left[i]:
                    changed = True
                    break
        if not changed:
            break
        left[:] = new_left
        if it == max_iter - 1:
            break
        # centroids of the new halves: c1 summed, c2 = total - c1
        for t in range(n_sup):
            c1[support[t]] = 0.0
        for i in range(n):
            if left[i]:
                r = rows[i]
                for k in range(indptr[r], indptr[r + 1]):
                    c1[indices[k]] += data[k]
        if spherical:
            n1 = 0.0
            n2 = 0.0
            for t in range(n_sup):
                j = support[t]
                a = c1[j]
                b = total[j] - a
                n1 += a * a
                n2 += b * b
            s1 = 1.0 / np.sqrt(n1) if n1 > 0 else 0.0
            s2 = 1.0 / np.sqrt(n2) if n2 > 0 else 0.0
        else:
            s1 = 1.0 / n_left
            s2 = 1.0 / n_right
        for t in range(n_sup):
            j = support[t]
            w[j] = c1[j] * s1 - (total[j] - c1[j]) * s2

    out = np.empty_like(rows)
    a = 0
    b = n_left
    for i in range(n):
        if left[i]:
            out[a] = rows[i]
            a += 1
        else:
            out[b] = rows[i]
            b += 1
    for t in range(n_sup):
        j = support[t]
        total[j] = 0.0
        c1[j] = 0.0
        w[j] = 0.0
        mark[j] = 0
    return out


@njit(cache=True, nogil=True, parallel=True)
def _split_segments(indptr, indices, data, n_features, perm, starts, ends, n_lefts, init1, init2,
                    max_iter, spherical, n_chunks):
    """Split every segment ``perm[starts[s]:ends[s]]`` in place, one thread per segment."""
    n_seg = starts.shape[0]
    for c in prange(n_chunks):
        total = np.zeros(n_features, dtype=np.float64)
        c1 = np.zeros(n_features, dtype=np.float64)
        w = np.zeros(n_features, dtype=np.float64)
        mark = np.zeros(n_features, dtype=np.uint8)
        for s in range(c, n_seg, n_chunks):
            rows = perm[starts[s]:ends[s]].copy()
            perm[starts[s]:ends[s]] = _split_one(indptr, indices, data, rows, n_lefts[s], init1[s], init2[s],
                                                 max_iter, spherical, False, total, c1, w, mark)


@njit(cache=True, nogil=True)
def _split_segments_serial(indptr, indices, data, n_features, perm, starts, ends, n_lefts, init1, init2,
                           max_iter, spherical):
    """Same as :func:`_split_segments` for few, large segments: the scoring pass runs in parallel."""
    total = np.zeros(n_features, dtype=np.float64)
    c1 = np.zeros(n_features, dtype=np.float64)
    w = np.zeros(n_features, dtype=np.float64)
    mark = np.zeros(n_features, dtype=np.uint8)
    for s in range(starts.shape[0]):
        rows = perm[starts[s]:ends[s]].copy()
        perm[starts[s]:ends[s]] = _split_one(indptr, indices, data, rows, n_lefts[s], init1[s], init2[s],
                                             max_iter, spherical, True, total, c1, w, mark)


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


def _threads(n_threads: int | None) -> int:
    if n_threads is None or n_threads <= 0:
        return numba.config.NUMBA_NUM_THREADS
    return min(int(n_threads), numba.config.NUMBA_NUM_THREADS)


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
                     max_iter: int = 20, n_threads: int | None = None, spherical: bool = True) -> LabelTree:
    """Cluster labels into a balanced tree by recursive balanced (spherical) k-means; see the module doc.

    ``label_emb`` is csr or dense ``(L, d)`` (e.g. :func:`xmtc.index.pifa.pifa`); rows are
    L2-normalised first when ``spherical``. ``n_threads=None`` uses numba's default thread count.
    """
    branching = _int_param("branching", branching, 2)
    max_leaf_size = _int_param("max_leaf_size", max_leaf_size, 1)
    max_iter = _int_param("max_iter", max_iter, 1)
    E = _as_embedding(label_emb, spherical)
    L, d = E.shape
    depth = tree_depth(L, branching, max_leaf_size)
    if depth == 0:
        return LabelTree.from_parents([np.zeros(L, dtype=np.int32)])

    indptr = E.indptr.astype(np.int64, copy=False)
    indices = E.indices.astype(np.int32, copy=False)
    data = E.data
    rng = np.random.default_rng(seed)
    perm = np.arange(L, dtype=np.int64)
    bounds = [np.array([0, L], dtype=np.int64)]  # bounds[t]: level-t clusters are perm[b[i]:b[i+1]]
    n_threads = _threads(n_threads)
    old_threads = numba.get_num_threads()
    numba.set_num_threads(n_threads)
    try:
        for _ in range(depth):
            starts, ends = bounds[-1][:-1], bounds[-1][1:]
            parts = np.minimum(branching, ends - starts)
            while np.any(parts > 1):
                split = parts > 1
                s, e, k = starts[split], ends[split], parts[split]
                n = e - s
                k_left = (k + 1) // 2
                n_left = k_left * (n // k) + np.minimum(n % k, k_left)
                i1 = rng.integers(0, n)
                i2 = (i1 + 1 + rng.integers(0, n - 1)) % n
                args = (indptr, indices, data, d, perm, s, e, n_left, i1, i2, max_iter, spherical)
                if s.size >= n_threads:
                    _split_segments(*args, n_threads)
                else:
                    _split_segments_serial(*args)
                # children replace their parent segment, left part first
                new_starts = np.concatenate([starts, s + n_left])
                new_ends = np.concatenate([ends, e])
                new_parts = np.concatenate([parts, k - k_left])
                new_ends[np.flatnonzero(split)] = s + n_left
                new_parts[np.flatnonzero(split)] = k_left
                order = np.argsort(new_starts, kind="stable")
                starts, ends, parts = new_starts[order], new_ends[order], new_parts[order]
            bounds.append(np.append(starts, L).astype(np.int64))
    finally:
        numba.set_num_threads(old_threads)

    parents = []
    for t in range(1, depth + 1):
        parents.append(np.searchsorted(bounds[t - 1], bounds[t][:-1], side="right") - 1)
    leaf_of_position = np.searchsorted(bounds[depth], np.arange(L), side="right") - 1
    leaf = np.empty(L, dtype=np.int64)
    leaf[perm] = leaf_of_position
    parents.append(leaf)
    return LabelTree.from_parents(parents)
