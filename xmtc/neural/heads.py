"""The matcher's output layer for one tree level, scored on a shortlist only; its bootstrapping; losses.

``score(emb, ids)`` gathers the shortlisted rows of the level's weight matrix, so a batch costs
``B * S * hidden`` whatever the number of nodes K_t: memory never grows with the label count beyond the
weight matrix itself (the X-Transformer/XR-Transformer requirement that makes 10^6 labels possible).

Bootstrapping (XR-Transformer, sec. 4): the head of level t starts from what level t-1 learned,

* ``inherit``: each node starts as a copy of its parent's row (children of one cluster start equal
  and the fine-tuning separates them);
* ``linear``: each node's row is the ridge-regression solution on the current embeddings,
  ``W = argmin ||E W^T - T||^2 + lam ||W||^2`` with targets ``T`` = +1 where the document has a label
  under the node and -1 elsewhere (the closed form ``(E^T E + lam I)^-1 E^T T`` with a bias column),
  the linear problem the paper solves to start each level from the embedding it has;
* ``random``: small random rows (what X-Transformer does for its single level).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError

BOOTSTRAPS = ("inherit", "linear", "random")
LOSSES = ("squared-hinge", "bce")


def make_head(n_nodes: int, hidden: int, seed: int = 0):
    """A (weight (K, hidden), bias (K,)) pair of torch Parameters, small random init."""
    import torch

    g = torch.Generator().manual_seed(seed)
    weight = torch.nn.Parameter(torch.randn(n_nodes, hidden, generator=g) * (1.0 / np.sqrt(hidden)) * 0.1)
    bias = torch.nn.Parameter(torch.zeros(n_nodes))
    return weight, bias


class LevelHead:
    """Sparse-scoring linear head of one level: a thin holder of its two parameters."""

    def __init__(self, weight, bias):
        self.weight = weight
        self.bias = bias

    @property
    def n_nodes(self) -> int:
        return int(self.weight.shape[0])

    def parameters(self):
        return [self.weight, self.bias]

    def score(self, emb, ids):
        """Scores (B, S) of shortlisted nodes ``ids`` (B, S, -1 = padding, scored 0) for embeddings (B, h)."""
        import torch

        safe = ids.clamp_min(0)
        w = self.weight[safe]                      # (B, S, h): only the shortlist's rows
        out = torch.einsum("bsh,bh->bs", w.to(emb.dtype), emb) + self.bias[safe].to(emb.dtype)
        return out.masked_fill(ids < 0, 0.0)


def bootstrap_inherit(parent_weight: np.ndarray, parent_bias: np.ndarray, parent_of: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Each node's row and bias copied from its parent's."""
    parent_of = np.asarray(parent_of, dtype=np.int64)
    return np.array(parent_weight[parent_of], dtype=np.float32), np.array(parent_bias[parent_of], dtype=np.float32)


def bootstrap_linear(emb: np.ndarray, targets: sp.csr_matrix, lam: float = 1.0
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Ridge regression of +-1 node targets on the embeddings, with a (regularised) bias column.

    Solves ``[E 1] [W b]^T ~ T`` (T = 2 * targets - 1) in closed form; cost O(n h^2 + h^3 + nnz(targets) h),
    independent of the number of nodes except through the output size.
    """
    if lam <= 0:
        raise ConfigError(f"bootstrap ridge lambda must be > 0, got {lam}")
    E = np.hstack([np.asarray(emb, dtype=np.float64), np.ones((emb.shape[0], 1))])
    G = E.T @ E + lam * np.eye(E.shape[1])
    T = sp.csr_matrix(targets, dtype=np.float64)
    # E^T (2 T01 - 1) = 2 E^T T01 - colsum(E)
    rhs = 2.0 * np.asarray((T.T @ E)).T - E.sum(axis=0)[:, None]   # (h + 1, K)
    sol = np.linalg.solve(G, rhs)                                  # (h + 1, K)
    return np.ascontiguousarray(sol[:-1].T, dtype=np.float32), np.asarray(sol[-1], dtype=np.float32)


def shortlist_loss(scores, targets, weights, loss: str = "squared-hinge"):
    """Weighted mean over a batch's shortlist entries (padding has weight 0)."""
    import torch

    if loss == "squared-hinge":
        per = torch.clamp(1.0 - targets * scores, min=0.0) ** 2
    elif loss == "bce":
        per = torch.nn.functional.binary_cross_entropy_with_logits(scores, (targets > 0).to(scores.dtype),
                                                                   reduction="none")
    else:
        raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
    return (per * weights).sum() / weights.shape[0]
