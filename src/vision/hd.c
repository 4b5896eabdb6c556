/* hd.c — dynamic HD preprocessing of one image; see hd.h for the pipeline.
 *
 * Exactness notes (each mirrors the official Python/PyTorch arithmetic):
 *  - grid choice: aspect ratios and differences in double; candidates visited by increasing
 *    i*j (the official list is sorted by product); a tie keeps the later candidate when
 *    W*H > 0.5*crop*crop*i*j. Inside one product the official order is a Python set's; it never
 *    matters: between any two grids of the same product lies a grid of another product (checked
 *    exhaustively for budgets up to 100), which is strictly closer to any aspect ratio equidistant
 *    from both. tests/e2e/image_diff.sh compares the whole choice with the official formula.
 *  - resized size: int(H * (crop*w / W)) etc. in double, truncated.
 *  - normalisation: (u / 255.f - 0.5f) / 0.5f in float32 (ToTensor then Normalize).
 *  - bicubic: ATen's upsample_bicubic2d CPU kernel (torch 1.13, generic N-d kernel): float
 *    scale = in/out, source index scale*(o+0.5)-0.5, taps floor(src)-1 .. floor(src)+2 clamped
 *    to the border, cubic weights with A = -0.75 in float, output = sum_y w_y * sum_x w_x * v.
 *    PyTorch runs the AVX2 build of that kernel on x86-64, compiled by GCC with fused
 *    multiply-adds in places; the fixtures (and Debian's torch 1.13) are reproduced bit for bit
 *    only with the same roundings, measured by impulse responses and random inputs against torch
 *    (tests/e2e/image_diff.sh) and written out with fmaf():
 *      floor  i0 = floor(fma(scale, o + 0.5, -0.5))
 *      frac   t  = fma(scale, o + 0.5, -0.5 - i0)    (one rounding of the exact fraction)
 *      near   fma(A+2, x, -(A+3)) * x * x + 1         weights 1, 2 (x = t, 1 - t)
 *      far    fma(fma(A, x, -5A), x, 8A) * x - 4A     weights 0, 3 (x = t + 1, 2 - t)
 *      sums   s = fma(v0, w0, v1 * w1); s = fma(v2, w2, s); s = fma(v3, w3, s)  (x, then y)
 *    fmaf is exact in software too, so this does not depend on our own compiler flags. */
#include "hd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vision/resize.h"

#define HD_PATCH 14

int pm_hd_plan_compute(int width, int height, int dynamic_hd, int crop, pm_hd_plan *p, pm_err *e) {
    memset(p, 0, sizeof *p);
    if (width < 1 || height < 1) return pm_errf(e, PM_EINVAL, "bad image size %dx%d", width, height);
    if (crop < HD_PATCH || crop % HD_PATCH || dynamic_hd < 1 || dynamic_hd > 4096) /* 4096: the divisor scan's bound */
        return pm_errf(e, PM_EINVAL, "bad dynamic HD settings (crop %d, max crops %d)", crop, dynamic_hd);
    int64_t wc = ((int64_t)width + crop - 1) / crop, hc = ((int64_t)height + crop - 1) / crop;
    int gw, gh;
    if (wc * hc > dynamic_hd) {
        double aspect = (double)width / (double)height;
        double area = (double)((int64_t)width * height);
        double best_diff = INFINITY;
        gw = gh = 1;
        /* candidates (i, j = n / i) for n = 1.. and i ascending over the divisors of n, in the
         * official order; the divisors come from a sqrt(n) scan (O(D^1.5), not O(D^2), for a
         * config with thousands of crops) */
        for (int n = 1; n <= dynamic_hd; n++) {
            int div[2 * 64 + 2], nd = 0, nl = 0, large[64 + 1];
            for (int d = 1; (int64_t)d * d <= n; d++)
                if (n % d == 0) {
                    div[nd++] = d;
                    if (d != n / d) large[nl++] = n / d;
                }
            while (nl > 0) div[nd++] = large[--nl];
            for (int k = 0; k < nd; k++) {
                int i = div[k], j = n / i;
                double diff = fabs(aspect - (double)i / (double)j);
                if (diff < best_diff) {
                    best_diff = diff;
                    gw = i;
                    gh = j;
                } else if (diff == best_diff && area > 0.5 * crop * crop * i * j) {
                    gw = i;
                    gh = j;
                }
            }
        }
    } else {
        gw = (int)wc;
        gh = (int)hc;
    }
    int tw = crop * gw, th = crop * gh;
    double rw = (double)tw / (double)width, rh = (double)th / (double)height;
    if (rw < rh) {
        p->new_w = tw;
        p->new_h = (int)((double)height * rw);
        p->pad_h = th - p->new_h;
    } else {
        p->new_w = (int)((double)width * rh);
        p->new_h = th;
        p->pad_w = tw - p->new_w;
    }
    p->w_crops = gw;
    p->h_crops = gh;
    p->canvas_w = tw;
    p->canvas_h = th;
    /* patch mask: m x m per crop; padding of >= 14 px masks floor(pad/14) trailing columns/rows */
    int m = crop / HD_PATCH, mw = m * gw, mh = m * gh;
    int zc = p->pad_w >= HD_PATCH ? p->pad_w / HD_PATCH : 0, zr = p->pad_h >= HD_PATCH ? p->pad_h / HD_PATCH : 0;
    if (zc >= mw || zr >= mh)
        return pm_errf(e, PM_EINVAL, "a %dx%d image has too extreme an aspect ratio (nothing left after padding)",
                       width, height);
    if (p->new_w < 10 || p->new_h < 10)
        return pm_errf(e, PM_EINVAL, "a %dx%d image has too extreme an aspect ratio (it would be resized to %dx%d, "
                       "under 10 px)", width, height, p->new_w, p->new_h);
    /* tokens: the mask subsampled at even offsets inside each crop, s x s per crop */
    int s = m / 2 + m % 2;
    int64_t sum = 0, rows = 0;
    for (int ci = 0; ci < gh; ci++)
        for (int r = 0; r < m; r += 2) {
            int y = ci * m + r;
            if (y >= mh - zr) continue; /* masked row */
            rows++;                     /* column 0 is never masked */
            for (int cj = 0; cj < gw; cj++)
                for (int q = 0; q < m; q += 2)
                    if (cj * m + q < mw - zc) sum++;
        }
    p->num_tokens = (int)(s * s + 1 + sum + rows + s);
    return PM_OK;
}

