/* resample.c — scipy.signal.resample_poly in C, float64 throughout.
 *
 * Steps, as scipy 1.10 performs them:
 *   1. reduce up/down by their gcd; 1/1 returns a copy;
 *   2. design h = firwin(2*half_len + 1, 1/max_rate, kaiser beta 5), half_len = 10*max_rate, times `up`;
 *   3. prepend n_pre_pad = down - half_len % down zeros (puts the output samples on the filter centre),
 *      append n_post_pad zeros until the filtered signal is long enough;
 *   4. upfirdn with zero extension, keeping outputs [n_pre_remove, n_pre_remove + n_out).
 * Step 4 computes only the kept outputs, but each one as upfirdn's polyphase loop does: output y uses
 * input index x_idx = floor(y*down/up) and phase t = (y*down) mod up, and sums x[c] * h_phase[...] for
 * c ascending from max(0, x_idx - taps_per_phase + 1) to x_idx, starting from 0.0; inputs past the end
 * contribute nothing. Same products, same order, so the same doubles as scipy. For pure decimation
 * (up = 1) interior outputs are computed 8 at a time with one accumulator each, which only changes
 * the interleaving across outputs, not any output's own summation order.
 * The products and sums must not be contracted into FMAs (the default x86-64 target has none). */
#include "audio/resample.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* cephes i0 Chebyshev coefficients, |x| <= 8 (argument x/2 - 2) and x > 8 (argument 32/x - 2). */
static const double I0_A[30] = {
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16, 1.71539128555513303061E-15,
    -1.16853328779934516808E-14, 7.67618549860493561688E-14, -4.85644678311192946090E-13, 2.95505266312963983461E-12,
    -1.72682629144155570723E-11, 9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8,  6.04699502254191894932E-8,  -2.67079385394061173391E-7, 1.11738753912010371815E-6,
    -4.41673835845875056359E-6,  1.64484480707288970893E-5,  -5.75419501008210370398E-5, 1.88502885095841655729E-4,
    -5.76375574538582365885E-4,  1.63947561694133579842E-3,  -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2,  4.93052842396707084878E-2,  -9.49010970480476444210E-2, 1.71620901522208775349E-1,
    -3.04682672343198398683E-1,  6.76795274409476084995E-1};
static const double I0_B[25] = {
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,  3.46122286769746109310E-17,
    -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15,  3.81168066935262242075E-15,
    -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
    7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
    1.18891471078464383424E-11,  4.94060238822496958910E-10,  3.39623202570838634515E-9,   2.26666899049817806459E-8,
    2.04891858946906374183E-7,   2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
    8.04490411014108831608E-1};

/* Clenshaw recurrence for a Chebyshev series (cephes chbevl): the half-sum convention of its tables. */
static double chebyshev(double x, const double *c, int n) {
    double b0 = c[0], b1 = 0.0, b2 = 0.0;
    for (int i = 1; i < n; i++) {
        b2 = b1;
        b1 = b0;
        b0 = x * b1 - b2 + c[i];
    }
    return 0.5 * (b0 - b2);
}

double pm_bessel_i0(double x) {
    if (x < 0) x = -x;
    if (x <= 8.0) return exp(x) * chebyshev(x / 2.0 - 2.0, I0_A, 30);
    return exp(x) * chebyshev(32.0 / x - 2.0, I0_B, 25) / sqrt(x);
}

void pm_kaiser(double *w, int m, double beta) {
    if (m <= 0) return;
    if (m == 1) {
        w[0] = 1.0;
        return;
    }
    double alpha = (m - 1) / 2.0, denom = pm_bessel_i0(beta);
    for (int i = 0; i < m; i++) {
        double r = ((double)i - alpha) / alpha;
        w[i] = pm_bessel_i0(beta * sqrt(1 - r * r)) / denom;
    }
}

