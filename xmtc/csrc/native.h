/* Shared declarations of xmtc's compiled kernels (loaded from Python with ctypes, see xmtc/native.py). */
#ifndef XMTC_NATIVE_H
#define XMTC_NATIVE_H

#include <stdint.h>

#define XMTC_API __attribute__((visibility("default")))

/* The hot loops are built for AVX-512, AVX2 and plain x86-64 and the loader picks the best the CPU
 * has; the arithmetic is the same in every clone (no FMA contraction), so are the results. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define XMTC_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define XMTC_HOT
#endif

/* Runs fn(ctx, t) for t = 0..n_threads-1, t = 0 on the calling thread (and any share whose thread
 * could not be started); returns -1 only when its bookkeeping could not be allocated. */
int xmtc_run_threads(int n_threads, void (*fn)(void *ctx, int t), void *ctx);

/* Fibonacci hashing: the multiplier of the text kernels' open-addressing tables (text.c, char_fit.c). */
#define XMTC_FIB 0x9E3779B97F4A7C15ULL

/* A key's home slot in an open-addressing table of 1 << bits slots (Fibonacci hashing). */
static inline int64_t xmtc_slot(int64_t key, int bits) {
    return (int64_t)(((uint64_t)key * XMTC_FIB) >> (64 - bits));
}

/* The key of the n-gram at [off, off + width) of a word padded with the code `space` on both sides (L codes in
 * all; the word's own are word[0..L-3]): the number its codes spell in base A, or -1 if one is 0 (outside the
 * alphabet).  The char_wb walk of xmtc_char_ngram_ids (text.c) and xmtc_char_fit (char_fit.c). */
static inline int64_t xmtc_gram_key(const int64_t *word, int64_t L, int64_t off, int64_t width, int64_t A,
                                    int64_t space) {
    int64_t key = 0;
    for (int64_t q = off; q < off + width; q++) {
        const int64_t c = (q == 0 || q == L - 1) ? space : word[q - 1];
        if (c == 0) return -1;
        key = (int64_t)((uint64_t)key * (uint64_t)A + (uint64_t)c);
    }
    return key;
}

#endif
