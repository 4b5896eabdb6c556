/* gemv.c — the decode-time matmul: y[n, out] (=|+=) x[n, in] @ W[out, in]^T for a small n (one
 * row per live sequence), with W bf16 in the mmap.
 *
 * Decode is memory-bound: every weight byte must come from DRAM exactly once per step whatever n
 * is, and the arithmetic must keep up when n grows (at n = 8 on 2 cores it no longer hides behind
 * the memory stream). So each thread walks its own contiguous range of output rows in blocks; a
 * block's rows are streamed from memory once, converted bf16 -> fp32 in registers, and multiplied
 * by register tiles of RT rows x NT inputs (12 accumulators at 4 x 3); the other input groups of
 * the same block re-read the rows from L1/L2.
 *
 * Determinism (ops.h): output (i, j) is always hsum(acc) of one 8-lane FMA accumulator walked
 * over k in order, then the scalar tail in order, whatever tile shape or n produced it. So a
 * sequence decoded alone and inside a batch gets the same bits. */
#include "kernels.h"
#include "ops.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define PM_X86 1
#endif

/* ---- portable reference ---- */

/* One output at a time with the SIMD path's exact arithmetic: 8 lanes of fmaf over k, folded in
 * hsum256's order, then the tail in order. Both paths give identical bits (tested). */
static float dot_row_c(const pm_tensor *W, size_t j, const float *x, int in, float *tmp) {
    pm_tensor_read_f32(W, j * (size_t)in, (size_t)in, tmp);
    float acc[8] = {0};
    int c = 0;
    for (; c + 8 <= in; c += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(tmp[c + l], x[c + l], acc[l]);
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (; c < in; c++) s += tmp[c] * x[c];
    return s;
}

void pm_kern_gemv_c(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
    int out = (int)W->shape[0], in = (int)W->shape[1];
#pragma omp parallel
    {
        float *tmp = malloc((size_t)in * sizeof(float));
        PM_ASSERT(tmp);
#pragma omp for schedule(static)
        for (int j = 0; j < out; j++)
            for (int i = 0; i < n; i++) {
                float d = dot_row_c(W, (size_t)j, x + (size_t)i * in, in, tmp);
                float *yy = &y[(size_t)i * out + j];
                *yy = accumulate ? *yy + scale * d : d;
            }
        free(tmp);
    }
}

#ifdef PM_X86
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

AVX2_INLINE float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

AVX2_INLINE __m256 load_bf16x8(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Stores s (the dot of row r with input i) into y. */
AVX2_INLINE void put(float *y, int out, int i, int j, float s, float scale, int accumulate) {
    float *yy = &y[(size_t)i * out + j];
    *yy = accumulate ? *yy + scale * s : s;
}

/* The register tile: rows wr[0..RT) against inputs x + i*in for i in [0, NT). RT and NT are
 * compile-time constants at every call site (the loops unroll into plain registers). PF > 0 adds
 * software prefetches PF bytes ahead on the weight rows (the n = 1 streaming case). */
AVX2_INLINE void tile(float *y, int out, int j0, int i0, const uint16_t *const *wr, const float *x, int in, int RT, int NT,
                      int PF, float scale, int accumulate) {
    __m256 acc[8][3];
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) acc[r][i] = _mm256_setzero_ps();
    const float *xi[3];
#pragma GCC unroll 3
    for (int i = 0; i < NT; i++) xi[i] = x + (size_t)(i0 + i) * in;
    int c = 0;
    for (; c + 8 <= in; c += 8) {
        __m256 xv[3];
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) xv[i] = _mm256_loadu_ps(xi[i] + c);
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            if (PF && (c & 31) == 0) _mm_prefetch((const char *)(wr[r] + c) + PF, _MM_HINT_T0);
            __m256 w = load_bf16x8(wr[r] + c);
#pragma GCC unroll 3
            for (int i = 0; i < NT; i++) acc[r][i] = _mm256_fmadd_ps(w, xv[i], acc[r][i]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) {
            float s = hsum256(acc[r][i]);
            for (int k = c; k < in; k++) s += pm_bf16_to_f32(wr[r][k]) * xi[i][k];
            put(y, out, i0 + i, j0 + r, s, scale, accumulate);
        }
}

#define GEMV_PF 512 /* bytes ahead per row for the n = 1 stream (tuned by bench on Zen 2/3) */

/* Rows [j0, j0 + RT) against all n inputs: groups of 3, then 2 or 1. */
AVX2 static void rows_4(float *y, const float *x, int n, const uint16_t *w, int out, int in, int j0, float scale, int accumulate) {
    const uint16_t *wr[4];
    for (int r = 0; r < 4; r++) wr[r] = w + (size_t)(j0 + r) * in;
    int i = 0;
    for (; i + 3 <= n; i += 3) tile(y, out, j0, i, wr, x, in, 4, 3, 0, scale, accumulate);
    if (n - i == 2) tile(y, out, j0, i, wr, x, in, 4, 2, 0, scale, accumulate);
    else if (n - i == 1) tile(y, out, j0, i, wr, x, in, 4, 1, 0, scale, accumulate);
}

AVX2 static void rows_1(float *y, const float *x, int n, const uint16_t *w, int out, int in, int j0, float scale, int accumulate) {
    const uint16_t *wr[1] = {w + (size_t)j0 * in};
    int i = 0;
    for (; i + 3 <= n; i += 3) tile(y, out, j0, i, wr, x, in, 1, 3, 0, scale, accumulate);
    for (; i < n; i++) tile(y, out, j0, i, wr, x, in, 1, 1, 0, scale, accumulate);
}

AVX2 static void rows_8_n1(float *y, const float *x, const uint16_t *w, int out, int in, int j0, float scale, int accumulate) {
    const uint16_t *wr[8];
    for (int r = 0; r < 8; r++) wr[r] = w + (size_t)(j0 + r) * in;
    tile(y, out, j0, 0, wr, x, in, 8, 1, GEMV_PF, scale, accumulate);
}

/* Each thread takes a contiguous share of whole 8-row blocks (good for the hardware prefetcher);
 * the last thread also takes the leftover rows. */
AVX2 static void gemv_bf16_avx2(float *y, const float *x, int n, const uint16_t *w, int out, int in, float scale, int accumulate) {
    int nb = out / 8;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int b0 = (int)((long)nb * id / nt), b1 = (int)((long)nb * (id + 1) / nt);
        for (int b = b0; b < b1; b++) {
            int j0 = b * 8;
            if (n == 1) rows_8_n1(y, x, w, out, in, j0, scale, accumulate);
            else {
                rows_4(y, x, n, w, out, in, j0, scale, accumulate);
                rows_4(y, x, n, w, out, in, j0 + 4, scale, accumulate);
            }
        }
        if (id == nt - 1)
            for (int j = nb * 8; j < out; j++) rows_1(y, x, n, w, out, in, j, scale, accumulate);
    }
}
#endif

void pm_kern_gemv(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
#ifdef PM_X86
    if (pm_kern_have_avx2() && W->dtype == PM_DT_BF16) {
        gemv_bf16_avx2(y, x, n, (const uint16_t *)W->data, (int)W->shape[0], (int)W->shape[1], scale, accumulate);
        return;
    }
#endif
    pm_kern_gemv_c(y, x, n, W, scale, accumulate);
}
