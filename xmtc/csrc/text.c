/* Text kernels: the TF-IDF featurizer's tokenising, n-gram interning, counts and rows
 * (xmtc/features/tfidf_kernels.py), the character n-gram walk of the label-text route
 * (xmtc/features/char_ngram_kernels.py) and the route's top-k through an inverted index
 * (xmtc/models/route_kernels.py).  The Python side allocates every output at its upper bound and checks
 * dtypes; each function here documents what it reads and writes.
 *
 * Ids are numbered in order of first occurrence, so no output depends on the hash tables' layout.
 * Floating point follows the Python specification step by step (float32 storage, float64 arithmetic where
 * it says so, no FMA: setup.py's -ffp-contract=off), so rows are the same bits on every build. */
#include "native.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET 0xCBF29CE484222325ULL
#define FNV_PRIME 0x100000001B3ULL

/* ---------------------------------------------------------------------------------------------------------
 * Unigrams: maximal runs of >= 2 word characters of NUL-separated UTF-8 texts, interned by FNV-1a.
 * --------------------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t cap;      /* slots, a power of two; at most half are used */
    uint64_t *slot_h; /* hash of the token in each slot */
    int32_t *slot_id; /* its id, -1 = empty */
    uint64_t *u_hash; /* per id: hash (for rehashing) */
    int64_t *u_off;   /* per id: start of its bytes in the blob; u_off[n_uni] = end */
} words_t;

static int words_grow(words_t *w, int64_t n_uni) {
    int64_t cap = w->cap * 2;
    uint64_t mask = (uint64_t)cap - 1;
    uint64_t *slot_h = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)cap);
    int32_t *slot_id = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
    uint64_t *u_hash = (uint64_t *)realloc(w->u_hash, sizeof(uint64_t) * (size_t)(cap / 2));
    if (u_hash) w->u_hash = u_hash;
    int64_t *u_off = (int64_t *)realloc(w->u_off, sizeof(int64_t) * (size_t)(cap / 2 + 1));
    if (u_off) w->u_off = u_off;
    if (!slot_h || !slot_id || !u_hash || !u_off) {
        free(slot_h);
        free(slot_id);
        return -1;
    }
    for (int64_t s = 0; s < cap; s++) slot_id[s] = -1;
    for (int64_t u = 0; u < n_uni; u++) {
        uint64_t s = w->u_hash[u] & mask;
        while (slot_id[s] >= 0) s = (s + 1) & mask;
        slot_h[s] = w->u_hash[u];
        slot_id[s] = (int32_t)u;
    }
    free(w->slot_h);
    free(w->slot_id);
    w->slot_h = slot_h;
    w->slot_id = slot_id;
    w->cap = cap;
    return 0;
}

/* buf[0:n]: texts joined by NUL (valid UTF-8, surrogates allowed), n_docs of them; isword[cp] for every
 * code point below 0x110000.  Writes tok (>= n / 3 + 1 entries: a token needs two bytes and a separator),
 * doc_end[n_docs] (token offset after each text), blob (>= n + 1 bytes: each distinct token's bytes and a
 * NUL, in id order) and counts = (tokens, blob bytes, distinct tokens).  Returns 0, or -1 out of memory. */
