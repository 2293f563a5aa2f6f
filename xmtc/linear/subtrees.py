"""Training a label tree as independent subtrees: the seam that lets XR-Linear train on many workers.

With teacher-forced negatives (``tfn``, the default) the classifier of a node is trained on the
instances positive at its parent, plus its own positives (:mod:`xmtc.linear.negatives`). Cut the tree
at depth ``c`` (the nodes of level ``c`` become subtree roots): every classifier below a root ``r``
then sees only instances that have a label under ``r``. So the subtree of ``r`` can be trained by
itself, on just those rows, and its weights are exactly those of the whole-tree fit: the solver
(:func:`xmtc.linear.solver.train_level`) makes each output's result depend only on its parent's rows
in their original order (local feature numbering, epoch order and sums are functions of those rows;
threads and batching do not change a bit), and row subsets keep that order.

The driver trains the ``c`` levels above the cut itself (:func:`train_top`), each subtree is a task
(:func:`train_subtree`, pure: arrays in, arrays out) and :func:`join` places every subtree's columns
at their node ids, giving the same :class:`~xmtc.linear.hierarchy.HierarchicalLinearModel`, byte for
byte once saved, as :meth:`~xmtc.linear.hierarchy.HierarchicalLinearModel.fit`. Who runs the tasks
is the caller's business: :func:`fit_by_subtrees` takes a ``run_tasks`` function (in-process by
default; :mod:`xmtc.distributed.ray_backend` runs them as Ray tasks).

Matcher-aware negatives (``man``, ``tfn+man``) are not decomposable this way: which instances the
beam sends into a subtree depends on the scores of every other subtree, so they are refused here;
:mod:`xmtc.linear.levelwise` parallelises them within each level instead.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from .beam import BeamLevel
from .hierarchy import HierarchicalLinearModel, fit_inputs
from ..index.tree import binarized
from .negatives import level_targets

log = logging.getLogger(__name__)

SOLVER_KEYS = ("C_pos", "C_neg", "bias", "tol", "max_iter", "threshold")


@dataclass
class Subtree:
    """The part of the tree below node ``root`` of level ``depth`` (``nodes[j]``: its nodes of
    chain level ``depth + j``, ascending global ids; the last entry holds its labels)."""

    root: int
    depth: int
    nodes: list[np.ndarray] = field(default_factory=list)

    @property
    def n_labels(self) -> int:
        return int(self.nodes[-1].size)

    def name(self) -> str:
        return f"subtree {self.root} of level {self.depth} ({self.n_labels} labels)"


def cut(chain: Sequence[sp.csr_matrix], depth: int) -> list[Subtree]:
    """The subtrees below every node of level ``depth`` (1 <= depth <= number of cluster levels)."""
    if not 1 <= depth < len(chain):
        raise ConfigError(f"cut depth must lie in [1, {len(chain) - 1}] for a tree of {len(chain) - 1} cluster"
                          f" levels, got {depth}")
    parents = [np.asarray(C.indices, dtype=np.int64) for C in chain]
    n_roots = chain[depth - 1].shape[0]
    # node -> root, level by level
    root_of = np.arange(n_roots, dtype=np.int64)
    owners = []
    for t in range(depth, len(chain)):
        root_of = root_of[parents[t]]
        owners.append(root_of)
    # each level's nodes grouped by root (stable: ascending ids within a root), then split by counts
    split = []
    for o in owners:
        order = np.argsort(o, kind="stable")
        split.append(np.split(order, np.cumsum(np.bincount(o, minlength=n_roots))[:-1]))
    return [Subtree(root=r, depth=depth, nodes=[s[r] for s in split]) for r in range(n_roots)]


def choose_depth(chain: Sequence[sp.csr_matrix], workers: int) -> int:
    """The shallowest cut with at least 4 subtrees per worker (so largest-first scheduling can even
    out their sizes), or the deepest cut a tree allows."""
    for depth in range(1, len(chain)):
        if chain[depth - 1].shape[0] >= 4 * max(int(workers), 1):
            return depth
    return len(chain) - 1


def solver_options(kw: dict) -> dict:
    unknown = set(kw) - set(SOLVER_KEYS) - {"n_threads"}
    if unknown:
        raise ConfigError(f"unknown solver settings {sorted(unknown)}")
    return kw


def rows_of(Y: sp.csr_matrix, labels: np.ndarray) -> np.ndarray:
    """Rows of ``Y`` with at least one of ``labels`` (ascending)."""
    mask = np.zeros(Y.shape[1], dtype=bool)
    mask[labels] = True
    hit = mask[Y.indices]
    row = np.repeat(np.arange(Y.shape[0], dtype=np.int64), np.diff(Y.indptr))
    return np.unique(row[hit])


def train_subtree(X: sp.csr_matrix, Y: sp.csr_matrix, chain: Sequence[sp.csr_matrix], sub: Subtree,
                  **solver_kw) -> list[sp.csc_matrix]:
    """Weights of one subtree, per level: csc ``(d + 1, len(sub.nodes[j]))``, columns in ``sub.nodes[j]`` order.

    Trains on the rows that have a label in the subtree, with teacher-forced negatives.
    """
    from .solver import train_level

    solver_kw = solver_options(dict(solver_kw))
    Y = sp.csr_matrix(Y)
    rows = rows_of(Y, sub.nodes[-1])
    Xs = X[rows]
    # the subtree as a tree of its own: local parent ids, root = 0
    local_parents = [np.zeros(sub.nodes[0].size, dtype=np.int64)]
    for j in range(1, len(sub.nodes)):
        glob = np.asarray(chain[sub.depth + j].indices, dtype=np.int64)[sub.nodes[j]]
        local_parents.append(np.searchsorted(sub.nodes[j - 1], glob))
    Ys = Y[rows][:, sub.nodes[-1]]
    local_chain = [sp.csr_matrix((np.ones(p.size, dtype=np.float32), p, np.arange(p.size + 1)),
                                 shape=(p.size, 1 if j == 0 else sub.nodes[j - 1].size))
                   for j, p in enumerate(local_parents)]
    targets = level_targets(Ys, local_chain)
    out = []
    for j, p in enumerate(local_parents):
        active = sp.csr_matrix(np.ones((rows.size, 1), dtype=np.float32)) if j == 0 else targets[j - 1]
        out.append(train_level(Xs, targets[j], p, active, **solver_kw))
    return out


def train_top(X: sp.csr_matrix, Y: sp.csr_matrix, chain: Sequence[sp.csr_matrix], depth: int,
              **solver_kw) -> list[sp.csc_matrix]:
    """The ``depth`` levels above the cut, as the whole-tree fit trains them (tfn)."""
    from .solver import train_level

    solver_kw = solver_options(dict(solver_kw))
    targets = level_targets(Y, list(chain))
    out = []
    for t in range(depth):
        active = sp.csr_matrix(np.ones((X.shape[0], 1), dtype=np.float32)) if t == 0 else targets[t - 1]
        out.append(train_level(X, targets[t], np.asarray(chain[t].indices, dtype=np.int64), active, **solver_kw))
    return out


def place_columns(parts: Sequence[sp.csc_matrix], ids: Sequence[np.ndarray], K: int, uncovered: str
                  ) -> sp.csc_matrix:
    """One level's weights with ``K`` columns: ``parts[i]``'s columns are the nodes ``ids[i]`` (in that order);
    ConfigError ``uncovered`` unless the ids cover ``0..K-1`` exactly once."""
    all_ids = np.concatenate(list(ids)) if len(ids) else np.zeros(0, dtype=np.int64)
    if all_ids.size != K or np.unique(all_ids).size != K:
        raise ConfigError(uncovered)
    W = sp.hstack(list(parts), format="csc", dtype=np.float32)
    inv = np.empty(K, dtype=np.int64)
    inv[all_ids] = np.arange(K)
    W = W[:, inv]
    W.sort_indices()
    return W


def join(chain: Sequence[sp.csr_matrix], top: list[sp.csc_matrix], subtrees: list[Subtree],
         parts: list[list[sp.csc_matrix]], *, bias: float) -> HierarchicalLinearModel:
    """The whole model from the top levels and every subtree's weights (``parts[i]`` for ``subtrees[i]``)."""
    weights = list(top)
    depth = len(top)
    for t in range(depth, len(chain)):
        j = t - depth
        weights.append(place_columns([p[j] for p in parts], [s.nodes[j] for s in subtrees], chain[t].shape[0],
                                     f"the subtrees do not cover level {t} exactly once"))
    levels = []
    for t, (C, W) in enumerate(zip(chain, weights)):
        levels.append(BeamLevel.from_weights(W, np.asarray(C.indices, dtype=np.int64), C.shape[1], bias=bias))
    model = HierarchicalLinearModel()
    model.levels_ = levels
    return model