int pm_hd_num_tokens(int width, int height, int dynamic_hd, int crop) {
    pm_hd_plan p;
    int rc = pm_hd_plan_compute(width, height, dynamic_hd, crop, &p, NULL);
    return rc ? rc : p.num_tokens;
}

/* ---------------------------------------------------------------------- bicubic (ATen) */

static inline float cubic_near(float x, float a) { return fmaf(a + 2, x, -(a + 3)) * x * x + 1; }
static inline float cubic_far(float x, float a) { return fmaf(fmaf(a, x, -5 * a), x, 8 * a) * x - 4 * a; }

typedef struct cubic_taps {
    int idx[4];
    float w[4];
} cubic_taps;

static void cubic_taps_make(int in_size, int out_size, cubic_taps *t) {
    const float a = -0.75f;
    float scale = (float)in_size / (float)out_size;
    for (int o = 0; o < out_size; o++) {
        float d = (float)o + 0.5f;
        int64_t i0 = (int64_t)floorf(fmaf(scale, d, -0.5f));
        float f = fmaf(scale, d, -0.5f - (float)i0);
        float g = 1.0f - f;
        t[o].w[0] = cubic_far(f + 1.0f, a);
        t[o].w[1] = cubic_near(f, a);
        t[o].w[2] = cubic_near(g, a);
        t[o].w[3] = cubic_far(g + 1.0f, a);
        for (int j = 0; j < 4; j++) {
            int64_t k = i0 + j - 1;
            if (k > in_size - 1) k = in_size - 1;
            if (k < 0) k = 0;
            t[o].idx[j] = (int)k;
        }
    }
}

int pm_hd_bicubic_f32(const float *src, int channels, int sh, int sw, float *dst, int dh, int dw, pm_err *e) {
    if (!src || !dst || channels < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1)
        return pm_errf(e, PM_EINVAL, "bicubic: bad sizes %dx%d -> %dx%d", sw, sh, dw, dh);
    cubic_taps *ty = pm_malloc(sizeof *ty * (size_t)dh, e), *tx = pm_malloc(sizeof *tx * (size_t)dw, e);
    if (!ty || !tx) {
        free(ty);
        free(tx);
        return PM_ENOMEM;
    }
    cubic_taps_make(sh, dh, ty);
    cubic_taps_make(sw, dw, tx);
    for (int c = 0; c < channels; c++) {
        const float *plane = src + (size_t)c * sh * sw;
        float *out = dst + (size_t)c * dh * dw;
        for (int oy = 0; oy < dh; oy++) {
            const cubic_taps *y = &ty[oy];
            for (int ox = 0; ox < dw; ox++) {
                const cubic_taps *x = &tx[ox];
                float row[4];
                for (int j = 0; j < 4; j++) {
                    const float *r = plane + (size_t)y->idx[j] * sw;
                    float t = fmaf(r[x->idx[0]], x->w[0], r[x->idx[1]] * x->w[1]);
                    t = fmaf(r[x->idx[2]], x->w[2], t);
                    row[j] = fmaf(r[x->idx[3]], x->w[3], t);
                }
                float acc = fmaf(row[0], y->w[0], row[1] * y->w[1]);
                acc = fmaf(row[2], y->w[2], acc);
                acc = fmaf(row[3], y->w[3], acc);
                out[(size_t)oy * dw + ox] = acc;
            }
        }
    }
    free(ty);
    free(tx);
    return PM_OK;
}