XMTC_API int xmtc_scan_words(const uint8_t *buf, int64_t n, const uint8_t *isword, int64_t n_docs, int32_t *tok,
                             int64_t *doc_end, uint8_t *blob, int64_t *counts) {
    words_t w;
    w.cap = 1 << 12;
    w.slot_h = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)w.cap);
    w.slot_id = (int32_t *)malloc(sizeof(int32_t) * (size_t)w.cap);
    w.u_hash = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)(w.cap / 2));
    w.u_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)(w.cap / 2 + 1));
    int status = 0;
    if (!w.slot_h || !w.slot_id || !w.u_hash || !w.u_off) {
        status = -1;
        goto done;
    }
    for (int64_t s = 0; s < w.cap; s++) w.slot_id[s] = -1;
    w.u_off[0] = 0;
    int64_t i = 0, t = 0, doc = 0, n_uni = 0, run_start = -1, run_cp = 0;
    uint64_t h = FNV_OFFSET;
    while (i <= n) {
        int word = 0;
        int64_t width = 1;
        uint32_t b = 0;
        if (i < n) {
            b = buf[i];
            uint32_t cp = 0;
            if (b < 0x80) {
                cp = b;
            } else if (b < 0xE0) {
                width = 2;
            } else if (b < 0xF0) {
                width = 3;
            } else {
                width = 4;
            }
            if (i + width > n) { /* truncated sequence (not from Python's encoder): not a word character */
                width = n - i;
                cp = 0;
            } else if (width == 2) {
                cp = ((b & 0x1F) << 6) | (buf[i + 1] & 0x3F);
            } else if (width == 3) {
                cp = ((b & 0x0F) << 12) | ((uint32_t)(buf[i + 1] & 0x3F) << 6) | (buf[i + 2] & 0x3F);
            } else if (width == 4) {
                cp = ((b & 0x07) << 18) | ((uint32_t)(buf[i + 1] & 0x3F) << 12) | ((uint32_t)(buf[i + 2] & 0x3F) << 6)
                     | (buf[i + 3] & 0x3F);
            }
            word = cp < 0x110000 && isword[cp];
        }
        if (word) {
            if (run_start < 0) {
                run_start = i;
                run_cp = 0;
                h = FNV_OFFSET;
            }
            run_cp++;
            for (int64_t k = 0; k < width; k++) h = (h ^ buf[i + k]) * FNV_PRIME;
        } else {
            if (run_start >= 0) {
                if (run_cp >= 2) {
                    int64_t length = i - run_start;
                    if (2 * (n_uni + 1) > w.cap && words_grow(&w, n_uni) != 0) {
                        status = -1;
                        goto done;
                    }
                    uint64_t mask = (uint64_t)w.cap - 1;
                    uint64_t s = h & mask;
                    int64_t found = -1;
                    while (w.slot_id[s] >= 0) {
                        if (w.slot_h[s] == h) {
                            int32_t u = w.slot_id[s];
                            int64_t a = w.u_off[u];
                            if (w.u_off[u + 1] - a == length + 1 && memcmp(blob + a, buf + run_start, (size_t)length) == 0) {
                                found = u;
                                break;
                            }
                        }
                        s = (s + 1) & mask;
                    }
                    if (found < 0) {
                        int64_t a = w.u_off[n_uni];
                        found = n_uni;
                        memcpy(blob + a, buf + run_start, (size_t)length);
                        blob[a + length] = 0;
                        w.u_off[n_uni + 1] = a + length + 1;
                        w.u_hash[n_uni] = h;
                        w.slot_h[s] = h;
                        w.slot_id[s] = (int32_t)n_uni;
                        n_uni++;
                    }
                    tok[t++] = (int32_t)found;
                }
                run_start = -1;
            }
            if (b == 0 && doc < n_docs) doc_end[doc++] = t;
        }
        i += width;
    }
    counts[0] = t;
    counts[1] = w.u_off[n_uni];
    counts[2] = n_uni;
done:
    free(w.slot_h);
    free(w.slot_id);
    free(w.u_hash);
    free(w.u_off);
    return status;
}

/* ---------------------------------------------------------------------------------------------------------
 * n-grams: the n-gram at token i is the pair (id of the (n-1)-gram at i, unigram at i + n - 1), its key
 * prev * n_uni + uni (int64, wrapping as numpy's int64 does); interned by Fibonacci hashing.
 * --------------------------------------------------------------------------------------------------------- */

static inline int64_t pair_key(int32_t p, int32_t u, int64_t n_uni) {
    return (int64_t)((uint64_t)(int64_t)p * (uint64_t)n_uni + (uint64_t)(int64_t)u);
}

/* Writes out[T] (id of the n-gram at each token, -1 where there is none) and keys (>= T entries, id order);
 * *n_keys = distinct n-grams.  Returns 0, or -1 out of memory. */
