"""One-vs-all L2-regularised squared-hinge (L2-loss SVM) solver for one level of a label tree.

Every level of XR-Linear / Parabel is thousands of small binary problems: output ``k`` (a cluster of the
next level, or a label) is trained against the instances its parent cluster routes to it.  This module
solves them all at once with liblinear's dual coordinate descent for ``L2R_L2LOSS_SVC_DUAL`` (the
``solve_l2r_l1l2_svc`` routine, including its shrinking heuristic, its stopping rule and its regularised
bias feature), which is also what PECOS runs.  For output ``k`` with training rows ``I_k`` it minimises

    0.5 * (||w||^2 + b^2) + sum_{i in I_k} C_{y_i} * max(0, 1 - y_i * (x_i . w + bias * b))^2

and returns ``[w; b]`` as one column of a sparse ``(d + 1, K)`` matrix; the decision value of an
instance is ``x . W[:d, k] + bias * W[d, k]``.

Warm starts (``init``, ``warm``) update a trained model without its training data or without starting over
(:mod:`xmtc.linear.update`): ``"proximal"`` minimises ``0.5 ||w - w_old||^2 + loss`` over the given rows
(liblinear's dual started at ``w = w_old``, ``alpha = 0``: each update reads only ``w . x_i`` and
``alpha_i``, so the same loop solves it); ``"dual"`` solves the objective above started from the dual point
that ``w_old`` implies (``alpha_i = max(0, 1 - y_i w_old . x_i) / D_ii``, ``w = sum alpha_i y_i x_i``).

Why it is organised the way it is:

* Outputs with the same parent share one training set, so training sets are built once per *parent*:
  the parent's rows are copied into a compact CSR whose feature ids are renumbered to the features
  that occur in those rows, most frequent first.  The dense weight buffer is then only as long as
  that local vocabulary instead of spanning the whole ~10^6-feature space, and its most used rows sit
  together in cache; weights are read out in global feature order through a local-id map.
* Parents are processed in batches whose copied data stays under a memory budget, so a level with
  heavy hard-negative mining never holds every parent's copy at once.
* Within a batch the outputs, not the parents, are the unit of parallel work (a root level has one
  parent but many outputs).  They are dealt to threads statically, longest-first onto the least
  loaded thread, and an epoch's row order depends only on the parent's row count, so the result is
  bit-identical whatever the number of threads.
* Each thread writes surviving weights straight into its own output buffer.  A thread stops before
  an output whose worst-case size (local vocabulary + 1) might not fit, the buffers are emptied
  and the kernel resumes, so nothing is trained twice and no per-output Python loop exists.

The loops run in C (``xmtc/csrc/solver.c``, through :mod:`xmtc.native`); this module prepares their
arrays and assembles the result, from arguments checked and converted by :mod:`xmtc.linear.solver_inputs`.
"""

from __future__ import annotations

import heapq

import numpy as np
import scipy.sparse as sp

from .. import native
from ..errors import ConfigError
from ..native import ptr
from .solver_inputs import check_inputs, warm_arrays

__all__ = ["train_level", "primal_objective"]

# Entries (feature id + value) of copied per-parent training data held at once; 2**25 is ~256 MiB.
_BATCH_NNZ = 1 << 25
# Initial per-thread capacity (entries) of the buffers that receive trained weights.
_OUT_CAP = 1 << 21

# Outputs trained together in one pass over their shared rows (one 64-byte cache line per feature).
# Measured on yso-finna-en: 16 lanes beat 8 by ~15%, 8 beat one output at a time by ~2x.
# The weights being built are float32 (sums and the dual variables stay float64): a 16-lane block
# of a 110k-feature parent is then 7 MB instead of 14 and two threads' blocks share the L3 cache;
# measured 20-25% faster on reuters21578 and the same P@k on it and on yso-finna-en.
# Must equal LANES in xmtc/csrc/solver.c, which reads blk_out and res_* as (blocks, _LANES) arrays.
_LANES = 16


def _deal(cost, n_threads):
    """Longest-processing-time-first assignment: returns (order, offsets) of per-thread work lists.

    Ties go to the lower thread, so the lists depend only on the costs and the thread count.
    """
    order = np.argsort(-cost, kind="mergesort")
    heap = [(0.0, t) for t in range(n_threads)]
    owner = np.empty(order.shape[0], dtype=np.int64)
    for s, item in enumerate(order):
        load, t = heapq.heappop(heap)
        owner[s] = t
        heapq.heappush(heap, (load + float(cost[item]), t))
    by_thread = np.argsort(owner, kind="stable")
    work = order[by_thread].astype(np.int64)
    offsets = np.zeros(n_threads + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n_threads), out=offsets[1:])
    return work, offsets


# --------------------------------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------------------------------

