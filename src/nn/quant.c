/* quant.c — see quant.h. */
#include "quant.h"
#include "kernels.h"
#include "ops.h"
#include "simd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int pm_q8_supported(const pm_tensor *W) {
    return W && W->ndim == 2 && W->dtype != PM_DT_Q8 && W->shape[0] > 0 && W->shape[1] > 0 && W->shape[1] % PM_Q8_BLOCK == 0;
}

/* One block of one row: scale = amax / 127 (0 for an all-zero block). */
static float quantize_block(int8_t *q, const float *w) {
    float amax = 0.0f;
    for (int k = 0; k < PM_Q8_BLOCK; k++) amax = fmaxf(amax, fabsf(w[k])); /* NaN ignored */
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < PM_Q8_BLOCK; k++) {
        /* round half to even without a libm call: |w * inv| <= 127, so adding and removing
         * 1.5 * 2^23 leaves the nearest integer (default rounding mode; not under -ffast-math) */
        float v = (w[k] * inv + 12582912.0f) - 12582912.0f;
        q[k] = (int8_t)(v != v ? 0 : v > 127.0f ? 127 : v < -127.0f ? -127 : v); /* NaN -> 0 */
    }
    return amax / 127.0f;
}

#ifdef PM_X86
/* The same block quantization with AVX2 (identical results: max is exact, the products are the
 * same fp32 multiplications, and cvtps rounds half to even like the scalar trick). */
AVX2 static float quantize_block_avx2(int8_t *q, const float *w) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    __m256 ord[4];
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(w + 8 * k);
        ord[k] = _mm256_cmp_ps(v[k], v[k], _CMP_ORD_Q); /* NaN lanes count as 0, as fmaxf ignores them */
        m = _mm256_max_ps(m, _mm256_and_ps(ord[k], _mm256_andnot_ps(sign, v[k])));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float amax = _mm_cvtss_f32(h);
    if (!(amax > 0.0f)) { /* all zero (or NaN: the scalar path decides) */
        return -1.0f;
    }
    __m256 inv = _mm256_set1_ps(127.0f / amax);
    __m256i r[4];
    for (int k = 0; k < 4; k++) {
        __m256 p = _mm256_mul_ps(v[k], inv);
        __m256i t = _mm256_and_si256(_mm256_cvtps_epi32(p), _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_ORD_Q)));
        r[k] = _mm256_max_epi32(_mm256_min_epi32(t, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
    }
    __m256i p16a = _mm256_packs_epi32(r[0], r[1]), p16b = _mm256_packs_epi32(r[2], r[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    /* packs work per 128-bit lane: restore element order */
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p8);
    return amax / 127.0f;
}

#endif

static float quantize_block_any(int8_t *q, const float *w) {
#ifdef PM_X86
    if (pm_kern_have_avx2()) {
        float s = quantize_block_avx2(q, w);
        if (s >= 0.0f) return s;
    }
#endif
    return quantize_block(q, w);
}

int pm_q8_quantize(pm_tensor *dst, const pm_tensor *src, pm_err *e) {
    memset(dst, 0, sizeof *dst);
    if (!pm_q8_supported(src))
        return pm_errf(e, PM_EUNSUPPORTED, "tensor '%s' cannot be quantized to int8 (needs 2-D with a width divisible by %d)",
                       src ? src->name : "?", PM_Q8_BLOCK);
    int64_t out = src->shape[0], in = src->shape[1], nb = in / PM_Q8_BLOCK, ng = (out + PM_Q8_ROWS - 1) / PM_Q8_ROWS;
    size_t bytes = (size_t)ng * nb * PM_Q8_RECORD;
    /* on huge pages (pm_alloc_huge): a 4 KB page fault every 4 KB of 4.3 GB otherwise; `--weights
     * q8` load + quantize of the full-size checkpoint 5.4-6.2 s against 10.8-11.2 s (Zen 5 VM, 2
     * threads, two runs each), decode the same */
    uint8_t *buf = pm_alloc_huge(bytes);
    if (!buf) return pm_errf(e, PM_ENOMEM, "out of memory quantizing '%s' (%zu bytes)", src->name, bytes);
    int fail = 0;
#pragma omp parallel
    {
        float *rows = malloc(sizeof(float) * (size_t)in * PM_Q8_ROWS);
        if (!rows) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for schedule(static)
        for (int64_t g = 0; g < ng; g++) {
            if (!rows) continue;
            for (int r = 0; r < PM_Q8_ROWS; r++) {
                int64_t j = g * PM_Q8_ROWS + r;
                if (j < out) pm_tensor_read_f32(src, (size_t)j * in, (size_t)in, rows + (size_t)r * in);
                else memset(rows + (size_t)r * in, 0, sizeof(float) * (size_t)in); /* padding rows */
            }
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *rec = buf + ((size_t)g * nb + b) * PM_Q8_RECORD;
                float sc[PM_Q8_ROWS];
                for (int r = 0; r < PM_Q8_ROWS; r++)
                    sc[r] = quantize_block_any((int8_t *)(rec + 4 * PM_Q8_ROWS + r * PM_Q8_BLOCK), rows + (size_t)r * in + b * PM_Q8_BLOCK);
                memcpy(rec, sc, sizeof sc);
            }
        }
        free(rows);
    }
    if (fail) {
        free(buf);
        return pm_errf(e, PM_ENOMEM, "out of memory quantizing '%s'", src->name);
    }
    *dst = *src;
    dst->dtype = PM_DT_Q8;
    dst->data = buf;
    dst->nbytes = bytes;
    dst->consumed = 1;
    return PM_OK;
}

void pm_q8_free(pm_tensor *t) {
    if (!t || t->dtype != PM_DT_Q8) return;
    free((void *)t->data);
    memset(t, 0, sizeof *t);
}

void pm_q8_read_f32(const pm_tensor *t, size_t off, size_t count, float *out) {
    size_t in = (size_t)t->shape[1], nb = in / PM_Q8_BLOCK;
    for (size_t i = 0; i < count; i++) {
        size_t j = (off + i) / in, k = (off + i) % in;
        const uint8_t *rec = pm_q8_record(t, j / PM_Q8_ROWS, k / PM_Q8_BLOCK, nb);
        int r = (int)(j % PM_Q8_ROWS);
        out[i] = (float)pm_q8_quants(rec, r)[k % PM_Q8_BLOCK] * pm_q8_scale(rec, r);
    }
}
