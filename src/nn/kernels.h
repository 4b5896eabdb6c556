/* kernels.h — hot loops with runtime CPU dispatch (AVX2+FMA when the CPU has them, portable C
 * otherwise). Each SIMD kernel has a plain-C twin (`*_c`) that tests compare against. */
#ifndef PM_KERNELS_H
#define PM_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "../io/safetensors.h"

void pm_kern_bf16_to_f32(float *out, const uint16_t *in, size_t n);
/* out[rows, in] = fp32 copy of W rows [row0, row0+rows). */
void pm_kern_convert_rows(float *out, const pm_tensor *W, size_t row0, size_t rows);

/* Small-batch matmul: y[i, j] (=|+=) scale * dot(W[j, :], x[i, :]) for i < n (n small).
 * accumulate=0: y = dot (scale ignored); accumulate=1: y += scale*dot.
 * Per-(i, j) arithmetic is independent of n (determinism contract of ops.h). */
void pm_kern_gemv(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate);
void pm_kern_gemv_c(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate);

/* 1 when the AVX2 path is in use (for tests and the benchmark's report). */
int pm_kern_have_avx2(void);
/* Forces the portable path (tests): 1 = force C, 0 = auto. */
void pm_kern_force_portable(int on);

#endif
