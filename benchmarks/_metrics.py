"""Stand-in for ``xmtc.metrics.evaluate`` while that module does not exist yet.

The harness must score every library with ONE implementation, so the parent process imports
``xmtc.metrics.evaluate`` when it is there and only falls back to this file otherwise (the
output then says so). Definitions, all in percent, averaged over every test document (documents
without labels count as 0, so all metrics share one denominator):

- P@k: hits among the top k / k.
- nDCG@k: DCG of the top k (gain 1, discount 1/log2(rank+1)) over the ideal DCG of
  min(k, |true labels|) hits.
- PSP@k: propensity-scored precision of Jain et al. (KDD'16), normalised as pyxclib does: the
  summed inverse propensities of the hits over the best achievable sum, ratio of totals.
  Propensity p_l = 1 / (1 + C (N_l + B)^-A), C = (ln N - 1)(B + 1)^A, A = 0.55, B = 1.5, where N_l
  is label l's train count and N the number of train documents.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def inverse_propensity(train_label_counts: np.ndarray, n_train: int, a: float = 0.55,
                       b: float = 1.5) -> np.ndarray:
    """1 / p_l, the weight a hit on label l earns in PSP@k (rare labels weigh more)."""
    counts = np.asarray(train_label_counts, dtype=np.float64)
    c = (np.log(n_train) - 1.0) * (b + 1.0) ** a
    return 1.0 + c * (counts + b) ** (-a)


def _hits(Y: sp.csr_matrix, indices: np.ndarray) -> np.ndarray:
    """Boolean (n, k): is indices[i, j] a true label of row i? One searchsorted, no row loop."""
    n, k = indices.shape
    n_cols = np.int64(max(Y.shape[1], int(indices.max(initial=-1)) + 1, 1))
    rows = np.repeat(np.arange(Y.shape[0], dtype=np.int64), np.diff(Y.indptr))
    true_keys = rows * n_cols + Y.indices.astype(np.int64)  # sorted: csr rows ascend, indices sorted
    query = np.arange(n, dtype=np.int64)[:, None] * n_cols + indices.astype(np.int64)
    if true_keys.size == 0:
        return np.zeros(indices.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(true_keys, query), true_keys.size - 1)
    return (true_keys[pos] == query) & (indices >= 0)


def _top_per_row_sum(Y: sp.csr_matrix, weights: np.ndarray, k: int) -> np.ndarray:
    """Per row, the sum of the k largest weights among its true labels (PSP's best case)."""
    rows = np.repeat(np.arange(Y.shape[0], dtype=np.int64), np.diff(Y.indptr))
    w = weights[Y.indices]
    order = np.lexsort((-w, rows))
    rank = np.arange(order.size) - Y.indptr[rows[order]]
    keep = rank < k
    return np.bincount(rows[order][keep], weights=w[order][keep], minlength=Y.shape[0])


def evaluate(Y_true: sp.csr_matrix, predictions: tuple[np.ndarray, np.ndarray], ks=(1, 3, 5),
             train_label_counts: np.ndarray | None = None, n_train: int | None = None) -> dict:
    """Metrics in percent; keys "P@k", "nDCG@k" and, with train counts, "PSP@k" for each k."""
    indices = np.asarray(predictions[0])
    Y = sp.csr_matrix(Y_true, dtype=np.float32)
    Y.sum_duplicates()
    Y.sort_indices()
    Y.data[:] = 1.0
    if indices.ndim != 2 or indices.shape[0] != Y.shape[0]:
        raise ValueError(f"predictions have shape {indices.shape}, expected ({Y.shape[0]}, k)")
    if indices.shape[1] < max(ks):
        raise ValueError(f"predictions hold top-{indices.shape[1]}, metrics need top-{max(ks)}")
    hits = _hits(Y, indices)
    n = max(Y.shape[0], 1)
    n_true = np.diff(Y.indptr)
    discount = 1.0 / np.log2(np.arange(2, max(ks) + 2))
    out: dict[str, float] = {}
    for k in ks:
        out[f"P@{k}"] = 100.0 * hits[:, :k].sum() / (k * n)
    for k in ks:
        dcg = (hits[:, :k] * discount[:k]).sum(axis=1)
        ideal = np.concatenate([[0.0], np.cumsum(discount[:k])])[np.minimum(n_true, k)]
        out[f"nDCG@{k}"] = 100.0 * float(np.sum(np.divide(dcg, ideal, out=np.zeros_like(dcg),
                                                           where=ideal > 0))) / n
    if train_label_counts is not None and n_train:
        counts = np.zeros(Y.shape[1], dtype=np.float64)
        tc = np.asarray(train_label_counts, dtype=np.float64)
        counts[: min(tc.size, counts.size)] = tc[: counts.size]
        inv_p = inverse_propensity(counts, n_train)
        safe_idx = np.where(indices >= 0, indices, 0)
        inv_p_pred = np.where(hits, inv_p[np.minimum(safe_idx, inv_p.size - 1)], 0.0)
        for k in ks:
            best = _top_per_row_sum(Y, inv_p, k).sum()
            out[f"PSP@{k}"] = 100.0 * float(inv_p_pred[:, :k].sum() / best) if best > 0 else 0.0
    return out