/* numpy's pairwise_sum for one block of at most 8192 elements. */
static double pairwise_block(const double *a, size_t n) {
    if (n < 8) {
        double r = 0.0;
        for (size_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        size_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_block(a, n2) + pairwise_block(a + n2, n - n2);
}

double pm_numpy_sum(const double *a, size_t n) {
    double r = 0.0;
    for (size_t i = 0; i < n; i += 8192) r += pairwise_block(a + i, n - i < 8192 ? n - i : 8192);
    return r;
}

/* numpy.sinc: sin(pi x) / (pi x), with x = 0 replaced by 1e-20. */
static double np_sinc(double x) {
    double y = M_PI * (x == 0 ? 1.0e-20 : x);
    return sin(y) / y;
}

void pm_resample_design(double *h, int max_rate) {
    int half_len = 10 * max_rate, numtaps = 2 * half_len + 1;
    double cutoff = 1. / max_rate; /* relative to Nyquist (fs = 2) */
    double alpha = 0.5 * (numtaps - 1);
    /* the Kaiser window (beta 5, symmetric) evaluated tap by tap, exactly as pm_kaiser does */
    double walpha = (numtaps - 1) / 2.0, wdenom = pm_bessel_i0(5.0);
    for (int i = 0; i < numtaps; i++) {
        double m = (double)i - alpha;
        double r = ((double)i - walpha) / walpha;
        double win = pm_bessel_i0(5.0 * sqrt(1 - r * r)) / wdenom;
        h[i] = cutoff * np_sinc(cutoff * m); /* the band starts at 0: its lower-edge term is exactly 0 */
        h[i] *= win;
    }
    /* Unit gain at DC: divide by the sum of the taps (times cos(0) = 1). */
    double s = pm_numpy_sum(h, (size_t)numtaps);
    for (int i = 0; i < numtaps; i++) h[i] /= s;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* upfirdn's output length for a filter of len_h taps: ceil(((n - 1) * up + len_h) / down). */
static int64_t upfirdn_len(int64_t len_h, int64_t n, int64_t up, int64_t down) {
    return (((n - 1) * up + len_h) - 1) / down + 1;
}

int pm_resample_poly(const double *x, size_t n, int up_in, int down_in, double **y, size_t *ny, pm_err *e) {
    *y = NULL;
    *ny = 0;
    if (up_in < 1 || down_in < 1) return pm_errf(e, PM_EINVAL, "resample_poly: up and down must be >= 1 (got %d/%d)", up_in, down_in);
    int64_t g = gcd64(up_in, down_in), up = up_in / g, down = down_in / g;
    if (up == 1 && down == 1) {
        double *c = pm_malloc(sizeof(double) * (n ? n : 1), e);
        if (!c) return e->code;
        if (n) memcpy(c, x, sizeof(double) * n);
        *y = c;
        *ny = n;
        return PM_OK;
    }
    int64_t n_in = (int64_t)n;
    int64_t n_out = n_in * up;
    n_out = n_out / down + (n_out % down != 0);

    int64_t max_rate = up > down ? up : down;
    if (max_rate > 100000) return pm_errf(e, PM_EINVAL, "resample_poly: factor %lld is too large", (long long)max_rate);
    int64_t half_len = 10 * max_rate, ntaps = 2 * half_len + 1;
    int64_t n_pre_pad = down - half_len % down, n_post_pad = 0;
    int64_t n_pre_remove = (half_len + n_pre_pad) / down;
    while (upfirdn_len(ntaps + n_pre_pad + n_post_pad, n_in, up, down) < n_out + n_pre_remove) n_post_pad++;
    int64_t len_h = ntaps + n_pre_pad + n_post_pad;

    /* Padded filter, gain `up` applied before padding, then split into phases: phase p holds
     * hp[(k)*up + p] for k = 0.., reversed, zero-filled to taps_per_phase. */
    int64_t padded = len_h + ((up - len_h % up) % up), tpp = padded / up;
    double *hp = pm_calloc((size_t)padded, sizeof(double), e);
    double *flip = pm_calloc((size_t)padded, sizeof(double), e);
    double *out = pm_malloc(sizeof(double) * (size_t)(n_out ? n_out : 1), e);
    if (!hp || !flip || !out) {
        free(hp);
        free(flip);
        free(out);
        return e->code;
    }
    pm_resample_design(hp + n_pre_pad, (int)max_rate);
    for (int64_t i = 0; i < ntaps; i++) hp[n_pre_pad + i] *= (double)up;
    for (int64_t p = 0; p < up; p++)
        for (int64_t k = 0; k < tpp; k++) flip[p * tpp + k] = hp[(tpp - 1 - k) * up + p];
    free(hp);

    int64_t padded_len = n_in + tpp - 1, total = upfirdn_len(len_h, n_in, up, down);
    for (int64_t j = 0; j < n_out;) {
        int64_t yi = n_pre_remove + j;
        /* Fast path (up == 1, the decimations of the audio policy): 8 outputs whose taps all fall inside
         * the signal, one independent accumulator each, every accumulator summing in the same order. */
        if (up == 1 && j + 8 <= n_out && yi + 7 < total) {
            int64_t first = yi * down - tpp + 1, last = (yi + 7) * down;
            if (first >= 0 && last <= n_in - 1) {
                double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                const double *xb = x + first;
                for (int64_t t = 0; t < tpp; t++) {
                    double hv = flip[t];
                    for (int k = 0; k < 8; k++) acc[k] = acc[k] + xb[k * down + t] * hv;
                }
                for (int k = 0; k < 8; k++) out[j + k] = acc[k];
                j += 8;
                continue;
            }
        }
        double acc = 0.0;
        if (yi < total) {
            int64_t prod = yi * down, x_idx = prod / up, t = prod % up;
            if (x_idx < padded_len) {
                int64_t first = x_idx - tpp + 1; /* tap index 0 pairs with x[first] */
                const double *hph = flip + t * tpp;
                int64_t c0 = first < 0 ? 0 : first, c1 = x_idx < n_in - 1 ? x_idx : n_in - 1;
                for (int64_t c = c0; c <= c1; c++) acc = acc + x[c] * hph[c - first];
            }
        }
        out[j] = acc;
        j++;
    }
    free(flip);
    *y = out;
    *ny = (size_t)n_out;
    return PM_OK;
}