/* ------------------------------------------------------------------------- preprocess */

void pm_hd_free(pm_hd_image *h) {
    if (!h) return;
    free(h->pixels);
    free(h->crop_mask);
    free(h->canvas_u8);
    free(h->canvas_mask);
    memset(h, 0, sizeof *h);
}

int pm_hd_preprocess(const pm_image *im, int dynamic_hd, int crop, pm_hd_image *out, pm_err *e) {
    memset(out, 0, sizeof *out);
    if (!im || !im->rgb) return pm_errf(e, PM_EINVAL, "no image pixels given");
    pm_hd_plan p;
    int rc = pm_hd_plan_compute(im->width, im->height, dynamic_hd, crop, &p, e);
    if (rc) return rc;
    const int cw = p.canvas_w, ch = p.canvas_h, m = crop / HD_PATCH, mw = cw / HD_PATCH, mh = ch / HD_PATCH;
    const size_t cpix = (size_t)cw * ch, crop2 = (size_t)crop * crop;
    out->n_crops = 1 + p.w_crops * p.h_crops;
    out->canvas_w = cw;
    out->canvas_h = ch;
    out->w_crops = p.w_crops;
    out->h_crops = p.h_crops;
    out->num_tokens = p.num_tokens;
    out->canvas_u8 = pm_malloc(cpix * 3, e);
    out->canvas_mask = pm_malloc(sizeof(float) * (size_t)mw * mh, e);
    out->pixels = pm_malloc(sizeof(float) * (size_t)out->n_crops * 3 * crop2, e);
    out->crop_mask = pm_malloc(sizeof(float) * (size_t)out->n_crops * m * m, e);
    uint8_t *resized = pm_malloc((size_t)p.new_w * p.new_h * 3, e);
    float *norm = pm_malloc(sizeof(float) * 3 * cpix, e);
    if (!out->canvas_u8 || !out->canvas_mask || !out->pixels || !out->crop_mask || !resized || !norm) {
        rc = PM_ENOMEM;
        goto fail;
    }

    /* resized image top-left on a white canvas */
    rc = pm_resize_bilinear_u8(im->rgb, im->width, im->height, resized, p.new_w, p.new_h, e);
    if (rc) goto fail;
    memset(out->canvas_u8, 255, cpix * 3);
    for (int y = 0; y < p.new_h; y++)
        memcpy(out->canvas_u8 + (size_t)y * cw * 3, resized + (size_t)y * p.new_w * 3, (size_t)p.new_w * 3);

    /* patch mask of the canvas */
    int zc = p.pad_w >= HD_PATCH ? p.pad_w / HD_PATCH : 0, zr = p.pad_h >= HD_PATCH ? p.pad_h / HD_PATCH : 0;
    for (int y = 0; y < mh; y++)
        for (int x = 0; x < mw; x++) out->canvas_mask[(size_t)y * mw + x] = (y < mh - zr && x < mw - zc) ? 1.0f : 0.0f;

    /* normalised planar canvas [3, ch, cw] */
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - 0.5f) / 0.5f;
    for (size_t i = 0; i < cpix; i++)
        for (int c = 0; c < 3; c++) norm[(size_t)c * cpix + i] = lut[out->canvas_u8[3 * i + c]];

    /* crop 0: global view; crops 1..: the grid row-major */
    rc = pm_hd_bicubic_f32(norm, 3, ch, cw, out->pixels, crop, crop, e);
    if (rc) goto fail;
    for (size_t i = 0; i < (size_t)m * m; i++) out->crop_mask[i] = 1.0f;
    for (int gy = 0; gy < p.h_crops; gy++)
        for (int gx = 0; gx < p.w_crops; gx++) {
            size_t k = 1 + (size_t)gy * p.w_crops + gx;
            float *dstp = out->pixels + k * 3 * crop2;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < crop; y++)
                    memcpy(dstp + (size_t)c * crop2 + (size_t)y * crop,
                           norm + (size_t)c * cpix + (size_t)(gy * crop + y) * cw + (size_t)gx * crop, sizeof(float) * crop);
            float *mk = out->crop_mask + k * m * m;
            for (int y = 0; y < m; y++)
                memcpy(mk + (size_t)y * m, out->canvas_mask + (size_t)(gy * m + y) * mw + (size_t)gx * m, sizeof(float) * m);
        }
    free(resized);
    free(norm);
    return PM_OK;
fail:
    free(resized);
    free(norm);
    pm_hd_free(out);
    return rc;
}
