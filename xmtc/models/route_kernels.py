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
        filled = 0  # pos[i, :filled] / val[i, :filled]: the best so far, best first
        for q in range(n):
            r = touched[q]
            s = acc[r]
            acc[r] = 0.0
            if not s > 0.0:
                continue
            if filled == k and not (s > val[i, k - 1] or (s == val[i, k - 1] and r < pos[i, k - 1])):
                continue
            slot = filled if filled < k else k - 1
            while slot > 0 and (s > val[i, slot - 1] or (s == val[i, slot - 1] and r < pos[i, slot - 1])):
                val[i, slot] = val[i, slot - 1]
                pos[i, slot] = pos[i, slot - 1]
                slot -= 1
            val[i, slot] = s
            pos[i, slot] = r
            if filled < k:
                filled += 1
