"""The hierarchical label tree (HLT) as PECOS lays it out: a chain of sparse cluster matrices.

``chain[t]`` is a csr ``(K_{t+1}, K_t)`` float32 matrix with exactly one 1.0 per row, in the column
of the row's parent; ``K_0 = 1`` is the root and the last level's nodes are the labels, so
``chain[0]`` is ``(K_1, 1)`` and ``chain[-1]`` is ``(L, K_D)``. This is the form the matcher and
rankers consume: ``Y @ chain[-1]`` says which leaf clusters an instance is positive in, and the
children of node ``p`` are the rows of ``chain[t]`` whose non-zero sits in column ``p``.

``depth`` counts the cluster levels between the root and the labels (``len(chain) - 1``). A tree
of depth 0 is the flat case, ``chain == [ones((L, 1))]``: every label hangs off the root, which is
what :func:`xmtc.index.kmeans.build_label_tree` returns when ``L <= max_leaf_size``.

The tree is stored as plain integer arrays (each node's parent), never pickled.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, ModelFormatError

__all__ = ["LabelTree", "binarized"]


def _parent_matrix(parents: np.ndarray, n_parents: int) -> sp.csr_matrix:
    n = parents.shape[0]
    C = sp.csr_matrix((np.ones(n, dtype=np.float32), parents.astype(np.int32, copy=False),
                       np.arange(n + 1, dtype=np.int64)), shape=(n, n_parents))
    C.has_sorted_indices = True
    return C


def binarized(M: sp.spmatrix) -> sp.csr_matrix:
    """csr float32 with 1.0 where ``M`` is non-zero (duplicates summed first, explicit zeros dropped)."""
    M = sp.csr_matrix(M)
    M.sum_duplicates()
    M.eliminate_zeros()
    out = sp.csr_matrix((np.ones(M.nnz, dtype=np.float32), M.indices, M.indptr), shape=M.shape)
    out.has_sorted_indices = True
    return out


class LabelTree:
    """A validated label tree; build it from a chain of cluster matrices or from parent arrays.

    >>> tree = LabelTree.from_parents([[0, 0], [0, 1, 1]])   # root -> 2 clusters -> 3 labels
    >>> tree.level_sizes, tree.depth, tree.leaf_assignment().tolist()
    ([2, 3], 1, [0, 1, 1])
    """

    def __init__(self, chain: Sequence[sp.spmatrix]):
        chain = list(chain)
        if not chain:
            raise ConfigError("a label tree needs at least one level (the labels)")
        parents = []
        n_parents = 1
        for t, C in enumerate(chain):
            if not sp.issparse(C):
                raise ConfigError(f"tree level {t} is a {type(C).__name__}; expected a sparse matrix")
            C = sp.csr_matrix(C)
            if C.shape[1] != n_parents:
                raise ConfigError(f"tree level {t} has shape {C.shape}; expected {n_parents} columns"
                                  f" (the number of nodes one level up)")
            C = binarized(C)
            if C.shape[0] == 0 or np.any(np.diff(C.indptr) != 1):
                raise ConfigError(f"tree level {t}: every node needs exactly one parent (one non-zero per row)")
            parents.append(C.indices.astype(np.int32))
            n_parents = C.shape[0]
        self._set_parents(parents)

    @classmethod
    def from_parents(cls, parents: Sequence[Sequence[int]]) -> "LabelTree":
        """Tree from each level's parent ids: ``parents[t][j]`` is the parent (level t) of node j of level t+1."""
        parents = [np.asarray(p, dtype=np.int64) for p in parents]
        if not parents:
            raise ConfigError("a label tree needs at least one level (the labels)")
        chain, n_parents = [], 1
        for t, p in enumerate(parents):
            if p.ndim != 1 or p.size == 0:
                raise ConfigError(f"tree level {t}: parents must be a non-empty 1-D array, got shape {p.shape}")
            if p.min() < 0 or p.max() >= n_parents:
                raise ConfigError(f"tree level {t}: parent ids must lie in [0, {n_parents}),"
                                  f" got [{p.min()}, {p.max()}]")
            chain.append(_parent_matrix(p, n_parents))
            n_parents = p.size
        return cls(chain)

    def _set_parents(self, parents: list[np.ndarray]) -> None:
        n_parents = 1
        for t, p in enumerate(parents):
            n_children = np.bincount(p, minlength=n_parents)
            if np.any(n_children == 0):
                empty = int(np.flatnonzero(n_children == 0)[0])
                what = "the root" if t == 0 else f"node {empty} of level {t - 1}"
                raise ConfigError(f"{what} has no children: every internal node of a label tree needs at least one")
            n_parents = p.size
        self._parents = parents
        self._chain = [_parent_matrix(p, 1 if t == 0 else parents[t - 1].size) for t, p in enumerate(parents)]

    # --- shape -----------------------------------------------------------------------------------------
    @property
    def chain(self) -> list[sp.csr_matrix]:
        """``[C_1, ..., C_{D+1}]``, csr float32; ``chain[t]`` is ``(K_{t+1}, K_t)`` (see the module doc)."""
        return list(self._chain)

    @property
    def parents(self) -> list[np.ndarray]:
        """Each level's parent ids (int32), the compact form of :attr:`chain`."""
        return [p.copy() for p in self._parents]

    @property
    def n_labels(self) -> int:
        return int(self._parents[-1].size)

    @property
    def level_sizes(self) -> list[int]:
        """Nodes per level below the root, ``[K_1, ..., K_D, L]``."""
        return [int(p.size) for p in self._parents]

    @property
    def depth(self) -> int:
        """Number of cluster levels between root and labels, ``len(chain) - 1``; 0 for a flat tree."""
        return len(self._parents) - 1

    def leaf_assignment(self) -> np.ndarray:
        """Leaf cluster of every label, int32 ``(L,)`` (all zeros for a flat tree: the root is the leaf)."""
        return self._parents[-1].copy()

    def level_targets(self, Y) -> list[sp.csr_matrix]:
        """Positive nodes per level: ``[Y_1, ..., Y_D, Y]``, binary csr float32, ``Y_t`` (n, K_t).

        An instance is positive at a node when any of its labels lies below it,
        ``Y_t = binarize(Y_{t+1} C_{t+1})``; these are the matchers' targets and the teacher-forcing
        negatives' source.
        """
        if not sp.issparse(Y):
            Y = sp.csr_matrix(np.asarray(Y))
        if Y.ndim != 2 or Y.shape[1] != self.n_labels:
            raise ConfigError(f"Y has shape {Y.shape}; the tree has {self.n_labels} labels")
        targets = [binarized(Y)]
        for C in reversed(self._chain[1:]):
            targets.insert(0, binarized(targets[0] @ C))
        return targets

    # --- storage ---------------------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain numeric arrays (load with ``allow_pickle=False``): level sizes and all parent ids, concatenated."""
        return {"level_sizes": np.asarray(self.level_sizes, dtype=np.int64),
                "parents": np.concatenate(self._parents).astype(np.int32)}

    @classmethod
    def from_arrays(cls, arrays) -> "LabelTree":
        """Inverse of :meth:`to_arrays`; anything inconsistent raises :class:`ModelFormatError`."""
        try:
            sizes, flat = arrays["level_sizes"], arrays["parents"]
        except KeyError as e:
            raise ModelFormatError(f"label tree arrays lack {e.args[0]!r} (have: {sorted(arrays)})") from None
        sizes, flat = np.asarray(sizes), np.asarray(flat)
        for name, a in (("level_sizes", sizes), ("parents", flat)):
            if a.ndim != 1 or a.dtype.kind not in "iu":
                raise ModelFormatError(f"label tree array {name!r} must be a 1-D integer array,"
                                       f" got dtype {a.dtype} and shape {a.shape}")
        # int64 from here on: unsigned sizes would turn the level bounds below into floats
        # (uint64 and int64 mix to float64); an unsigned value above 2**63 wraps negative and is refused
        sizes = sizes.astype(np.int64)
        if sizes.size == 0 or np.any(sizes < 1):
            raise ModelFormatError(f"label tree level sizes must be positive and non-empty, got {sizes.tolist()}")
        if int(sizes.sum()) != flat.size:
            raise ModelFormatError(f"label tree has {flat.size} parent ids but its level sizes"
                                   f" {sizes.tolist()} add up to {int(sizes.sum())}")
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        try:
            return cls.from_parents([flat[bounds[t]:bounds[t + 1]] for t in range(sizes.size)])
        except ConfigError as e:
            raise ModelFormatError(f"inconsistent label tree arrays: {e}") from None

    def __repr__(self) -> str:
        return f"LabelTree(level_sizes={self.level_sizes})"


