/* kernels.c — CPU dispatch and the bf16 -> fp32 conversions (see kernels.h). The AVX2 and AVX-512
 * versions are compiled with target attributes so the binary stays runnable on any x86-64; dispatch reads
 * the CPU once. */
#include "kernels.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>
#include "simd.h"

static pm_kern_level level_cap = PM_KERN_AVX512; /* tests and the benchmark lower it */
void pm_kern_cap(pm_kern_level max) { level_cap = max; }
void pm_kern_force_portable(int on) { pm_kern_cap(on ? PM_KERN_PORTABLE : PM_KERN_AVX512); }

/* What the CPU offers, read once. The AVX-512 kernels use F only (16-lane FMAs, widening loads,
 * lane shuffles) plus everything the AVX2 ones do; BW is required too so that the level means "a
 * Skylake-SP or later core" (every such core has it; the Xeon Phi ones, which lack it, stay on AVX2). */
static pm_kern_level cpu_level(void) {
#ifdef PM_X86
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
        cached = avx512 ? PM_KERN_AVX512 : avx2 ? PM_KERN_AVX2 : PM_KERN_PORTABLE;
    }
    return (pm_kern_level)cached;
#else
    return PM_KERN_PORTABLE;
#endif
}

pm_kern_level pm_kern_level_in_use(void) {
    pm_kern_level l = cpu_level();
    return l < level_cap ? l : level_cap;
}

const char *pm_kern_level_name(pm_kern_level l) { return l == PM_KERN_AVX512 ? "avx512" : l == PM_KERN_AVX2 ? "avx2" : "portable"; }

int pm_kern_have_avx2(void) { return pm_kern_level_in_use() >= PM_KERN_AVX2; }
int pm_kern_have_avx512(void) { return pm_kern_level_in_use() >= PM_KERN_AVX512; }

/* AVX512-BF16 is an extension of the AVX-512 level, not a level of its own: it goes with the cap. */
int pm_kern_have_avx512bf16(void) {
#ifdef PM_X86
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx512bf16") ? 1 : 0;
    }
    return cached && pm_kern_have_avx512();
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
    for (; i + 16 <= n; i += 16) {
        __m128i h0 = _mm_loadu_si128((const __m128i *)(in + i)), h1 = _mm_loadu_si128((const __m128i *)(in + i + 8));
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16)));
        _mm256_storeu_ps(out + i + 8, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16)));
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

void pm_kern_convert_rows_1t(float *out, const pm_tensor *W, size_t row0, size_t rows) {
    size_t in = (size_t)W->shape[1];
    if (W->dtype == PM_DT_Q8) pm_kern_dequant_q8_rows(out, W, row0, rows);
    else if (W->dtype == PM_DT_BF16) pm_kern_bf16_to_f32(out, (const uint16_t *)W->data + row0 * in, rows * in);
    else pm_tensor_read_f32(W, row0 * in, rows * in, out);
}

void pm_kern_convert_rows(float *out, const pm_tensor *W, size_t row0, size_t rows) {
    size_t in = (size_t)W->shape[1];
    if (W->dtype == PM_DT_Q8) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < (long)rows; r++) pm_kern_dequant_q8_rows(out + (size_t)r * in, W, row0 + (size_t)r, 1);
    } else if (W->dtype == PM_DT_BF16) {
        const uint16_t *src = (const uint16_t *)W->data + row0 * in;
#pragma omp parallel for schedule(static)
        for (long r = 0; r < (long)rows; r++) pm_kern_bf16_to_f32(out + (size_t)r * in, src + (size_t)r * in, in);
    } else pm_tensor_read_f32(W, row0 * in, rows * in, out);
}
