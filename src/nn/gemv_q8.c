/* gemv_q8.c — the decode matmul on int8 weights (quant.h): y[n, out] (=|+=) x[n, in] @ W^T for a
 * small n, W in PM_DT_Q8 (4-row records of one fp32 scale + 32 int8 per row and block).
 *
 * Threads take dynamic chunks of consecutive 4-row groups; a group's records are one sequential
 * stream. Per block and row the scale is broadcast once, then per 8 weights: one 8-byte load
 * sign-extended to 8 int32 (vpmovsxbd), converted to fp32, multiplied by the scale, and one FMA
 * per input row. Activations stay fp32.
 *
 * AVX-512: the same per 16 weights (vpmovsxbd of 16 bytes), tiles of 4 rows x up to 4 inputs; at
 * n = 1 four groups at once, each from its own run of consecutive groups (four long streams per
 * thread; four neighbouring groups, as before, were 0.85-0.95 x as fast in one process). For
 * n > 4 both widths walk a group in L1-sized k-blocks, converted once per block by the first pass
 * (group_kblocked256/512).
 *
 * Determinism (ops.h): output (i, j) is hsum(acc) of one L-lane FMA accumulator (L = 8 on AVX2, 16
 * on AVX-512; 16 lanes fold to 8 as (l, l + 8)) walked over the row in order, lane l taking element
 * c + l of each L-group, with w = (float)q * scale rounded before the FMA. Tile shape, n and thread
 * count do not change it; the portable twin performs the same operations for the lane count of
 * the level in use, and pm_tensor_read_f32 / pm_kern_dequant_q8_rows give the same w. */
#include "kernels.h"
#include "ops.h"
#include "quant.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "simd.h"

/* ---- portable twin ---- */

static float dot_row_q8_c(const pm_tensor *W, size_t j, const float *x, int in, int L) {
    size_t nb = (size_t)in / PM_Q8_BLOCK, g = j / PM_Q8_ROWS;
    int r = (int)(j % PM_Q8_ROWS);
    float acc[16] = {0};
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *rec = pm_q8_record(W, g, b, nb);
        const int8_t *q = pm_q8_quants(rec, r);
        float s = pm_q8_scale(rec, r);
        const float *xb = x + b * PM_Q8_BLOCK;
        for (int v = 0; v < PM_Q8_BLOCK; v += L)
            for (int l = 0; l < L; l++) {
                float w = (float)q[v + l] * s;
                acc[l] = fmaf(w, xb[v + l], acc[l]);
            }
    }
    if (L == 16)
        for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void pm_kern_gemv_q8_c(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
    int out = (int)W->shape[0], in = (int)W->shape[1], L = pm_kern_have_avx512() ? 16 : 8;
#pragma omp parallel for schedule(static)
    for (int j = 0; j < out; j++)
        for (int i = 0; i < n; i++) {
            float d = dot_row_q8_c(W, (size_t)j, x + (size_t)i * in, in, L);
            float *yy = &y[(size_t)i * out + j];
            *yy = accumulate ? *yy + scale * d : d;
        }
}

static void dequant_rows_c(float *out, const pm_tensor *W, size_t row0, size_t rows) {
    size_t in = (size_t)W->shape[1], nb = in / PM_Q8_BLOCK;
    for (size_t j = row0; j < row0 + rows; j++, out += in)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *rec = pm_q8_record(W, j / PM_Q8_ROWS, b, nb);
            int r = (int)(j % PM_Q8_ROWS);
            const int8_t *q = pm_q8_quants(rec, r);
            float s = pm_q8_scale(rec, r);
            for (int k = 0; k < PM_Q8_BLOCK; k++) out[b * PM_Q8_BLOCK + k] = (float)q[k] * s;
        }
}

/* ---- AVX2 ---- */

#ifndef Q8_NG
#define Q8_NG 4 /* groups (record streams) walked together at n = 1: 4 measured 6-15 % above 2 */
#endif
#ifndef GEMV_Q8_PF
#define GEMV_Q8_PF 32 /* records ahead (~4.6 KB) on the first pass over a group */
#endif

#ifdef PM_X86

