/* fft.h — a small double-precision real FFT for power-of-two sizes (the STFT of the audio
 * front-end uses 512 and 256). numpy's rfft (pocketfft) computes in float64; so does this, which keeps
 * the complex64-rounded spectrum equal to numpy's except for rare last-bit ties. */
#ifndef PM_AUDIO_FFT_H
#define PM_AUDIO_FFT_H

#include "util/err.h"

typedef struct pm_rfft {
    int n;          /* transform size, a power of two >= 4 */
    double *tw;     /* n/2 twiddles exp(-2 pi i k / n), k < n/2, interleaved re/im */
    int *rev;       /* bit reversal of the n/2-point complex transform */
    double *work;   /* n doubles of scratch: the packed half-size complex signal */
} pm_rfft;

/* Prepares a transform of size n (power of two, 4 <= n <= 2^24). PM_EINVAL otherwise; PM_ENOMEM. */
int pm_rfft_init(pm_rfft *p, int n, pm_err *e);
void pm_rfft_free(pm_rfft *p);

/* out[2k], out[2k+1] = Re, Im of sum_j x[j] exp(-2 pi i j k / n) for k = 0..n/2 (n/2 + 1 bins, like
 * numpy.fft.rfft). x has n real samples. Uses the plan's scratch: one plan per thread. */
void pm_rfft_forward(pm_rfft *p, const double *x, double *out);

#endif
