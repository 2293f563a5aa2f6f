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
3. **Each refit of an old node starts from its old weights** (:func:`xmtc.linear.solver.train_level`'s warm starts):

   * ``"proximal"`` (no old data needed): ``min 0.5 ||w - w_old||^2 + C * loss(new rows)``, i.e.
     ``w = w_old + v`` with ``v`` regularised; the old weights stand in for the old documents. The old
     documents' pull is far from even, though: every training row the node saw had the bias feature, so the
     old objective's curvature along the bias is that of all its rows (a Laplace approximation of the old
     objective at ``w_old`` gives ``1/2 (w - w_old)^T (I + C H) (w - w_old)``), against a handful of rows
     for a rare word. Held like a feature weight, three documents moved the biases of the nodes they touch
     by 0.13-0.18 and cost 1.06 P@1 on yso-finna-en-2k-20k (a model remembering 5,000 of its 20,000 rows).
     So the bias is held :data:`BIAS_ANCHOR` (10) times harder, ``1/2 BIAS_ANCHOR^2 (b - b_old)^2``
     (:func:`_refit`): measured there, P@1 after learning three titles of a new label 29.70 -> 30.96
     (30.76 before the learn), after re-learning 30 of the training titles 30.76 / 30.64 -> 30.74 / 30.90 (two
     draws), and the 80% model given the other 20% 30.20 -> 30.40 (30.76 retrained); 30 and 100 measured
     within 0.1 of 10;
   * ``"dual"`` (old data replayed): the node's full objective on old + new rows, started from the dual
     point the old weights imply, which is what a retrain on the union would converge to.
   * proximal with a **sampled replay** (``sample=(X_s, Y_s)``: a uniform sample of the old training rows, the
     model's memory): the sample's loss joins the proximal objective, its gradient at ``w_old`` removed
     (a control variate; the solver's kernel moves the centre block by block, :func:`_refit_sampled`)::

         min_w  a/2 ||w - c||_H^2 + C loss(new rows, w) + C loss(sample, w),
         c = w_old + C H^-1 grad loss(sample, w_old) / a

     (``H``: the bias's hold and the per-feature curvature, as below). ``w_old`` minimises the old objective,
     so its gradient there is 0; the sample's own is not (the weights would drift toward fitting the sample),
     and the shifted centre cancels it exactly, leaving the sample's curvature: the old data's pull along the
     directions the new rows move the weights, margins and feature correlations included, where the anchor
     ``a`` is one number for every direction. ``a`` then stands for the old rows the sample does not.
     Measured on yso-finna-en (80% trained, the other 20% learned; benchmarks/RESULTS.md): test P@1 35.92 ->
     35.99-36.01 with 25,000 of the 50,000 remembered rows (four draws and anchors; 36.06 with all 50,000, 36.38
     retrained), P@5 15.48 -> 15.52, ECE@5 1.61% -> 1.59%; the sample added at weight 1 without the centre's
     shift lost (35.76), and per-node anchors or diagonal curvatures from the memory changed nothing (35.90-35.93).

4. **A fresh label is fitted cold, against remembered negatives** (``memory=(X_mem, Y_mem)``: a seeded
   sample of the training rows the model keeps, :mod:`xmtc.models.learning`). A fresh label is one the
   model has no ranker for: a new column, or one that had no document so far (added by its text, or
   learned-away). It has no old weights for the anchor to hold, so a proximal refit on its new documents
   alone sees positives only and learns a large positive bias: measured on yso-finna-en-2k-20k, three
   titles of "railways" made it the top label of 3,437 of 5,000 test titles (P@1 30.76 -> 16.52). It is
   fitted instead as a retrain would fit it, with the fit's own ``C``, on its new documents plus the
   remembered rows its parent makes active (teacher-forced negatives) -- all of them when the memory holds
   the whole training set. A fresh label whose documents are not among the new rows (a label known only by
   its text) gets a ranker that says no, a bias of :data:`NEVER`, so the tree never scores it above 0.

5. **Features past the model's** (a vocabulary grown by the new documents' words, :mod:`xmtc.models.learning`)
   are appended after its ``d``: every node's weights on them start at 0 (its bias row moves past them,
   :func:`~xmtc.linear.beam_edit.widened`), the new rows' values on them are learned where a node is refitted, and old rows given
   for a refit (replay, memory) have none of them. The placement of new labels (1.) reads the first ``d``.

The tree is not re-clustered; a model that has grown far from its first data is better retrained.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from ..index.tree import LabelTree
from ..native import resolve_threads
from .beam import BeamLevel, beam_step, prepare_features, root_beam
from .beam_edit import grown, merged, node_columns, replaced
from .hierarchy import HierarchicalLinearModel
from .negatives import active_mask, check_negatives

log = logging.getLogger(__name__)

WARM_MODES = ("proximal", "dual")
# a proximal refit holds an old node's bias this many times harder than its feature weights (module doc, 3.)
BIAS_ANCHOR = 10.0
NEVER = -10.0  # decision value of a fresh label with no document: l3-hinge exp(-11^3) = 0, sigmoid 4.5e-5


def place_new_labels(model: HierarchicalLinearModel, X: sp.csr_matrix, Y_new: sp.csr_matrix, *,
                     beam_size: int = 10, post_processor: str = "l3-hinge", n_threads: int | None = None
                     ) -> np.ndarray:
    """The leaf cluster (a node of the level above the labels) for each column of ``Y_new`` (n, m): see the
    module doc. A flat model has one cluster, the root (0); so does a column without documents (no vote)."""
    levels = model._check_fitted()
    m = Y_new.shape[1]
    if len(levels) == 1 or m == 0:
        return np.zeros(m, dtype=np.int32)
    rows = np.flatnonzero(Y_new.getnnz(axis=1))
    d = levels[0].n_features
    Xr = prepare_features(X[rows] if X.shape[1] == d else sp.csr_matrix(X[rows])[:, :d], d)
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


def extended_tree(model: HierarchicalLinearModel, labels: np.ndarray, placement: np.ndarray) -> LabelTree:
    """The model's tree with label ``labels[j]`` under leaf cluster ``placement[j]``: a label past the model's
    labels is appended (every id up to the largest is then placed), one of its own labels moves."""
    parents = [lv.parent_of.astype(np.int64) for lv in model._check_fitted()]
    labels = np.asarray(labels, dtype=np.int64)
    last = np.zeros(max(parents[-1].size, int(labels.max()) + 1 if labels.size else 0), dtype=np.int64)
    last[:parents[-1].size] = parents[-1]
    last[labels] = np.asarray(placement, dtype=np.int64)
    parents[-1] = last
    return LabelTree.from_parents(parents)


def changed_nodes(parent_of: np.ndarray, active_new: sp.csr_matrix, targets_new: sp.csr_matrix) -> np.ndarray:
    """Ascending ids of the nodes whose training set the new rows change: children of a parent some new
    row is active for, and nodes some new row is positive for."""
    hot_parents = np.asarray(active_new.getnnz(axis=0)) > 0
    return np.flatnonzero(hot_parents[parent_of] | (np.asarray(targets_new.getnnz(axis=0)) > 0))


def fresh_columns(n_labels_old: int, n_columns: int, cold=None) -> np.ndarray:
    """The label columns to fit cold (module doc, 4.): those past the model's ``n_labels_old`` and the
    ``cold`` ids among its own (labels without a document so far), ascending."""
    own = np.zeros(0, dtype=np.int64) if cold is None else np.asarray(cold, dtype=np.int64)
    return np.union1d(own[own < n_labels_old], np.arange(n_labels_old, n_columns, dtype=np.int64))


def update(model: HierarchicalLinearModel, X_new, Y_new, *, warm: str = "proximal", replay=None, memory=None,
           cold=None, negatives: str = "tfn", beam_size: int = 10, n_threads: int | None = None,
           progress: bool = False, fresh_C: tuple[float, float] | None = None, curvature=None,
           sample=None, **solver_kw) -> tuple[HierarchicalLinearModel, dict]:
    """A new model: ``model`` updated with documents ``X_new`` (n, d) and labels ``Y_new`` (n, L'), where
    columns past ``model.n_labels`` are new labels. ``replay=(X_old, Y_old)`` (old columns only) adds the old
    documents to every refit (needed by ``warm="dual"``). ``memory=(X_mem, Y_mem)``: remembered training rows,
    the negatives of fresh labels (module doc, 4.); ``cold``: the model's own labels to treat as fresh (no
    document so far); ``fresh_C``: their ``(C_pos, C_neg)`` (default: ``solver_kw``'s). ``solver_kw`` are the
    fit's solver settings for the other nodes. ``curvature``: per feature, ``h_j > 0`` of a proximal refit's
    ``1/2 sum_j h_j (w_j - w_old_j)^2`` (:func:`old_curvature`; default 1 for every feature; below 1 on the
    features of a grown vocabulary, which no old row holds, :mod:`xmtc.models.learning`). ``sample=(X_s, Y_s)``:
    old training rows (old columns only) that a proximal refit replays with its gradient at the old weights
    removed (module doc, 3., sampled replay; teacher-forced negatives: ``negatives`` must be ``"tfn"``).

    Returns ``(model, report)``; the report counts refitted nodes per level and times the update. The given
    model is not modified.
    """
    from ..progress import progress_bar

    if warm not in WARM_MODES:
        raise ConfigError(f"unknown warm start {warm!r}; choose one of {', '.join(WARM_MODES)}")
    if warm == "dual" and replay is None:
        raise ConfigError("warm='dual' refits on the old documents too; it needs replay=(X_old, Y_old)")
    check_negatives(negatives)
    if sample is not None and (warm != "proximal" or negatives != "tfn"):
        raise ConfigError("a sampled replay refits proximally with teacher-forced negatives (warm='proximal',"
                          " negatives='tfn')")
    levels = model._check_fitted()
    t_start = time.perf_counter()
    L_old = model.n_labels
    d = X_new.shape[1] if sp.issparse(X_new) and X_new.ndim == 2 and X_new.shape[1] > model.n_features \
        else model.n_features  # a grown vocabulary (module doc, 5.)
    X_new = prepare_features(X_new, d)
    Y_new = sp.csr_matrix(Y_new, dtype=np.float32)
    if Y_new.shape[0] != X_new.shape[0] or Y_new.shape[1] < L_old:
        raise ConfigError(f"Y has shape {Y_new.shape}; expected {X_new.shape[0]} rows and at least the model's"
                          f" {L_old} label columns")
    fresh = fresh_columns(L_old, Y_new.shape[1], cold)
    documented = np.asarray(Y_new[:, fresh].getnnz(axis=0)) > 0
    # labels without a document keep their place (a new one: cluster 0) and get a ranker that says no
    placement = np.zeros(fresh.size, dtype=np.int32)
    placement[documented] = place_new_labels(model, X_new, Y_new[:, fresh[documented]], beam_size=beam_size,
                                             post_processor="l3-hinge", n_threads=n_threads)
    own = fresh < L_old
    placement[own & ~documented] = levels[-1].parent_of[fresh[own & ~documented]]
    tree = extended_tree(model, fresh, placement)
    chain = tree.chain
    targets_new = tree.level_targets(Y_new)
    X, Y, n_old = _training_rows(X_new, Y_new, replay, d, L_old)
    targets = tree.level_targets(Y)
    if sample is not None:
        X_s = prepare_features(widened_rows(sample[0], d), d)
        Y_s = sp.csr_matrix(sample[1], dtype=np.float32)
        if Y_s.shape[0] != X_s.shape[0] or Y_s.shape[1] > L_old:
            raise ConfigError(f"the sample has shape {X_s.shape} / {Y_s.shape}; expected at most {L_old} label"
                              " columns and one label row per document")
        Y_s.resize(Y_s.shape[0], Y_new.shape[1])
        sample_targets = tree.level_targets(Y_s)
    fit_fresh = fresh[documented]
    apart = warm != "dual"  # fresh labels: fitted with the rest on the full objective, else against the memory
    use_man = negatives != "tfn"
    beam_ids, beam_sc = root_beam(X.shape[0])
    report = {"warm": warm, "new_labels": int(Y_new.shape[1] - L_old), "placement": placement.tolist(),
              "fresh": int(fit_fresh.size), "refitted": []}

    def one_level(t: int, beam_ids) -> tuple[BeamLevel, int]:
        """Level ``t`` after the update and the nodes it refitted."""
        t0 = time.perf_counter()
        C, lv = chain[t], levels[t]
        parent_of = C.indices.astype(np.int32)
        active = active_mask(negatives, t, targets, beam_ids if use_man else None)
        changed = changed_nodes(parent_of, active[n_old:], targets_new[t])
        last = t == len(chain) - 1
        # the level's own layout, grown to the features and nodes of the update; only the edited nodes change,
        # in one pass over the level's entries (the edits in order: a node's last edit stands)
        level = grown(lv, d, parent_of, C.shape[1])
        edits = []
        if last:  # fresh labels start cold; the others' refits from their old weights
            edits += [(fit_fresh, sp.csc_matrix((d + 1, fit_fresh.size), dtype=np.float32)),
                      _never(fresh[~documented], d, lv.bias)]
            # with the old rows replayed the fresh labels are refitted with the rest, else against the memory
            changed = np.setdiff1d(changed, fresh) if apart else \
                np.union1d(np.setdiff1d(changed, fresh[~documented]), fit_fresh)
        if changed.size:
            init = node_columns(level, changed)
            if last:
                init = _zeroed(init, np.isin(changed, fit_fresh))
            if sample is not None:
                edits.append((changed, _refit_sampled(
                    X, targets[t][:, changed], active, X_s, sample_targets[t][:, changed],
                    active_mask("tfn", t, sample_targets), parent_of[changed], init, lv.bias, n_threads,
                    solver_kw, curvature)))
            else:
                edits.append((changed, _refit(X, targets[t][:, changed], parent_of[changed], active, init, warm,
                                              n_threads, solver_kw, curvature)))
        if last and fit_fresh.size and apart:
            edits.append((fit_fresh, _fit_fresh(tree, X_new, Y_new, memory, fit_fresh, parent_of, negatives,
                                                n_threads, fresh_C, solver_kw)))
        level = replaced(level, *merged(edits))
        refitted = int(changed.size + (fit_fresh.size if last and apart else 0))
        log.info("update level %d/%d: refitted %d of %d nodes on %d rows (%s), %.1fs", t + 1, len(chain),
                 refitted, C.shape[0], X.shape[0], warm, time.perf_counter() - t0)
        bar.update(1)
        return level, refitted

    bar = progress_bar(progress, total=len(chain), desc="updating levels", unit="level")
    try:
        if use_man:  # a level's negatives come from the beam through the levels above it: one after the other
            done = []
            for t in range(len(chain)):
                done.append(one_level(t, beam_ids))
                if t < len(chain) - 1:
                    beam_ids, beam_sc = beam_step(X, done[-1][0], beam_ids, beam_sc, beam_size, n_threads=n_threads)
        else:  # teacher-forced negatives: the levels are independent, and the leaves (the bulk) run beside the
            # others (their sparse products and sorts release the GIL; the solver's threads share the cores)
            workers = min(2, resolve_threads(n_threads), len(chain))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = {t: pool.submit(one_level, t, None) for t in [len(chain) - 1, *range(len(chain) - 1)]}
                done = [futures[t].result() for t in range(len(chain))]
        new_levels = [level for level, _ in done]
        report["refitted"] = [n for _, n in done]
    finally:
        bar.close()
    out = HierarchicalLinearModel()
    out.levels_ = new_levels
    report["seconds"] = round(time.perf_counter() - t_start, 3)
    return out, report


def _training_rows(X_new, Y_new, replay, d: int, L_old: int):
    """(X, Y, n_old): the rows every refit sees, the replayed old documents first when given."""
    if replay is None:
        return X_new, Y_new, 0
    X_old, Y_old = replay
    X_old = prepare_features(widened_rows(X_old, d), d)
    Y_old = sp.csr_matrix(Y_old, dtype=np.float32)
    if Y_old.shape[1] > L_old or Y_old.shape[0] != X_old.shape[0]:
        raise ConfigError(f"the replay set has shape {X_old.shape} / {Y_old.shape}; expected at most"
                          f" {L_old} label columns and one label row per document")
    Y_old.resize(Y_old.shape[0], Y_new.shape[1])
    return sp.vstack([X_old, X_new], format="csr"), sp.vstack([Y_old, Y_new], format="csr"), X_old.shape[0]


def _refit_sampled(X, Y, active, X_s, Y_s, active_s, parent_of, init, bias, n_threads, solver_kw, curvature
                   ) -> sp.csc_matrix:
    """Proximal refits of the old nodes ``init`` on the new rows ``(X, Y, active)`` and the sampled old rows
    ``(X_s, Y_s, active_s)``, around the centre ``c`` of the module doc (3.), which the solver's kernel
    computes block by block from the sample rows it holds anyway (``train_level(sample_rows=)``): the centre as a
    sparse matrix had 3.6x the old weights' entries, and building, adding and sorting it took 11 of the 60 CPU
    seconds of a fifth of yso-finna-en's learn. ``bias``: the level's bias value (the solver's, ``solver_kw``)."""
    if float(bias) != float(solver_kw.get("bias", 1.0)):
        raise ConfigError(f"the level's bias {bias} is not the solver's {solver_kw.get('bias', 1.0)}")
    return _refit(sp.vstack([X_s, X], format="csr"), sp.vstack([Y_s, Y], format="csr"), parent_of,
                  sp.vstack([sp.csr_matrix(active_s), sp.csr_matrix(active)], format="csr"), init, "proximal",
                  n_threads, solver_kw, curvature, sample_rows=X_s.shape[0])


def _refit(X, Y, parent_of, active, init, warm, n_threads, solver_kw, curvature=None, sample_rows: int = 0
           ) -> sp.csc_matrix:
    """Old nodes refitted from their weights ``init``. Proximal refits hold the bias :data:`BIAS_ANCHOR` times
    harder than the feature weights (module doc, 3.): the bias feature's value is divided by it and the old
    bias weight multiplied, so margins are unchanged and ``1/2 (b' - b'_old)^2`` is ``BIAS_ANCHOR^2 / 2
    (b - b_old)^2`` in the bias's own units. A ``curvature`` ``h`` holds feature ``j`` ``sqrt(h_j)`` times
    harder the same way (``x_j / sqrt(h_j)``, ``w_j sqrt(h_j)``): ``1/2 sum_j h_j (w_j - w_old_j)^2``.
    ``sample_rows``: the first rows are a sampled replay (:func:`_refit_sampled`); in these scaled coordinates its
    centre is ``w_old' - sum_i (y_i slack_i / D_ii) x_i'``, the module doc's ``c`` scaled."""
    from .solver import train_level

    kw = dict(solver_kw, sample_rows=sample_rows)
    b_hold = BIAS_ANCHOR if warm == "proximal" and kw.get("bias", 1.0) else 1.0
    if warm != "proximal" or (b_hold == 1.0 and curvature is None):
        return train_level(X, Y, parent_of, active, init=init, warm=warm, n_threads=n_threads, **kw)
    d = init.shape[0] - 1
    hold = np.ones(d, dtype=np.float64) if curvature is None else np.sqrt(np.asarray(curvature, dtype=np.float64))
    if curvature is not None:
        X = sp.csr_matrix(X, dtype=np.float32, copy=True)  # X diag(1 / hold), in float64 as the product was
        X.data = (X.data.astype(np.float64) * (1.0 / hold)[X.indices]).astype(np.float32)
    kw["bias"] = kw.get("bias", 1.0) / b_hold
    W = train_level(X, Y, parent_of, active, init=_scaled(init, np.r_[hold, b_hold]), warm=warm, n_threads=n_threads,
                    **kw)
    return _scaled(W, np.r_[1.0 / hold, 1.0 / b_hold])


def _scaled(W, row_scale: np.ndarray) -> sp.csc_matrix:
    """``diag(row_scale) @ W`` for a csc ``W``, in float32, by scaling its stored values: the products a sparse
    matrix product gives, without its two format conversions (3.7 s of a learn of 104k rows into
    yso-finna-en's tree)."""
    W = sp.csc_matrix(W, dtype=np.float32, copy=True)
    W.sort_indices()
    W.data *= np.asarray(row_scale, dtype=np.float32)[W.indices]
    return W


def old_curvature(X_old: sp.csr_matrix, weight: float, C: float) -> np.ndarray:
    """Per feature, the diagonal of the old documents' objective's curvature that a proximal refit keeps in place
    of them (an elastic-weight-consolidation-style diagonal): ``h_j = 1 + 2 C weight sum_i x_ij^2``, the
    regulariser's 1 plus the squared hinge's ``2 C x x^T`` over the old rows ``X_old`` (each standing for
    ``weight`` documents: a memory sample's ``seen / len``). Counting every old row as inside the margin and
    every node as seeing every row over-states it, which errs toward keeping what the model knew."""
    X_old = sp.csr_matrix(X_old)
    sq = np.asarray(X_old.multiply(X_old).sum(axis=0), dtype=np.float64).ravel()
    return 1.0 + 2.0 * float(C) * float(weight) * sq


def _fit_fresh(tree: LabelTree, X_new, Y_new, memory, labels, parent_of, negatives, n_threads, fresh_C,
               solver_kw) -> sp.csc_matrix:
    """Rankers of the fresh ``labels``, fitted cold on the new rows plus the remembered ones (module doc, 4.).
    The remembered rows' negatives are teacher-forced: those positive under the label's parent."""
    from .solver import train_level

    X, Y = X_new, Y_new
    if memory is not None and memory[0].shape[0]:
        X_mem = prepare_features(widened_rows(memory[0], X_new.shape[1]), X_new.shape[1])
        Y_mem = sp.csr_matrix(memory[1], dtype=np.float32)
        Y_mem.resize(Y_mem.shape[0], Y_new.shape[1])
        X, Y = sp.vstack([X_mem, X_new], format="csr"), sp.vstack([Y_mem, Y_new], format="csr")
    targets = tree.level_targets(Y)
    active = active_mask("tfn", len(targets) - 1, targets)
    kw = dict(solver_kw)
    if fresh_C is not None:
        kw.update(C_pos=fresh_C[0], C_neg=fresh_C[1])
    return train_level(X, targets[-1][:, labels], parent_of[labels], active, n_threads=n_threads, **kw)


def widened_rows(X, d: int):
    """Sparse rows ``X`` over ``d >= X.shape[1]`` features (zeros past its own): rows featurized before the
    vocabulary grew. ``X`` itself when it has ``d`` columns."""
    if not sp.issparse(X) or X.shape[1] == d:
        return X
    if X.shape[1] > d:
        raise ConfigError(f"features have {X.shape[1]} columns, the model expects {d}")
    X = sp.csr_matrix(X)
    return sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], d))


def _never(labels: np.ndarray, d: int, bias: float) -> tuple[np.ndarray, sp.csc_matrix]:
    """The edit that gives the nodes ``labels`` a ranker that says no: decision value :data:`NEVER` (bias only)."""
    value = NEVER / bias if bias else 0.0
    cols = sp.csc_matrix((np.full(labels.size, value, dtype=np.float32), np.full(labels.size, d),
                          np.arange(labels.size + 1)), shape=(d + 1, labels.size))
    return labels, cols


def _zeroed(W: sp.csc_matrix, columns: np.ndarray) -> sp.csc_matrix:
    """``W`` with the flagged columns emptied (fresh labels start cold)."""
    if not columns.any():
        return W
    out = sp.csc_matrix(W @ sp.diags((~columns).astype(np.float32)), dtype=np.float32)
    out.eliminate_zeros()
    return out
