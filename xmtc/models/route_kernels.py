"""The label-text route's cosines through an inverted index: per text, work in proportion to its n-grams' postings.

The kernel is C (``xmtc_route_top_rows`` in ``xmtc/csrc/text.c``); this module prepares its arrays.

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

from ..native import lib, ptr


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
        x_ptr = np.ascontiguousarray(indptr, np.int64)
        x_ind = np.ascontiguousarray(indices, np.int32)
        x_val = np.ascontiguousarray(data, np.float32)
        t_ptr, t_ind, t_val = index
        acc = np.zeros(n_rows, np.float32)
        touched = np.empty(n_rows + 1, np.int32)
        lib().xmtc_route_top_rows(ptr(x_ptr, np.int64), ptr(x_ind, np.int32), ptr(x_val, np.float32), n,
                                  ptr(t_ptr, np.int64), ptr(t_ind, np.int32), ptr(t_val, np.float32), k,
                                  ptr(acc, np.float32), ptr(touched, np.int32), ptr(pos, np.int64),
                                  ptr(val, np.float32))
    return pos, val
