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

#endif
