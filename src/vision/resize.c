/* resize.c — a port of Pillow 9.x's 8-bit bilinear resampling (libImaging/Resample.c).
 *
 * Design. PIL resizes in two separable passes, horizontal first, each a convolution with a
 * triangle filter whose support grows with the downscale factor (antialiasing):
 *   scale   = in / out,  fscale = max(scale, 1),  support = 1 * fscale
 *   output i is centred at (i + 0.5) * scale; taps j in [round(c - support), round(c + support))
 *   clamped to the image, weight tri((j - c + 0.5) / fscale), normalised to sum 1 (in double).
 * Each weight is then turned into a 22-bit fixed-point integer (round half away from zero), and
 * every pass accumulates uint8 * weight in an int starting at 1 << 21, shifts right by 22 and
 * clips to 0..255 — so the intermediate image between the passes is uint8, as in PIL.
 * A pass is skipped when its dimension does not change; when both are unchanged the image is
 * copied. The horizontal pass only produces the rows the vertical pass will read. */
#include "resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RS_BITS 22 /* 32 bits - 8 for the result - 2 for overflow of negative/over-unity lobes */

/* Per-output-sample taps: first source index, tap count and fixed-point weights (ksize each). */
typedef struct rs_coeffs {
    int ksize;
    int *first, *count;
    int32_t *w;
} rs_coeffs;

static void rs_coeffs_free(rs_coeffs *c) {
    free(c->first);
    free(c->count);
    free(c->w);
    memset(c, 0, sizeof *c);
}

static double rs_triangle(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Coefficients for resampling a line of in_size samples to out_size samples over the whole
 * line (PIL's box (0, in_size)). Arithmetic order follows Pillow's precompute_coeffs. */
static int rs_coeffs_make(int in_size, int out_size, rs_coeffs *c, pm_err *e) {
    memset(c, 0, sizeof *c);
    double scale = (double)(float)in_size / out_size; /* box edges are floats in PIL */
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * fscale;
    int ksize = (int)ceil(support) * 2 + 1;
    c->ksize = ksize;
    c->first = pm_malloc(sizeof(int) * (size_t)out_size, e);
    c->count = pm_malloc(sizeof(int) * (size_t)out_size, e);
    c->w = pm_calloc(pm_mul_size((size_t)out_size, (size_t)ksize), sizeof(int32_t), e);
    double *tmp = pm_malloc(sizeof(double) * (size_t)ksize, e);
    if (!c->first || !c->count || !c->w || !tmp) {
        free(tmp);
        rs_coeffs_free(c);
        return PM_ENOMEM;
    }
    double ss = 1.0 / fscale;
    for (int o = 0; o < out_size; o++) {
        double center = 0.0 + (o + 0.5) * scale;
        int lo = (int)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int hi = (int)(center + support + 0.5);
        if (hi > in_size) hi = in_size;
        int n = hi - lo;
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            double wt = rs_triangle((j + lo - center + 0.5) * ss);
            tmp[j] = wt;
            sum += wt;
        }
        int32_t *k = c->w + (size_t)o * ksize;
        for (int j = 0; j < n; j++) {
            double wt = sum != 0.0 ? tmp[j] / sum : tmp[j];
            k[j] = wt < 0 ? (int32_t)(-0.5 + wt * (1 << RS_BITS)) : (int32_t)(0.5 + wt * (1 << RS_BITS));
        }
        c->first[o] = lo;
        c->count[o] = n;
    }
    free(tmp);
    return PM_OK;
}

static inline uint8_t rs_clip8(int32_t acc) {
    if (acc < 0) return 0;
    int32_t v = acc >> RS_BITS;
    return v > 255 ? 255 : (uint8_t)v;
}

/* Horizontal pass: rows [y0, y0 + rows) of src [*, sw, 3] -> dst [rows, dw, 3]. */
static void rs_horizontal(const uint8_t *src, int sw, int y0, int rows, uint8_t *dst, int dw, const rs_coeffs *c) {
    for (int y = 0; y < rows; y++) {
        const uint8_t *in = src + (size_t)(y + y0) * sw * 3;
        uint8_t *out = dst + (size_t)y * dw * 3;
        for (int o = 0; o < dw; o++) {
            const int32_t *k = c->w + (size_t)o * c->ksize;
            const uint8_t *p = in + (size_t)c->first[o] * 3;
            int32_t a0 = 1 << (RS_BITS - 1), a1 = a0, a2 = a0;
            for (int j = 0; j < c->count[o]; j++) {
                a0 += p[3 * j + 0] * k[j];
                a1 += p[3 * j + 1] * k[j];
                a2 += p[3 * j + 2] * k[j];
            }
            out[3 * o + 0] = rs_clip8(a0);
            out[3 * o + 1] = rs_clip8(a1);
            out[3 * o + 2] = rs_clip8(a2);
        }
    }
}

/* Vertical pass: src [*, w, 3] (row 0 = source row `shift`) -> dst [dh, w, 3]. */
static void rs_vertical(const uint8_t *src, int w, int shift, uint8_t *dst, int dh, const rs_coeffs *c) {
    size_t stride = (size_t)w * 3;
    for (int o = 0; o < dh; o++) {
        const int32_t *k = c->w + (size_t)o * c->ksize;
        const uint8_t *base = src + (size_t)(c->first[o] - shift) * stride;
        uint8_t *out = dst + (size_t)o * stride;
        for (size_t x = 0; x < stride; x++) {
            int32_t a = 1 << (RS_BITS - 1);
            for (int j = 0; j < c->count[o]; j++) a += base[(size_t)j * stride + x] * k[j];
            out[x] = rs_clip8(a);
        }
    }
}

int pm_resize_bilinear_u8(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh, pm_err *e) {
    if (!src || !dst || sw < 1 || sh < 1 || dw < 1 || dh < 1)
        return pm_errf(e, PM_EINVAL, "resize: bad sizes %dx%d -> %dx%d", sw, sh, dw, dh);
    int need_h = dw != sw, need_v = dh != sh;
    if (!need_h && !need_v) {
        memcpy(dst, src, (size_t)sw * sh * 3);
        return PM_OK;
    }
    rs_coeffs cv, ch;
    int rc = rs_coeffs_make(sh, dh, &cv, e);
    if (rc) return rc;
    if (!need_h) { /* vertical only, straight from the source */
        rs_vertical(src, sw, 0, dst, dh, &cv);
        rs_coeffs_free(&cv);
        return PM_OK;
    }
    rc = rs_coeffs_make(sw, dw, &ch, e);
    if (rc) {
        rs_coeffs_free(&cv);
        return rc;
    }
    if (!need_v) {
        rs_horizontal(src, sw, 0, sh, dst, dw, &ch);
    } else {
        /* only the source rows the vertical pass reads */
        int y_first = cv.first[0], y_last = cv.first[dh - 1] + cv.count[dh - 1];
        uint8_t *tmp = pm_malloc(pm_mul_size((size_t)dw * 3, (size_t)(y_last - y_first)), e);
        if (!tmp) {
            rs_coeffs_free(&cv);
            rs_coeffs_free(&ch);
            return PM_ENOMEM;
        }
        rs_horizontal(src, sw, y_first, y_last - y_first, tmp, dw, &ch);
        rs_vertical(tmp, dw, y_first, dst, dh, &cv);
        free(tmp);
    }
    rs_coeffs_free(&cv);
    rs_coeffs_free(&ch);
    return PM_OK;
}
