"""The few-shot stage's probability ``p_j(s)`` and what it is read from (:mod:`xmtc.models.few_shot`, whose
module doc has the definition and the measurements): the interpolated precision of a decision value against the
label's leave-one-out values and the sketch of its negatives' values."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

TAIL = 256  # highest negative decision values kept per label
# below them, the values at these ranks (1-based, among the label's negatives): N_j(s) within a factor of 2
RANKS = TAIL * 2 ** np.arange(1, 21, dtype=np.int64)


CHUNK = 1 << 22  # (text, label, sketch value) comparisons per block of :func:`probability`


def probability(values: np.ndarray, loo: np.ndarray, neg_tail: np.ndarray, neg_ranks: np.ndarray,
                omega: np.ndarray, best_below: np.ndarray | None = None) -> np.ndarray:
    """``p_j(s)`` (module doc) for decision values ``values`` (n, m): the precision of the threshold ``s``,
    ``A_j(s) / (A_j(s) + omega_j N_j(s) + 1)``, interpolated as in information retrieval: the best precision of
    any threshold at or below ``s`` (a text that scores above every leave-one-out value keeps the precision of
    the highest one instead of dropping to 0). ``loo`` (m, FEW) leave-one-out values, ``neg_tail`` (m, TAIL)
    the highest negative values and ``neg_ranks`` (m, len(RANKS)) the negative values at :data:`RANKS`, each
    row padded with ``-inf``; ``omega`` (m,) the documents each remembered row stood for when label j was
    fitted. Below the tail, ``N_j(s)`` is the largest rank whose value is at least ``s``: counted low by less
    than half, so ``p`` is high by less than 2x there. All labels at once, the texts in blocks of at most
    :data:`CHUNK` comparisons: a one-text prediction with hundreds of learned labels costs one vectorised pass
    (a loop over labels took 25 ms for 300), and no (n, m, TAIL) temporary is larger than a block.
    ``best_below``: :func:`interpolation_points` of these arrays, where the caller keeps them."""
    values = np.asarray(values, dtype=np.float64)
    n, m = values.shape
    out = np.zeros((n, m), dtype=np.float64)
    if m == 0 or n == 0:
        return out
    stats = _stats(loo, neg_tail, neg_ranks, omega)
    loo = stats[0]
    if best_below is None:
        best_below = _best_below(stats)
    step = max(1, CHUNK // (m * stats[1].shape[1]))
    for r0 in range(0, n, step):
        S = values[r0:r0 + step]
        at = (loo[None, :, :] <= S[:, :, None]).sum(axis=2)  # values at or below s, the padding among them
        below = np.take_along_axis(best_below[None, :, :], np.maximum(at - 1, 0)[:, :, None], axis=2)[:, :, 0]
        out[r0:r0 + step] = np.maximum(_ratio(S, *stats), np.where(at > 0, below, 0.0))
    return out


def interpolation_points(loo: np.ndarray, neg_tail: np.ndarray, neg_ranks: np.ndarray, omega: np.ndarray
                         ) -> np.ndarray:
    """Per label (m, FEW), the precision at each of its leave-one-out values sorted from the lowest up, the best
    so far (the ``-inf`` padding, no threshold: 0): what :func:`probability` interpolates with, the same for every
    text."""
    return _best_below(_stats(loo, neg_tail, neg_ranks, omega))


def _stats(loo, neg_tail, neg_ranks, omega) -> tuple[np.ndarray, ...]:
    """The arrays as :func:`_ratio` reads them: float64, each label's leave-one-out values sorted (padding first)."""
    return (np.sort(np.asarray(loo, dtype=np.float64), axis=1), np.asarray(neg_tail, dtype=np.float64),
            np.asarray(neg_ranks, dtype=np.float64), np.asarray(omega, dtype=np.float64))


def _best_below(stats: tuple[np.ndarray, ...]) -> np.ndarray:
    """:func:`interpolation_points` of arrays made by :func:`_stats`."""
    loo = stats[0]
    return np.maximum.accumulate(np.where(np.isfinite(loo), _ratio(loo.T, *stats).T, 0.0), axis=1)


def _ratio(S: np.ndarray, loo: np.ndarray, tail: np.ndarray, ranks: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """``A_j(s) / (A_j(s) + omega_j N_j(s) + 1)`` for every ``s = S[i, j]`` (see :func:`probability`)."""
    A = (loo[None, :, :] >= S[:, :, None]).sum(axis=2)
    N = (tail[None, :, :] >= S[:, :, None]).sum(axis=2)
    deeper = (ranks[None, :, :] >= S[:, :, None]).sum(axis=2)
    N = np.where(deeper > 0, RANKS[np.maximum(deeper - 1, 0)], N)
    return A / (A + omega[None, :] * N + 1.0)


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
