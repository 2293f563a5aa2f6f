"""Which instances train which node: the per-level masks of hard negatives.

A node's classifier only needs to separate instances that could reach its parent; training it on
every instance would cost n * K and waste capacity on easy negatives. Masks are ``active`` csr
``(n, P)`` over the parent level: instance i trains every child of parent p with ``active[i, p]``.

* ``tfn`` (teacher forcing): the parents the instance truly belongs to, ``Y_{t-1}``;
* ``man`` (matcher-aware): the parents the model trained so far puts in its beam; these are the
  mistakes the ranker will face at prediction time;
* ``tfn+man``: their union (PECOS's default and the XR-Transformer paper's recipe).

The first level has a single parent (the root), so every instance trains it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from ..index.tree import LabelTree, binarized

NEGATIVES = ("tfn", "man", "tfn+man")


def level_targets(Y: sp.spmatrix, chain: list[sp.spmatrix]) -> list[sp.csr_matrix]:
    """Positive nodes of every level, ``Y_t`` (n, K_{t+1}); the last one is ``Y`` itself (binarized).

    An instance is positive at a node when any of its labels lies below it: ``Y_t = Y_{t+1} C_{t+1}``.
    """
    return LabelTree(chain).level_targets(Y)


def beam_mask(beam_ids: np.ndarray, n_nodes: int) -> sp.csr_matrix:
    """Beam ids (n, b), -1 padded -> binary csr (n, n_nodes)."""
    beam_ids = np.asarray(beam_ids)
    keep = beam_ids >= 0
    indptr = np.zeros(beam_ids.shape[0] + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    M = sp.csr_matrix((np.ones(int(indptr[-1]), dtype=np.float32), beam_ids[keep].astype(np.int32), indptr),
                      shape=(beam_ids.shape[0], n_nodes))
    return binarized(M)


def check_negatives(negatives: str) -> str:
    if negatives not in NEGATIVES:
        raise ConfigError(f"unknown negatives {negatives!r}; choose one of {', '.join(NEGATIVES)}")
    return negatives


def active_mask(negatives: str, level: int, targets: list[sp.csr_matrix], beam_ids: np.ndarray | None = None
                ) -> sp.csr_matrix:
    """Training mask ``(n, K_level)`` over the parents of level ``level`` (see the module doc).

    ``targets`` are :func:`level_targets`; ``beam_ids`` (needed for ``man``) are the model's beam at
    the parent level, ``level - 1``, predicted on the training instances.
    """
    check_negatives(negatives)
    n = targets[0].shape[0]
    if level == 0:
        return sp.csr_matrix(np.ones((n, 1), dtype=np.float32))
    parents = targets[level - 1]
    if negatives == "tfn":
        return parents
    if beam_ids is None:
        raise ValueError(f"negatives={negatives!r} needs the beam at level {level - 1}")
    man = beam_mask(beam_ids, parents.shape[1])
    if man.shape[0] != n:
        raise ValueError(f"beam has {man.shape[0]} rows, targets have {n}")
    if negatives == "man":
        return man
    return binarized(parents + man)