AVX2_INLINE __m256 load_w(const uint8_t *rec, int r, int v, __m256 s) {
    __m256i qi = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(pm_q8_quants(rec, r) + v)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(qi), s);
}

/* The 4 rows of group g against inputs i0 .. i0 + NT (NT, HS compile-time constants). HS = 1 keeps
 * the 4 block scales in registers (NT = 1 leaves room), else they are re-broadcast from L1. The
 * first tile of a group (i0 = 0) streams it from memory, with software prefetches far ahead: the
 * hardware prefetcher alone held one core to about half its share of the bandwidth here; later
 * tiles of the same group hit L1/L2. */
AVX2_INLINE void tile(float *y, int out, int g, int i0, const pm_tensor *W, const float *x, int in, int NT, int HS, float scale,
                      int accumulate) {
    size_t nb = (size_t)in / PM_Q8_BLOCK;
    const uint8_t *rec = pm_q8_record(W, (size_t)g, 0, nb);
    __m256 acc[PM_Q8_ROWS][2];
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++)
#pragma GCC unroll 2
        for (int i = 0; i < NT; i++) acc[r][i] = _mm256_setzero_ps();
    const float *xi[2];
#pragma GCC unroll 2
    for (int i = 0; i < NT; i++) xi[i] = x + (size_t)(i0 + i) * in;
    for (size_t b = 0; b < nb; b++, rec += PM_Q8_RECORD) {
        if (i0 == 0) { /* first pass over the group: a record spans 2-3 cache lines, touch each ahead */
            const char *pf = (const char *)rec + GEMV_Q8_PF * PM_Q8_RECORD;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
        }
        __m256 sv[PM_Q8_ROWS];
        if (HS)
#pragma GCC unroll 4
            for (int r = 0; r < PM_Q8_ROWS; r++) sv[r] = _mm256_broadcast_ss((const float *)rec + r);
#pragma GCC unroll 4
        for (int v = 0; v < PM_Q8_BLOCK; v += 8) {
            __m256 xv[2];
#pragma GCC unroll 2
            for (int i = 0; i < NT; i++) xv[i] = _mm256_loadu_ps(xi[i] + b * PM_Q8_BLOCK + v);
#pragma GCC unroll 4
            for (int r = 0; r < PM_Q8_ROWS; r++) {
                __m256 w = load_w(rec, r, v, HS ? sv[r] : _mm256_broadcast_ss((const float *)rec + r));
#pragma GCC unroll 2
                for (int i = 0; i < NT; i++) acc[r][i] = _mm256_fmadd_ps(w, xv[i], acc[r][i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++) {
        int j = g * PM_Q8_ROWS + r;
        if (j >= out) break; /* padding rows of the last group */
#pragma GCC unroll 2
        for (int i = 0; i < NT; i++) {
            float s = hsum256(acc[r][i]);
            float *yy = &y[(size_t)(i0 + i) * out + j];
            *yy = accumulate ? *yy + scale * s : s;
        }
    }
}

AVX2 static void group_all(float *y, int out, int g, const pm_tensor *W, const float *x, int n, int in, float scale, int accumulate) {
    if (n == 1) {
        tile(y, out, g, 0, W, x, in, 1, 1, scale, accumulate);
        return;
    }
    int i = 0;
    for (; i + 2 <= n; i += 2) tile(y, out, g, i, W, x, in, 2, 0, scale, accumulate);
    if (i < n) tile(y, out, g, i, W, x, in, 1, 1, scale, accumulate);
}

/* n > 4 at 8 lanes, as group_kblocked512: per k-block, the first pass (2 inputs) streams and
 * converts the records into wb, passes of 3 inputs (12 accumulators: the 16 ymm registers hold no
 * more) run their FMAs from it. AVX2 converts at 3 µops per 8 weights against 2 FMAs of a 2-input
 * tile, so converting once matters more here than at 16 lanes: measured in one process at the
 * AVX2 level against those tiles, +14-16 % at n = 5-6, +47 % at 8, +25-32 % at 12-16. */
AVX2_INLINE void kgroup256(float *buf, float *wb, const uint8_t *rec, int kw, const float *x, int ldx, int i0, int c0, int NT, int CONV) {
    __m256 acc[PM_Q8_ROWS][3];
    const float *xi[3];
#pragma GCC unroll 3
    for (int i = 0; i < NT; i++) xi[i] = x + (size_t)(i0 + i) * ldx + c0;
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) acc[r][i] = c0 ? _mm256_load_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 8) : _mm256_setzero_ps();
    for (int v = 0; v < kw; v += 8) {
        const uint8_t *rc = rec + (size_t)(v / PM_Q8_BLOCK) * PM_Q8_RECORD;
        if (CONV && v % PM_Q8_BLOCK == 0) { /* the group's record stream, ahead */
            const char *pf = (const char *)rc + GEMV_Q8_PF * PM_Q8_RECORD;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
        }
        __m256 xv[3];
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) xv[i] = _mm256_loadu_ps(xi[i] + v);
#pragma GCC unroll 4
        for (int r = 0; r < PM_Q8_ROWS; r++) {
            __m256 w;
            if (CONV) {
                w = load_w(rc, r, v % PM_Q8_BLOCK, _mm256_broadcast_ss((const float *)rc + r));
                _mm256_store_ps(wb + (size_t)r * kw + v, w);
            } else
                w = _mm256_load_ps(wb + (size_t)r * kw + v);
#pragma GCC unroll 3
            for (int i = 0; i < NT; i++) acc[r][i] = _mm256_fmadd_ps(w, xv[i], acc[r][i]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) _mm256_store_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 8, acc[r][i]);
}

#define KGROUP256(NT, CONV, NAME)                                                                                                     \
    AVX2 __attribute__((noinline)) static void NAME(float *buf, float *wb, const uint8_t *rec, int kw, const float *x, int ldx,       \
                                                    int i0, int c0) {                                                                \
        kgroup256(buf, wb, rec, kw, x, ldx, i0, c0, NT, CONV);                                                                        \
    }
KGROUP256(2, 1, kgroup256_conv)
KGROUP256(3, 0, kgroup256_3)
KGROUP256(2, 0, kgroup256_2)
KGROUP256(1, 0, kgroup256_1)

AVX2 static void group_kblocked256(float *y, int out, int g, const pm_tensor *W, const float *x, int ldx, int n, int in, int kbw,
                                   float *wb, float scale, int accumulate) {
    size_t nb = (size_t)in / PM_Q8_BLOCK;
    _Alignas(32) float buf[PM_Q8_ROWS * PM_SMALL_N * 8];
    for (int c0 = 0; c0 < in; c0 += kbw) {
        int kw = in - c0 < kbw ? in - c0 : kbw, i = 2;
        const uint8_t *rec = pm_q8_record(W, (size_t)g, (size_t)c0 / PM_Q8_BLOCK, nb);
        kgroup256_conv(buf, wb, rec, kw, x, ldx, 0, c0);
        for (; i + 3 <= n; i += 3) kgroup256_3(buf, wb, rec, kw, x, ldx, i, c0);
        if (n - i == 2) kgroup256_2(buf, wb, rec, kw, x, ldx, i, c0);
        else if (n - i == 1) kgroup256_1(buf, wb, rec, kw, x, ldx, i, c0);
    }
    for (int r = 0; r < PM_Q8_ROWS; r++) {
        int j = g * PM_Q8_ROWS + r;
        if (j >= out) break; /* padding rows of the last group */
        for (int i = 0; i < n; i++) {
            float s = hsum256(_mm256_load_ps(buf + ((size_t)r * PM_SMALL_N + i) * 8));
            float *yy = &y[(size_t)i * out + j];
            *yy = accumulate ? *yy + scale * s : s;
        }
    }
}

/* The k-blocked batched path of either width: the inputs copied with a row stride one line past
 * a multiple of 64 bytes (in = 3072 or 8192 floats is a multiple of 4 KB: the k-block slices of
 * rows 12 KB apart all fell into the same L1 sets), a conversion buffer per thread. */
typedef void (*kgroup_fn)(float *y, int out, int g, const pm_tensor *W, const float *x, int ldx, int n, int in, int kbw, float *wb,
                          float scale, int accumulate);
static void gemv_q8_kblocked(kgroup_fn group, float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
    int out = (int)W->shape[0], in = (int)W->shape[1], ng = (out + PM_Q8_ROWS - 1) / PM_Q8_ROWS;
    int chunk = pm_gemv_chunk(ng, (size_t)(in / PM_Q8_BLOCK) * PM_Q8_RECORD, omp_get_max_threads());
    int kbw = pm_gemv_kblock(n), ldx = in + 16;
    float *xp = aligned_alloc(64, sizeof(float) * (size_t)n * ldx);
    PM_ASSERT(xp);
    for (int i = 0; i < n; i++) memcpy(xp + (size_t)i * ldx, x + (size_t)i * in, sizeof(float) * (size_t)in);
#pragma omp parallel
    {
        float *wb = aligned_alloc(64, sizeof(float) * PM_Q8_ROWS * (size_t)kbw);
        PM_ASSERT(wb);
#pragma omp for schedule(dynamic, chunk)
        for (int g = 0; g < ng; g++) group(y, out, g, W, xp, ldx, n, in, kbw, wb, scale, accumulate);
        free(wb);
    }
    free(xp);
}

/* Threads take chunks of ~512 KB of consecutive groups dynamically (one sequential stream each;
 * a descheduled thread does not leave the others idle at the barrier). */
AVX2 static void gemv_q8_avx2(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
    int out = (int)W->shape[0], in = (int)W->shape[1], ng = (out + PM_Q8_ROWS - 1) / PM_Q8_ROWS;
    if (n > 4 && n <= PM_SMALL_N) { /* measured at n = 3-4: 0.81-0.87 x the tiles */
        gemv_q8_kblocked(group_kblocked256, y, x, n, W, scale, accumulate);
        return;
    }
    int chunk = pm_gemv_chunk(ng, (size_t)(in / PM_Q8_BLOCK) * PM_Q8_RECORD, omp_get_max_threads());
#pragma omp parallel for schedule(dynamic, chunk)
    for (int g = 0; g < ng; g++) group_all(y, out, g, W, x, n, in, scale, accumulate);
}

/* ---- AVX-512 ---- */

AVX512_INLINE __m512 load_w16(const uint8_t *rec, int r, int v, __m512 s) {
    __m512i qi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(pm_q8_quants(rec, r) + v)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(qi), s);
}

