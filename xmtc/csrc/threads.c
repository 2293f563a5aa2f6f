/* A fork-join over a fixed number of pthreads: every parallel kernel in xmtc deals its work into
 * per-thread lists up front (so results never depend on timing), so a pool would buy nothing. */
#include "native.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    void (*fn)(void *, int);
    void *ctx;
    int t;
} job_t;

static void *thread_main(void *p) {
    job_t *j = (job_t *)p;
    j->fn(j->ctx, j->t);
    return NULL;
}

int xmtc_run_threads(int n_threads, void (*fn)(void *ctx, int t), void *ctx) {
    if (n_threads <= 1) {
        fn(ctx, 0);
        return 0;
    }
    pthread_t *tid = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)n_threads);
    job_t *jobs = (job_t *)malloc(sizeof(job_t) * (size_t)n_threads);
    int *started = (int *)calloc((size_t)n_threads, sizeof(int));
    if (!tid || !jobs || !started) {
        free(tid);
        free(jobs);
        free(started);
        return -1;
    }
    for (int t = 1; t < n_threads; t++) {
        jobs[t].fn = fn;
        jobs[t].ctx = ctx;
        jobs[t].t = t;
        started[t] = pthread_create(&tid[t], NULL, thread_main, &jobs[t]) == 0;
    }
    fn(ctx, 0);
    for (int t = 1; t < n_threads; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else fn(ctx, t); /* could not start it: do its share here */
    }
    free(tid);
    free(jobs);
    free(started);
    return 0;
}
