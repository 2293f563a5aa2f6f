"""How a level head starts: XR-Transformer's bootstrapping (NeurIPS'21 sec. 4.2, eq. 11), or not.

* ``linear`` (eq. 11): level t's head is the minimiser of level t's loss *on its shortlist* (eq. 8)
  with the embeddings the encoder produces after level t-1,

      W(t)_init = argmin_W  sum_i sum_{l in M(t)_i}  loss(y_il, W_l . phi(x_i)) + regulariser,

  solved with the project's own one-vs-all L2-loss SVM solver (:func:`xmtc.linear.solver.train_level`:
  squared hinge, the matcher's own loss, with ``0.5 ||[w; b]||^2``). The solver's ``active`` mask is
  exactly eq. 8: a text trains every child of its top-k and of its positive parents at level t-1.
  Positives weigh 1 and negatives α (``C_neg = neg_weight``); the per-positive importance R̂ of the
  fine-tuning loss is not expressible in the solver's two costs, so the bootstrap uses 0/1 relevance
  (PECOS's default ``linear`` bootstrap does the same; its ``weighted-linear`` passes Y as R). Nothing
  is dropped (threshold 0), so the result is the solver's optimum. The embeddings are handed to the
  solver as a float32 CSR (the solver's input format): 8 bytes per entry, no float64 copy.
* ``inherit``: each node starts as a copy of its parent's row (children of one cluster start equal).
  It needs the level directly above to have been fine-tuned; otherwise it is a ConfigError.
* ``random``: small random rows (X-Transformer's single level; also every method's first level,
  which has no previous level to start from).
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError
from ...neural.heads import random_head
from ...neural.shortlist import parent_mask

log = logging.getLogger(__name__)

BOOTSTRAPS = ("linear", "inherit", "random")


def bootstrap_inherit(parent_weight: np.ndarray, parent_bias: np.ndarray, parent_of: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Each node's row and bias copied from its parent's."""
    parent_of = np.asarray(parent_of, dtype=np.int64)
    return np.array(parent_weight[parent_of], dtype=np.float32), np.array(parent_bias[parent_of], dtype=np.float32)


def bootstrap_linear(emb: np.ndarray, positives: sp.spmatrix, parent_of: np.ndarray, n_parents: int,
                     prev_topk: np.ndarray | None, prev_positive: sp.spmatrix | None, *, neg_weight: float = 1.0,
                     tol: float = 0.1, max_iter: int = 100, n_threads: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 11 on the shortlist of eq. 8: ``(W (K, h), b (K,))`` float32.

    ``emb`` (n, h): embeddings after level t-1; ``positives`` (n, K_t): positive nodes of level t;
    ``parent_of`` (K_t,): each node's parent at level t-1 (``n_parents`` of them); ``prev_topk`` /
    ``prev_positive``: what eq. 8 expands (both None: every node is on every shortlist).
    """
    from ...linear.solver import train_level

    emb = np.asarray(emb)
    if emb.dtype != np.float32:
        emb = emb.astype(np.float32)
    n, h = emb.shape
    active = parent_mask(prev_topk, prev_positive, n_parents, n)
    if active is None:
        active = sp.csr_matrix((np.ones(n * n_parents, dtype=np.float32),
                                np.tile(np.arange(n_parents, dtype=np.int32), n),
                                np.arange(0, n * n_parents + 1, n_parents, dtype=np.int64)), shape=(n, n_parents))
    if neg_weight <= 0:
        raise ConfigError(f"bootstrap 'linear' needs neg_weight > 0 (it is the solver's C_neg), got {neg_weight}")
    W = train_level(sp.csr_matrix(emb), positives, parent_of, active, C_pos=1.0, C_neg=float(neg_weight),
                    bias=1.0, tol=tol, max_iter=max_iter, threshold=0.0, n_threads=n_threads)
    W = W.tocsr()
    head_w = np.ascontiguousarray(W[:h].toarray().T, dtype=np.float32)
    head_b = np.asarray(W[h].toarray()).ravel().astype(np.float32)  # bias feature value 1
    return head_w, head_b


def start_head(method: str, level: int, prev_level: int | None, *, n_nodes: int, hidden: int, seed: int,
               parent_of: np.ndarray, n_parents: int, prev_head=None, emb=None, positives=None, prev_topk=None,
               prev_positive=None, neg_weight: float = 1.0, n_threads: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The starting ``(W, b)`` of level ``level`` under ``method``; the explicit rules:

    the first fine-tuned level (``prev_level`` None) always starts random (there is nothing to
    bootstrap from, logged); ``inherit`` after a level that was not the one directly above is a
    ConfigError; ``linear`` after such a level puts every node on every text's shortlist (logged).
    """
    if method not in BOOTSTRAPS:
        raise ConfigError(f"bootstrap must be one of {', '.join(BOOTSTRAPS)}, got {method!r}")
    if prev_level is None or method == "random":
        if prev_level is None and method != "random":
            log.info("level %d: first fine-tuned level, head starts random (nothing to bootstrap from)", level)
        return random_head(n_nodes, hidden, seed + level)
    adjacent = prev_level == level - 1
    if method == "inherit":
        if not adjacent:
            raise ConfigError(f"bootstrap 'inherit' needs level {level - 1} fine-tuned before level {level}"
                              f" (the last fine-tuned level is {prev_level}); use 'linear' or 'random'")
        return bootstrap_inherit(prev_head[0], prev_head[1], parent_of)
    if not adjacent:
        log.info("level %d: level %d was not fine-tuned; the linear bootstrap trains every node on every"
                 " text", level, level - 1)
        prev_topk = prev_positive = None
    return bootstrap_linear(emb, positives, parent_of, n_parents, prev_topk, prev_positive,
                            neg_weight=neg_weight, n_threads=n_threads)


def refit_heads(emb: np.ndarray, chain: list[sp.csr_matrix], levels: list[int], positives: list[sp.spmatrix],
                shortlist_topk: int, *, neg_weight: float = 1.0, n_threads: int | None = None
                ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Eq. 11's objective solved again, top level first, on the *final* embeddings for consecutive ``levels``.

    Why: the encoder keeps training after a level's head is done (level t+1 .. the last fine-tuned level),
    so the heads of the upper levels no longer fit the embeddings they are applied to at prediction. Each
    head here minimises its level's loss on the eq. 8 shortlist (children of the refitted level above's
    top ``shortlist_topk`` ∪ of its positive nodes; every node at the first level) with the embeddings
    the finished encoder produces. ``positives[t]`` (n, K_t) are the positive nodes of chain level t.
    """
    from .matcher import head_beam_step
    from ...neural.shortlist import children_csr

    heads, topk = {}, None
    for i, t in enumerate(levels):
        C = chain[t]
        parent_of = C.indices.astype(np.int64)
        first = i == 0
        W, b = bootstrap_linear(emb, positives[t], parent_of, C.shape[1], None if first else topk,
                                None if first else positives[t - 1], neg_weight=neg_weight, n_threads=n_threads)
        heads[t] = (W, b)
        topk, _ = head_beam_step(emb, W, b, None if first else topk, None,
                                 None if first else children_csr(parent_of, C.shape[1]), shortlist_topk)
    return heads
