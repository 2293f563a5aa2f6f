/* One-vs-all L2-loss SVM training for one tree level: liblinear's dual coordinate descent, 16 outputs
 * at a time.  xmtc/linear/solver.py explains the data layout and calls these through ctypes; this
 * file only holds the loops that must run at C speed, and the pthreads that share them out.
 *
 * Numerics: the weights being trained are float32 (a 16-lane block of a 110k-feature parent is 7 MB,
 * not 14), every sum, the dual variables and the step sizes are double, and nothing is contracted into
 * FMAs (-ffp-contract=off), so each lane computes the same bits on every build and thread count.  This
 * is the arithmetic of the numba solver it replaced (whose weights it matched bit for bit on reuters21578
 * before rows were stored in local-id order, which reorders each row's sums).
 */
#include "native.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16
/* A row with at most this many live lanes takes the lane-by-lane path; 6 measured best of 2/4/6/8 on
 * reuters21578 (always 16 lanes, or always lane by lane, were both ~50% slower). */
#ifndef FEW_LANES
#define FEW_LANES 6
#endif
#if FEW_LANES < 1 || FEW_LANES > 8
#error "FEW_LANES must lie in 1..8 (FEW_CASES spells out 8 cases)"
#endif

/* xorshift64*: one word of state, so each block owns a cheap, reproducible stream. */
static inline uint64_t next_rand(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C(2685821657736338717);
}

/* splitmix64 of k: well spread, nonzero starting states. */
static uint64_t seed_state(uint64_t k) {
    uint64_t z = k + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z = z ^ (z >> 31);
    return z ? z : UINT64_C(0x9E3779B97F4A7C15);
}

/* A row with few live lanes: one pass over its entries serves all of them (each lane's sum and update
 * in the same entry order as the 16-lane path, so the bits are the same whichever path a row takes).
 * n is a compile-time constant at every call site (see FEW_CASES), so the lane loops unroll and the
 * sums stay in registers as independent chains. */
static inline __attribute__((always_inline)) void few_dot(const int n, const int *ln, const float *wf,
                                                          const int32_t *lind, const float *lval, int64_t start,
                                                          int64_t stop, int64_t ub, double bias, double *gb) {
    double g[8];
    for (int k = 0; k < n; k++) g[k] = (double)wf[ub + ln[k]] * bias;
    for (int64_t q = start; q < stop; q++) {
        const float *wr = wf + (int64_t)lind[q] * LANES;
        const double v = (double)lval[q];
        for (int k = 0; k < n; k++) g[k] += (double)wr[ln[k]] * v;
    }
    for (int k = 0; k < n; k++) gb[ln[k]] = g[k];
}

static inline __attribute__((always_inline)) void few_axpy(const int n, const int *ln, float *wf, const int32_t *lind,
                                                           const float *lval, int64_t start, int64_t stop, int64_t ub,
                                                           double bias, const double *dl) {
    double d[8];
    for (int k = 0; k < n; k++) d[k] = dl[ln[k]];
    for (int64_t q = start; q < stop; q++) {
        float *wr = wf + (int64_t)lind[q] * LANES;
        const double v = (double)lval[q];
        for (int k = 0; k < n; k++) wr[ln[k]] = (float)((double)wr[ln[k]] + d[k] * v);
    }
    for (int k = 0; k < n; k++) wf[ub + ln[k]] = (float)((double)wf[ub + ln[k]] + d[k] * bias);
}

#define FEW_CASES(call)      \
    switch (n_few) {         \
    case 1: call(1); break;  \
    case 2: call(2); break;  \
    case 3: call(3); break;  \
    case 4: call(4); break;  \
    case 5: call(5); break;  \
    case 6: call(6); break;  \
    case 7: call(7); break;  \
    case 8: call(8); break;  \
    }
#define FEW_DOT(N) few_dot(N, ln, wf, lind, lval, start, stop, ub, bias, gb)
#define FEW_AXPY(N) few_axpy(N, ln, wf, lind, lval, start, stop, ub, bias, dl)

/* Per-thread scratch of the block solver. */
typedef struct {
    float *w;          /* (u + 1) x LANES, row-major: the 16 lanes of one feature share a cache line */
    double *alpha;     /* m x LANES */
    int8_t *yv;        /* m x LANES: +1, -1, or 0 (row outside the lane's training set) */
    uint8_t *shrunk;   /* m x LANES */
    int32_t *count;    /* m: live lanes of a row */
    int32_t *perm;     /* m */
} scratch_t;