def train_level(X, Y, parent_of, active, *, C_pos=1.0, C_neg=1.0, bias=1.0, tol=0.1, max_iter=100,
                threshold=0.05, n_threads=None, init=None, warm=None, sample_rows: int = 0) -> sp.csc_matrix:
    """Train one L2-loss linear SVM per column of ``Y`` on the rows its parent makes active.

    Parameters
    ----------
    X : (n, d) sparse, cast to float32 CSR.  Y : (n, K) sparse, nonzero = positive.
    parent_of : (K,) ints in ``[0, P)``.  active : (n, P) sparse; row i trains every output whose parent
        p has ``active[i, p] != 0``.  Positives of an output are always trained on, active or not;
        a sibling's positive that is not active is not a negative of the output.
    C_pos, C_neg : loss weights of positive / negative instances.  bias : value of the appended,
        regularised bias feature (0 disables it).  tol, max_iter : liblinear's ``eps`` (on the spread of
        projected gradients) and epoch limit.  threshold : weights with ``|w| < threshold`` are dropped
        (PECOS's rule); the bias weight is kept whenever it is nonzero.  n_threads : worker threads,
        default every CPU the process may use; the result does not depend on it.
    init : (d + 1, K) sparse old weights to start from, with ``warm`` "proximal" or "dual" (module doc).
        Proximal keeps an output's old weights on features that none of its rows has.
    sample_rows : proximal only: the first ``sample_rows`` rows of ``X`` are a sampled replay of old training
        rows, and the proximal centre moves to cancel their loss's gradient at ``init``
        (the centre ``c`` of :mod:`xmtc.linear.update`'s module doc, 3., computed here in the kernel, block by
        block).

    Returns
    -------
    W : (d + 1, K) float32 CSC; row ``d`` holds the bias weight, so a decision value is
        ``x @ W[:d] + bias * W[d]``.

    Degenerate outputs are solved exactly, not special-cased: an output whose parent has no active
    instances and which has no positives has an empty training set, so its optimum is ``w = 0`` (an
    empty column, decision value 0).  An output with negatives only learns a negative bias (close to
    ``-1 / bias`` when its negatives are many) and negative weights on its negatives' features, so it
    scores below zero everywhere it was trained.
    """
    return _train(X, Y, parent_of, active, C_pos=C_pos, C_neg=C_neg, bias=bias, tol=tol,
                  max_iter=max_iter, threshold=threshold, n_threads=n_threads, init=init, warm=warm,
                  sample_rows=sample_rows)[0]


