"""Updating a trained label tree with new labelled documents, new labels included, without a retrain.

The tree and the feature space stay; what changes:

1. **New labels get a leaf cluster.** A label the model has never seen is hung under the leaf cluster
   to which the model's own matcher sends its documents most strongly (the beam's path scores at the
   leaf-cluster level, summed over the label's documents; ties to the smaller cluster id). The PIFA
   centroid of a cluster would need the old documents; the matcher's routing needs none, and it is what
   decides whether the ranker ever sees the label's documents at prediction time.
2. **Only nodes whose training data changed are refitted.** Node ``k`` of level ``t`` trains on the rows
   its parent makes active plus its own positives (:mod:`xmtc.linear.negatives`), so new documents
   change exactly the children of parents that some new row is active for, and the nodes they are
   positive for. Every other node keeps its weights, bit for bit.
3. **Each refit starts from the old weights** (:func:`xmtc.linear.solver.train_level`'s warm starts):

   * ``"proximal"`` (no old data needed): ``min 0.5 ||w - w_old||^2 + C * loss(new rows)``, i.e.
     ``w = w_old + v`` with ``v`` regularised; the old weights stand in for the old documents;
   * ``"dual"`` (old data replayed): the node's full objective on old + new rows, started from the dual
     point the old weights imply, which is what a retrain on the union would converge to.

The tree is not re-clustered; a model that has grown far from its first data is better retrained.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from ..index.tree import LabelTree
from .beam import BeamLevel, beam_step, prepare_features, root_beam
from .hierarchy import HierarchicalLinearModel
from .negatives import active_mask, check_negatives

log = logging.getLogger(__name__)

WARM_MODES = ("proximal", "dual")


def place_new_labels(model: HierarchicalLinearModel, X: sp.csr_matrix, Y_new: sp.csr_matrix, *,
                     beam_size: int = 10, post_processor: str = "l3-hinge", n_threads: int | None = None
                     ) -> np.ndarray:
    """The leaf cluster (a node of the level above the labels) for each column of ``Y_new`` (n, m): see the
    module doc. A flat model has one cluster, the root (0)."""
    levels = model._check_fitted()
    m = Y_new.shape[1]
    if len(levels) == 1 or m == 0:
        return np.zeros(m, dtype=np.int32)
    rows = np.flatnonzero(Y_new.getnnz(axis=1))
    Xr = prepare_features(X[rows], X.shape[1])
    ids, sc = root_beam(rows.size)
    for lv in levels[:-1]:
        ids, sc = beam_step(Xr, lv, ids, sc, beam_size, post_processor=post_processor, n_threads=n_threads)
    n_clusters = levels[-1].n_parents
    keep = ids >= 0
    # (document, cluster) -> summed path score, then label x cluster = Y_new^T @ that
    R = sp.csr_matrix((sc[keep].astype(np.float64), ids[keep], np.r_[0, np.cumsum(keep.sum(axis=1))]),
                      shape=(rows.size, n_clusters))
    votes = (sp.csr_matrix(Y_new[rows], dtype=np.float64).T @ R).toarray()
    return votes.argmax(axis=1).astype(np.int32)  # argmax takes the first (smallest id) of ties; no vote -> 0


def extended_tree(model: HierarchicalLinearModel, placement: np.ndarray) -> LabelTree:
    """The model's tree with one more label under ``placement[j]`` for each new label j."""
    parents = [lv.parent_of.astype(np.int64) for lv in model._check_fitted()]
    parents[-1] = np.concatenate([parents[-1], np.asarray(placement, dtype=np.int64)])
    return LabelTree.from_parents(parents)


def changed_nodes(parent_of: np.ndarray, active_new: sp.csr_matrix, targets_new: sp.csr_matrix) -> np.ndarray:
    """Ascending ids of the nodes whose training set the new rows change: children of a parent some new
    row is active for, and nodes some new row is positive for."""
    hot_parents = np.asarray(active_new.getnnz(axis=0)) > 0
    return np.flatnonzero(hot_parents[parent_of] | (np.asarray(targets_new.getnnz(axis=0)) > 0))


