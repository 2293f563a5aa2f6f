"""The label-text route's cosines through an inverted index: per text, work in proportion to its n-grams' postings.

What: :func:`top_rows` gives, per row of a CSR matrix ``X`` (texts by n-grams), the ``k`` label rows with the
largest inner product, from the labels' matrix transposed (``T``: n-grams by labels, CSR, so row ``j`` lists
the labels whose text holds n-gram ``j`` -- an inverted index). Only the postings of the text's own n-grams
are read; the per-label accumulator is a scratch array that is cleared where it was touched.

Why: the route scores ~26k label texts for every text with the whole YSO vocabulary as the label file. A
dense product (and transposing the label matrix on each call) made that 50 ms p99 for one text; the work
the answer needs is the postings the text's n-grams hit.

Exactness: each product is summed in float32 in the order of the text's n-grams (its sorted column order),
as scipy's sparse product sums it, so a cosine is the same number whichever way it is asked for, one text
or a batch. Rows are non-negative (TF-IDF), which the kernel's bookkeeping relies on and checks.
The top ``k`` are ordered by cosine, then by label row (ties go to the lower row, never to the
order a partial sort happens to leave); a product of 0 is no match (-1, as fewer than ``k`` matches leave).
The best ``k`` are kept in a bounded heap (the worst of them at the root), O(log k) per kept candidate, then
heap-sorted: at ``k`` = 1000 (``xmtc evaluate``'s zero-shot depth) a sorted insertion's O(k) shifts were most
of a prediction. (product, row) pairs are distinct, so the order is total and the lists are the insertion's,
bit for bit (tests/test_route_top_rows.py).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit


def inverted(M: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The transposed label matrix as the arrays :func:`top_rows` reads: (indptr int64, label rows int32,
    float32 values), rows in ascending order within each n-gram."""
    T = sp.csr_matrix(sp.csr_matrix(M, dtype=np.float32).T)
    T.sort_indices()
    if T.nnz and not T.data.min() >= 0:
        raise ValueError("the label-text route's rows must be non-negative (TF-IDF)")
    return (np.ascontiguousarray(T.indptr, np.int64), np.ascontiguousarray(T.indices, np.int32),
            np.ascontiguousarray(T.data, np.float32))


def top_rows(X, index: tuple[np.ndarray, np.ndarray, np.ndarray], n_rows: int, k: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``X`` (a CSR matrix, or its ``(indptr, indices, data)`` with sorted indices) the ``k`` best of
    the ``n_rows`` label rows in ``index`` (:func:`inverted`): (positions int64, -1 padded; float32 products,
    0 padded), best first."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if not X.has_sorted_indices:
            X = X.sorted_indices()
        X = (X.indptr, X.indices, X.data)
    indptr, indices, data = X
    n = indptr.shape[0] - 1
    pos = np.full((n, k), -1, dtype=np.int64)
    val = np.zeros((n, k), dtype=np.float32)
    if n_rows and n and k:
        if len(data) and not np.min(data) >= 0:  # the kernel counts a row as touched once its sum leaves 0
            raise ValueError("the texts' rows must be non-negative (TF-IDF)")
        _top_rows(np.asarray(indptr, np.int64), np.asarray(indices, np.int32), np.asarray(data, np.float32),
                  *index, n_rows, pos, val)
    return pos, val


@njit(cache=True, nogil=True, inline="always")
def _worse(s, r, t, q):  # pragma: no cover - compiled
    """(product ``s``, row ``r``) ranks below (``t``, ``q``): a lower product, or the same and a higher row."""
    return s < t or (s == t and r > q)


@njit(cache=True, nogil=True)
def _sift_down(hv, hp, start, end):  # pragma: no cover - compiled
    """Restore the heap ``hv[:end]`` / ``hp[:end]`` (the worst at the root) below ``start``."""
    s = hv[start]
    r = hp[start]
    c = start
    while True:
        child = 2 * c + 1
        if child >= end:
            break
        if child + 1 < end and _worse(hv[child + 1], hp[child + 1], hv[child], hp[child]):
            child += 1
        if not _worse(hv[child], hp[child], s, r):
            break
        hv[c] = hv[child]
        hp[c] = hp[child]
        c = child
    hv[c] = s
    hp[c] = r


@njit(cache=True, nogil=True)
def _top_rows(x_ptr, x_ind, x_val, t_ptr, t_ind, t_val, n_rows, pos, val):  # pragma: no cover - compiled
    k = pos.shape[1]
    acc = np.zeros(n_rows, np.float32)
    touched = np.empty(n_rows + 1, np.int32)
    for i in range(x_ptr.shape[0] - 1):
        n = 0
        for a in range(x_ptr[i], x_ptr[i + 1]):
            j = x_ind[a]
            v = x_val[a]
            for p in range(t_ptr[j], t_ptr[j + 1]):
                r = t_ind[p]
                prod = v * t_val[p]
                if prod == 0.0:  # adds nothing (and so cannot list a row twice)
                    continue
                s = acc[r]
                touched[n] = r  # kept only on the first touch: no branch to mispredict
                n += s == 0.0
                acc[r] = s + prod
        # The k best so far in a bounded heap whose root is the worst of them (lowest product, then highest
        # row): a candidate that beats the root replaces it, O(log k); then a heap sort leaves them best first.
        # (product, row) pairs are distinct (a row is listed once), so the order is total and the result unique.
        hv = val[i]
        hp = pos[i]
        filled = 0
        for q in range(n):
            r = touched[q]
            s = acc[r]
            acc[r] = 0.0
            if not s > 0.0:
                continue
            if filled < k:  # sift up
                c = filled
                filled += 1
                while c > 0:
                    parent = (c - 1) >> 1
                    if not _worse(s, r, hv[parent], hp[parent]):
                        break
                    hv[c] = hv[parent]
                    hp[c] = hp[parent]
                    c = parent
                hv[c] = s
                hp[c] = r
            elif _worse(hv[0], hp[0], s, r):
                hv[0] = s
                hp[0] = r
                _sift_down(hv, hp, 0, k)
        for end in range(filled - 1, 0, -1):  # the worst to the back: best first
            s = hv[0]
            r = hp[0]
            hv[0] = hv[end]
            hp[0] = hp[end]
            hv[end] = s
            hp[end] = r
            _sift_down(hv, hp, 0, end)