def run_in_process(X, Y, chain, subtrees: list[Subtree], solver_kw: dict) -> list[list[sp.csc_matrix]]:
    """The default task runner: one subtree after the other, in this process."""
    return [train_subtree(X, Y, chain, s, **solver_kw) for s in subtrees]


def fit_by_subtrees(X, Y, tree, *, depth: int | None = None, workers: int = 1, negatives: str = "tfn",
                    run_tasks: Callable | None = None, beam_size: int = 10, progress: bool = False,
                    **solver_kw) -> HierarchicalLinearModel:
    """:meth:`HierarchicalLinearModel.fit` (tfn) as top levels + independent subtree tasks; same result.

    ``run_tasks(X, Y, chain, subtrees, solver_kw)`` returns each subtree's :func:`train_subtree`
    result, in the order given (subtrees arrive largest first). ``depth`` defaults to
    :func:`choose_depth` for ``workers``. A flat tree has nothing to cut and is fitted directly.
    """
    if negatives != "tfn":
        raise ConfigError(f"training by subtrees (distributed) needs negatives='tfn'; {negatives!r} uses the"
                          " matcher's beam, which couples all subtrees")
    solver_kw = solver_options(dict(solver_kw))
    X, Y, chain = fit_inputs(X, Y, tree, negatives, beam_size)
    if len(chain) == 1:
        return HierarchicalLinearModel().fit(X, Y, chain, negatives="tfn", beam_size=beam_size, progress=progress,
                                             **solver_kw)
    depth = choose_depth(chain, workers) if depth is None else int(depth)
    subtrees = cut(chain, depth)
    t0 = time.perf_counter()
    top = train_top(X, Y, chain, depth, **solver_kw)
    log.info("subtrees: %d top level(s) trained in %.1fs; %d subtrees below level %d", depth,
             time.perf_counter() - t0, len(subtrees), depth)
    # largest first (by training entries: rows x their features), ties by root id
    root_of_label = np.empty(Y.shape[1], dtype=np.int64)
    for s in subtrees:
        root_of_label[s.nodes[-1]] = s.root
    at_root = binarized(Y @ sp.csr_matrix((np.ones(Y.shape[1]), (np.arange(Y.shape[1]), root_of_label)),
                                          shape=(Y.shape[1], len(subtrees))))
    cost = np.rint(at_root.T @ np.diff(X.indptr).astype(np.float64)).astype(np.int64)
    order = np.lexsort((np.arange(len(subtrees)), -cost))
    ordered = [subtrees[i] for i in order]
    runner = run_tasks or run_in_process
    kw = dict(solver_kw)
    t0 = time.perf_counter()
    parts = runner(X, Y, chain, ordered, kw)
    if len(parts) != len(ordered):
        raise RuntimeError(f"the task runner returned {len(parts)} results for {len(ordered)} subtrees")
    log.info("subtrees: %d trained in %.1fs", len(ordered), time.perf_counter() - t0)
    return join(chain, top, ordered, list(parts), bias=solver_kw.get("bias", 1.0))
