/* fft.c — real FFT of size n through an n/2-point complex radix-2 FFT (double precision).
 *
 * The even/odd samples are packed as z[j] = x[2j] + i x[2j+1]; Z = FFT_{n/2}(z) (iterative
 * decimation in time after a bit-reversal permutation); then the two interleaved spectra are
 * separated: X[k] = E[k] + W^k O[k] with E = (Z[k] + conj Z[n/2-k]) / 2, O = (Z[k] - conj Z[n/2-k]) / 2i,
 * W = exp(-2 pi i / n). Twiddles are computed directly with cos/sin (no recurrences), so every
 * twiddle is within an ulp or so of exact. */
#include "audio/fft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int pm_rfft_init(pm_rfft *p, int n, pm_err *e) {
    memset(p, 0, sizeof *p);
    if (n < 4 || n > (1 << 24) || (n & (n - 1)) != 0) return pm_errf(e, PM_EINVAL, "rfft: size %d is not a power of two in [4, 2^24]", n);
    int m = n / 2;
    p->n = n;
    p->tw = pm_malloc(sizeof(double) * (size_t)n, e);
    p->rev = pm_malloc(sizeof(int) * (size_t)m, e);
    p->work = pm_malloc(sizeof(double) * (size_t)n, e);
    if (!p->tw || !p->rev || !p->work) {
        pm_rfft_free(p);
        return e->code;
    }
    for (int k = 0; k < m; k++) {
        double a = -2.0 * M_PI * (double)k / (double)n;
        p->tw[2 * k] = cos(a);
        p->tw[2 * k + 1] = sin(a);
    }
    int bits = 0;
    while ((1 << bits) < m) bits++;
    for (int i = 0; i < m; i++) {
        int r = 0;
        for (int b = 0; b < bits; b++)
            if (i & (1 << b)) r |= 1 << (bits - 1 - b);
        p->rev[i] = r;
    }
    return PM_OK;
}

void pm_rfft_free(pm_rfft *p) {
    if (!p) return;
    free(p->tw);
    free(p->rev);
    free(p->work);
    memset(p, 0, sizeof *p);
}

void pm_rfft_forward(pm_rfft *p, const double *x, double *out) {
    int n = p->n, m = n / 2;
    double *z = p->work;
    const double *tw = p->tw;
    for (int j = 0; j < m; j++) {
        int r = p->rev[j];
        z[2 * r] = x[2 * j];
        z[2 * r + 1] = x[2 * j + 1];
    }
    for (int size = 2; size <= m; size *= 2) {
        int half = size / 2, stride = n / size;
        for (int start = 0; start < m; start += size) {
            for (int j = 0; j < half; j++) {
                double wr = tw[2 * j * stride], wi = tw[2 * j * stride + 1];
                double *a = z + 2 * (start + j), *b = z + 2 * (start + j + half);
                double tr = b[0] * wr - b[1] * wi, ti = b[0] * wi + b[1] * wr;
                b[0] = a[0] - tr;
                b[1] = a[1] - ti;
                a[0] += tr;
                a[1] += ti;
            }
        }
    }
    out[0] = z[0] + z[1];
    out[1] = 0.0;
    out[2 * m] = z[0] - z[1];
    out[2 * m + 1] = 0.0;
    for (int k = 1; k < m; k++) {
        double zr = z[2 * k], zi = z[2 * k + 1], cr = z[2 * (m - k)], ci = -z[2 * (m - k) + 1];
        double er = 0.5 * (zr + cr), ei = 0.5 * (zi + ci);
        /* O = (Z - conj Z') / 2i: (a + ib) / 2i = (b - ia) / 2 */
        double dr = zr - cr, di = zi - ci;
        double or_ = 0.5 * di, oi = -0.5 * dr;
        double wr = tw[2 * k], wi = tw[2 * k + 1];
        out[2 * k] = er + (or_ * wr - oi * wi);
        out[2 * k + 1] = ei + (or_ * wi + oi * wr);
    }
}