TREE_SHAPES = ("binary", "full")


def level_splits(n_labels: int, branching: int, max_leaf_size: int, shape: str = "full") -> list[int]:
    """Children per node at each cluster level, top first (``[]`` for the flat tree).

    ``full``: every level splits ``branching`` ways, so there are ``B^D`` leaves for the fewest levels
    ``D`` that keep leaves within ``max_leaf_size``; leaves can end up far smaller than that bound
    (159 labels, B=16, m=100: 16 leaves of ~10 labels).

    ``binary`` (PECOS's rule: ``HierarchicalKMeans.TrainParams.infer_binary_tree_depth`` in
    ``pecos/xmc/base.py``, then ``ClusterChain.from_partial_chain``): the leaves are the smallest power
    of two ``P >= L / m`` (at least 2), i.e. a balanced binary tree split until its leaves hold at most
    ``m`` labels, so a leaf holds ``L / P`` labels (rounded either way), with ``m / 2 < L / P <= m``;
    its binary levels are then grouped ``B`` at a time from the bottom, and the top level takes what is
    left (``P / B^(D-1)`` children). 159 labels: ``[2]`` (2 leaves of ~80); 1,994: ``[2, 16]`` (32
    leaves of ~62); 25,147: ``[16, 16]``. With a ``branching`` that is not a power of two the top level
    takes ``ceil(P / B^(D-1))`` (PECOS would leave the top level's last group short instead).
    """
    if shape not in TREE_SHAPES:
        raise ConfigError(f"unknown tree shape {shape!r}; choose one of {', '.join(TREE_SHAPES)}")
    depth = tree_depth(n_labels, branching, max_leaf_size)
    if depth == 0 or shape == "full":
        return [branching] * depth
    leaves = 2
    while leaves * max_leaf_size < n_labels:
        leaves *= 2
    below = [1]  # leaves under one child of the top level, per level below it
    while below[-1] * branching < leaves:  # the fewest levels whose top needs at most B children
        below.append(below[-1] * branching)
    return [-(-leaves // below[-1])] + [branching] * (len(below) - 1)


def tree_depth(n_labels: int, branching: int, max_leaf_size: int) -> int:
    """Fewest cluster levels ``D`` with ``ceil(n_labels / branching^D) <= max_leaf_size``."""
    depth, capacity = 0, max_leaf_size
    while capacity < n_labels:
        capacity *= branching
        depth += 1
    return depth


def cluster_members(cluster_of_label: np.ndarray, n_clusters: int) -> np.ndarray:
    """(C, M) int64: the labels of each cluster in increasing order, padded with -1 (M = largest cluster)."""
    cluster_of_label = np.asarray(cluster_of_label, dtype=np.int64)
    order = np.argsort(cluster_of_label, kind="stable")
    sizes = np.bincount(cluster_of_label, minlength=n_clusters)
    width = max(1, int(sizes.max()) if sizes.size else 1)
    out = np.full((n_clusters, width), -1, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pos = np.arange(order.size) - np.repeat(starts, sizes)
    out[cluster_of_label[order], pos] = order
    return out
