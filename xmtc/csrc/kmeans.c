/* Balanced 2-means splits of label clusters (one binary level of xmtc/index/kmeans.py's tree).
 * The Python module describes the method; these are its loops.  Every cluster's arithmetic runs in a
 * fixed order and ranking ties keep the current label order, so the tree is the same for any number
 * of threads. */
#include "native.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const int64_t *indptr;
    const int32_t *indices;
    const float *data;
} csr_t;

/* ---------------------------------------------------------------------------------------------- */
/* scoring: scores[i] = E[rows[i]] . w */

typedef struct {
    const csr_t *E;
    const int64_t *rows;
    int64_t n;
    const double *w;
    double *scores;
    int n_threads;
} score_args_t;

static void score_range(const csr_t *E, const int64_t *rows, int64_t lo, int64_t hi, const double *w,
                        double *scores) {
    for (int64_t i = lo; i < hi; i++) {
        const int64_t r = rows[i];
        double s = 0.0;
        for (int64_t k = E->indptr[r]; k < E->indptr[r + 1]; k++) s += (double)E->data[k] * w[E->indices[k]];
        scores[i] = s;
    }
}

static void score_worker(void *ctx, int t) {
    score_args_t *a = (score_args_t *)ctx;
    score_range(a->E, a->rows, a->n * t / a->n_threads, a->n * (t + 1) / a->n_threads, a->w, a->scores);
}

/* ---------------------------------------------------------------------------------------------- */
/* stable ranking by descending score (ties: lower position first), as numpy's mergesort of -scores */

static void rank_desc(const double *scores, int64_t n, int64_t *order, int64_t *tmp) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            const int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi) tmp[o++] = scores[order[b]] > scores[order[a]] ? order[b++] : order[a++];
            while (a < mid) tmp[o++] = order[a++];
            while (b < hi) tmp[o++] = order[b++];
        }
        memcpy(order, tmp, (size_t)n * sizeof(int64_t));
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* one split */

typedef struct {
    double *total, *c1, *w; /* d each, zero between splits */
    uint8_t *mark;          /* d, zero between splits */
} scratch_t;

static int scratch_init(scratch_t *s, int64_t d) {
    const size_t n = (size_t)(d > 0 ? d : 1);
    s->total = (double *)calloc(n, sizeof(double));
    s->c1 = (double *)calloc(n, sizeof(double));
    s->w = (double *)calloc(n, sizeof(double));
    s->mark = (uint8_t *)calloc(n, 1);
    return s->total && s->c1 && s->w && s->mark ? 0 : -1;
}

static void scratch_free(scratch_t *s) {
    free(s->total);
    free(s->c1);
    free(s->w);
    free(s->mark);
}

/* Balanced 2-means on rows[0..n): reorders them in place, the n_left rows of the left part first (each
 * part keeps its order).  score_threads > 1 scores rows on that many threads.  Returns -1 when out of
 * memory (rows untouched). */
