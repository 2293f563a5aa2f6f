"""ELIAS's index (Gupta et al., NeurIPS'22): the sparse cluster -> label adjacency of each stage, built from data.

The adjacency is stored as an ELL-style sparse matrix, ``adj_index`` (C, kappa) label ids (-1 = empty slot);
in stage 2 the network adds the dense (C, kappa) edge logits ``adj_logits`` over the same slots (its size is
that of the index, ``C * kappa``, about ``L * kappa / max_leaf``: a weight matrix, never B x L).

* stage 1 (:func:`tree_adjacency`): every cluster of the label tree links to its own labels, weight 1;
* stage 2 (:func:`approximate_adjacency`): the stage-1 model's cluster beams on the training texts give
  ``M`` (N x C), each training text's top-b cluster scores; ``M^T Y`` (C x L) says how strongly each
  label's texts activate each cluster, and each cluster keeps its ``kappa`` strongest labels;
* :func:`add_missing_labels` (the estimator's default, ``keep_tree_edges``): labels that no cluster keeps
  in its top-kappa are unreachable in stage 2 in the reference code (their parent silently becomes
  cluster 0); this gives each such label the edge from its stage-1 cluster instead.

Separate from the network because these run between the two stages, on numpy and the training labels:
the network receives the finished index (and, with ``adjacency_init="approx"``, its values) and stores it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError
from ...index.tree import cluster_members


def tree_adjacency(cluster_of_label: np.ndarray, n_clusters: int) -> np.ndarray:
    """Stage 1's index: cluster c -> its labels, as a (C, max cluster size) int64 array padded with -1."""
    cluster_of_label = np.asarray(cluster_of_label, dtype=np.int64)
    if cluster_of_label.size and (cluster_of_label.min() < 0 or cluster_of_label.max() >= n_clusters):
        raise ConfigError("cluster_of_label holds ids outside 0..n_clusters-1")
    return cluster_members(cluster_of_label, n_clusters)


def approximate_adjacency(beam_ids: np.ndarray, beam_scores: np.ndarray, Y: sp.spmatrix, n_clusters: int,
                          kappa: int) -> tuple[np.ndarray, np.ndarray]:
    """Stage 2's index from the stage-1 model: row-wise top-``kappa`` of ``M^T Y`` (C x L).

    ``beam_ids`` / ``beam_scores`` (N, b): each training text's top-b clusters and their scores (-1 padded);
    ``M`` is them as a sparse (N, C) matrix. Returns ``(index (C, kappa) int64, -1 padded; values (C, kappa))``,
    each row's labels by decreasing value (ties: smaller label id first); a cluster with fewer than kappa
    labels of non-zero weight keeps only those.
    """
    Y = sp.csr_matrix(Y, dtype=np.float32)
    beam_ids = np.asarray(beam_ids)
    keep = beam_ids >= 0
    n = beam_ids.shape[0]
    if Y.shape[0] != n:
        raise ValueError(f"beams for {n} texts, labels for {Y.shape[0]}")
    rows = np.repeat(np.arange(n), keep.sum(1))
    M = sp.csr_matrix((np.asarray(beam_scores, dtype=np.float32)[keep], (rows, beam_ids[keep])),
                      shape=(n, n_clusters))
    CL = sp.csr_matrix(M.T @ Y)                   # (C, L): sum over a label's texts of their cluster scores
    CL.sum_duplicates()
    CL.eliminate_zeros()
    index = np.full((n_clusters, kappa), -1, dtype=np.int64)
    values = np.zeros((n_clusters, kappa), dtype=np.float32)
    for c in range(n_clusters):
        s, e = CL.indptr[c], CL.indptr[c + 1]
        cols, vals = CL.indices[s:e], CL.data[s:e]
        order = np.lexsort((cols, -vals))[:kappa]
        index[c, :order.size] = cols[order]
        values[c, :order.size] = vals[order]
    return index, values


def add_missing_labels(index: np.ndarray, values: np.ndarray, cluster_of_label: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Give every label that no cluster kept an edge from its stage-1 (tree) cluster.

    Appended after the cluster's kept labels with the row's smallest kept value (or 1 in an empty row);
    rows widen past kappa only as far as the most such labels one cluster needs. Returns new arrays.
    """
    index, values = np.asarray(index), np.asarray(values, dtype=np.float32)
    n_labels = cluster_of_label.shape[0]
    present = np.zeros(n_labels, dtype=bool)
    present[index[index >= 0]] = True
    missing = np.flatnonzero(~present)
    if missing.size == 0:
        return index.copy(), values.copy()
    C = index.shape[0]
    fill = (index >= 0).sum(1)
    by_cluster = [[] for _ in range(C)]
    for l in missing:
        by_cluster[int(cluster_of_label[l])].append(int(l))
    width = max(index.shape[1], int(max(fill[c] + len(by_cluster[c]) for c in range(C))))
    out_i = np.full((C, width), -1, dtype=np.int64)
    out_v = np.zeros((C, width), dtype=np.float32)
    out_i[:, :index.shape[1]], out_v[:, :index.shape[1]] = index, values
    for c in range(C):
        if by_cluster[c]:
            low = float(values[c, :fill[c]].min()) if fill[c] else 1.0
            out_i[c, fill[c]:fill[c] + len(by_cluster[c])] = by_cluster[c]
            out_v[c, fill[c]:fill[c] + len(by_cluster[c])] = low
    return out_i, out_v
