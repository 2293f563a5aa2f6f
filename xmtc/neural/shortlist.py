"""Which nodes of a tree level a document is trained (and predicted) on: the XR-Transformer shortlist.

At level t only a shortlist of the level's K_t nodes is scored, so the output layer's cost does not
grow with K_t:

    M(t) = children(top-k nodes the model predicted at level t-1)  ∪  nodes holding a true label

(at the first level, the children of the root: every node). The union with the positives is the
teacher-forcing part: a positive the matcher missed is still trained on. Each shortlisted node gets a
target (+1 positive / -1 negative) and an importance weight (XR-Transformer's R̂):

* a positive node's weight is its share of the document's label mass, rescaled so the positives of a
  document weigh as many as there are of them: ``n_pos * (labels under the node / labels of the doc)``.
  A cluster holding three of a document's four labels matters more than one holding one of them;
* a negative's weight is ``neg_weight`` (the paper's alpha).

Everything is vectorised over the batch; the result is padded with -1 ids and zero weights.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def children_csr(parent_of: np.ndarray, n_parents: int) -> sp.csr_matrix:
    """(n_parents, n_nodes) 0/1 matrix whose row p lists the children of p."""
    n = parent_of.shape[0]
    return sp.csr_matrix((np.ones(n, dtype=np.float32), (parent_of.astype(np.int64), np.arange(n))),
                         shape=(n_parents, n))


def build_shortlist(prev_topk: np.ndarray | None, label_mass: sp.csr_matrix, children: sp.csr_matrix,
                    neg_weight: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shortlist of a batch: ``(ids int64 (B, S), targets float32 (B, S) of +-1, weights float32 (B, S))``.

    ``prev_topk`` (B, k) are the nodes of level t-1 the model ranked highest (-1 padded), or None at
    the first level (all nodes); ``label_mass`` (B, K_t) holds, per document, how many of its labels
    lie under each node of level t (``Y @ leaf-to-node map``); ``children`` is :func:`children_csr`
    of level t. Padding entries have id -1, target 0 and weight 0; ids within a row are increasing.
    """
    B, K = label_mass.shape
    if prev_topk is None:
        cand = sp.csr_matrix(np.ones((B, K), dtype=np.float32))
    else:
        prev = np.asarray(prev_topk)
        keep = prev >= 0
        rows = np.repeat(np.arange(B), keep.sum(1))
        sel = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, prev[keep])), shape=(B, children.shape[0]))
        cand = sel @ children
    pos = sp.csr_matrix(label_mass, dtype=np.float32)
    pos.eliminate_zeros()
    union = (cand != 0).astype(np.float32) + (pos != 0).astype(np.float32)
    union = sp.csr_matrix(union)
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