/* liblinear's solve_l2r_l1l2_svc (L2 loss) for nl <= LANES outputs sharing local rows r0..r0+m.
 *
 * Each lane is exactly liblinear's dual coordinate descent for its output: own alpha, own shrinking,
 * own stopping rule.  Epoch e visits rows in a permutation of 0..m-1 that depends only on m and e (one
 * fixed-seed stream); a lane skips its shrunk rows, so it sees a uniformly random order of its active
 * rows, as in liblinear.  Because the order never depends on the other lanes, an output's weights do
 * not depend on which outputs share its block (so blocks may be cut to suit the thread count) nor on
 * its parent's id.  Sharing the order is what makes this fast: a row is fetched once for all lanes,
 * and the lanes' weights of one feature share a cache line, so the random accesses that dominate
 * coordinate descent are paid once per block instead of once per output.
 *
 * With an infinite dual upper bound (L2 loss) only the alpha == 0 shrinking case exists.  On entry
 * alpha and w are zero and yv is +1, -1, or 0 for a row outside the lane's training set (a sibling's
 * positive that is not active); a 0 row stays shrunk for good.  A lane that has converged is frozen
 * (its rows count as shrunk); iters[b] gets its epoch count. */
XMTC_HOT static void dcd_block(const int64_t *lptr, const int32_t *lind, const float *lval, int64_t r0, int64_t m,
                               const double *rsq, scratch_t *s, int64_t u, int nl, double bias, double dpos,
                               double dneg, double eps, int64_t max_iter, int64_t *iters) {
    float *wf = s->w;
    const int64_t ub = u * LANES;
    double gb[LANES], dl[LANES], pgmax_old[LANES], pgmax_new[LANES], pgmin_new[LANES];
    int64_t n_act[LANES], m_lane[LANES];
    int done[LANES];
    int8_t *yv = s->yv;
    uint8_t *shrunk = s->shrunk;
    int32_t *count = s->count, *perm = s->perm;
    double *alpha = s->alpha;

    for (int b = 0; b < LANES; b++) {
        pgmax_old[b] = INFINITY;
        n_act[b] = 0;
        m_lane[b] = 0;
        done[b] = b >= nl;
        if (b < nl) iters[b] = max_iter;
    }
    for (int64_t i = 0; i < m; i++) {
        perm[i] = (int32_t)i;
        int c = 0;
        for (int b = 0; b < LANES; b++) {
            if (b < nl && yv[i * LANES + b] != 0) {
                shrunk[i * LANES + b] = 0;
                m_lane[b]++;
                c++;
            } else {
                shrunk[i * LANES + b] = 1;
            }
        }
        count[i] = c;
    }
    for (int b = 0; b < nl; b++) n_act[b] = m_lane[b];
    uint64_t state = seed_state(0);
    int n_live = nl;
    int64_t it = 0;
    while (it < max_iter && n_live > 0) {
        for (int b = 0; b < LANES; b++) {
            pgmax_new[b] = -INFINITY;
            pgmin_new[b] = INFINITY;
        }
        for (int64_t i = 0; i < m - 1; i++) {
            int64_t j = i + (int64_t)(next_rand(&state) % (uint64_t)(m - i));
            int32_t tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
        for (int64_t t = 0; t < m; t++) {
            const int64_t i = perm[t];
            if (count[i] == 0) continue;
            const int64_t r = r0 + i;
            const int64_t start = lptr[r], stop = lptr[r + 1];
            const uint8_t *sh = shrunk + i * LANES;
            if (count[i] <= FEW_LANES) {
                int ln[8], n_few = 0;
                for (int b = 0; b < LANES; b++)
                    if (!sh[b]) ln[n_few++] = b;
                FEW_CASES(FEW_DOT)
            } else {
                double g[LANES];
                for (int b = 0; b < LANES; b++) g[b] = (double)wf[ub + b] * bias;
                for (int64_t q = start; q < stop; q++) {
                    const float *wr = wf + (int64_t)lind[q] * LANES;
                    const double v = (double)lval[q];
                    for (int b = 0; b < LANES; b++) g[b] += (double)wr[b] * v;
                }
                for (int b = 0; b < LANES; b++) gb[b] = g[b];
            }
            int n_upd = 0;
            const double rq = rsq[r];
            int8_t *yr = yv + i * LANES;
            double *ar = alpha + i * LANES;
            uint8_t *shw = shrunk + i * LANES;
            for (int b = 0; b < LANES; b++) {
                dl[b] = 0.0;
                if (shw[b]) continue;
                double yi, diag;
                if (yr[b] > 0) {
                    yi = 1.0;
                    diag = dpos;
                } else {
                    yi = -1.0;
                    diag = dneg;
                }
                const double a_old = ar[b];
                const double G = yi * gb[b] - 1.0 + a_old * diag;
                double pg = 0.0;
                if (a_old == 0.0) {
                    if (G > pgmax_old[b]) {
                        shw[b] = 1;
                        count[i]--;
                        n_act[b]--;
                        continue;
                    } else if (G < 0.0) {
                        pg = G;
                    }
                } else {
                    pg = G;
                }
                if (pg > pgmax_new[b]) pgmax_new[b] = pg;
                if (pg < pgmin_new[b]) pgmin_new[b] = pg;
                if (fabs(pg) > 1e-12) {
                    double a_new = a_old - G / (rq + diag);
                    if (a_new < 0.0) a_new = 0.0;
                    ar[b] = a_new;
                    dl[b] = (a_new - a_old) * yi;
                    n_upd++;
                }
            }
            if (n_upd == 0) continue;
            if (n_upd <= FEW_LANES) {
                int ln[8], n_few = 0;
                for (int b = 0; b < LANES; b++)
                    if (dl[b] != 0.0) ln[n_few++] = b;
                FEW_CASES(FEW_AXPY)
            } else {
                for (int64_t q = start; q < stop; q++) {
                    float *wr = wf + (int64_t)lind[q] * LANES;
                    const double v = (double)lval[q];
                    for (int b = 0; b < LANES; b++) wr[b] = (float)((double)wr[b] + dl[b] * v);
                }
                for (int b = 0; b < LANES; b++) wf[ub + b] = (float)((double)wf[ub + b] + dl[b] * bias);
            }
        }
        it++;
        for (int b = 0; b < nl; b++) {
            if (done[b]) continue;
            if (pgmax_new[b] - pgmin_new[b] <= eps) {
                if (n_act[b] == m_lane[b]) { /* converged without shrinking: freeze the lane */
                    done[b] = 1;
                    iters[b] = it;
                    n_live--;
                    for (int64_t i = 0; i < m; i++) {
                        if (shrunk[i * LANES + b] == 0) {
                            shrunk[i * LANES + b] = 1;
                            count[i]--;
                        }
                    }
                } else { /* converged on the shrunk problem: unshrink and check on all its rows */
                    for (int64_t i = 0; i < m; i++) {
                        if (shrunk[i * LANES + b] != 0 && yv[i * LANES + b] != 0) {
                            shrunk[i * LANES + b] = 0;
                            count[i]++;
                        }
                    }
                    n_act[b] = m_lane[b];
                    pgmax_old[b] = INFINITY;
                }
            } else {
                pgmax_old[b] = pgmax_new[b] > 0.0 ? pgmax_new[b] : INFINITY;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Copy each parent's rows into the batch CSR with feature ids renumbered to local ids.
 *
 * Local ids go by descending frequency in the parent's rows (ties: ascending global id), so the
 * weight rows of the features that most rows touch sit together at the front of the block and stay
 * in cache (on reuters21578 the 16k most frequent of 110k features hold 74% of the entries);
 * and each row's entries are stored in ascending local id, so a row's sweep over the block moves
 * forward through memory from the hot end.  Measured ~25% less CPU time on reuters21578 than global
 * ids.  (The sums then run in that order, which depends only on the parent's rows.)  feat[] keeps
 * the parent's global ids ascending and lpos[] the local id of each, the order weights are read in. */

typedef struct {
    const int64_t *x_ptr;
    const int32_t *x_ind;
    const float *x_val;
    const int32_t *rows;
    const int64_t *row_off;
    const int64_t *lptr;
    int32_t *lind;
    float *lval;
    double *rsq;       /* per batch row: ||x||^2 + bias^2, the diagonal of the dual's Hessian */
    double bias_sq;
    int32_t *feat;
    int32_t *lpos;
    const int64_t *feat_off;
    int64_t *n_feat;
    int64_t d;
    const int64_t *work;
    const int64_t *work_off;
    int failed;
} build_args_t;

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Ascending sort of short arrays of keys (a row's entries): insertion sort below 24, else quicksort. */
static void sort_u64(uint64_t *a, int64_t n) {
    while (n > 24) {
        const uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
        const uint64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        int64_t i = 0, j = n - 1;
        for (;;) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i >= j) break;
            const uint64_t tmp = a[i];
            a[i++] = a[j];
            a[j--] = tmp;
        }
        /* recurse into the smaller part, loop on the larger */
        if (j + 1 < n - j - 1) {
            sort_u64(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            sort_u64(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (int64_t i = 1; i < n; i++) {
        const uint64_t v = a[i];
        int64_t k = i;
        while (k > 0 && a[k - 1] > v) {
            a[k] = a[k - 1];
            k--;
        }
        a[k] = v;
    }
}

static void build_worker(void *ctx, int t) {
    build_args_t *a = (build_args_t *)ctx;
    int32_t *mp = (int32_t *)malloc((size_t)(a->d > 0 ? a->d : 1) * sizeof(int32_t));
    if (!mp) {
        a->failed = 1;
        return;
    }
    for (int64_t j = 0; j < a->d; j++) mp[j] = -1;
    uint64_t *key = NULL;
    int64_t key_cap = 0;
    for (int64_t wi = a->work_off[t]; wi < a->work_off[t + 1]; wi++) {
        const int64_t b = a->work[wi];
        int32_t *vocab = a->feat + a->feat_off[b];
        int32_t *lpos = a->lpos + a->feat_off[b];
        int64_t nf = 0;
        for (int64_t g = a->row_off[b]; g < a->row_off[b + 1]; g++) { /* distinct features and their counts */
            const int64_t xr = a->rows[g];
            for (int64_t q = a->x_ptr[xr]; q < a->x_ptr[xr + 1]; q++) {
                const int32_t j = a->x_ind[q];
                if (mp[j] < 0) {
                    mp[j] = 0;
                    vocab[nf++] = j;
                }
                mp[j]++;
            }
        }
        qsort(vocab, (size_t)nf, sizeof(int32_t), cmp_i32);
        /* stable counting sort by descending count: a feature's count is at most the parent's rows */
        const int64_t max_c = a->row_off[b + 1] - a->row_off[b];
        int64_t *start = (int64_t *)calloc((size_t)max_c + 2, sizeof(int64_t));
        if (!start) {
            a->failed = 1;
            break;
        }
        for (int64_t k = 0; k < nf; k++) start[max_c - mp[vocab[k]] + 1]++;
        for (int64_t c = 0; c <= max_c; c++) start[c + 1] += start[c];
        for (int64_t k = 0; k < nf; k++) lpos[k] = (int32_t)start[max_c - mp[vocab[k]]]++;
        free(start);
        for (int64_t k = 0; k < nf; k++) mp[vocab[k]] = lpos[k];
        for (int64_t g = a->row_off[b]; g < a->row_off[b + 1] && !a->failed; g++) {
            /* each row's entries in ascending local id: hot features first, addresses ascending */
            const int64_t xr = a->rows[g], len = a->x_ptr[xr + 1] - a->x_ptr[xr];
            if (len > key_cap) {
                free(key);
                key_cap = len;
                key = (uint64_t *)malloc((size_t)key_cap * sizeof(uint64_t));
                if (!key) {
                    a->failed = 1;
                    break;
                }
            }
            for (int64_t q = 0; q < len; q++) {
                uint32_t bits;
                memcpy(&bits, &a->x_val[a->x_ptr[xr] + q], sizeof(bits));
                key[q] = ((uint64_t)(uint32_t)mp[a->x_ind[a->x_ptr[xr] + q]] << 32) | bits;
            }
            sort_u64(key, len);
            double sq = 0.0;
            for (int64_t q = a->x_ptr[xr]; q < a->x_ptr[xr + 1]; q++) sq += (double)a->x_val[q] * (double)a->x_val[q];
            a->rsq[g] = sq + a->bias_sq;
            const int64_t dst = a->lptr[g];
            for (int64_t q = 0; q < len; q++) {
                const uint32_t bits = (uint32_t)key[q];
                a->lind[dst + q] = (int32_t)(key[q] >> 32);
                memcpy(&a->lval[dst + q], &bits, sizeof(bits));
            }
        }
        for (int64_t jj = 0; jj < nf; jj++) mp[vocab[jj]] = -1;
        a->n_feat[b] = nf;
    }
    free(key);
    free(mp);
}

XMTC_API int xmtc_build_batch(const int64_t *x_ptr, const int32_t *x_ind, const float *x_val, const int32_t *rows,
                              const int64_t *row_off, const int64_t *lptr, int32_t *lind, float *lval, double *rsq,
                              double bias_sq, int32_t *feat, int32_t *lpos, const int64_t *feat_off, int64_t *n_feat, int64_t d, const int64_t *work,
                              const int64_t *work_off, int n_threads) {
    build_args_t a = {x_ptr, x_ind, x_val, rows, row_off, lptr, lind, lval, rsq, bias_sq, feat, lpos, feat_off, n_feat,
                      d, work, work_off, 0};
    if (xmtc_run_threads(n_threads, build_worker, &a) != 0) return -1;
    return a.failed ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Train every block of a batch; thread t takes blocks work[work_off[t]:work_off[t+1]] from progress[t]. */

typedef struct {
    const int64_t *lptr;
    const int32_t *lind;
    const float *lval;
    const double *rsq;
    const int32_t *rows;
    const uint8_t *row_active;
    const int64_t *row_off;
    const int32_t *feat;
    const int32_t *lpos;
    const int64_t *feat_off;
    const int64_t *n_feat;
    const int64_t *y_ptr;
    const int32_t *y_ind;
    const int64_t *blk_out;     /* nblk x LANES, -1 = unused lane */
    const int64_t *blk_parent;
    const int64_t *work;
    const int64_t *work_off;
    int64_t *progress;
    double bias, dpos, dneg, eps;
    int64_t max_iter;
    double threshold;
    int32_t bias_row;
    int64_t max_m, max_u;
    int32_t *o_rows;            /* n_threads x cap */
    float *o_vals;
    int64_t cap;
    int64_t *o_used;
    int64_t *res_start, *res_count, *res_iter;   /* nblk x LANES */
    const int64_t *w0_ptr;      /* warm start (warm != 0): each output's old weights, csc over d + 1 rows */
    const int32_t *w0_ind;
    const float *w0_val;
    int warm;                   /* 0 cold, 1 proximal, 2 dual (see warm_start) */
    int64_t n_sample;           /* proximal: rows with a global id below it are a sampled replay (warm_sampled) */
    int failed;
} train_args_t;

static int64_t lower_bound_i32(const int32_t *a, int64_t n, int32_t x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Most old weights a proximal block may append: all of its outputs' old entries. */
static int64_t warm_extra(const train_args_t *a, const int64_t *outs) {
    int64_t n = 0;
    for (int lane = 0; lane < LANES && outs[lane] >= 0; lane++) n += a->w0_ptr[outs[lane] + 1] - a->w0_ptr[outs[lane]];
    return n;
}

/* Index of global feature g among a block's local features (gid ascending), or -1. */
static int64_t local_of(const int32_t *gid, int64_t u, int32_t g) {
    const int64_t k = lower_bound_i32(gid, u, g);
    return k < u && gid[k] == g ? k : -1;
}

/* Start lane `lane` from output k's old weights w0 (the warm-start modes of train_level).
 *
 * warm 1, proximal: w := w_old and alpha := 0.  Dual coordinate descent from there minimises
 * 0.5 ||w - w_old||^2 + sum_i C_i max(0, 1 - y_i w.x_i)^2 over the given rows: its dual is liblinear's
 * with w = w_old + sum_i alpha_i y_i x_i, and each update reads only w.x_i and alpha_i.  Old weights on
 * features none of the rows has cannot move; extract_block writes them back out unchanged.
 * warm 2, dual: the full problem on the given rows, started near its optimum: alpha_i := the optimality
 * condition's max(0, 1 - y_i w_old.x_i) / D_ii, then w := sum_i alpha_i y_i x_i, a consistent primal-dual
 * pair (done by warm_dual below, once every lane is loaded). */
static void warm_load(const train_args_t *a, scratch_t *s, int64_t k, int lane, const int32_t *gid,
                      const int32_t *loc, int64_t u) {
    for (int64_t q = a->w0_ptr[k]; q < a->w0_ptr[k + 1]; q++) {
        const int32_t g = a->w0_ind[q];
        if (g == a->bias_row) {
            s->w[u * LANES + lane] = a->w0_val[q];
            continue;
        }
        const int64_t kk = local_of(gid, u, g);
        if (kk >= 0) s->w[(int64_t)loc[kk] * LANES + lane] = a->w0_val[q];
    }
}

/* Row r's decision values in every lane, g[b] = w_b . x_r + bias w_b[bias] (the block's local features). */
static inline void row_values(const train_args_t *a, const float *wf, int64_t ub, int64_t r, double *g) {
    for (int b = 0; b < LANES; b++) g[b] = (double)wf[ub + b] * a->bias;
    for (int64_t q = a->lptr[r]; q < a->lptr[r + 1]; q++) {
        const float *wr = wf + (int64_t)a->lind[q] * LANES;
        const double v = (double)a->lval[q];
        for (int b = 0; b < LANES; b++) g[b] += (double)wr[b] * v;
    }
}

/* w_b += dl[b] x_r in every lane, the bias feature included; nothing where every dl[b] is 0. */
static inline void add_row(const train_args_t *a, float *wf, int64_t ub, int64_t r, const double *dl) {
    int any = 0;
    for (int b = 0; b < LANES; b++) any |= dl[b] != 0.0;
    if (!any) return;
    for (int64_t q = a->lptr[r]; q < a->lptr[r + 1]; q++) {
        float *wr = wf + (int64_t)a->lind[q] * LANES;
        const double v = (double)a->lval[q];
        for (int b = 0; b < LANES; b++) wr[b] = (float)((double)wr[b] + dl[b] * v);
    }
    for (int b = 0; b < LANES; b++) wf[ub + b] = (float)((double)wf[ub + b] + dl[b] * a->bias);
}

XMTC_HOT static void warm_dual(const train_args_t *a, scratch_t *s, int64_t r0, int64_t m, int64_t u, int nl) {
    float *wf = s->w;
    const int64_t ub = u * LANES;
    for (int64_t i = 0; i < m; i++) {
        double g[LANES];
        row_values(a, wf, ub, r0 + i, g);
        for (int b = 0; b < nl; b++) {
            const int8_t y = s->yv[i * LANES + b];
            if (y == 0) continue;
            const double slack = 1.0 - (double)y * g[b];
            s->alpha[i * LANES + b] = slack > 0.0 ? slack / (y > 0 ? a->dpos : a->dneg) : 0.0;
        }
    }
    memset(wf, 0, (size_t)(u + 1) * LANES * sizeof(float));
    for (int64_t i = 0; i < m; i++) {
        double dl[LANES];
        for (int b = 0; b < LANES; b++) dl[b] = b < nl ? s->alpha[i * LANES + b] * (double)s->yv[i * LANES + b] : 0.0;
        add_row(a, wf, ub, r0 + i, dl);
    }
}

/* Proximal mode with a sampled replay (xmtc.linear.update, module doc 3.): the block's rows with a global id
 * below n_sample are remembered training rows, and the centre of the proximal term moves so that their loss's
 * gradient at the old weights is cancelled, c = w_old - sum_i (y_i max(0, 1 - y_i w_old.x_i) / D_ii) x_i over
 * each lane's sample rows (2 C_i = 1 / D_ii); w := c and alpha := 0, so the descent minimises
 * 0.5 ||w - c||^2 + sum_i C_i max(0, 1 - y_i w.x_i)^2 over all the rows. The rows are in the caller's scaled
 * coordinates, where c is this sum (tests/test_learn.py computes the same in numpy: the reference the tests
 * compare with). The block's rows ascend by global id: its sample rows come first. */
XMTC_HOT static void warm_sampled(const train_args_t *a, scratch_t *s, int64_t r0, int64_t m, const int32_t *prow,
                                  int64_t u, int nl) {
    float *wf = s->w;
    const int64_t ub = u * LANES;
    const int64_t ms = lower_bound_i32(prow, m, (int32_t)(a->n_sample < INT32_MAX ? a->n_sample : INT32_MAX));
    double *coef = s->alpha;  /* scratch, zero again when the descent starts */
    for (int64_t i = 0; i < ms; i++) {
        double g[LANES];
        row_values(a, wf, ub, r0 + i, g);
        for (int b = 0; b < LANES; b++) {
            const int8_t y = b < nl ? s->yv[i * LANES + b] : 0;
            const double slack = y ? 1.0 - (double)y * g[b] : 0.0;
            coef[i * LANES + b] = slack > 0.0 ? -(double)y * slack / (y > 0 ? a->dpos : a->dneg) : 0.0;
        }
    }
    for (int64_t i = 0; i < ms; i++) add_row(a, wf, ub, r0 + i, coef + i * LANES);
    memset(coef, 0, (size_t)ms * LANES * sizeof(double));
}

/* Proximal mode: old weights of output k on features outside the block, which the rows could not move. */
static int64_t kept_old(const train_args_t *a, int64_t k, const int32_t *gid, int64_t u, int32_t *orow, float *oval) {
    int64_t n = 0;
    for (int64_t q = a->w0_ptr[k]; q < a->w0_ptr[k + 1]; q++) {
        const int32_t g = a->w0_ind[q];
        if (g == a->bias_row || local_of(gid, u, g) >= 0 || fabs((double)a->w0_val[q]) < a->threshold) continue;
        if (orow) {
            orow[n] = g;
            oval[n] = a->w0_val[q];
        }
        n++;
    }
    return n;
}

/* The smallest float f with (double)f >= t, so that for every float v, fabsf(v) >= f exactly when
 * fabs((double)v) >= t: the pruning test runs in float lanes without changing a single kept weight. */
static float float_at_least(double t) {
    float f = (float)t;
    return (double)f < t ? nextafterf(f, INFINITY) : f;
}

/* cnt[lane] += the lane's weights that survive pruning (nonzero and |w| >= thr) over the block's u
 * features.  Branch-free, so that it vectorises. */
XMTC_HOT static void count_kept(const float *w, const int32_t *loc, int64_t u, int nl, float thr, int64_t *cnt) {
    int32_t c[LANES] = {0};
    for (int64_t k = 0; k < u; k++) {
        const float *wr = w + (int64_t)loc[k] * LANES;
        for (int lane = 0; lane < LANES; lane++) c[lane] += (wr[lane] != 0.0f) & (fabsf(wr[lane]) >= thr);
    }
    for (int lane = 0; lane < nl; lane++) cnt[lane] += c[lane];
}

static void train_worker(void *ctx, int t) {
    train_args_t *a = (train_args_t *)ctx;
    const float thr = float_at_least(a->threshold);
    const int64_t M = a->max_m > 0 ? a->max_m : 1;
    scratch_t s;
    s.w = (float *)calloc((size_t)(a->max_u + 1) * LANES, sizeof(float));
    s.alpha = (double *)malloc((size_t)M * LANES * sizeof(double));
    s.yv = (int8_t *)malloc((size_t)M * LANES);
    s.shrunk = (uint8_t *)malloc((size_t)M * LANES);
    s.count = (int32_t *)malloc((size_t)M * sizeof(int32_t));
    s.perm = (int32_t *)malloc((size_t)M * sizeof(int32_t));
    if (!s.w || !s.alpha || !s.yv || !s.shrunk || !s.count || !s.perm) {
        a->failed = 1;
        goto out;
    }
    int32_t *orow = a->o_rows + (int64_t)t * a->cap;
    float *oval = a->o_vals + (int64_t)t * a->cap;
    int64_t iters[LANES];
    int64_t used = 0;
    int64_t wi = a->progress[t];
    for (; wi < a->work_off[t + 1]; wi++) {
        const int64_t j = a->work[wi];
        const int64_t b = a->blk_parent[j];
        const int64_t u = a->n_feat[b];
        if (used + LANES * (u + 1) + (a->warm == 1 ? warm_extra(a, a->blk_out + j * LANES) : 0) > a->cap) break;
        const int64_t r0 = a->row_off[b];
        const int64_t m = a->row_off[b + 1] - r0;
        const int32_t *prow = a->rows + r0;
        const int64_t *outs = a->blk_out + j * LANES;
        int nl = 0;
        while (nl < LANES && outs[nl] >= 0) nl++;
        memset(s.alpha, 0, (size_t)m * LANES * sizeof(double));
        for (int64_t i = 0; i < m; i++) {
            const int8_t neg = a->row_active[r0 + i] ? -1 : 0;
            for (int lane = 0; lane < LANES; lane++) s.yv[i * LANES + lane] = lane < nl ? neg : 0;
        }
        for (int lane = 0; lane < nl; lane++) {
            const int64_t k = outs[lane];
            for (int64_t q = a->y_ptr[k]; q < a->y_ptr[k + 1]; q++)
                s.yv[lower_bound_i32(prow, m, a->y_ind[q]) * LANES + lane] = 1;
        }
        const int32_t *gid = a->feat + a->feat_off[b];
        const int32_t *loc = a->lpos + a->feat_off[b];
        int64_t n_kept[LANES] = {0};
        if (a->warm) {
            for (int lane = 0; lane < nl; lane++) {
                warm_load(a, &s, outs[lane], lane, gid, loc, u);
                if (a->warm == 1) n_kept[lane] = kept_old(a, outs[lane], gid, u, NULL, NULL);
            }
            if (a->warm == 2) warm_dual(a, &s, r0, m, u, nl);
            if (a->warm == 1 && a->n_sample > 0) warm_sampled(a, &s, r0, m, prow, u, nl);
        }
        dcd_block(a->lptr, a->lind, a->lval, r0, m, a->rsq, &s, u, nl, a->bias, a->dpos, a->dneg, a->eps,
                  a->max_iter, iters);
        /* Read the weights out in ascending global feature id, clearing the block as we go: a first
         * pass counts each lane's survivors, so every lane writes straight into its packed place.
         * Proximal warm starts append the old weights the rows could not move (re-sorted by the caller). */
        int64_t at[LANES], cnt[LANES] = {0};
        count_kept(s.w, loc, u, nl, thr, cnt);
        for (int lane = 0; lane < nl; lane++) {
            cnt[lane] += (s.w[u * LANES + lane] != 0.0f) + n_kept[lane];
            at[lane] = used;
            a->res_iter[j * LANES + lane] = iters[lane];
            a->res_start[j * LANES + lane] = used;
            a->res_count[j * LANES + lane] = cnt[lane];
            used += cnt[lane];
        }
        for (int64_t k = 0; k < u; k++) {
            float *wr = s.w + (int64_t)loc[k] * LANES;
            for (int lane = 0; lane < nl; lane++) {
                const float v = wr[lane];
                if (v != 0.0f && fabsf(v) >= thr) {
                    orow[at[lane]] = gid[k];
                    oval[at[lane]++] = v;
                }
            }
            memset(wr, 0, LANES * sizeof(float));
        }
        for (int lane = 0; lane < nl; lane++) {
            const float vb = s.w[u * LANES + lane];
            if (vb != 0.0f) {
                orow[at[lane]] = a->bias_row;
                oval[at[lane]++] = vb;
            }
            s.w[u * LANES + lane] = 0.0f;
            if (n_kept[lane]) at[lane] += kept_old(a, outs[lane], gid, u, orow + at[lane], oval + at[lane]);
        }
    }
    a->progress[t] = wi;
    a->o_used[t] = used;
out:
    free(s.w);
    free(s.alpha);
    free(s.yv);
    free(s.shrunk);
    free(s.count);
    free(s.perm);
}

static int train_batch(train_args_t *a, int n_threads) {
    if (xmtc_run_threads(n_threads, train_worker, a) != 0) return -1;
    return a->failed ? -1 : 0;
}

XMTC_API int xmtc_train_batch(const int64_t *lptr, const int32_t *lind, const float *lval, const double *rsq,
                              const int32_t *rows, const uint8_t *row_active, const int64_t *row_off,
                              const int32_t *feat, const int32_t *lpos, const int64_t *feat_off,
                              const int64_t *n_feat, const int64_t *y_ptr, const int32_t *y_ind, const int64_t *blk_out,
                              const int64_t *blk_parent, const int64_t *work, const int64_t *work_off,
                              int64_t *progress, double bias, double dpos, double dneg, double eps,
                              int64_t max_iter, double threshold, int32_t bias_row, int64_t max_m, int64_t max_u,
                              int32_t *o_rows, float *o_vals, int64_t cap, int64_t *o_used, int64_t *res_start,
                              int64_t *res_count, int64_t *res_iter, int n_threads) {
    train_args_t a = {lptr, lind, lval, rsq, rows, row_active, row_off, feat, lpos, feat_off, n_feat, y_ptr, y_ind,
                      blk_out, blk_parent, work, work_off, progress, bias, dpos, dneg, eps, max_iter, threshold,
                      bias_row, max_m, max_u, o_rows, o_vals, cap, o_used, res_start, res_count, res_iter,
                      NULL, NULL, NULL, 0, 0, 0};
    return train_batch(&a, n_threads);
}

/* xmtc_train_batch started from old weights: w0 (csc over d + 1 rows, one column per output) and the
 * warm mode, 1 proximal or 2 dual (see warm_load); n_sample: proximal, the rows below it a sampled replay
 * (warm_sampled), 0 none. */
XMTC_API int xmtc_train_batch_warm(const int64_t *lptr, const int32_t *lind, const float *lval, const double *rsq,
                                   const int32_t *rows, const uint8_t *row_active, const int64_t *row_off,
                                   const int32_t *feat, const int32_t *lpos, const int64_t *feat_off,
                                   const int64_t *n_feat, const int64_t *y_ptr, const int32_t *y_ind,
                                   const int64_t *blk_out, const int64_t *blk_parent, const int64_t *work,
                                   const int64_t *work_off, int64_t *progress, double bias, double dpos, double dneg,
                                   double eps, int64_t max_iter, double threshold, int32_t bias_row, int64_t max_m,
                                   int64_t max_u, int32_t *o_rows, float *o_vals, int64_t cap, int64_t *o_used,
                                   int64_t *res_start, int64_t *res_count, int64_t *res_iter, const int64_t *w0_ptr,
                                   const int32_t *w0_ind, const float *w0_val, int warm, int64_t n_sample,
                                   int n_threads) {
    train_args_t a = {lptr, lind, lval, rsq, rows, row_active, row_off, feat, lpos, feat_off, n_feat, y_ptr, y_ind,
                      blk_out, blk_parent, work, work_off, progress, bias, dpos, dneg, eps, max_iter, threshold,
                      bias_row, max_m, max_u, o_rows, o_vals, cap, o_used, res_start, res_count, res_iter,
                      w0_ptr, w0_ind, w0_val, warm, n_sample, 0};
    return train_batch(&a, n_threads);
}