/* The AVX2 tile at 16 lanes: the 4 rows of group g x inputs i0 .. i0 + NT (NT <= 4). */
AVX512_INLINE void tile512(float *y, int out, int g, int i0, const pm_tensor *W, const float *x, int in, int NT, float scale,
                           int accumulate) {
    size_t nb = (size_t)in / PM_Q8_BLOCK;
    const uint8_t *rec = pm_q8_record(W, (size_t)g, 0, nb);
    __m512 acc[PM_Q8_ROWS][4];
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++)
#pragma GCC unroll 4
        for (int i = 0; i < NT; i++) acc[r][i] = _mm512_setzero_ps();
    const float *xi[4];
#pragma GCC unroll 4
    for (int i = 0; i < NT; i++) xi[i] = x + (size_t)(i0 + i) * in;
    for (size_t b = 0; b < nb; b++, rec += PM_Q8_RECORD) {
        if (i0 == 0) {
            const char *pf = (const char *)rec + GEMV_Q8_PF * PM_Q8_RECORD;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
        }
        __m512 sv[PM_Q8_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < PM_Q8_ROWS; r++) sv[r] = _mm512_set1_ps(((const float *)rec)[r]);
#pragma GCC unroll 2
        for (int v = 0; v < PM_Q8_BLOCK; v += 16) {
            __m512 xv[4];
#pragma GCC unroll 4
            for (int i = 0; i < NT; i++) xv[i] = _mm512_loadu_ps(xi[i] + b * PM_Q8_BLOCK + v);
#pragma GCC unroll 4
            for (int r = 0; r < PM_Q8_ROWS; r++) {
                __m512 w = load_w16(rec, r, v, sv[r]);
#pragma GCC unroll 4
                for (int i = 0; i < NT; i++) acc[r][i] = _mm512_fmadd_ps(w, xv[i], acc[r][i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++) {
        int j = g * PM_Q8_ROWS + r;
        if (j >= out) break;
#pragma GCC unroll 4
        for (int i = 0; i < NT; i++) {
            float s = hsum512(acc[r][i]);
            float *yy = &y[(size_t)(i0 + i) * out + j];
            *yy = accumulate ? *yy + scale * s : s;
        }
    }
}

/* n = 1 on the groups gs[0 .. Q8_NG) together: Q8_NG record streams per thread (one stream alone kept
 * too few reads in flight). */
AVX512 static void groups512(float *y, int out, const int *gs, const pm_tensor *W, const float *x, int in, float scale, int accumulate) {
    size_t nb = (size_t)in / PM_Q8_BLOCK;
    const uint8_t *rec[Q8_NG];
    for (int h = 0; h < Q8_NG; h++) rec[h] = pm_q8_record(W, (size_t)gs[h], 0, nb);
    __m512 acc[Q8_NG][PM_Q8_ROWS];
#pragma GCC unroll 4
    for (int h = 0; h < Q8_NG; h++)
#pragma GCC unroll 4
        for (int r = 0; r < PM_Q8_ROWS; r++) acc[h][r] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int h = 0; h < Q8_NG; h++) {
            const uint8_t *rc = rec[h] + b * PM_Q8_RECORD;
            const char *pf = (const char *)rc + GEMV_Q8_PF * PM_Q8_RECORD;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
#pragma GCC unroll 2
            for (int v = 0; v < PM_Q8_BLOCK; v += 16) {
                __m512 xv = _mm512_loadu_ps(x + b * PM_Q8_BLOCK + v);
#pragma GCC unroll 4
                for (int r = 0; r < PM_Q8_ROWS; r++)
                    acc[h][r] = _mm512_fmadd_ps(load_w16(rc, r, v, _mm512_set1_ps(((const float *)rc)[r])), xv, acc[h][r]);
            }
        }
    }
    for (int h = 0; h < Q8_NG; h++)
        for (int r = 0; r < PM_Q8_ROWS; r++) {
            int j = gs[h] * PM_Q8_ROWS + r;
            if (j >= out) break;
            float s = hsum512(acc[h][r]);
            y[j] = accumulate ? y[j] + scale * s : s;
        }
}

AVX512 static void group_all512(float *y, int out, int g, const pm_tensor *W, const float *x, int n, int in, float scale, int accumulate) {
    int i = 0;
    for (; i + 4 <= n; i += 4) tile512(y, out, g, i, W, x, in, 4, scale, accumulate);
    switch (n - i) {
    case 3: tile512(y, out, g, i, W, x, in, 3, scale, accumulate); break;
    case 2: tile512(y, out, g, i, W, x, in, 2, scale, accumulate); break;
    case 1: tile512(y, out, g, i, W, x, in, 1, scale, accumulate); break;
    }
}

/* n > 4 (the batched decode): converting a weight costs 3 µops (sign-extend, to float, times the
 * scale) against 4 FMAs of a 4-input tile. So the group's rows are walked in k-blocks of kbw
 * weights: the first 4 inputs' pass streams the records, converts them (the very w of tile512)
 * and keeps the fp32 rows in wb; the other inputs' passes run their FMAs from wb in L1. The
 * accumulators wait in buf between blocks (16 floats per output, (r * PM_SMALL_N + i) * 16, stored
 * exactly: the same chains as in registers). CONV: this pass converts (rec: the block's first
 * record). Measured in one process against the 4 x 4 tiles that convert in every pass: +7-10 % at
 * n = 5-12, +19 % at 16 (with the padded input rows; without them no gain: the k-block slices of
 * inputs 12 KB apart fell into the same L1 sets). */
AVX512_INLINE void kgroup512(float *buf, float *wb, const uint8_t *rec, int kw, const float *x, int ldx, int i0, int c0, int NT, int CONV) {
    __m512 acc[PM_Q8_ROWS][4];
    const float *xi[4];
#pragma GCC unroll 4
    for (int i = 0; i < NT; i++) xi[i] = x + (size_t)(i0 + i) * ldx + c0;
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++)
#pragma GCC unroll 4
        for (int i = 0; i < NT; i++) acc[r][i] = c0 ? _mm512_load_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 16) : _mm512_setzero_ps();
    for (int v = 0; v < kw; v += 16) {
        const uint8_t *rc = rec + (size_t)(v / PM_Q8_BLOCK) * PM_Q8_RECORD;
        if (CONV && v % PM_Q8_BLOCK == 0) { /* the group's record stream, ahead */
            const char *pf = (const char *)rc + GEMV_Q8_PF * PM_Q8_RECORD;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
        }
        __m512 xv[4];
#pragma GCC unroll 4
        for (int i = 0; i < NT; i++) xv[i] = _mm512_loadu_ps(xi[i] + v);
#pragma GCC unroll 4
        for (int r = 0; r < PM_Q8_ROWS; r++) {
            __m512 w;
            if (CONV) {
                w = load_w16(rc, r, v % PM_Q8_BLOCK, _mm512_set1_ps(pm_q8_scale(rc, r)));
                _mm512_store_ps(wb + (size_t)r * kw + v, w);
            } else
                w = _mm512_load_ps(wb + (size_t)r * kw + v);
#pragma GCC unroll 4
            for (int i = 0; i < NT; i++) acc[r][i] = _mm512_fmadd_ps(w, xv[i], acc[r][i]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < PM_Q8_ROWS; r++)
#pragma GCC unroll 4
        for (int i = 0; i < NT; i++) _mm512_store_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 16, acc[r][i]);
}

