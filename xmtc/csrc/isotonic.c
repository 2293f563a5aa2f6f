/* Weighted isotonic regression by pool-adjacent-violators: the least-squares non-decreasing fit of the
 * values y (weights w > 0) in their given order, as scipy.optimize.isotonic_regression computes it.
 * Here because importing scipy.optimize costs every `xmtc train` 0.3 s for one 40-line algorithm
 * (xmtc/models/calibration.py:isotonic_steps); tests/test_calibration.py holds the two to the same fit. */
#include "native.h"

/* On return y[i] is the fit at i.  Works in place: the stack of blocks overlays y (block means) and w (block
 * weights), which never outgrows the points read so far; first[b] is block b's first point. */
XMTC_API int64_t xmtc_pava(double *y, double *w, int64_t *first, int64_t n) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        double mean = y[i], weight = w[i];
        int64_t start = i;
        while (m > 0 && y[m - 1] > mean) { /* the block before is higher: pool the two */
            double total = w[m - 1] + weight;
            mean = (w[m - 1] * y[m - 1] + weight * mean) / total;
            weight = total;
            start = first[m - 1];
            m--;
        }
        y[m] = mean;
        w[m] = weight;
        first[m] = start;
        m++;
    }
    for (int64_t b = m - 1, end = n; b >= 0; end = first[b], b--) { /* last block first: y[b] is never yet overwritten */
        double mean = y[b];
        for (int64_t i = first[b]; i < end; i++) y[i] = mean;
    }
    return m;
}
