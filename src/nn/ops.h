/* ops.h — the dense building blocks every model file uses (fp32 activations, weights in any
 * checkpoint dtype). Shapes are row-major; "x [n, in]" means n rows of `in` floats.
 *
 * Determinism contract: pm_linear() computes each output row with arithmetic that does not depend
 * on how many other rows are in the call, nor on the thread count, when n <= PM_SMALL_N (the decode
 * path, nn/gemv.c), so a sequence batched with others gets bit-identical results to its solo run.
 * Up to 24 rows (40 with short inputs; pm_kern_gemv_many_takes, AVX-512) take the same GEMV
 * arithmetic in larger tiles. Other products take the blocked bf16 GEMM of nn/gemm.c
 * (AVX2), or BLAS sgemm on fp32 panels converted from the weights (other CPUs, f16/f32 weights);
 * rows are then not independent of n. A weight with a prepacked copy (W->gemm_pack: the Conformer's
 * block matrices on AVX-512) takes the GEMM at every n; its rows do not depend on n either (the GEMM
 * sums each output in the same order whatever the tile). */
#ifndef PM_OPS_H
#define PM_OPS_H

#include <stdint.h>
#include <stddef.h>
#include "../io/safetensors.h"

#define PM_SMALL_N 16

static inline float pm_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
float pm_f16_to_f32(uint16_t h);
uint16_t pm_f32_to_bf16(float f); /* round to nearest even, as torch does */

/* Converts elements [off, off+count) of t to fp32. */
void pm_tensor_read_f32(const pm_tensor *t, size_t off, size_t count, float *out);
/* malloc'd fp32 copy of a (small) tensor; NULL + error on OOM. NULL tensor -> NULL, no error. */
float *pm_tensor_f32_copy(const pm_tensor *t, pm_err *e);

/* y[n, out] = x[n, in] @ W[out, in]^T (+ b[out] if b). W may be bf16/f16/f32. */
void pm_linear(float *y, const float *x, int n, const pm_tensor *W, const pm_tensor *b);
/* pm_linear of count weights on the same x (ys[w] = x @ Ws[w]^T + bs[w]; bs or its entries may be
 * NULL), the same bits; when every one takes the GEMM, they share one packing of x and one
 * parallel region (q / k / v projections). */
void pm_linear_many(float *const *ys, const float *x, int n, const pm_tensor *const *Ws, const pm_tensor *const *bs, int count);
/* y[n, out] += scale * (x[n, in] @ W[out, in]^T) — used for LoRA B and residual fusions. */
void pm_linear_acc(float *y, const float *x, int n, const pm_tensor *W, float scale);
/* Reference (plain C, one thread) of pm_linear, for kernel tests. */
void pm_linear_ref(float *y, const float *x, int n, const pm_tensor *W, const pm_tensor *b);

/* C[m, n] = A[m, k] @ B[n, k]^T, all fp32 (sgemm). ldc = n. */
void pm_matmul_nt(float *C, const float *A, const float *B, int m, int n, int k);
/* C[m, n] = A[m, k] @ B[k, n], all fp32. */
void pm_matmul_nn(float *C, const float *A, const float *B, int m, int n, int k);

void pm_rmsnorm(float *y, const float *x, const float *w, int n, int dim, float eps);
void pm_layernorm(float *y, const float *x, const float *w, const float *b, int n, int dim, float eps);
void pm_softmax_inplace(float *x, int n);
float pm_silu(float x);
float pm_gelu_erf(float x);
void pm_add_inplace(float *y, const float *x, size_t n);

#endif
