/* gemm_dot.h — internal seam between gemm.c (blocking, threads, C updates) and gemm_dot.c (the
 * bf16-product path's packs and micro-kernel, AVX512-BF16 and a portable twin). simd = 1 takes
 * the AVX512-BF16 code (only where pm_kern_have_avx512bf16()), 0 the twin; both give the same bits. */
#ifndef PM_GEMM_DOT_H
#define PM_GEMM_DOT_H

#include <stddef.h>
#include <stdint.h>
#include "kernels.h"

/* 12 rows src[r] [0, kc) rounded to bf16 -> [ceil(kc/2)][12] pair dwords (an odd kc: last high 0). */
void pm_dot_pack_a(uint32_t *dst, const float *const *src, int kc, int simd);
/* W rows [j0, j0 + nc) (past `out`: `zero`, kc + 16 zeros) x cols [k0, k0 + kc) -> nc/32 slivers of
 * [ceil(kc/2)][32] pair dwords, one after another. */
void pm_dot_pack_b(uint32_t *dst, const uint16_t *w, int in, int out, int j0, int nc, int k0, int kc, const uint16_t *zero, int simd);
/* One 12 x 32 tile over a slice of kc: C rows < mr, cols < nr = (first ? (beta_one ? C : 0) : C)
 * + alpha * sum. */
void pm_dot_tile(int kc, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, int mr, int nr, float alpha, int first, int beta_one,
                 int simd);
/* gemm.c's C update of a finished tile t (row stride ldt). */
void pm_gemm_store_tile(float *c, size_t ldc, const float *t, int ldt, int mr, int nr, float alpha, int first, int beta_one);

#include "simd.h"
#ifdef PM_X86
/* The C update of a finished 12 x 32 register tile (acc[i][h]: row i, columns 16h..16h+15), both
 * AVX-512 GEMM tiles' (gemm.c's fp32 one, gemm_dot.c's): straight into C when the tile is whole,
 * through pm_gemm_store_tile otherwise. Rounded like the scalar twins: prev + alpha * acc, mul then add. */
AVX512_INLINE void pm_gemm_finish512(__m512 acc[][2], int rows, float *c, size_t ldc, int mr, int nr, float alpha, int first,
                                     int beta_one) {
    if (mr == rows && nr == 32) {
        __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
        for (int i = 0; i < rows; i++)
            for (int h = 0; h < 2; h++) {
                float *cc = c + (size_t)i * ldc + 16 * h;
                __m512 prev = first && !beta_one ? _mm512_setzero_ps() : _mm512_loadu_ps(cc);
                _mm512_storeu_ps(cc, _mm512_add_ps(prev, _mm512_mul_ps(al, acc[i][h])));
            }
        return;
    }
    float t[12 * 32];
    for (int i = 0; i < rows; i++) {
        _mm512_storeu_ps(t + i * 32, acc[i][0]);
        _mm512_storeu_ps(t + i * 32 + 16, acc[i][1]);
    }
    pm_gemm_store_tile(c, ldc, t, 32, mr, nr, alpha, first, beta_one);
}
#endif

#endif