static int split_one(const csr_t *E, int64_t *rows, int64_t n, int64_t n_left, int64_t i1, int64_t i2,
                     int64_t max_iter, int spherical, int score_threads, scratch_t *sc) {
    if (n < 2 || n_left < 1 || n_left >= n) return 0; /* nothing to split (the driver never asks) */
    int64_t nnz = 0;
    for (int64_t i = 0; i < n; i++) nnz += E->indptr[rows[i] + 1] - E->indptr[rows[i]];
    int32_t *support = (int32_t *)malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(int32_t));
    double *scores = (double *)malloc((size_t)n * sizeof(double));
    int64_t *order = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    int64_t *tmp = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    uint8_t *left = (uint8_t *)calloc((size_t)n, 1), *new_left = (uint8_t *)calloc((size_t)n, 1);
    int status = -1;
    if (!support || !scores || !order || !tmp || !left || !new_left) goto out;

    double *total = sc->total, *c1 = sc->c1, *w = sc->w;
    int64_t n_sup = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = rows[i];
        for (int64_t k = E->indptr[r]; k < E->indptr[r + 1]; k++) {
            const int32_t j = E->indices[k];
            if (!sc->mark[j]) {
                sc->mark[j] = 1;
                support[n_sup++] = j;
            }
            total[j] += E->data[k];
        }
    }
    /* initial centroids: two distinct members (difference of their unit directions / of themselves) */
    for (int side = 0; side < 2; side++) {
        const int64_t r = rows[side == 0 ? i1 : i2];
        const double sign = side == 0 ? 1.0 : -1.0;
        double norm = 0.0;
        for (int64_t k = E->indptr[r]; k < E->indptr[r + 1]; k++) norm += (double)E->data[k] * (double)E->data[k];
        double scale = sign;
        if (spherical) scale = norm > 0 ? sign / sqrt(norm) : 0.0;
        for (int64_t k = E->indptr[r]; k < E->indptr[r + 1]; k++) w[E->indices[k]] += scale * (double)E->data[k];
    }
    const int64_t n_right = n - n_left;
    for (int64_t it = 0; it < max_iter; it++) {
        if (score_threads > 1) {
            score_args_t a = {E, rows, n, w, scores, score_threads};
            if (xmtc_run_threads(score_threads, score_worker, &a) != 0) score_range(E, rows, 0, n, w, scores);
        } else {
            score_range(E, rows, 0, n, w, scores);
        }
        rank_desc(scores, n, order, tmp);
        memset(new_left, 0, (size_t)n);
        for (int64_t i = 0; i < n_left; i++) new_left[order[i]] = 1;
        int changed = it == 0;
        for (int64_t i = 0; i < n && !changed; i++) changed = new_left[i] != left[i];
        if (!changed) break;
        memcpy(left, new_left, (size_t)n);
        if (it == max_iter - 1) break;
        /* centroids of the new halves: c1 summed, c2 = total - c1 */
        for (int64_t t = 0; t < n_sup; t++) c1[support[t]] = 0.0;
        for (int64_t i = 0; i < n; i++) {
            if (!left[i]) continue;
            const int64_t r = rows[i];
            for (int64_t k = E->indptr[r]; k < E->indptr[r + 1]; k++) c1[E->indices[k]] += E->data[k];
        }
        double s1, s2;
        if (spherical) {
            double n1 = 0.0, n2 = 0.0;
            for (int64_t t = 0; t < n_sup; t++) {
                const double a = c1[support[t]], b = total[support[t]] - a;
                n1 += a * a;
                n2 += b * b;
            }
            s1 = n1 > 0 ? 1.0 / sqrt(n1) : 0.0;
            s2 = n2 > 0 ? 1.0 / sqrt(n2) : 0.0;
        } else {
            s1 = 1.0 / (double)n_left;
            s2 = 1.0 / (double)n_right;
        }
        for (int64_t t = 0; t < n_sup; t++) {
            const int32_t j = support[t];
            w[j] = c1[j] * s1 - (total[j] - c1[j]) * s2;
        }
    }
    /* left part first, each part in its current order (order[] is free scratch now) */
    int64_t a = 0, b = n_left;
    for (int64_t i = 0; i < n; i++) order[left[i] ? a++ : b++] = rows[i];
    memcpy(rows, order, (size_t)n * sizeof(int64_t));
    for (int64_t t = 0; t < n_sup; t++) {
        const int32_t j = support[t];
        total[j] = 0.0;
        c1[j] = 0.0;
        w[j] = 0.0;
        sc->mark[j] = 0;
    }
    status = 0;
out:
    free(support);
    free(scores);
    free(order);
    free(tmp);
    free(left);
    free(new_left);
    return status;
}

/* ---------------------------------------------------------------------------------------------- */
/* every segment perm[starts[s]:ends[s]] of one binary level */

typedef struct {
    csr_t E;
    int64_t d;
    int64_t *perm;
    const int64_t *starts, *ends, *n_lefts, *init1, *init2;
    int64_t n_seg, max_iter;
    int spherical, n_threads;
    int failed;
} level_args_t;

static void level_worker(void *ctx, int t) { /* segments t, t + n_threads, ...: one thread each */
    level_args_t *a = (level_args_t *)ctx;
    scratch_t sc;
    if (scratch_init(&sc, a->d) == 0) {
        for (int64_t s = t; s < a->n_seg; s += a->n_threads) {
            if (split_one(&a->E, a->perm + a->starts[s], a->ends[s] - a->starts[s], a->n_lefts[s], a->init1[s],
                          a->init2[s], a->max_iter, a->spherical, 1, &sc) != 0)
                __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
        }
    } else {
        __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
    }
    scratch_free(&sc);
}

XMTC_API int xmtc_kmeans_split_level(const int64_t *indptr, const int32_t *indices, const float *data, int64_t d,
                                     int64_t *perm, const int64_t *starts, const int64_t *ends,
                                     const int64_t *n_lefts, const int64_t *init1, const int64_t *init2,
                                     int64_t n_seg, int64_t max_iter, int spherical, int n_threads) {
    level_args_t a = {{indptr, indices, data}, d, perm, starts, ends, n_lefts, init1, init2, n_seg, max_iter,
                      spherical, n_threads > 0 ? n_threads : 1, 0};
    if (n_seg >= a.n_threads) { /* enough clusters: one thread per cluster */
        if (xmtc_run_threads(a.n_threads, level_worker, &a) != 0) return -1;
        return a.failed ? -1 : 0;
    }
    scratch_t sc; /* few, large clusters: one at a time, each scoring pass on every thread */
    int status = scratch_init(&sc, d);
    for (int64_t s = 0; s < n_seg && status == 0; s++)
        status = split_one(&a.E, perm + starts[s], ends[s] - starts[s], n_lefts[s], init1[s], init2[s], max_iter,
                           spherical, a.n_threads, &sc);
    scratch_free(&sc);
    return status;
}
