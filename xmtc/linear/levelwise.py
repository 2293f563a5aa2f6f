"""Training a label tree level by level, each level's classifiers split into independent tasks: the seam
that lets matcher-aware negatives (``man``, ``tfn+man``) train on many workers.

Subtrees (:mod:`xmtc.linear.subtrees`) cannot carry matcher-aware negatives: the instances the beam
sends below a node depend on the scores of every node of the level above, so no subtree is
independent of the others. Within one level, though, the classifiers are independent once the level's
training mask is known: :func:`xmtc.linear.solver.train_level` trains each output on the rows its
parent makes active (plus its own positives), and its result depends only on those rows, in their
original order (the property the subtree cut relies on). So, top-down, for each level ``t``:

1. the driver builds the level's mask exactly as :meth:`HierarchicalLinearModel.fit` does
   (:func:`~xmtc.linear.negatives.active_mask`: true parents and/or the beam at level ``t - 1``);
2. the level's parents are cut into groups of about equal cost (active rows x children), and each
   group is one task (:func:`train_group`): the group's children trained on the rows active for its
   parents or positive for its children;
3. the driver places every group's columns at their node ids (:func:`join_level`), builds the level
   and, below the last level, runs the beam step on the training rows for the next mask.

The result is :meth:`HierarchicalLinearModel.fit`'s model, byte for byte once saved. The price against
subtrees is one round of tasks per level (a barrier each) and the beam steps on the driver -- the same
beam steps the single-process fit runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from .hierarchy import HierarchicalLinearModel, chain_of
from .subtrees import place_columns, solver_options

log = logging.getLogger(__name__)


def parent_groups(parent_of: np.ndarray, active: sp.csr_matrix, n_groups: int) -> list[np.ndarray]:
    """The parents of a level (those with a child) cut into at most ``n_groups`` groups of about equal
    cost, each ascending, the costliest group first. Cost of a parent: its active rows x its children
    (the solver's work); groups are filled longest-processing-time first, ties by parent id."""
    parent_of = np.asarray(parent_of, dtype=np.int64)
    n_parents = active.shape[1]
    children = np.bincount(parent_of, minlength=n_parents)
    rows = np.diff(sp.csc_matrix(active).indptr)
    cost = (rows.astype(np.int64) + 1) * children
    used = np.flatnonzero(children)
    k = max(1, min(int(n_groups), used.size))
    order = used[np.lexsort((used, -cost[used]))]
    load = np.zeros(k, dtype=np.int64)
    members: list[list[int]] = [[] for _ in range(k)]
    for p in order:
        g = int(np.argmin(load))
        members[g].append(int(p))
        load[g] += cost[p]
    groups = [np.sort(np.asarray(m, dtype=np.int64)) for m in members if m]
    loads = [int(cost[g].sum()) for g in groups]
    return [groups[i] for i in np.lexsort((np.arange(len(groups)), -np.asarray(loads)))]


def group_children(parent_of: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Ascending ids of the level's nodes whose parent is in ``parents`` (ascending)."""
    return np.flatnonzero(np.isin(np.asarray(parent_of, dtype=np.int64), parents))


def train_group(X: sp.csr_matrix, targets: sp.csr_matrix, parent_of: np.ndarray, active: sp.csr_matrix,
                parents: np.ndarray, **solver_kw) -> sp.csc_matrix:
    """Weights csc ``(d + 1, len(children))`` of the children of ``parents``, in ascending child id order:
    what :func:`~xmtc.linear.solver.train_level` gives those columns when it trains the whole level."""
    from .solver import train_level

    solver_kw = solver_options(dict(solver_kw))
    parents = np.asarray(parents, dtype=np.int64)
    parent_of = np.asarray(parent_of, dtype=np.int64)
    children = group_children(parent_of, parents)
    act = sp.csc_matrix(active)[:, parents].tocsr()
    Yg = sp.csc_matrix(targets)[:, children].tocsr()
    rows = np.union1d(np.repeat(np.arange(act.shape[0]), np.diff(act.indptr))[act.data != 0],
                      np.repeat(np.arange(Yg.shape[0]), np.diff(Yg.indptr))[Yg.data != 0])
    local_parent = np.searchsorted(parents, parent_of[children])
    return train_level(X[rows], Yg[rows], local_parent, act[rows], **solver_kw)


def join_level(parts: Sequence[sp.csc_matrix], groups: Sequence[np.ndarray], parent_of: np.ndarray
               ) -> sp.csc_matrix:
    """One level's weights from every group's columns (:func:`~xmtc.linear.subtrees.place_columns`)."""
    return place_columns(parts, [group_children(parent_of, g) for g in groups], np.asarray(parent_of).size,
                         "the parent groups do not cover the level's nodes exactly once")


def run_groups_in_process(X, targets, parent_of, active, groups, solver_kw, level=0) -> list[sp.csc_matrix]:
    """The default task runner: one group after the other, in this process."""
    return [train_group(X, targets, parent_of, active, g, **solver_kw) for g in groups]


def fit_by_levels(X, Y, tree, *, negatives: str = "tfn+man", beam_size: int = 10, workers: int = 1,
                  run_tasks: Callable | None = None, progress: bool = False, **solver_kw) -> HierarchicalLinearModel:
    """:meth:`HierarchicalLinearModel.fit` with each level's classifiers trained as parallel group tasks.

    ``run_tasks(X, targets_t, parent_of, active, groups, solver_kw, t)`` returns each group's
    :func:`train_group` result in the order given (costliest first). Levels get ``4 * workers`` groups
    so that largest-first scheduling evens them out. Any ``negatives`` works; ``tfn`` is better served
    by :func:`xmtc.linear.subtrees.fit_by_subtrees` (no barrier per level).
    """
    runner = run_tasks or run_groups_in_process
    n_levels = len(chain_of(tree))

    def train_level(X, targets, parent_of, active, t, **kw):
        parent_of = np.asarray(parent_of, dtype=np.int64)
        groups = parent_groups(parent_of, active, 4 * max(1, int(workers)))
        t0 = time.perf_counter()
        parts = runner(X, targets, parent_of, active, groups, dict(kw), t)
        if len(parts) != len(groups):
            raise RuntimeError(f"the task runner returned {len(parts)} results for {len(groups)} groups")
        log.info("level %d/%d: %d nodes in %d tasks, %d training (instance, parent) pairs, %.1fs", t + 1, n_levels,
                 parent_of.size, len(groups), active.nnz, time.perf_counter() - t0)
        return join_level(parts, groups, parent_of)

    return HierarchicalLinearModel().fit(X, Y, tree, negatives=negatives, beam_size=beam_size, progress=progress,
                                         train_level=train_level, **solver_options(dict(solver_kw)))