XMTC_API int xmtc_ngram_fit(const int32_t *prev, const int32_t *uni, int64_t T, const int64_t *doc_ptr, int64_t n_docs,
                            int64_t n, int64_t n_uni, int32_t *out, int64_t *keys, int64_t *n_keys) {
    int bits = 12;
    int64_t cap = (int64_t)1 << bits;
    int32_t *slot = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
    if (!slot) return -1;
    for (int64_t s = 0; s < cap; s++) slot[s] = -1;
    for (int64_t i = 0; i < T; i++) out[i] = -1;
    int64_t nk = 0;
    for (int64_t d = 0; d < n_docs; d++) {
        for (int64_t i = doc_ptr[d]; i < doc_ptr[d + 1] - n + 1; i++) {
            int32_t p = prev[i];
            if (p < 0) continue;
            int64_t key = pair_key(p, uni[i + n - 1], n_uni);
            int64_t s = xmtc_slot(key, bits);
            int64_t found = -1;
            while (slot[s] >= 0) {
                if (keys[slot[s]] == key) {
                    found = slot[s];
                    break;
                }
                s = (s + 1) & (cap - 1);
            }
            if (found < 0) {
                if (2 * (nk + 1) > cap) {
                    bits++;
                    cap <<= 1;
                    int32_t *grown = (int32_t *)malloc(sizeof(int32_t) * (size_t)cap);
                    if (!grown) {
                        free(slot);
                        return -1;
                    }
                    free(slot);
                    slot = grown;
                    for (int64_t q = 0; q < cap; q++) slot[q] = -1;
                    for (int64_t j = 0; j < nk; j++) {
                        int64_t q = xmtc_slot(keys[j], bits);
                        while (slot[q] >= 0) q = (q + 1) & (cap - 1);
                        slot[q] = (int32_t)j;
                    }
                    s = xmtc_slot(key, bits);
                    while (slot[s] >= 0) s = (s + 1) & (cap - 1);
                }
                found = nk;
                keys[nk] = key;
                slot[s] = (int32_t)nk;
                nk++;
            }
            out[i] = (int32_t)found;
        }
    }
    free(slot);
    *n_keys = nk;
    return 0;
}

/* Transform time: out[i] = position of the n-gram at token i in the sorted keys[K], -1 if absent. */
XMTC_API void xmtc_ngram_lookup(const int32_t *prev, const int32_t *uni, int64_t T, const int64_t *doc_ptr,
                                int64_t n_docs, int64_t n, int64_t n_uni, const int64_t *keys, int64_t K, int32_t *out) {
    for (int64_t i = 0; i < T; i++) out[i] = -1;
    for (int64_t d = 0; d < n_docs; d++) {
        for (int64_t i = doc_ptr[d]; i < doc_ptr[d + 1] - n + 1; i++) {
            int32_t p = prev[i], u = uni[i + n - 1];
            if (p < 0 || u < 0) continue;
            int64_t key = pair_key(p, u, n_uni);
            int64_t lo = 0, hi = K; /* first position with keys[j] >= key */
            while (lo < hi) {
                int64_t mid = lo + ((hi - lo) >> 1);
                if (keys[mid] < key) lo = mid + 1;
                else hi = mid;
            }
            if (lo < K && keys[lo] == key) out[i] = (int32_t)lo;
        }
    }
}

/* Per term: texts containing it (df) and occurrences (tf), added to df / tf (zero, from the caller);
 * last[n_terms] is scratch, -1 from the caller (the last text counted in df). */