/* One function per pass shape: inlined together, 16-accumulator loops risk a spill. */
#define KGROUP512(NT, CONV, NAME)                                                                                                     \
    AVX512 __attribute__((noinline)) static void NAME(float *buf, float *wb, const uint8_t *rec, int kw, const float *x, int ldx,     \
                                                      int i0, int c0) {                                                              \
        kgroup512(buf, wb, rec, kw, x, ldx, i0, c0, NT, CONV);                                                                        \
    }
KGROUP512(4, 1, kgroup512_conv)
KGROUP512(4, 0, kgroup512_4)
KGROUP512(3, 0, kgroup512_3)
KGROUP512(2, 0, kgroup512_2)
KGROUP512(1, 0, kgroup512_1)

/* Group g against all n (5..PM_SMALL_N) inputs in k-blocks of kbw weights (a multiple of the
 * block). wb: scratch of PM_Q8_ROWS * kbw floats, 64-byte aligned. */
AVX512 static void group_kblocked512(float *y, int out, int g, const pm_tensor *W, const float *x, int ldx, int n, int in, int kbw,
                                     float *wb, float scale, int accumulate) {
    size_t nb = (size_t)in / PM_Q8_BLOCK;
    _Alignas(64) float buf[PM_Q8_ROWS * PM_SMALL_N * 16];
    for (int c0 = 0; c0 < in; c0 += kbw) {
        int kw = in - c0 < kbw ? in - c0 : kbw, i = 4;
        const uint8_t *rec = pm_q8_record(W, (size_t)g, (size_t)c0 / PM_Q8_BLOCK, nb);
        kgroup512_conv(buf, wb, rec, kw, x, ldx, 0, c0);
        for (; i + 4 <= n; i += 4) kgroup512_4(buf, wb, rec, kw, x, ldx, i, c0);
        switch (n - i) {
        case 3: kgroup512_3(buf, wb, rec, kw, x, ldx, i, c0); break;
        case 2: kgroup512_2(buf, wb, rec, kw, x, ldx, i, c0); break;
        case 1: kgroup512_1(buf, wb, rec, kw, x, ldx, i, c0); break;
        }
    }
    _Static_assert(PM_Q8_ROWS == 4, "the fold takes 4 rows x 4 inputs");
    for (int i0 = 0; i0 < n; i0 += 4) { /* 4 rows x 4 inputs folded together (pm_hsum512_x16) */
        __m512 a[16];
        _Alignas(64) float sum[16];
        for (int k = 0; k < 16; k++) a[k] = i0 + k % 4 < n ? _mm512_load_ps(buf + ((size_t)(k / 4) * PM_SMALL_N + i0 + k % 4) * 16) : _mm512_setzero_ps();
        pm_hsum512_x16(a, sum);
        for (int r = 0; r < PM_Q8_ROWS; r++) {
            int j = g * PM_Q8_ROWS + r;
            if (j >= out) break; /* padding rows of the last group */
            for (int i = i0; i < n && i < i0 + 4; i++) {
                float *yy = &y[(size_t)i * out + j];
                *yy = accumulate ? *yy + scale * sum[r * 4 + i - i0] : sum[r * 4 + i - i0];
            }
        }
    }
}

