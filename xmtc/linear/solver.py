"""One-vs-all L2-regularised squared-hinge (L2-loss SVM) solver for one level of a label tree.

Every level of XR-Linear / Parabel is thousands of small binary problems: output ``k`` (a cluster of the
next level, or a label) is trained against the instances its parent cluster routes to it.  This module
solves them all at once with liblinear's dual coordinate descent for ``L2R_L2LOSS_SVC_DUAL`` (the
``solve_l2r_l1l2_svc`` routine, including its shrinking heuristic, its stopping rule and its regularised
bias feature), which is also what PECOS runs.  For output ``k`` with training rows ``I_k`` it minimises

    0.5 * (||w||^2 + b^2) + sum_{i in I_k} C_{y_i} * max(0, 1 - y_i * (x_i . w + bias * b))^2

and returns ``[w; b]`` as one column of a sparse ``(d + 1, K)`` matrix; the decision value of an
instance is ``x . W[:d, k] + bias * W[d, k]``.

Why it is organised the way it is:

* Outputs with the same parent share one training set, so training sets are built once per *parent*:
  the parent's rows are copied into a compact CSR whose feature ids are renumbered to the (sorted)
  features that occur in those rows.  The dense weight buffer is then only as long as that local
  vocabulary (it usually fits in L2 cache instead of spanning the whole ~10^6-feature space), clearing
  it is a sweep over exactly the entries that can be nonzero, and reading the surviving weights out
  of it yields globally sorted feature ids for free.
* Parents are processed in batches whose copied data stays under a memory budget, so a level with
  heavy hard-negative mining never holds every parent's copy at once.
* Within a batch the outputs, not the parents, are the unit of parallel work (a root level has one
  parent but many outputs).  They are dealt to threads statically, longest-first onto the least
  loaded thread, and each output draws its shuffles from its own generator seeded by its index, so
  the result is bit-identical whatever the number of threads.
* Each thread writes surviving weights straight into its own output buffer.  A thread stops before
  an output whose worst-case size (local vocabulary + 1) might not fit, the buffers are emptied
  and the kernel resumes, so nothing is trained twice and no per-output Python loop exists.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from ..errors import ConfigError
from ..jit import slp_vectorized

__all__ = ["train_level", "primal_objective"]

# Entries (feature id + value) of copied per-parent training data held at once; 2**25 is ~256 MiB.
_BATCH_NNZ = 1 << 25
# Initial per-thread capacity (entries) of the buffers that receive trained weights.
_OUT_CAP = 1 << 21

_INF = np.inf
# Outputs trained together in one pass over their shared rows (one 64-byte cache line per feature).
# Measured on yso-finna-en: 16 lanes beat 8 by ~15%, 8 beat one output at a time by ~2x.
# The weights being built are float32 (sums and the dual variables stay float64): a 16-lane block
# of a 110k-feature parent is then 7 MB instead of 14 and two threads' blocks share the L3 cache;
# measured 20-25% faster on reuters21578 and the same P@k on it and on yso-finna-en.
_LANES = 16
# A row with at most this many live lanes is computed lane by lane instead of all 16 at once.
_FEW_LANES = 4


# --------------------------------------------------------------------------------------------------
# numba kernels.  Every array argument has one fixed dtype (see _prepare_*), so each kernel compiles
# exactly once and the on-disk cache is reused across runs.
# --------------------------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _next_rand(state):
    """xorshift64*: a cheap generator whose whole state is one word, so each output owns one."""
    x = state[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[0] = x
    return x * np.uint64(2685821657736338717)


@njit(cache=True, nogil=True)
def _seed(state, k):
    """splitmix64 of the output index: well-spread, nonzero starting states for neighbouring k."""
    z = np.uint64(k) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    if z == np.uint64(0):
        z = np.uint64(0x9E3779B97F4A7C15)
    state[0] = z


# Row kernels for one block.  The _LANES lanes are spelt out with scalar accumulators, which stay in
# registers (a ``for lane`` loop over a small array kept every partial sum in memory, ~15% slower)
# and which LLVM's SLP vectoriser packs into SIMD registers: the solver is compiled with it on
# (xmtc.jit.slp_vectorized), which measured ~1.4x faster on reuters21578 with identical weights.

assert _LANES == 16, "_row_dot and _row_axpy spell out exactly 16 lanes"


@njit(cache=True, nogil=True, inline="always")
def _row_dot(wf, lind, lval, start, stop, ub, bias, gb):
    """gb[l] = w[:, l] . x_r + bias * w[u, l] for every lane, with w flattened row-major as wf."""
    g0 = wf[ub + 0] * bias; g1 = wf[ub + 1] * bias; g2 = wf[ub + 2] * bias; g3 = wf[ub + 3] * bias  # noqa: E702
    g4 = wf[ub + 4] * bias; g5 = wf[ub + 5] * bias; g6 = wf[ub + 6] * bias; g7 = wf[ub + 7] * bias  # noqa: E702
    g8 = wf[ub + 8] * bias; g9 = wf[ub + 9] * bias; g10 = wf[ub + 10] * bias; g11 = wf[ub + 11] * bias  # noqa: E702
    g12 = wf[ub + 12] * bias; g13 = wf[ub + 13] * bias; g14 = wf[ub + 14] * bias; g15 = wf[ub + 15] * bias  # noqa: E702
    for q in range(start, stop):
        jb = lind[q] * 16
        v = np.float64(lval[q])
        g0 += wf[jb + 0] * v; g1 += wf[jb + 1] * v; g2 += wf[jb + 2] * v; g3 += wf[jb + 3] * v  # noqa: E702
        g4 += wf[jb + 4] * v; g5 += wf[jb + 5] * v; g6 += wf[jb + 6] * v; g7 += wf[jb + 7] * v  # noqa: E702
        g8 += wf[jb + 8] * v; g9 += wf[jb + 9] * v; g10 += wf[jb + 10] * v; g11 += wf[jb + 11] * v  # noqa: E702
        g12 += wf[jb + 12] * v; g13 += wf[jb + 13] * v; g14 += wf[jb + 14] * v; g15 += wf[jb + 15] * v  # noqa: E702
    gb[0] = g0; gb[1] = g1; gb[2] = g2; gb[3] = g3  # noqa: E702
    gb[4] = g4; gb[5] = g5; gb[6] = g6; gb[7] = g7  # noqa: E702
    gb[8] = g8; gb[9] = g9; gb[10] = g10; gb[11] = g11  # noqa: E702
    gb[12] = g12; gb[13] = g13; gb[14] = g14; gb[15] = g15  # noqa: E702


@njit(cache=True, nogil=True, inline="always")
def _row_axpy(wf, lind, lval, start, stop, ub, bias, dl):
    """w[:, l] += dl[l] * x_r and w[u, l] += dl[l] * bias for every lane."""
    d0 = dl[0]; d1 = dl[1]; d2 = dl[2]; d3 = dl[3]  # noqa: E702
    d4 = dl[4]; d5 = dl[5]; d6 = dl[6]; d7 = dl[7]  # noqa: E702
    d8 = dl[8]; d9 = dl[9]; d10 = dl[10]; d11 = dl[11]  # noqa: E702
    d12 = dl[12]; d13 = dl[13]; d14 = dl[14]; d15 = dl[15]  # noqa: E702
    for q in range(start, stop):
        jb = lind[q] * 16
        v = np.float64(lval[q])
        wf[jb + 0] += d0 * v; wf[jb + 1] += d1 * v; wf[jb + 2] += d2 * v; wf[jb + 3] += d3 * v  # noqa: E702
        wf[jb + 4] += d4 * v; wf[jb + 5] += d5 * v; wf[jb + 6] += d6 * v; wf[jb + 7] += d7 * v  # noqa: E702
        wf[jb + 8] += d8 * v; wf[jb + 9] += d9 * v; wf[jb + 10] += d10 * v; wf[jb + 11] += d11 * v  # noqa: E702
        wf[jb + 12] += d12 * v; wf[jb + 13] += d13 * v; wf[jb + 14] += d14 * v; wf[jb + 15] += d15 * v  # noqa: E702
    wf[ub + 0] += d0 * bias; wf[ub + 1] += d1 * bias; wf[ub + 2] += d2 * bias; wf[ub + 3] += d3 * bias  # noqa: E702
    wf[ub + 4] += d4 * bias; wf[ub + 5] += d5 * bias; wf[ub + 6] += d6 * bias; wf[ub + 7] += d7 * bias  # noqa: E702
    wf[ub + 8] += d8 * bias; wf[ub + 9] += d9 * bias; wf[ub + 10] += d10 * bias; wf[ub + 11] += d11 * bias  # noqa: E702
    wf[ub + 12] += d12 * bias; wf[ub + 13] += d13 * bias; wf[ub + 14] += d14 * bias; wf[ub + 15] += d15 * bias  # noqa: E702


@njit(cache=True, nogil=True, inline="always")
def _row_dot_lanes(wf, lind, lval, start, stop, ub, bias, gb, shrunk, i):
    """_row_dot for the lanes of row i that are not shrunk only (the others' gb is not read).

    Each lane sums in exactly _row_dot's order, so the weights are bit-identical whichever path a
    row takes; this one is cheaper once shrinking has left a row few live lanes (well-separated
    problems shrink most rows of most lanes after a few epochs).
    """
    for b in range(_LANES):
        if shrunk[i, b]:
            continue
        g = wf[ub + b] * bias
        for q in range(start, stop):
            g += wf[lind[q] * 16 + b] * np.float64(lval[q])
        gb[b] = g


@njit(cache=True, nogil=True, inline="always")
def _row_axpy_lanes(wf, lind, lval, start, stop, ub, bias, dl):
    """_row_axpy for the lanes with a non-zero step only (same arithmetic per lane)."""
    for b in range(_LANES):
        d = dl[b]
        if d == 0.0:
            continue
        for q in range(start, stop):
            wf[lind[q] * 16 + b] += d * np.float64(lval[q])
        wf[ub + b] += d * bias


@njit(cache=True, nogil=True)
def _dcd_block(lptr, lind, lval, r0, m, rsq, yv, alpha, shrunk, count, perm, w, u, nl, bias, dpos, dneg,
               eps, max_iter, iters):
    """liblinear's solve_l2r_l1l2_svc (L2 loss) for ``nl <= _LANES`` outputs sharing local rows r0..r0+m.

    Each lane is exactly liblinear's dual coordinate descent for its output: own alpha, own shrinking,
    own stopping rule.  Epoch ``e`` visits rows in the order of a permutation of ``range(m)`` that
    depends only on ``m`` and ``e`` (one fixed-seed stream); a lane skips its shrunk rows, so it sees
    a uniformly random order of its active rows, as in liblinear.  Because the order never depends on
    the other lanes, an output's weights do not depend on which outputs share its block (so blocks may
    be cut to suit the thread count) nor on its parent's id: training an output on its parent's rows
    alone gives bit-identical weights.

    Sharing the order is what makes this fast: a row is fetched once for all lanes, and the lanes'
    weights of one feature are adjacent (``w[j, :]``), so the random accesses that dominate coordinate
    descent are paid once per block instead of once per output.

    With an infinite dual upper bound (L2 loss) only the ``alpha == 0`` shrinking case exists.
    On entry alpha[:m] and w[:u+1] are zero and yv[:m, :nl] is +1, -1, or 0 for a row outside the
    lane's training set (the parent's rows include every child's positives, which are not negatives
    of a sibling unless active); w[u] holds the bias weights.  A 0 row stays shrunk for good.
    A lane that has converged is frozen (its rows count as shrunk); ``iters`` gets its epoch count.
    """
    L = _LANES
    wf = w.reshape(w.size)
    ub = u * L
    gb = np.empty(L)
    dl = np.empty(L)
    pgmax_old = np.full(L, _INF)
    pgmax_new = np.empty(L)
    pgmin_new = np.empty(L)
    n_act = np.zeros(L, dtype=np.int64)
    m_lane = np.zeros(L, dtype=np.int64)  # rows in each lane's training set
    done = np.ones(L, dtype=np.bool_)
    for b in range(nl):
        done[b] = False
        iters[b] = max_iter
    for i in range(m):
        perm[i] = i
        c = 0
        for b in range(L):
            if b < nl and yv[i, b] != 0:
                shrunk[i, b] = 0
                m_lane[b] += 1
                c += 1
            else:
                shrunk[i, b] = 1
        count[i] = c
    for b in range(nl):
        n_act[b] = m_lane[b]
    state = np.empty(1, dtype=np.uint64)
    _seed(state, 0)
    n_live = nl
    it = 0
    while it < max_iter and n_live > 0:
        for b in range(L):
            pgmax_new[b] = -_INF
            pgmin_new[b] = _INF
        for i in range(m - 1):
            j = i + np.int64(_next_rand(state) % np.uint64(m - i))
            tmp = perm[i]
            perm[i] = perm[j]
            perm[j] = tmp
        for s in range(m):
            i = perm[s]
            if count[i] == 0:
                continue
            r = r0 + i
            start = lptr[r]
            stop = lptr[r + 1]
            few = count[i] <= _FEW_LANES
            if few:
                _row_dot_lanes(wf, lind, lval, start, stop, ub, bias, gb, shrunk, i)
            else:
                _row_dot(wf, lind, lval, start, stop, ub, bias, gb)
            upd = False
            n_upd = 0
            rq = rsq[r]
            for b in range(L):
                dl[b] = 0.0
                if shrunk[i, b]:
                    continue
                if yv[i, b] > 0:
                    yi = 1.0
                    diag = dpos
                else:
                    yi = -1.0
                    diag = dneg
                a_old = alpha[i, b]
                G = yi * gb[b] - 1.0 + a_old * diag
                pg = 0.0
                if a_old == 0.0:
                    if G > pgmax_old[b]:
                        shrunk[i, b] = 1
                        count[i] -= 1
                        n_act[b] -= 1
                        continue
                    elif G < 0.0:
                        pg = G
                else:
                    pg = G
                if pg > pgmax_new[b]:
                    pgmax_new[b] = pg
                if pg < pgmin_new[b]:
                    pgmin_new[b] = pg
                if abs(pg) > 1e-12:
                    a_new = a_old - G / (rq + diag)
                    if a_new < 0.0:
                        a_new = 0.0
                    alpha[i, b] = a_new
                    dl[b] = (a_new - a_old) * yi
                    upd = True
                    n_upd += 1
            if upd:
                if n_upd <= _FEW_LANES:
                    _row_axpy_lanes(wf, lind, lval, start, stop, ub, bias, dl)
                else:
                    _row_axpy(wf, lind, lval, start, stop, ub, bias, dl)
        it += 1
        for b in range(nl):
            if done[b]:
                continue
            if pgmax_new[b] - pgmin_new[b] <= eps:
                if n_act[b] == m_lane[b]:  # converged without shrinking: freeze the lane
                    done[b] = True
                    iters[b] = it
                    n_live -= 1
                    for i in range(m):
                        if shrunk[i, b] == 0:
                            shrunk[i, b] = 1
                            count[i] -= 1
                else:  # converged on the shrunk problem: unshrink and check on all its rows
                    for i in range(m):
                        if shrunk[i, b] != 0 and yv[i, b] != 0:
                            shrunk[i, b] = 0
                            count[i] += 1
                    n_act[b] = m_lane[b]
                    pgmax_old[b] = _INF
            else:
                pgmax_old[b] = pgmax_new[b] if pgmax_new[b] > 0.0 else _INF


@njit(cache=True, nogil=True, parallel=True)
def _build_batch(x_ptr, x_ind, x_val, rows, row_off, lptr, lind, lval, feat, feat_off, n_feat,
                 fmap, work, work_off):
    """Copy each parent's rows into the batch CSR with feature ids renumbered to its sorted vocabulary.

    ``fmap`` is one ``-1``-filled global->local map per thread, restored after every parent.
    """
    n_threads = work_off.shape[0] - 1
    for t in prange(n_threads):
        mp = fmap[t]
        for wi in range(work_off[t], work_off[t + 1]):
            b = work[wi]
            f0 = feat_off[b]
            nf = 0
            for g in range(row_off[b], row_off[b + 1]):
                xr = rows[g]
                for q in range(x_ptr[xr], x_ptr[xr + 1]):
                    j = x_ind[q]
                    if mp[j] < 0:
                        mp[j] = 0
                        feat[f0 + nf] = j
                        nf += 1
            vocab = feat[f0:f0 + nf]
            vocab.sort()
            for jj in range(nf):
                mp[vocab[jj]] = jj
            for g in range(row_off[b], row_off[b + 1]):
                xr = rows[g]
                dst = lptr[g]
                for q in range(x_ptr[xr], x_ptr[xr + 1]):
                    lind[dst] = mp[x_ind[q]]
                    lval[dst] = x_val[q]
                    dst += 1
            for jj in range(nf):
                mp[vocab[jj]] = -1
            n_feat[b] = nf


@njit(cache=True, nogil=True, parallel=True)
def _train_batch(lptr, lind, lval, rsq, rows, row_active, row_off, feat, feat_off, n_feat,
                 y_ptr, y_ind, blk_out, blk_parent, work, work_off, progress,
                 bias, dpos, dneg, eps, max_iter, threshold, bias_row,
                 w_buf, a_buf, y_buf, s_buf, c_buf, i_buf, o_rows, o_vals, o_used,
                 res_start, res_count, res_iter):
    """Train every block of the batch; thread t takes blocks work[work_off[t]:work_off[t+1]] in order.

    ``progress[t]`` is where thread t resumes; it stops early when its output buffer might overflow.
    ``row_active`` marks the batch's rows that are active for their parent (negatives of every child);
    the others train only the children they are positive for.
    Lane l of block j (output ``blk_out[j, l]``, -1 = unused lane) leaves ``res_count[j, l]`` entries
    at ``o_rows/o_vals[t, res_start[j, l]:]``.
    """
    L = _LANES
    n_threads = work_off.shape[0] - 1
    cap = o_rows.shape[1]
    for t in prange(n_threads):
        w = w_buf[t]
        alpha = a_buf[t]
        yv = y_buf[t]
        shrunk = s_buf[t]
        count = c_buf[t]
        index = i_buf[t]
        orow = o_rows[t]
        oval = o_vals[t]
        iters = np.zeros(L, dtype=np.int64)
        used = 0
        wi = progress[t]
        while wi < work_off[t + 1]:
            j = work[wi]
            b = blk_parent[j]
            u = n_feat[b]
            if used + L * (u + 1) > cap:
                break
            r0 = row_off[b]
            m = row_off[b + 1] - r0
            prow = rows[r0:r0 + m]
            nl = 0
            for lane in range(L):
                k = blk_out[j, lane]
                if k < 0:
                    break
                nl += 1
                for i in range(m):
                    yv[i, lane] = -1 if row_active[r0 + i] else 0
                for q in range(y_ptr[k], y_ptr[k + 1]):
                    yv[np.searchsorted(prow, y_ind[q]), lane] = 1
            for i in range(m):
                for lane in range(L):
                    alpha[i, lane] = 0.0
            _dcd_block(lptr, lind, lval, r0, m, rsq, yv, alpha, shrunk, count, index, w, u, nl, bias,
                       dpos, dneg, eps, max_iter, iters)
            f0 = feat_off[b]
            for lane in range(nl):
                res_iter[j, lane] = iters[lane]
                res_start[j, lane] = used
                cnt = 0
                for jj in range(u):
                    v = w[jj, lane]
                    if v != 0.0:
                        if abs(v) >= threshold and np.float32(v) != 0.0:
                            orow[used + cnt] = feat[f0 + jj]
                            oval[used + cnt] = v
                            cnt += 1
                        w[jj, lane] = 0.0
                vb = w[u, lane]
                if np.float32(vb) != 0.0:
                    orow[used + cnt] = bias_row
                    oval[used + cnt] = vb
                    cnt += 1
                w[u, lane] = 0.0
                res_count[j, lane] = cnt
                used += cnt
            wi += 1
        progress[t] = wi
        o_used[t] = used


@njit(cache=True, nogil=True)
def _deal(cost, n_threads):
    """Longest-processing-time-first assignment: returns (order, offsets) of per-thread work lists."""
    n = cost.shape[0]
    order = np.argsort(-cost, kind="mergesort")
    owner = np.empty(n, dtype=np.int64)
    load = np.zeros(n_threads, dtype=np.float64)
    counts = np.zeros(n_threads + 1, dtype=np.int64)
    for s in range(n):
        t = np.argmin(load)
        owner[s] = t
        load[t] += cost[order[s]]
        counts[t + 1] += 1
    offsets = np.cumsum(counts)
    fill = offsets[:-1].copy()
    work = np.empty(n, dtype=np.int64)
    for s in range(n):
        t = owner[s]
        work[fill[t]] = order[s]
        fill[t] += 1
    return work, offsets


# --------------------------------------------------------------------------------------------------
# Input checking and conversion to the kernels' fixed dtypes.
# --------------------------------------------------------------------------------------------------

def _as_csr(name, A, dtype):
    if sp.issparse(A):
        A = sp.csr_matrix(A)
    elif isinstance(A, np.ndarray) and A.ndim == 2:
        A = sp.csr_matrix(A)
    else:
        raise ValueError(f"{name} must be a 2-D scipy sparse matrix or numpy array, got {type(A).__name__}")
    if not (np.issubdtype(A.dtype, np.number) or A.dtype == np.bool_):
        raise ValueError(f"{name} must be numeric, got dtype {A.dtype}")
    A = A.astype(dtype, copy=False)
    if not A.has_canonical_format or not A.data.all():  # canonicalise a copy: never touch the caller's data
        A = A.copy()
        A.sum_duplicates()
        A.eliminate_zeros()
    return A


def _check_positive(name, value, allow_zero=False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return v


def _prepare(X, Y, parent_of, active, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads):
    C_pos = _check_positive("C_pos", C_pos)
    C_neg = _check_positive("C_neg", C_neg)
    bias = _check_positive("bias", bias, allow_zero=True)
    tol = _check_positive("tol", tol)
    threshold = _check_positive("threshold", threshold, allow_zero=True)
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ConfigError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if n_threads is None:
        n_threads = numba.get_num_threads()
    elif isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)) or n_threads < 1:
        raise ConfigError(f"n_threads must be None or an integer >= 1, got {n_threads!r}")

    X = _as_csr("X", X, np.float32)
    Y = _as_csr("Y", Y, np.float32)
    active = _as_csr("active", active, np.float32)
    n, d = X.shape
    if not np.all(np.isfinite(X.data)):
        raise ValueError("X contains NaN or infinite values")
    if Y.shape[0] != n:
        raise ValueError(f"Y has {Y.shape[0]} rows but X has {n}: they must describe the same instances")
    if active.shape[0] != n:
        raise ValueError(f"active has {active.shape[0]} rows but X has {n}: they must describe the same "
                         "instances")
    K = Y.shape[1]
    P = active.shape[1]
    parent_of = np.asarray(parent_of)
    if parent_of.ndim != 1 or parent_of.shape[0] != K:
        raise ValueError(f"parent_of must have shape ({K},) (one parent per column of Y), "
                         f"got shape {parent_of.shape}")
    if K and not np.issubdtype(parent_of.dtype, np.integer):
        raise ValueError(f"parent_of must hold integers, got dtype {parent_of.dtype}")
    parent_of = parent_of.astype(np.int64)
    if K and (parent_of.min() < 0 or parent_of.max() >= P):
        raise ValueError(f"parent_of values must lie in [0, {P}) (the columns of active), "
                         f"got range [{parent_of.min()}, {parent_of.max()}]")
    if max(n, d + 1, P, K) >= np.iinfo(np.int32).max:
        raise ValueError("more than 2**31 - 2 instances, features, parents or outputs are not supported")
    return (X, Y, parent_of, active, C_pos, C_neg, bias, tol, int(max_iter), threshold, int(n_threads))


# --------------------------------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------------------------------

def train_level(X, Y, parent_of, active, *, C_pos=1.0, C_neg=1.0, bias=1.0, tol=0.1, max_iter=100,
                threshold=0.05, n_threads=None) -> sp.csc_matrix:
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
        default numba's current setting; the result does not depend on it.

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
                  max_iter=max_iter, threshold=threshold, n_threads=n_threads)[0]


def _train(X, Y, parent_of, active, *, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads):
    """train_level, also returning the epochs each output ran (max_iter means it did not converge)."""
    (X, Y, parent_of, active, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads) = _prepare(
        X, Y, parent_of, active, C_pos, C_neg, bias, tol, max_iter, threshold, n_threads)
    n, d = X.shape
    K = Y.shape[1]
    P = active.shape[1]
    if K == 0:
        return sp.csc_matrix((d + 1, 0), dtype=np.float32), np.zeros(0, dtype=np.int64)

    x_ptr = X.indptr.astype(np.int64)
    x_ind = X.indices.astype(np.int32, copy=False)
    x_val = X.data
    row_nnz = np.diff(x_ptr)
    rsq_all = np.bincount(np.repeat(np.arange(n), row_nnz), weights=x_val.astype(np.float64) ** 2,
                          minlength=n) + bias * bias

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
    fmap = np.full((n_threads, d), -1, dtype=np.int32)
    cap = _OUT_CAP
    bias_row = np.int32(d)
    dpos, dneg = 0.5 / C_pos, 0.5 / C_neg
    L = _LANES

    prev_threads = numba.get_num_threads()
    numba.set_num_threads(min(n_threads, numba.config.NUMBA_NUM_THREADS))
    with slp_vectorized():  # the 16-lane sums compile to SIMD (see xmtc.jit)
        try:
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
                n_feat = np.zeros(nb, dtype=np.int64)
                work, work_off = _deal(parent_nnz[p0:p1].astype(np.float64) + 1.0, n_threads)
                _build_batch(x_ptr, x_ind, x_val, rows, row_off, lptr, lind, lval, feat, feat_off, n_feat,
                             fmap, work, work_off)
                rsq = rsq_all[rows]

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
                cap = max(cap, L * (max_u + 1))
                w_buf = np.zeros((n_threads, max_u + 1, L), dtype=np.float32)
                a_buf = np.empty((n_threads, max_m, L), dtype=np.float64)
                y_buf = np.empty((n_threads, max_m, L), dtype=np.int8)
                s_buf = np.empty((n_threads, max_m, L), dtype=np.uint8)
                c_buf = np.empty((n_threads, max_m), dtype=np.int32)
                i_buf = np.empty((n_threads, max_m), dtype=np.int32)
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
                    _train_batch(lptr, lind, lval, rsq, rows, row_active, row_off, feat, feat_off, n_feat,
                                 y_ptr, y_ind, blk_out, blk_parent, work, work_off, progress,
                                 bias, dpos, dneg, tol, max_iter, threshold, bias_row,
                                 w_buf, a_buf, y_buf, s_buf, c_buf, i_buf, o_rows, o_vals, o_used,
                                 res_start, res_cnt, res_it)
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
        finally:
            numba.set_num_threads(prev_threads)

    all_rows = np.concatenate(chunks_rows) if chunks_rows else np.empty(0, np.int32)
    all_vals = np.concatenate(chunks_vals) if chunks_vals else np.empty(0, np.float32)
    indptr = np.zeros(K + 1, dtype=np.int64)
    np.cumsum(res_count, out=indptr[1:])
    gather = np.repeat(res_start_all - indptr[:-1], res_count) + np.arange(indptr[-1], dtype=np.int64)
    W = sp.csc_matrix((all_vals[gather], all_rows[gather], indptr), shape=(d + 1, K))
    W.has_sorted_indices = True
    return W, res_iter


def _blocks(outs, start, lanes):
    """Cut each parent's outputs (``outs[start[p]:start[p+1]]``) into near-equal blocks of <= lanes.

    Returns (blk_out, blk_parent): output ids per block and lane (-1 = unused lane), and each block's
    batch-local parent.  Weights do not depend on how outputs are blocked (see _dcd_block), so
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
