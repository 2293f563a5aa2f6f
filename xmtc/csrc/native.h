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

#endif