/* Same schedule as gemv_q8_avx2. */
AVX512 static void gemv_q8_avx512(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
    int out = (int)W->shape[0], in = (int)W->shape[1], ng = (out + PM_Q8_ROWS - 1) / PM_Q8_ROWS;
    int chunk = pm_gemv_chunk(ng, (size_t)(in / PM_Q8_BLOCK) * PM_Q8_RECORD, omp_get_max_threads());
    if (n == 1) { /* work items of Q8_NG runs of q consecutive groups, walked side by side (as gemv.c's gemv_runs) */
        size_t gbytes = (size_t)(in / PM_Q8_BLOCK) * PM_Q8_RECORD;
        int nt = omp_get_max_threads(), q = (int)((384u << 10) / (gbytes ? gbytes : 1));
        int most = (ng + 4 * Q8_NG * nt - 1) / (4 * Q8_NG * nt); /* at least 4 items per thread */
        if (q > most) q = most;
        if (q < 1) q = 1;
        int items = (ng + Q8_NG * q - 1) / (Q8_NG * q);
#pragma omp parallel for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            int g0 = it * Q8_NG * q, gn = ng - g0 < Q8_NG * q ? ng - g0 : Q8_NG * q, qq = (gn + Q8_NG - 1) / Q8_NG;
            for (int t = 0; t < qq; t++) {
                int gs[Q8_NG], k = 0;
                for (int h = 0; h < Q8_NG; h++)
                    if (h * qq + t < gn) gs[k++] = g0 + h * qq + t;
                if (k == Q8_NG) groups512(y, out, gs, W, x, in, scale, accumulate);
                else
                    for (int h = 0; h < k; h++) group_all512(y, out, gs[h], W, x, 1, in, scale, accumulate);
            }
        }
        return;
    }
    if (n <= 4 || n > PM_SMALL_N) {
#pragma omp parallel for schedule(dynamic, chunk)
        for (int g = 0; g < ng; g++) group_all512(y, out, g, W, x, n, in, scale, accumulate);
        return;
    }
    gemv_q8_kblocked(group_kblocked512, y, x, n, W, scale, accumulate);
}

