/* Beam search kernels: score the children of each row's beam parents and keep the best.
 * xmtc/linear/beam.py describes the feature-major weight layout these walk and calls them via ctypes.
 * Scores are float32 throughout, as in the Python layout; ties rank the smaller node id first. */
#include "native.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    int32_t col; /* the child's offset under its parent */
    float val;
} entry_t;

/* ---------------------------------------------------------------------------------------------- */
/* layout: counting sort of the weights by (feature, parent, child) */

/* Weights given as csc columns (rows 0..d-1 features, row d the bias; zeros are no weight) as feature-major
 * entries: with ent == NULL, cursor[r] counts row r's nonzero entries (r < d); otherwise cursor[r] is where row
 * r's next entry goes, and the columns are taken in `order` (the nodes' (parent, offset) order), so each
 * feature's entries come out in that order, with the parent in ent_par and the bias of column j in bias[j]. A
 * whole level (BeamLevel.from_weights) and a learn's edited nodes (beam_edit.py) alike. */
XMTC_API void xmtc_columns_fill(const int64_t *indptr, const int32_t *indices, const float *data, int64_t d,
                                const int64_t *order, int64_t n, const int32_t *col_par, const int32_t *col_off,
                                int64_t *cursor, entry_t *ent, int32_t *ent_par, float *bias) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t j = order[i];
        for (int64_t e = indptr[j]; e < indptr[j + 1]; e++) {
            const int64_t r = indices[e];
            const float v = data[e];
            if (v == 0.0f) continue;
            if (ent == NULL) {
                if (r < d) cursor[r]++;
            } else if (r < d) {
                const int64_t q = cursor[r]++;
                ent[q].col = col_off[j];
                ent[q].val = v;
                ent_par[q] = col_par[j];
            } else {
                bias[j] = v;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* layout edits (xmtc/linear/beam_edit.py): a few nodes' weights replaced in one pass over the entries */

static inline void emit(int64_t p, entry_t x, int64_t *last_p, int32_t *out_seg, int64_t *so, entry_t *out_ent,
                        int64_t *eo) {
    if (p != *last_p) { /* a new (feature, parent) segment */
        out_seg[2 * *so] = (int32_t)p;
        out_seg[2 * *so + 1] = 0;
        (*so)++;
        *last_p = p;
    }
    out_seg[2 * (*so - 1) + 1]++;
    out_ent[(*eo)++] = x;
}

/* The entries of the nodes flagged in `edited` dropped and the new entries merged in (feature f's are
 * new_p / new_ent[new_ptr[f] .. new_ptr[f + 1]), in (parent, offset) order), each feature's entries kept in
 * (parent, offset) order. With `renumber` (not NULL) a kept entry's offset becomes renumber[node] (its node's
 * offset among new sibling lists, in the same order). out_ent holds nnz + m entries and out_seg S + m segments
 * at most (m = new_ptr[d]); counts[0..1] = segments, entries. */
XMTC_API void xmtc_layout_edit(int64_t d, const int64_t *feat, const int32_t *seg, const entry_t *ent,
                               const int64_t *child_ptr, const int32_t *child_ids, const uint8_t *edited,
                               const int64_t *new_ptr, const int32_t *new_p, const entry_t *new_ent,
                               int64_t *out_feat, int32_t *out_seg, entry_t *out_ent, int64_t *counts,
                               const int32_t *renumber) {
    int64_t so = 0, eo = 0;
    for (int64_t f = 0; f < d; f++) {
        out_feat[2 * f] = so;
        out_feat[2 * f + 1] = eo;
        int64_t last_p = -1, e = feat[2 * f + 1], q = new_ptr[f];
        const int64_t q_end = new_ptr[f + 1];
        for (int64_t s = feat[2 * f]; s < feat[2 * f + 2]; s++) {
            const int64_t p = seg[2 * s], n = seg[2 * s + 1], base = child_ptr[p];
            for (int64_t k = 0; k < n; k++, e++) {
                entry_t x = ent[e];
                const int32_t node = child_ids[base + x.col];
                if (edited[node]) continue; /* the new entries before it go before the next kept one */
                if (renumber) x.col = renumber[node];
                while (q < q_end && (new_p[q] < p || (new_p[q] == p && new_ent[q].col < x.col))) {
                    emit(new_p[q], new_ent[q], &last_p, out_seg, &so, out_ent, &eo);
                    q++;
                }
                emit(p, x, &last_p, out_seg, &so, out_ent, &eo);
            }
        }
        for (; q < q_end; q++) emit(new_p[q], new_ent[q], &last_p, out_seg, &so, out_ent, &eo);
    }
    out_feat[2 * d] = so;
    out_feat[2 * d + 1] = eo;
    counts[0] = so;
    counts[1] = eo;
}

/* The weights of the nodes with slot[node] >= 0 as csc columns (one per slot), rows ascending: with out_row NULL,
 * cursor[slot] counts each column's entries; otherwise cursor[slot] is where its next entry goes (features are
 * walked in order, so each column's rows come out sorted). Returns the number of entries. */
XMTC_API int64_t xmtc_layout_columns(int64_t d, const int64_t *feat, const int32_t *seg, const entry_t *ent,
                                     const int64_t *child_ptr, const int32_t *child_ids, const int32_t *slot,
                                     int64_t *cursor, int32_t *out_row, float *out_val) {
    int64_t c = 0;
    for (int64_t f = 0; f < d; f++) {
        int64_t e = feat[2 * f + 1];
        for (int64_t s = feat[2 * f]; s < feat[2 * f + 2]; s++) {
            const int64_t p = seg[2 * s], n = seg[2 * s + 1], base = child_ptr[p];
            for (int64_t k = 0; k < n; k++, e++) {
                const int32_t j = slot[child_ids[base + ent[e].col]];
                if (j >= 0) {
                    if (out_row) {
                        const int64_t q = cursor[j]++;
                        out_row[q] = (int32_t)f;
                        out_val[q] = ent[e].val;
                    } else {
                        cursor[j]++;
                    }
                    c++;
                }
            }
        }
    }
    return c;
}

/* ---------------------------------------------------------------------------------------------- */
/* search */

enum { POST_L3_HINGE = 0, POST_SIGMOID = 1, POST_NOOP = 2 };

static inline float post(int code, float s, float parent) {
    if (code == POST_L3_HINGE) {
        double z = 1.0 - (double)s;
        if (z < 0.0) z = 0.0;
        return (float)exp(-(z * z * z)) * parent;
    }
    if (code == POST_SIGMOID) return (float)(1.0 / (1.0 + exp(-(double)s))) * parent;
    return s;
}

static inline int better(float s1, int32_t i1, float s2, int32_t i2) { return s1 > s2 || (s1 == s2 && i1 < i2); }

static inline void swap_items(int32_t *h_id, float *h_sc, int64_t a, int64_t b) {
    const int32_t ti = h_id[a];
    h_id[a] = h_id[b];
    h_id[b] = ti;
    const float ts = h_sc[a];
    h_sc[a] = h_sc[b];
    h_sc[b] = ts;
}

/* min-heap on quality: the root is the worst item kept */
static void sift_down(int32_t *h_id, float *h_sc, int64_t size, int64_t pos) {
    for (;;) {
        const int64_t left = 2 * pos + 1;
        if (left >= size) return;
        int64_t w = left;
        const int64_t right = left + 1;
        if (right < size && better(h_sc[w], h_id[w], h_sc[right], h_id[right])) w = right;
        if (!better(h_sc[pos], h_id[pos], h_sc[w], h_id[w])) return;
        swap_items(h_id, h_sc, pos, w);
        pos = w;
    }
}

/* Offer one candidate to a bounded heap of the best `keep`; returns the new size. */
static int64_t push(int32_t *h_id, float *h_sc, int64_t size, int64_t keep, int32_t node, float score) {
    if (size < keep) {
        int64_t pos = size;
        h_id[pos] = node;
        h_sc[pos] = score;
        while (pos > 0) {
            const int64_t up = (pos - 1) / 2;
            if (!better(h_sc[up], h_id[up], h_sc[pos], h_id[pos])) break;
            swap_items(h_id, h_sc, pos, up);
            pos = up;
        }
        return size + 1;
    }
    if (better(score, node, h_sc[0], h_id[0])) {
        h_id[0] = node;
        h_sc[0] = score;
        sift_down(h_id, h_sc, size, 0);
    }
    return size;
}

/* Valid (>= 0), distinct beam parents in ascending id order into bp/bs; returns how many. */
static int64_t sorted_beam(const int32_t *ids, const float *scores, int64_t width, int32_t *bp, float *bs) {
    int64_t nb = 0;
    for (int64_t j = 0; j < width; j++) {
        const int32_t p = ids[j];
        if (p < 0) continue;
        int64_t q = nb;
        while (q > 0 && bp[q - 1] > p) q--;
        if (q > 0 && bp[q - 1] == p) continue; /* a repeated node: keep its first (best) score */
        for (int64_t r = nb; r > q; r--) {
            bp[r] = bp[r - 1];
            bs[r] = bs[r - 1];
        }
        bp[q] = p;
        bs[q] = scores[j];
        nb++;
    }
    return nb;
}

typedef struct {
    int64_t n;
    const int64_t *x_indptr;
    const int32_t *x_indices;
    const float *x_data;
    const int32_t *in_ids;
    const float *in_sc;
    int64_t width;
    const int64_t *child_ptr;
    const int32_t *child_ids;
    const int64_t *feat; /* (d + 1) x 2: first segment, first entry */
    const int32_t *seg;  /* n_seg x 2: parent, entries */
    const entry_t *ent;
    const float *bias_w;
    float bias;
    int64_t max_children;
    int code;
    int32_t *out_ids;
    float *out_sc;
    int64_t keep;
    int64_t chunk;
    int64_t next; /* next unclaimed row, taken `chunk` at a time */
    int failed;
} step_args_t;

static void step_rows(step_args_t *a, int64_t lo, int64_t hi, float *buf, int32_t *bp, float *bs, int32_t *h_id,
                      float *h_sc) {
    const int64_t stride = a->max_children > 0 ? a->max_children : 1;
    for (int64_t i = lo; i < hi; i++) {
        const int64_t nb = sorted_beam(a->in_ids + i * a->width, a->in_sc + i * a->width, a->width, bp, bs);
        for (int64_t j = 0; j < nb; j++) {
            const int64_t c0 = a->child_ptr[bp[j]], nc = a->child_ptr[bp[j] + 1] - c0;
            for (int64_t c = 0; c < nc; c++) buf[j * stride + c] = a->bias_w[a->child_ids[c0 + c]] * a->bias;
        }
        for (int64_t q = a->x_indptr[i]; q < a->x_indptr[i + 1]; q++) {
            const int64_t f = a->x_indices[q];
            const float v = a->x_data[q];
            int64_t s = a->feat[2 * f], e = a->feat[2 * f + 1];
            const int64_t s1 = a->feat[2 * (f + 1)];
            int64_t j = 0;
            while (s < s1 && j < nb) { /* merge the feature's parents with the beam's */
                const int32_t p = a->seg[2 * s];
                const int64_t n_e = a->seg[2 * s + 1];
                if (p < bp[j]) {
                    e += n_e;
                    s++;
                } else if (p > bp[j]) {
                    j++;
                } else {
                    float *row = buf + j * stride;
                    for (int64_t r = e; r < e + n_e; r++) row[a->ent[r].col] += v * a->ent[r].val;
                    e += n_e;
                    s++;
                    j++;
                }
            }
        }
        int64_t size = 0;
        for (int64_t j = 0; j < nb; j++) {
            const int64_t c0 = a->child_ptr[bp[j]], nc = a->child_ptr[bp[j] + 1] - c0;
            for (int64_t c = 0; c < nc; c++)
                size = push(h_id, h_sc, size, a->keep, a->child_ids[c0 + c], post(a->code, buf[j * stride + c], bs[j]));
        }
        int32_t *oi = a->out_ids + i * a->keep;
        float *os = a->out_sc + i * a->keep;
        for (int64_t r = size - 1; r >= 0; r--) { /* pop worst-first into the tail: rows come out best-first */
            oi[r] = h_id[0];
            os[r] = h_sc[0];
            h_id[0] = h_id[r];
            h_sc[0] = h_sc[r];
            sift_down(h_id, h_sc, r, 0);
        }
    }
}

static void step_worker(void *ctx, int t) {
    step_args_t *a = (step_args_t *)ctx;
    (void)t;
    const int64_t stride = a->max_children > 0 ? a->max_children : 1;
    const int64_t width = a->width > 0 ? a->width : 1;
    float *buf = (float *)malloc(sizeof(float) * (size_t)(width * stride));
    int32_t *bp = (int32_t *)malloc(sizeof(int32_t) * (size_t)width);
    float *bs = (float *)malloc(sizeof(float) * (size_t)width);
    int32_t *h_id = (int32_t *)malloc(sizeof(int32_t) * (size_t)a->keep);
    float *h_sc = (float *)malloc(sizeof(float) * (size_t)a->keep);
    if (!buf || !bp || !bs || !h_id || !h_sc) {
        __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
    } else {
        for (;;) {
            const int64_t lo = __atomic_fetch_add(&a->next, a->chunk, __ATOMIC_RELAXED);
            if (lo >= a->n) break;
            step_rows(a, lo, lo + a->chunk < a->n ? lo + a->chunk : a->n, buf, bp, bs, h_id, h_sc);
        }
    }
    free(buf);
    free(bp);
    free(bs);
    free(h_id);
    free(h_sc);
}

/* One level of beam search for rows 0..n-1; out_ids/out_sc (n x keep) must come in as -1 / 0. */
XMTC_API int xmtc_beam_step(int64_t n, const int64_t *x_indptr, const int32_t *x_indices, const float *x_data,
                            const int32_t *in_ids, const float *in_sc, int64_t width, const int64_t *child_ptr,
                            const int32_t *child_ids, const int64_t *feat, const int32_t *seg, const entry_t *ent,
                            const float *bias_w, float bias, int64_t max_children, int code, int32_t *out_ids,
                            float *out_sc, int64_t keep, int n_threads) {
    step_args_t a = {n, x_indptr, x_indices, x_data, in_ids, in_sc, width, child_ptr, child_ids, feat, seg, ent,
                     bias_w, bias, max_children, code, out_ids, out_sc, keep, 64, 0, 0};
    /* one chunk or less runs on the calling thread: starting threads would cost more than it saves, and
     * a single-text call must stay far below a millisecond; never more threads than chunks */
    if (n_threads > 1 && n <= a.chunk) n_threads = 1;
    if (n_threads > 1 && (n + a.chunk - 1) / a.chunk < n_threads) n_threads = (int)((n + a.chunk - 1) / a.chunk);
    if (xmtc_run_threads(n_threads, step_worker, &a) != 0) return -1;
    return a.failed ? -1 : 0;
}