def _train(X, Y, parent_of, active, *, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads, init=None,
           warm=None, sample_rows: int = 0):
    """train_level, also returning the epochs each output ran (max_iter means it did not converge)."""
    sample_rows = int(sample_rows)
    if sample_rows and (warm != "proximal" or not 0 < sample_rows <= X.shape[0]):
        raise ConfigError(f"sample_rows={sample_rows} needs warm='proximal' and at most the {X.shape[0]} rows")
    (X, Y, parent_of, active, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads) = check_inputs(
        X, Y, parent_of, active, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads)
    n, d = X.shape
    K = Y.shape[1]
    P = active.shape[1]
    w0_ptr, w0_ind, w0_val, mode = warm_arrays(init, warm, (d + 1, K))
    if K == 0:
        return sp.csc_matrix((d + 1, 0), dtype=np.float32), np.zeros(0, dtype=np.int64)

    x_ptr = X.indptr.astype(np.int64)
    x_ind = X.indices.astype(np.int32, copy=False)
    x_val = X.data
    row_nnz = np.diff(x_ptr)

    Yc = Y.tocsc()
    Yc.sort_indices()
    y_ptr = Yc.indptr.astype(np.int64)
    y_ind = Yc.indices.astype(np.int32)

    # Training rows per parent: active rows plus the positives of its outputs (callers should make
    # positives active; including them regardless keeps every positive's loss in the objective).
    # Parents without outputs get no rows, so nothing is copied for them.
    onehot = sp.csr_matrix((np.ones(K, dtype=np.float32), (np.arange(K), parent_of)), shape=(K, P))
    has_out = (np.bincount(parent_of, minlength=P) > 0).astype(np.float32)
    # Y is binarised first: "nonzero = positive" includes negative values, which must not cancel
    # against each other or against the active mask in this sum and drop a training row.
    Yb = sp.csr_matrix((np.ones(Y.nnz, dtype=np.float32), Y.indices, Y.indptr), shape=Y.shape)
    # An active row carries K + 1, more than any count of positive children, so the sum also says
    # which rows are active: the others are in the parent's set only as some child's positive, and
    # only that child trains on them (a sibling's positive is not a negative unless active).
    big = float(K + 1)
    S = sp.csc_matrix((big * (active != 0).astype(np.float64) + Yb.astype(np.float64) @ onehot) @ sp.diags(has_out))
    S.eliminate_zeros()
    S.sort_indices()
    s_active = (S.data >= big).astype(np.uint8)
    S.data[:] = 1.0
    s_ptr = S.indptr.astype(np.int64)
    s_rows = S.indices.astype(np.int32)
    parent_nnz = np.rint(S.T @ row_nnz.astype(np.float64)).astype(np.int64)
    parent_rows = np.diff(s_ptr)

    # Outputs grouped by parent (stable, so ties keep index order).
    by_parent = np.argsort(parent_of, kind="stable").astype(np.int64)
    out_start = np.searchsorted(parent_of[by_parent], np.arange(P + 1))

    res_start_all = np.zeros(K, dtype=np.int64)
    res_count = np.zeros(K, dtype=np.int64)
    res_iter = np.zeros(K, dtype=np.int64)
    chunks_rows, chunks_vals, base = [], [], 0
    cap = _OUT_CAP
    dpos, dneg = 0.5 / C_pos, 0.5 / C_neg
    L = _LANES

    kern = native.lib()
    for p0, p1 in _batches(parent_nnz):
        nb = p1 - p0
        rows = s_rows[s_ptr[p0]:s_ptr[p1]]
        row_active = s_active[s_ptr[p0]:s_ptr[p1]]
        row_off = s_ptr[p0:p1 + 1] - s_ptr[p0]
        lptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(row_nnz[rows], out=lptr[1:])
        lind = np.empty(lptr[-1], dtype=np.int32)
        lval = np.empty(lptr[-1], dtype=np.float32)
        feat_off = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(np.minimum(parent_nnz[p0:p1], d), out=feat_off[1:])
        feat = np.empty(feat_off[-1], dtype=np.int32)
        lpos = np.empty(feat_off[-1], dtype=np.int32)
        n_feat = np.zeros(nb, dtype=np.int64)
        rsq = np.empty(rows.shape[0], dtype=np.float64)
        work, work_off = _deal(parent_nnz[p0:p1].astype(np.float64) + 1.0, n_threads)
        native.check(kern.xmtc_build_batch(
            ptr(x_ptr, np.int64), ptr(x_ind, np.int32), ptr(x_val, np.float32), ptr(rows, np.int32),
            ptr(row_off, np.int64), ptr(lptr, np.int64), ptr(lind, np.int32), ptr(lval, np.float32),
            ptr(rsq, np.float64), bias * bias,
            ptr(feat, np.int32), ptr(lpos, np.int32), ptr(feat_off, np.int64), ptr(n_feat, np.int64), d, ptr(work, np.int64),
            ptr(work_off, np.int64), n_threads), "copying a batch of training rows")

        n_out = int(out_start[p1] - out_start[p0])
        # Full blocks are fastest, but a level with few outputs (the root) must still give
        # every thread a block.
        lanes = int(min(L, max(1, -(-n_out // n_threads))))
        blk_out, blk_parent = _blocks(by_parent[out_start[p0]:out_start[p1]],
                                      out_start[p0:p1 + 1] - out_start[p0], lanes)
        cost = (parent_nnz[p0:p1] + parent_rows[p0:p1]).astype(np.float64)[blk_parent] + 1.0
        work, work_off = _deal(cost, n_threads)
        max_m = max(int(parent_rows[p0:p1].max()), 1)
        max_u = int(n_feat.max())
        # a proximal block may also hand back all of its outputs' old weights
        extra = np.where(blk_out >= 0, np.diff(w0_ptr)[np.maximum(blk_out, 0)], 0).sum(axis=1).max() \
            if mode == 1 else 0
        cap = max(cap, L * (max_u + 1) + int(extra))
        o_rows = np.empty((n_threads, cap), dtype=np.int32)
        o_vals = np.empty((n_threads, cap), dtype=np.float32)
        o_used = np.zeros(n_threads, dtype=np.int64)
        nblk = blk_out.shape[0]
        res_start = np.zeros((nblk, L), dtype=np.int64)
        res_cnt = np.zeros((nblk, L), dtype=np.int64)
        res_it = np.zeros((nblk, L), dtype=np.int64)
        progress = work_off[:-1].copy()
        while True:
            before = progress.copy()
            warm_args = (ptr(w0_ptr, np.int64), ptr(w0_ind, np.int32), ptr(w0_val, np.float32), mode,
                         sample_rows) if mode else ()
            native.check((kern.xmtc_train_batch_warm if mode else kern.xmtc_train_batch)(
                ptr(lptr, np.int64), ptr(lind, np.int32), ptr(lval, np.float32), ptr(rsq, np.float64),
                ptr(rows, np.int32), ptr(row_active, np.uint8), ptr(row_off, np.int64), ptr(feat, np.int32),
                ptr(lpos, np.int32), ptr(feat_off, np.int64), ptr(n_feat, np.int64), ptr(y_ptr, np.int64), ptr(y_ind, np.int32),
                ptr(blk_out, np.int64), ptr(blk_parent, np.int64), ptr(work, np.int64), ptr(work_off, np.int64),
                ptr(progress, np.int64), bias, dpos, dneg, tol, max_iter, threshold, d, max_m, max_u,
                ptr(o_rows, np.int32), ptr(o_vals, np.float32), cap, ptr(o_used, np.int64),
                ptr(res_start, np.int64), ptr(res_cnt, np.int64), ptr(res_it, np.int64), *warm_args, n_threads),
                "training a batch of outputs")
            for t in range(n_threads):  # harvest each thread's buffer (a loop over threads only)
                res_start[work[before[t]:progress[t]]] += base
                chunks_rows.append(o_rows[t, :o_used[t]].copy())
                chunks_vals.append(o_vals[t, :o_used[t]].copy())
                base += int(o_used[t])
            if np.all(progress == work_off[1:]):
                break
        valid = blk_out >= 0
        ids = blk_out[valid]
        res_start_all[ids] = res_start[valid]
        res_count[ids] = res_cnt[valid]
        res_iter[ids] = res_it[valid]

    all_rows = np.concatenate(chunks_rows) if chunks_rows else np.empty(0, np.int32)
    all_vals = np.concatenate(chunks_vals) if chunks_vals else np.empty(0, np.float32)
    indptr = np.zeros(K + 1, dtype=np.int64)
    np.cumsum(res_count, out=indptr[1:])
    gather = np.repeat(res_start_all - indptr[:-1], res_count) + np.arange(indptr[-1], dtype=np.int64)
    W = sp.csc_matrix((all_vals[gather], all_rows[gather], indptr), shape=(d + 1, K))
    W.has_sorted_indices = mode != 1  # proximal: the kept old weights follow the trained ones
    if mode == 1:
        W.sort_indices()
    return W, res_iter


def _blocks(outs, start, lanes):
    """Cut each parent's outputs (``outs[start[p]:start[p+1]]``) into near-equal blocks of <= lanes.

    Returns (blk_out, blk_parent): output ids per block and lane (-1 = unused lane), and each block's
    batch-local parent.  Weights do not depend on how outputs are blocked (see dcd_block in xmtc/csrc/solver.c), so
    ``lanes`` may follow the thread count.
    """
    per_parent = np.diff(start)
    nblk_p = (per_parent + lanes - 1) // lanes
    blk_base = np.concatenate(([0], np.cumsum(nblk_p)))
    parent = np.repeat(np.arange(per_parent.shape[0]), per_parent)
    pos = np.arange(outs.shape[0]) - start[parent]
    blk_in_parent = pos * nblk_p[parent] // per_parent[parent]
    # first position of each block inside its parent: ceil(b * c / nblk)
    first = -((-blk_in_parent * per_parent[parent]) // nblk_p[parent])
    blk_out = np.full((int(blk_base[-1]), _LANES), -1, dtype=np.int64)
    blk_out[blk_base[parent] + blk_in_parent, pos - first] = outs
    blk_parent = np.repeat(np.arange(per_parent.shape[0]), nblk_p).astype(np.int64)
    return blk_out, blk_parent


def _batches(parent_nnz):
    """Contiguous parent ranges of about _BATCH_NNZ copied entries each (a big parent stands alone)."""
    before = np.cumsum(parent_nnz) - parent_nnz
    batch = before // _BATCH_NNZ
    cuts = np.flatnonzero(np.diff(batch)) + 1
    bounds = np.concatenate(([0], cuts, [parent_nnz.shape[0]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def primal_objective(X, y, w, b, C_pos, C_neg, bias):
    """Primal objective ``0.5 (||w||^2 + b^2) + sum_i C_{y_i} max(0, 1 - y_i (x_i.w + bias b))^2``.

    For tests and diagnostics: it is what train_level minimises per output, so comparing it against
    another solver's optimum checks convergence without depending on either solver's internals.
    ``y`` holds +1 / -1 (any value > 0 counts as positive); ``b`` is the bias *weight* (row d of W).
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.where(np.asarray(y).ravel() > 0, 1.0, -1.0)
    w = np.asarray(w, dtype=np.float64).ravel()
    if X.shape[0] != y.shape[0] or X.shape[1] != w.shape[0]:
        raise ValueError(f"shapes do not match: X {X.shape}, y {y.shape}, w {w.shape}")
    f = X @ w + float(bias) * float(b)
    slack = np.maximum(0.0, 1.0 - y * f)
    c = np.where(y > 0, float(C_pos), float(C_neg))
    return float(0.5 * (w @ w + float(b) ** 2) + np.sum(c * slack * slack))