XMTC_API void xmtc_doc_term_freq(const int32_t *ids, const int64_t *doc_ptr, int64_t n_docs, int64_t n_terms,
                                 int64_t *df, int64_t *tf, int64_t *last) {
    for (int64_t d = 0; d < n_docs; d++) {
        for (int64_t i = doc_ptr[d]; i < doc_ptr[d + 1]; i++) {
            int32_t j = ids[i];
            if (j < 0 || j >= n_terms) continue;
            tf[j]++;
            if (last[j] != d) {
                last[j] = d;
                df[j]++;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------
 * Rows: featpos[L][T] (feature id per order and token, -1 = none) into CSR rows.
 * --------------------------------------------------------------------------------------------------------- */

/* ub_ptr[n_docs + 1]: running count of each text's valid entries, an upper bound of its row length. */
XMTC_API void xmtc_rows_bound(const int32_t *featpos, int64_t L, int64_t T, const int64_t *doc_ptr, int64_t n_docs,
                              int64_t *ub_ptr) {
    ub_ptr[0] = 0;
    for (int64_t d = 0; d < n_docs; d++) {
        int64_t c = 0;
        for (int64_t lvl = 0; lvl < L; lvl++)
            for (int64_t i = doc_ptr[d]; i < doc_ptr[d + 1]; i++) c += featpos[lvl * T + i] >= 0;
        ub_ptr[d + 1] = ub_ptr[d] + c;
    }
}

static void sort_i32(int32_t *a, int64_t m) {
    while (m > 24) { /* quicksort on the larger side's loop, median of three */
        int32_t x = a[0], y = a[m / 2], z = a[m - 1];
        int32_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        int64_t i = 0, j = m - 1;
        for (;;) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i >= j) break;
            int32_t tmp = a[i];
            a[i] = a[j];
            a[j] = tmp;
            i++;
            j--;
        }
        int64_t left = j + 1; /* a[0:left] <= pivot <= a[left:m] */
        if (left < m - left) {
            sort_i32(a, left);
            a += left;
            m -= left;
        } else {
            sort_i32(a + left, m - left);
            m = left;
        }
    }
    for (int64_t i = 1; i < m; i++) {
        int32_t v = a[i];
        int64_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

typedef struct {
    const int32_t *featpos;
    int64_t L, T;
    const int64_t *doc_ptr, *ub_ptr;
    int64_t n_docs;
    const double *idf;
    int sublinear, norm, idx64, n_threads;
    int64_t n_chunks;
    void *indices;
    float *data;
    int64_t *nnz;
    int failed;
} rows_t;

/* Rows d0..d1: sort each text's feature ids, count runs (float32 counts), weight (float64: 1 + log of the
 * float32 count, taken in float32, or the count; times idf), store as float32, and divide the stored values
 * by the float64 l1 / l2 norm of the unrounded weights. */
static int rows_chunk(const rows_t *r, int64_t d0, int64_t d1) {
    int64_t longest = 0;
    for (int64_t d = d0; d < d1; d++)
        if (r->ub_ptr[d + 1] - r->ub_ptr[d] > longest) longest = r->ub_ptr[d + 1] - r->ub_ptr[d];
    int32_t *tmp = (int32_t *)malloc(sizeof(int32_t) * (size_t)(longest > 0 ? longest : 1));
    if (!tmp) return -1;
    int32_t *ind32 = (int32_t *)r->indices;
    int64_t *ind64 = (int64_t *)r->indices;
    float *data = r->data;
    for (int64_t d = d0; d < d1; d++) {
        int64_t m = 0;
        for (int64_t lvl = 0; lvl < r->L; lvl++) {
            const int32_t *fp = r->featpos + lvl * r->T;
            for (int64_t i = r->doc_ptr[d]; i < r->doc_ptr[d + 1]; i++)
                if (fp[i] >= 0) tmp[m++] = fp[i];
        }
        sort_i32(tmp, m);
        int64_t base = r->ub_ptr[d], k = base;
        int32_t prev = -1;
        for (int64_t q = 0; q < m; q++) {
            int32_t f = tmp[q];
            if (f != prev) {
                if (r->idx64) ind64[k] = f;
                else ind32[k] = f;
                data[k] = 1.0f;
                k++;
                prev = f;
            } else {
                data[k - 1] = (float)((double)data[k - 1] + 1.0);
            }
        }
        double total = 0.0;
        for (int64_t q = base; q < k; q++) {
            float c = data[q];
            double v = r->sublinear ? 1.0 + (double)logf(c) : (double)c;
            v *= r->idf[r->idx64 ? ind64[q] : (int64_t)ind32[q]];
            data[q] = (float)v;
            if (r->norm == 2) total += v * v;
            else if (r->norm == 1) total += fabs(v);
        }
        if (r->norm == 2) total = sqrt(total);
        if (r->norm != 0 && total > 0.0)
            for (int64_t q = base; q < k; q++) data[q] = (float)((double)data[q] / total);
        r->nnz[d] = k - base;
    }
    free(tmp);
    return 0;
}

static void rows_thread(void *ctx, int t) {
    rows_t *r = (rows_t *)ctx;
    for (int64_t c = t; c < r->n_chunks; c += r->n_threads)
        if (rows_chunk(r, c * r->n_docs / r->n_chunks, (c + 1) * r->n_docs / r->n_chunks) != 0) r->failed = 1;
}

/* Rows written at ub_ptr[d] (indices int64 if idx64 else int32, data float32), nnz[d] their lengths; chunks
 * of texts dealt to n_threads threads (each row is computed alone, so the split changes nothing).
 * Returns 0, or -1 out of memory. */
XMTC_API int xmtc_rows_fill(const int32_t *featpos, int64_t L, int64_t T, const int64_t *doc_ptr, int64_t n_docs,
                            const int64_t *ub_ptr, const double *idf, int sublinear, int norm, int n_threads,
                            int64_t n_chunks, int idx64, void *indices, float *data, int64_t *nnz) {
    rows_t r = {featpos, L, T, doc_ptr, ub_ptr, n_docs, idf, sublinear, norm, idx64,
                n_threads < 1 ? 1 : n_threads, n_chunks < 1 ? 1 : n_chunks, indices, data, nnz, 0};
    if (n_docs == 0) return 0;
    if (r.n_chunks > n_docs) r.n_chunks = n_docs;
    if (r.n_threads > r.n_chunks) r.n_threads = (int)r.n_chunks;
    if (xmtc_run_threads(r.n_threads, rows_thread, &r) != 0) return -1;
    return r.failed ? -1 : 0;
}

/* Move each row from its upper-bound slot ub_ptr[d] to indptr[d] (indptr of the width idx64 says). */
XMTC_API void xmtc_rows_compact(const int64_t *ub_ptr, const void *indptr, int64_t n_docs, int idx64,
                                const void *indices_ub, const float *data_ub, void *indices, float *data) {
    for (int64_t d = 0; d < n_docs; d++) {
        int64_t a = idx64 ? ((const int64_t *)indptr)[d] : ((const int32_t *)indptr)[d];
        int64_t b = idx64 ? ((const int64_t *)indptr)[d + 1] : ((const int32_t *)indptr)[d + 1];
        int64_t s = ub_ptr[d];
        size_t w = idx64 ? 8 : 4;
        memmove((char *)indices + (size_t)a * w, (const char *)indices_ub + (size_t)s * w, (size_t)(b - a) * w);
        memmove(data + a, data_ub + s, sizeof(float) * (size_t)(b - a));
    }
}

/* ---------------------------------------------------------------------------------------------------------
 * Character n-grams (the char_wb walk) looked up in an open-addressing table of base-A keys.
 * --------------------------------------------------------------------------------------------------------- */

/* Insert keys[n] into table_keys / table_ids (1 << bits slots, -1 = empty); id = position in keys. */
XMTC_API void xmtc_char_fill(const int64_t *keys, int64_t n, int64_t *table_keys, int32_t *table_ids, int bits) {
    int64_t mask = ((int64_t)1 << bits) - 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t h = xmtc_slot(keys[i], bits);
        while (table_keys[h] != -1) h = (h + 1) & mask;
        table_keys[h] = keys[i];
        table_ids[h] = (int32_t)i;
    }
}

/* Each word (word_len[w] codes of codes[], 0 = outside the alphabet) padded with the code `space` on both
 * sides; for each n in min_n..max_n every n-gram of the padded word, or the whole padded word once if it is
 * not longer than n (which ends that word).  Found n-grams are appended as (word_text[w], id); returns how
 * many. */
XMTC_API int64_t xmtc_char_ngram_ids(const int64_t *codes, const int64_t *word_len, const int64_t *word_text,
                                     int64_t n_words, int64_t min_n, int64_t max_n, int64_t A, int64_t space,
                                     const int64_t *table_keys, const int32_t *table_ids, int bits, int64_t *out_text,
                                     int64_t *out_id) {
    int64_t mask = ((int64_t)1 << bits) - 1;
    int64_t n_out = 0, start = 0;
    for (int64_t w = 0; w < n_words; w++) {
        int64_t L = word_len[w] + 2;
        for (int64_t n = min_n; n <= max_n; n++) {
            int whole = n >= L;
            int64_t last = whole ? 0 : L - n;
            int64_t width = whole ? L : n;
            for (int64_t off = 0; off <= last; off++) {
                const int64_t key = xmtc_gram_key(codes + start, L, off, width, A, space);
                if (key < 0) continue;
                int64_t h = xmtc_slot(key, bits);
                while (table_keys[h] != -1) {
                    if (table_keys[h] == key) {
                        out_text[n_out] = word_text[w];
                        out_id[n_out] = table_ids[h];
                        n_out++;
                        break;
                    }
                    h = (h + 1) & mask;
                }
            }
            if (whole) break;
        }
        start += word_len[w];
    }
    return n_out;
}

/* ---------------------------------------------------------------------------------------------------------
 * The label-text route's top k per text through the labels' inverted index (float32 products and sums).
 * --------------------------------------------------------------------------------------------------------- */

/* (product s, row r) ranks below (t, q): a lower product, or the same and a higher row. */
static inline int worse(float s, int64_t r, float t, int64_t q) { return s < t || (s == t && r > q); }

static void sift_down(float *hv, int64_t *hp, int64_t start, int64_t end) {
    float s = hv[start];
    int64_t r = hp[start], c = start;
    for (;;) {
        int64_t child = 2 * c + 1;
        if (child >= end) break;
        if (child + 1 < end && worse(hv[child + 1], hp[child + 1], hv[child], hp[child])) child++;
        if (!worse(hv[child], hp[child], s, r)) break;
        hv[c] = hv[child];
        hp[c] = hp[child];
        c = child;
    }
    hv[c] = s;
    hp[c] = r;
}

/* Per text i of x (CSR, n_x texts), the k label rows with the largest products with it, best first, into
 * pos[i * k:] / val[i * k:] (left as they are past the matches); acc[n_rows] must be zero and is left zero,
 * touched[n_rows + 1] is scratch. */
XMTC_API void xmtc_route_top_rows(const int64_t *x_ptr, const int32_t *x_ind, const float *x_val, int64_t n_x,
                                  const int64_t *t_ptr, const int32_t *t_ind, const float *t_val, int64_t k,
                                  float *acc, int32_t *touched, int64_t *pos, float *val) {
    for (int64_t i = 0; i < n_x; i++) {
        int64_t n = 0;
        for (int64_t a = x_ptr[i]; a < x_ptr[i + 1]; a++) {
            int32_t j = x_ind[a];
            float v = x_val[a];
            for (int64_t p = t_ptr[j]; p < t_ptr[j + 1]; p++) {
                int32_t r = t_ind[p];
                float prod = v * t_val[p];
                if (prod == 0.0f) continue;
                float s = acc[r];
                touched[n] = r;
                n += s == 0.0f;
                acc[r] = s + prod;
            }
        }
        float *hv = val + i * k;
        int64_t *hp = pos + i * k;
        int64_t filled = 0;
        for (int64_t q = 0; q < n; q++) {
            int64_t r = touched[q];
            float s = acc[r];
            acc[r] = 0.0f;
            if (!(s > 0.0f)) continue;
            if (filled < k) {
                int64_t c = filled++;
                while (c > 0) {
                    int64_t parent = (c - 1) >> 1;
                    if (!worse(s, r, hv[parent], hp[parent])) break;
                    hv[c] = hv[parent];
                    hp[c] = hp[parent];
                    c = parent;
                }
                hv[c] = s;
                hp[c] = r;
            } else if (worse(hv[0], hp[0], s, r)) {
                hv[0] = s;
                hp[0] = r;
                sift_down(hv, hp, 0, k);
            }
        }
        for (int64_t end = filled - 1; end > 0; end--) {
            float s = hv[0];
            int64_t r = hp[0];
            hv[0] = hv[end];
            hp[0] = hp[end];
            hv[end] = s;
            hp[end] = r;
            sift_down(hv, hp, 0, end);
        }
    }
}
