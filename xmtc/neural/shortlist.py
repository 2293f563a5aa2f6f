"""Which nodes of a tree level a text is trained on: the XR-Transformer shortlist (NeurIPS'21 eq. 8).

At level t only a shortlist of the level's K_t nodes is scored, so the output layer's cost does not
grow with K_t. Eq. 8:

    M(t) = children( top-k nodes predicted at level t-1  ∪  positive nodes of level t-1 )

(at the first level, every node). The children of the *positive* parents make every sibling of a
positive node a hard negative (teacher-forced negatives, TFN); the children of the predicted parents
are the matcher-aware negatives (MAN). Every positive node of level t is in M(t), because its parent is
a positive of t-1. PECOS builds the same set: ``binarized(Y_{t-1}) + binarized(M_pred)`` as the
parent mask of level t (``pecos/xmc/xtransformer/model.py``, ``get_negative_samples``).

``topk+positives`` (selectable for the ablation in benchmarks/RESULTS.md) is
children(top-k of t-1) ∪ {positive nodes of t}: :func:`build_shortlist` without ``prev_positive``. The
linear bootstrap then expands the top-k parents only (its solver trains whole sibling groups, so it cannot
add a positive node without its siblings).

Each shortlisted node gets a target (+1 / -1) and an importance weight, our reading of the paper's R̂
(eq. 6) with α for negatives:

* ``R(t) = Y C(D) ... C(t+1)``: how many of the text's labels lie under each node of level t;
* a positive node weighs ``|P_i| * R_il / ||R_i||_1`` (its share of the text's label mass, rescaled so
  that a text's positives together weigh as many as there are of them): a cluster holding three of a
  text's four labels counts more than one holding one of them;
* a negative weighs ``neg_weight`` (α).

PECOS's ``weighted-squared-hinge`` instead weighs a positive by the raw count ``R_il`` and a negative
by 1. Everything is vectorised over the batch; the result is padded with -1 ids and zero weights.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


SHORTLISTS = ("eq8", "topk+positives")  # eq. 8, and a narrower reading (kept for the ablation)


def children_csr(parent_of: np.ndarray, n_parents: int) -> sp.csr_matrix:
    """(n_parents, n_nodes) 0/1 matrix whose row p lists the children of p."""
    n = parent_of.shape[0]
    return sp.csr_matrix((np.ones(n, dtype=np.float32), (parent_of.astype(np.int64), np.arange(n))),
                         shape=(n_parents, n))


def topk_mask(topk: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """(B, k) node ids, -1 padded -> (B, n_cols) 0/1 csr."""
    topk = np.asarray(topk)
    keep = topk >= 0
    rows = np.repeat(np.arange(topk.shape[0]), keep.sum(1))
    M = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, topk[keep])), shape=(topk.shape[0], n_cols))
    M.data[:] = 1.0
    return M


def parent_mask(prev_topk: np.ndarray | None, prev_positive: sp.spmatrix | None, n_parents: int,
                n_rows: int) -> sp.csr_matrix | None:
    """The parents eq. 8 expands, (B, K_{t-1}) 0/1: top-k ∪ positives; None = every node (first level)."""
    if prev_topk is None and prev_positive is None:
        return None
    parts = []
    if prev_topk is not None:
        parts.append(topk_mask(prev_topk, n_parents))
    if prev_positive is not None:
        P = sp.csr_matrix(prev_positive, dtype=np.float32)
        P.eliminate_zeros()
        P.data[:] = 1.0
        parts.append(P)
    M = parts[0] if len(parts) == 1 else parts[0] + parts[1]
    M = sp.csr_matrix(M)
    M.data[:] = 1.0
    return M


def build_shortlist(prev_topk: np.ndarray | None, label_mass: sp.csr_matrix, children: sp.csr_matrix,
                    neg_weight: float = 1.0, prev_positive: sp.spmatrix | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shortlist of a batch: ``(ids int64 (B, S), targets float32 (B, S) of +-1, weights float32 (B, S))``.

    ``prev_topk`` (B, k): the nodes of level t-1 the model ranked highest (-1 padded); ``prev_positive``
    (B, K_{t-1}): the text's positive nodes of level t-1; both None at the first level (all nodes).
    ``label_mass`` (B, K_t) holds how many of the text's labels lie under each node of level t;
    ``children`` is :func:`children_csr` of level t. Padding: id -1, target 0, weight 0; ids increase
    within a row.
    """
    B, K = label_mass.shape
    parents = parent_mask(prev_topk, prev_positive, children.shape[0], B)
    if parents is None:
        cand = sp.csr_matrix(np.ones((B, K), dtype=np.float32))
    else:
        cand = sp.csr_matrix(parents @ children)
    pos = sp.csr_matrix(label_mass, dtype=np.float32)
    pos.eliminate_zeros()
    union = sp.csr_matrix((cand != 0).astype(np.float32) + (pos != 0).astype(np.float32))
    union.sum_duplicates()
    union.sort_indices()
    lengths = np.diff(union.indptr)
    S = int(lengths.max(initial=0))
    ids = np.full((B, S), -1, dtype=np.int64)
    targets = np.zeros((B, S), dtype=np.float32)
    weights = np.zeros((B, S), dtype=np.float32)
    if S == 0:
        return ids, targets, weights
    row_of = np.repeat(np.arange(B), lengths)
    col_of = np.arange(union.nnz) - union.indptr[row_of]
    ids[row_of, col_of] = union.indices
    mass = np.asarray(pos[row_of, union.indices]).ravel()
    total = np.asarray(pos.sum(axis=1)).ravel()
    n_pos = np.diff(pos.indptr)
    is_pos = mass > 0
    share = np.divide(mass, total[row_of], out=np.zeros_like(mass), where=total[row_of] > 0)
    targets[row_of, col_of] = np.where(is_pos, 1.0, -1.0)
    weights[row_of, col_of] = np.where(is_pos, share * n_pos[row_of], neg_weight)
    return ids, targets, weights
