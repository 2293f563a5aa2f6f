"""The few-shot stage's word scorer: a linear ranker per label learned from a few documents, fitted on the
model's own features against every remembered training row, with the out-of-sample values its probability is
counted on (:mod:`xmtc.models.few_shot`, ``few_shot="words"``, and a stage saved with it).

For label ``j`` with documents ``d_1 .. d_k`` the ranker minimises the tree's own squared-hinge objective (the
model's ``C`` and bias) over the documents as positives and every remembered row that carries none of the labels
being fitted as a negative, weighted by ``omega`` (each remembered row stands for ``omega`` documents):

    0.5 ||w||^2 + C_pos sum_i loss(+1, x_i . w) + omega C_neg sum_{n} loss(-1, x_n . w)

and the stage's ``p_j(s)`` reads two kinds of values that the ranker being scored did not see:

* a document's *leave-one-out* value: ``x_i . w_j^{(-i)}``, the ranker refitted without ``d_i``;
* a remembered row's *cross-fitted* value: scored by the ranker fitted on the other half of the rows (even /
  odd). Scored by the ranker fitted on them, the negatives took 0.32-0.60% of the others' top-5 slots for the
  same recall, their probabilities of 0.1-0.3 right 0-7% of the time (benchmarks/RESULTS.md, "Labels learned
  from a few documents, scored flat").

Every one of these rankers (``k + 3`` per label: full, ``k`` leave-one-out, even, odd) is a column of one
:func:`~xmtc.linear.solver.train_level` call, whose parents are every remembered row (full and leave-one-out),
the even rows and the odd rows: the solver's per-parent row copies make the ``k + 3`` fits of a label one pass
over shared rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .few_shot_scores import _decision


def rankers(pos: list[sp.csr_matrix], negatives: sp.csr_matrix, few: int, omega: float, bias: float, *,
            C_pos: float, C_neg: float, tol: float, max_iter: int, threshold: float, n_threads=None
            ) -> tuple[sp.csc_matrix, np.ndarray, list[np.ndarray]]:
    """Per label (its documents' rows ``pos[t]``, at least two): the ranker fitted on all its documents, its
    documents' leave-one-out values (``few`` wide, ``-inf`` padded) and every negative's cross-fitted value
    (module doc). Returns ``(W, loo, values)``: ``W`` (features + 1, labels), the bias weight in the last row."""
    from ..linear.solver import train_level

    n_neg = negatives.shape[0]
    P = sp.vstack(pos, format="csr")
    sizes = np.array([p.shape[0] for p in pos], dtype=np.int64)
    first = np.r_[0, np.cumsum(sizes)[:-1]]  # each label's first positive row, after the negatives
    width = sizes + 3  # full, leave-one-out x k, even, odd
    col0 = np.r_[0, np.cumsum(width)[:-1]]
    rows, cols = [], []
    for c0, r0, k in zip(col0, first, sizes):
        r = n_neg + r0 + np.arange(k)
        rows += [r, np.tile(r, k), r, r]
        cols += [np.full(k, c0), (c0 + 1 + np.repeat(np.arange(k), k)), np.full(k, c0 + k + 1),
                 np.full(k, c0 + k + 2)]
        keep = np.repeat(np.arange(k), k) != np.tile(np.arange(k), k)  # leave-one-out: all but its own
        rows[-3], cols[-3] = rows[-3][keep], cols[-3][keep]
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    n_cols = int(width.sum())
    # a positive that is not a column's positive and not active for its parent is in no term of its objective
    Y = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(n_neg + P.shape[0], n_cols))
    parent_of = np.zeros(n_cols, dtype=np.int32)
    parent_of[col0 + sizes + 1], parent_of[col0 + sizes + 2] = 1, 2
    half = np.arange(n_neg) % 2
    a_rows = np.r_[np.arange(n_neg), np.arange(n_neg)]
    a_cols = np.r_[np.zeros(n_neg, np.int64), 1 + half]
    active = sp.csr_matrix((np.ones(a_rows.size, np.float32), (a_rows, a_cols)), shape=(Y.shape[0], 3))
    W = train_level(sp.vstack([negatives, P], format="csr"), Y, parent_of, active, C_pos=C_pos,
                    C_neg=C_neg * omega, bias=bias, tol=tol, max_iter=max_iter, threshold=threshold,
                    n_threads=n_threads)
    loo = np.full((len(pos), few), -np.inf, dtype=np.float32)
    values = []
    for t, (c0, r0, k) in enumerate(zip(col0, first, sizes)):
        Wj = W[:, c0:c0 + k + 3]
        loo[t, :k] = np.diag(_decision(P[r0:r0 + k], Wj[:, 1:k + 1], bias))
        v = _decision(negatives, Wj[:, [k + 1, k + 2]], bias)  # each row by the column that did not see it
        values.append(np.where(half == 1, v[:, 0], v[:, 1]))
    return W[:, col0], loo, values