def update(model: HierarchicalLinearModel, X_new, Y_new, *, warm: str = "proximal", replay=None,
           negatives: str = "tfn", beam_size: int = 10, n_threads: int | None = None, progress: bool = False,
           **solver_kw) -> tuple[HierarchicalLinearModel, dict]:
    """A new model: ``model`` updated with documents ``X_new`` (n, d) and labels ``Y_new`` (n, L'), where
    columns past ``model.n_labels`` are new labels. ``replay=(X_old, Y_old)`` (old columns only) adds the old
    documents to every refit (needed by ``warm="dual"``). ``solver_kw`` are the fit's solver settings.

    Returns ``(model, report)``; the report counts refitted nodes per level and times the update. The given
    model is not modified.
    """
    from ..progress import progress_bar
    from .solver import train_level

    if warm not in WARM_MODES:
        raise ConfigError(f"unknown warm start {warm!r}; choose one of {', '.join(WARM_MODES)}")
    if warm == "dual" and replay is None:
        raise ConfigError("warm='dual' refits on the old documents too; it needs replay=(X_old, Y_old)")
    check_negatives(negatives)
    levels = model._check_fitted()
    t_start = time.perf_counter()
    d, L_old = model.n_features, model.n_labels
    X_new = prepare_features(X_new, d)
    Y_new = sp.csr_matrix(Y_new, dtype=np.float32)
    if Y_new.shape[0] != X_new.shape[0] or Y_new.shape[1] < L_old:
        raise ConfigError(f"Y has shape {Y_new.shape}; expected {X_new.shape[0]} rows and at least the model's"
                          f" {L_old} label columns")
    placement = place_new_labels(model, X_new, Y_new[:, L_old:], beam_size=beam_size,
                                 post_processor="l3-hinge", n_threads=n_threads)
    tree = extended_tree(model, placement)
    chain = tree.chain
    targets_new = tree.level_targets(Y_new)
    if replay is not None:
        X_old, Y_old = replay
        X_old = prepare_features(X_old, d)
        Y_old = sp.csr_matrix(Y_old, dtype=np.float32)
        if Y_old.shape[1] > L_old or Y_old.shape[0] != X_old.shape[0]:
            raise ConfigError(f"the replay set has shape {X_old.shape} / {Y_old.shape}; expected at most"
                              f" {L_old} label columns and one label row per document")
        Y_old.resize(Y_old.shape[0], Y_new.shape[1])
        X = sp.vstack([X_old, X_new], format="csr")
        Y = sp.vstack([Y_old, Y_new], format="csr")
        n_old = X_old.shape[0]
    else:
        X, Y, n_old = X_new, Y_new, 0
    targets = tree.level_targets(Y)
    use_man = negatives != "tfn"
    beam_ids, beam_sc = root_beam(X.shape[0])
    new_levels: list[BeamLevel] = []
    report = {"warm": warm, "new_labels": int(placement.size), "placement": placement.tolist(), "refitted": []}
    bar = progress_bar(progress, total=len(chain), desc="updating levels", unit="level")
    try:
        for t, (C, lv) in enumerate(zip(chain, levels)):
            t0 = time.perf_counter()
            parent_of = C.indices.astype(np.int32)
            active = active_mask(negatives, t, targets, beam_ids if use_man else None)
            changed = changed_nodes(parent_of, active[n_old:], targets_new[t])
            W_old = lv.to_weights()
            if W_old.shape[1] < C.shape[0]:  # the labels level, new labels appended with no weights yet
                W_old = sp.hstack([W_old, sp.csc_matrix((d + 1, C.shape[0] - W_old.shape[1]), dtype=np.float32)],
                                  format="csc")
            W = W_old
            if changed.size:
                W_fit = train_level(X, targets[t][:, changed], parent_of[changed], active, init=W_old[:, changed],
                                    warm=warm, n_threads=n_threads, **solver_kw)
                W = _replace_columns(W_old, changed, W_fit)
            level = BeamLevel.from_weights(W, parent_of, C.shape[1], bias=lv.bias)
            new_levels.append(level)
            if use_man and t < len(chain) - 1:
                beam_ids, beam_sc = beam_step(X, level, beam_ids, beam_sc, beam_size, n_threads=n_threads)
            report["refitted"].append(int(changed.size))
            log.info("update level %d/%d: refitted %d of %d nodes on %d rows (%s), %.1fs", t + 1, len(chain),
                     changed.size, C.shape[0], X.shape[0], warm, time.perf_counter() - t0)
            bar.update(1)
    finally:
        bar.close()
    out = HierarchicalLinearModel()
    out.levels_ = new_levels
    report["seconds"] = round(time.perf_counter() - t_start, 3)
    return out, report


def _replace_columns(W: sp.csc_matrix, cols: np.ndarray, W_cols: sp.csc_matrix) -> sp.csc_matrix:
    """``W`` with columns ``cols`` (ascending) replaced by those of ``W_cols``, the others untouched."""
    K = W.shape[1]
    source = np.arange(K)
    source[cols] = K + np.arange(cols.size)  # position in hstack([W, W_cols])
    out = sp.hstack([W, sp.csc_matrix(W_cols, dtype=np.float32)], format="csc")[:, source]
    out.sort_indices()
    return sp.csc_matrix(out, dtype=np.float32)