AVX2 static void dequant_rows_avx2(float *out, const pm_tensor *W, size_t row0, size_t rows) {
    size_t in = (size_t)W->shape[1], nb = in / PM_Q8_BLOCK;
    for (size_t j = row0; j < row0 + rows; j++, out += in)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *rec = pm_q8_record(W, j / PM_Q8_ROWS, b, nb);
            int r = (int)(j % PM_Q8_ROWS);
            __m256 s = _mm256_broadcast_ss((const float *)rec + r);
            for (int v = 0; v < PM_Q8_BLOCK; v += 8) _mm256_storeu_ps(out + b * PM_Q8_BLOCK + v, load_w(rec, r, v, s));
        }
}
#endif

void pm_kern_dequant_q8_rows(float *out, const pm_tensor *W, size_t row0, size_t rows) {
#ifdef PM_X86
    if (pm_kern_have_avx2()) {
        dequant_rows_avx2(out, W, row0, rows);
        return;
    }
#endif
    dequant_rows_c(out, W, row0, rows);
}

void pm_kern_gemv_q8(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
#ifdef PM_X86
    if (pm_kern_have_avx512()) {
        gemv_q8_avx512(y, x, n, W, scale, accumulate);
        return;
    }
    if (pm_kern_have_avx2()) {
        gemv_q8_avx2(y, x, n, W, scale, accumulate);
        return;
    }
#endif
    pm_kern_gemv_q8_c(y, x, n, W, scale, accumulate);
}
