/* resample.h — a port of scipy.signal.resample_poly (scipy 1.10 semantics, default window
 * ('kaiser', 5.0), padtype 'constant') in float64, plus the numerical helpers it needs.
 *
 * The filter is designed the way scipy's firwin designs it (windowed sinc, Kaiser window from the
 * cephes Bessel I0, normalised by numpy's pairwise sum) and applied with upfirdn's polyphase loop and
 * accumulation order, so results agree with scipy to the last bits (checked by tests/e2e/audio_diff.sh). */
#ifndef PM_AUDIO_RESAMPLE_H
#define PM_AUDIO_RESAMPLE_H

#include <stddef.h>
#include "util/err.h"

/* Resamples x[n] by up/down like scipy.signal.resample_poly(x, up, down): *ny = ceil(n*up/down) samples
 * in a malloc'd *y (a plain copy when up/down reduces to 1/1). up, down >= 1. PM_EINVAL on bad
 * factors, PM_ENOMEM. n may be 0 (then *y is a valid empty allocation and *ny = 0). */
int pm_resample_poly(const double *x, size_t n, int up, int down, double **y, size_t *ny, pm_err *e);

/* The low-pass FIR resample_poly designs for max(up, down) = max_rate, before its gain `up` and padding:
 * firwin(2*10*max_rate + 1, 1/max_rate, window=('kaiser', 5.0)). h has 20*max_rate + 1 taps. */
void pm_resample_design(double *h, int max_rate);

/* scipy.signal.windows.kaiser(m, beta, sym=True). */
void pm_kaiser(double *w, int m, double beta);

/* Modified Bessel function of the first kind, order 0 (cephes' Chebyshev expansion, as scipy.special.i0). */
double pm_bessel_i0(double x);

/* numpy's float64 np.sum of a contiguous array (8-way unrolled pairwise summation in blocks of 8192). */
double pm_numpy_sum(const double *a, size_t n);

#endif
