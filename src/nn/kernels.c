/* kernels.c — see kernels.h. The AVX2 versions are compiled with target attributes so the
 * binary stays runnable on any x86-64; dispatch reads the CPU once. */
#include "kernels.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define PM_X86 1
#endif

static int force_portable;
void pm_kern_force_portable(int on) { force_portable = on; }

int pm_kern_have_avx2(void) {
#ifdef PM_X86
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return cached && !force_portable;
#else
    return 0;
#endif
}

/* ---- conversions ---- */

static void bf16_to_f32_c(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = pm_bf16_to_f32(in[i]);
}

#ifdef PM_X86
__attribute__((target("avx2,fma"))) static void bf16_to_f32_avx2(float *out, const uint16_t *in, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(in + i));
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
    }
    for (; i < n; i++) out[i] = pm_bf16_to_f32(in[i]);
}
#endif

void pm_kern_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
#ifdef PM_X86
    if (pm_kern_have_avx2()) {
        bf16_to_f32_avx2(out, in, n);
        return;
    }
#endif
    bf16_to_f32_c(out, in, n);
}

void pm_kern_convert_rows(float *out, const pm_tensor *W, size_t row0, size_t rows) {
    size_t in = (size_t)W->shape[1];
    if (W->dtype == PM_DT_BF16) {
        const uint16_t *src = (const uint16_t *)W->data + row0 * in;
#pragma omp parallel for schedule(static)
        for (long r = 0; r < (long)rows; r++) pm_kern_bf16_to_f32(out + (size_t)r * in, src + (size_t)r * in, in);
    } else pm_tensor_read_f32(W, row0 * in, rows * in, out);
}

/* ---- small-batch GEMV ---- */

/* Portable reference: one output at a time, fixed left-to-right accumulation in 8 lanes so that
 * its rounding resembles the SIMD path (both are tested against the fp64 pm_linear_ref). */
static float dot_row_c(const pm_tensor *W, size_t j, const float *x, int in, float *tmp) {
    pm_tensor_read_f32(W, j * (size_t)in, (size_t)in, tmp);
    float acc[8] = {0};
    int c = 0;
    for (; c + 8 <= in; c += 8)
        for (int l = 0; l < 8; l++) acc[l] += tmp[c + l] * x[c + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
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
__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) static inline __m256 load_bf16x8(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 4 bf16 weight rows against each of the n inputs; the 4 rows (4*in*2 bytes) stay in L1/L2 while
 * the inputs stream past, so each weight byte comes from memory once per call. */
__attribute__((target("avx2,fma"))) static void gemv_bf16_avx2(float *y, const float *x, int n, const uint16_t *w, int out, int in,
                                                                  float scale, int accumulate) {
    int nb = (out + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        int j0 = b * 4, rows = out - j0 < 4 ? out - j0 : 4;
        const uint16_t *wr[4];
        for (int r = 0; r < 4; r++) wr[r] = w + (size_t)(j0 + (r < rows ? r : 0)) * in;
        for (int i = 0; i < n; i++) {
            const float *xi = x + (size_t)i * in;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int c = 0;
            for (; c + 8 <= in; c += 8) {
                __m256 xv = _mm256_loadu_ps(xi + c);
                a0 = _mm256_fmadd_ps(load_bf16x8(wr[0] + c), xv, a0);
                a1 = _mm256_fmadd_ps(load_bf16x8(wr[1] + c), xv, a1);
                a2 = _mm256_fmadd_ps(load_bf16x8(wr[2] + c), xv, a2);
                a3 = _mm256_fmadd_ps(load_bf16x8(wr[3] + c), xv, a3);
            }
            float s[4] = {hsum256(a0), hsum256(a1), hsum256(a2), hsum256(a3)};
            for (; c < in; c++)
                for (int r = 0; r < 4; r++) s[r] += pm_bf16_to_f32(wr[r][c]) * xi[c];
            for (int r = 0; r < rows; r++) {
                float *yy = &y[(size_t)i * out + j0 + r];
                *yy = accumulate ? *yy + scale * s[r] : s[r];
            }
        }
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
