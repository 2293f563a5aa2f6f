"""Label representations built from the training data: PIFA and concatenations of embeddings.

PIFA (Positive Instance Feature Aggregation, Parabel / PECOS) represents a label by the direction of
the documents that carry it. Rows of ``X`` are L2-normalised first so that long documents do not
dominate their labels; the aggregate is normalised again so that k-means compares directions only
(cosine similarity), whatever a label's frequency.

A label with no positive instance gets an all-zero row: there is nothing to say about it. The
clustering (:func:`xmtc.index.kmeans.build_label_tree`) gives such a row similarity 0 to every
centroid, so the balanced split places it wherever room is left (deterministically, under the
seed); it never empties or unbalances a cluster.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError

__all__ = ["normalize_rows", "pifa", "concat_embeddings"]


def normalize_rows(M, *, copy: bool = True):
    """Rows scaled to unit L2 norm (zero rows stay zero); csr float32 in, csr float32 out.

    Dense 2-D arrays are accepted and returned dense (float32).
    """
    if sp.issparse(M):
        M = sp.csr_matrix(M, dtype=np.float32, copy=copy)
        M.sum_duplicates()
        M.data *= np.repeat(_inverse_row_norms(M), np.diff(M.indptr))
        return M
    A = np.array(M, dtype=np.float32, copy=copy)
    if A.ndim != 2:
        raise ConfigError(f"expected a 2-D matrix, got an array of shape {A.shape}")
    norms = np.sqrt(np.einsum("ij,ij->i", A, A, dtype=np.float64))
    norms[norms == 0] = 1.0
    A /= norms[:, None].astype(np.float32)
    return A


def _inverse_row_norms(M) -> np.ndarray:
    """float32 ``1 / ||row||`` (0 for empty rows) of a canonical csr float32, as :func:`normalize_rows` scales."""
    sq = np.square(M.data, dtype=np.float64)
    counts = np.diff(M.indptr)
    norms = np.zeros(M.shape[0], dtype=np.float64)
    nonempty = counts > 0
    norms[nonempty] = np.add.reduceat(sq, M.indptr[:-1][nonempty]) if sq.size else 0.0
    scale = np.zeros_like(norms)
    pos = norms > 0
    scale[pos] = 1.0 / np.sqrt(norms[pos])
    return scale.astype(np.float32)


def pifa(X, Y) -> sp.csr_matrix:
    """PIFA label embeddings, csr ``(L, d)`` float32: ``normalize(binarize(Y)^T normalize(X))``.

    ``X`` is the (n, d) feature matrix (csr or dense), ``Y`` the (n, L) label matrix; any non-zero in
    ``Y`` counts as a positive (label weights are ignored, as "positive instance" says). A label
    without positives gets a zero row (see the module doc).
    """
    if X.shape[0] != Y.shape[0]:
        raise ConfigError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}; they must describe the same documents")
    # normalize(X) is diag(s) X with s_i = 1 / ||x_i||: the scale goes on Y's few entries instead of a
    # copy of X (the largest matrix in training), and the products are the same float32 numbers
    # s_i * x_ik in the same order, so the result is bit-identical to scaling X first.
    X = sp.csr_matrix(X, dtype=np.float32)  # no copy for csr float32 input
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    scale = _inverse_row_norms(X)
    Yb = sp.csr_matrix(Y, copy=True)
    Yb.sum_duplicates()
    Yb.eliminate_zeros()
    Yb = sp.csr_matrix((np.repeat(scale, np.diff(Yb.indptr)), Yb.indices, Yb.indptr), shape=Yb.shape)
    emb = sp.csr_matrix(Yb.T.tocsr() @ X, dtype=np.float32)
    emb.eliminate_zeros()
    emb.sort_indices()
    return normalize_rows(emb, copy=False)


def concat_embeddings(*embs, weights=None) -> sp.csr_matrix:
    """Row-normalised blocks side by side, ``[w_1 normalize(E_1), ..., w_k normalize(E_k)]``, csr float32.

    Used for PIFA-on-TF-IDF ⊕ PIFA-on-neural (XR-Transformer) or PIFA ⊕ label-text embeddings.
    Normalising each block first keeps a high-dimensional sparse block from drowning a small dense
    one; with every block non-zero, the cosine of two concatenations is the ``w_i^2``-weighted mean
    of the blocks' cosines. Blocks may be csr or dense; all need the same number of rows.
    """
    if not embs:
        raise ConfigError("concat_embeddings needs at least one embedding matrix")
    n = embs[0].shape[0]
    if any(E.shape[0] != n for E in embs):
        raise ConfigError(f"embeddings have different numbers of rows: {[E.shape[0] for E in embs]}")
    if weights is None:
        weights = [1.0] * len(embs)
    weights = [float(w) for w in weights]
    if len(weights) != len(embs) or any(not np.isfinite(w) or w < 0 for w in weights):
        raise ConfigError(f"weights must be {len(embs)} non-negative finite numbers, got {weights}")
    blocks = []
    for E, w in zip(embs, weights):
        B = normalize_rows(E if sp.issparse(E) else sp.csr_matrix(np.asarray(E, dtype=np.float32)))
        B.data *= np.float32(w)
        blocks.append(B)
    out = sp.hstack(blocks, format="csr", dtype=np.float32)
    out.eliminate_zeros()
    return out
