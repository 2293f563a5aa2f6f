"""The few-shot stage's probability ``p_j(s)`` and what it is read from (:mod:`xmtc.models.few_shot`, whose
module doc has the definition and the measurements): the interpolated precision of a decision value against the
label's leave-one-out values and the sketch of its negatives' values."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

TAIL = 256  # highest negative decision values kept per label
# below them, the values at these ranks (1-based, among the label's negatives): N_j(s) within a factor of 2
RANKS = TAIL * 2 ** np.arange(1, 21, dtype=np.int64)


def probability(values: np.ndarray, loo: np.ndarray, neg_tail: np.ndarray, neg_ranks: np.ndarray,
                omega: np.ndarray) -> np.ndarray:
    """``p_j(s)`` (module doc) for decision values ``values`` (n, m): the precision of the threshold ``s``,
    ``A_j(s) / (A_j(s) + omega_j N_j(s) + 1)``, interpolated as in information retrieval: the best precision of
    any threshold at or below ``s`` (a text that scores above every leave-one-out value keeps the precision of
    the highest one instead of dropping to 0). ``loo`` (m, FEW) leave-one-out values, ``neg_tail`` (m, TAIL)
    the highest negative values and ``neg_ranks`` (m, len(RANKS)) the negative values at :data:`RANKS`, each
    row padded with ``-inf``; ``omega`` (m,) the documents each remembered row stood for when label j was
    fitted. Below the tail, ``N_j(s)`` is the largest rank whose value is at least ``s``: counted low by less
    than half, so ``p`` is high by less than 2x there. One label at a time (sorted searches): no (n, m, TAIL)
    temporary."""
    values = np.asarray(values, dtype=np.float64)
    out = np.zeros(values.shape, dtype=np.float64)
    for j in range(values.shape[1]):
        ratio = _precision(loo[j], neg_tail[j], neg_ranks[j], float(omega[j]))
        points = np.sort(loo[j][np.isfinite(loo[j])].astype(np.float64))
        out[:, j] = ratio(values[:, j])
        if points.size:
            best_below = np.maximum.accumulate(ratio(points))
            at = np.searchsorted(points, values[:, j], side="right")  # leave-one-out values at or below s
            out[:, j] = np.maximum(out[:, j], np.where(at > 0, best_below[np.maximum(at - 1, 0)], 0.0))
    return out


def _precision(loo: np.ndarray, tail: np.ndarray, ranks: np.ndarray, omega: float):
    """``s -> A(s) / (A(s) + omega N(s) + 1)`` for one label (see :func:`probability`)."""
    loo_up, tail_up, ranks_up = (np.sort(np.asarray(a, dtype=np.float64)) for a in (loo, tail, ranks))

    def ratio(s: np.ndarray) -> np.ndarray:
        A = loo_up.size - np.searchsorted(loo_up, s, side="left")
        N = tail_up.size - np.searchsorted(tail_up, s, side="left")
        deeper = ranks_up.size - np.searchsorted(ranks_up, s, side="left")
        N = np.where(deeper > 0, RANKS[np.maximum(deeper - 1, 0)], N)
        return A / (A + omega * N + 1.0)

    return ratio


def negative_sketch(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(tail, ranks)`` of one label's negative values: the :data:`TAIL` highest, best first, and the value of
    rank ``r`` (1-based, the r-th highest) for each ``r`` in :data:`RANKS`; ``-inf`` where there are fewer."""
    desc = -np.sort(-np.asarray(values, dtype=np.float32))
    tail = np.full(TAIL, -np.inf, dtype=np.float32)
    tail[:min(TAIL, desc.size)] = desc[:TAIL]
    ranks = np.full(RANKS.size, -np.inf, dtype=np.float32)
    within = RANKS <= desc.size
    ranks[within] = desc[RANKS[within] - 1]
    return tail, ranks


def _decision(X: sp.csr_matrix, W: sp.csc_matrix, bias: float) -> np.ndarray:
    """Dense decision values ``X W[:d] + bias W[d]`` (n, columns)."""
    d = W.shape[0] - 1
    out = np.asarray((sp.csr_matrix(X) @ W[:d]).todense(), dtype=np.float64)
    return out + bias * W[d].toarray().ravel()[None, :]
