/* kernels.h — hot loops with runtime CPU dispatch (AVX-512 or AVX2+FMA when the CPU has them,
 * portable C otherwise). Each SIMD kernel has a plain-C twin (`*_c`) that tests compare against; the twins
 * use fmaf and the SIMD lane order, so both paths give the same bits (tests/unit/test_kernels.c);
 * the fused encoder attention is the exception (its twin agrees to rounding).
 * Files: kernels.c (dispatch, conversions), gemv.c (decode matmul; gemv_q8.c on int8 weights), gemm.c (prefill matmul), vmath.c (exp, softmax,
 * SiLU), attn.c (decode attention inner loops), flash.c (fused encoder attention). */
#ifndef PM_KERNELS_H
#define PM_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "../io/safetensors.h"

void pm_kern_bf16_to_f32(float *out, const uint16_t *in, size_t n);
/* out[rows, in] = fp32 copy of W rows [row0, row0+rows). Parallel over rows (OpenMP). */
void pm_kern_convert_rows(float *out, const pm_tensor *W, size_t row0, size_t rows);
/* Same, single-threaded (for callers already inside a parallel region). */
void pm_kern_convert_rows_1t(float *out, const pm_tensor *W, size_t row0, size_t rows);

/* Small-batch matmul: y[i, j] (=|+=) scale * dot(W[j, :], x[i, :]) for i < n (n small).
 * accumulate=0: y = dot (scale ignored); accumulate=1: y += scale*dot.
 * Streams W once per call whatever n is. Per-(i, j) arithmetic is independent of n and of the
 * thread count (determinism contract of ops.h). */
void pm_kern_gemv(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate);
void pm_kern_gemv_c(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate);
/* pm_kern_gemv's arithmetic for any number of inputs (bf16 weights on AVX-512; otherwise it is
 * pm_kern_gemv): 4-row x 4-input tiles over the whole row, no weight pack, same bits as
 * pm_kern_gemv_c. _takes: 1 where it beats the GEMM (bf16, AVX-512, n <= 40 when a 4-input group's
 * rows fit in half of L1, n <= 24 otherwise; never for a W that takes the bf16-product GEMM); ops.c
 * routes those products of n > PM_SMALL_N rows here. */
void pm_kern_gemv_many(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate);
int pm_kern_gemv_many_takes(const pm_tensor *W, int n);
/* The same on int8 weights (W->dtype == PM_DT_Q8, nn/quant.h; gemv_q8.c). pm_kern_gemv and
 * pm_kern_gemv_c hand Q8 weights to these. */
void pm_kern_gemv_q8(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate);
void pm_kern_gemv_q8_c(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate);
/* fp32 copy of rows [row0, row0 + rows) of a Q8 weight (single-threaded; exact (float)q * scale). */
void pm_kern_dequant_q8_rows(float *out, const pm_tensor *W, size_t row0, size_t rows);

/* Large-n matmul (prefill, encoders): y[n, out] = x @ W^T (accumulate = 0) or y += alpha * x @ W^T
 * (accumulate = 1). W bf16, or int8 on AVX-512 (see pm_kern_gemm_takes); the _c twin takes bf16.
 * Packs slivers of W per call, no fp32 copy of W. Threads take blocks of output columns; each
 * output's arithmetic depends on neither them nor the level (gemm.c). */
void pm_kern_gemm_bf16(float *y, const float *x, int n, const pm_tensor *W, float alpha, int accumulate);
void pm_kern_gemm_bf16_c(float *y, const float *x, int n, const pm_tensor *W, float alpha, int accumulate);
/* y_w = x @ Ws[w]^T for count (<= PM_GEMM_MANY_MAX) weights of the same in, as count calls of
 * pm_kern_gemm_bf16 would give them bit for bit, with x packed once and one parallel region. */
#define PM_GEMM_MANY_MAX 8
void pm_kern_gemm_bf16_many(float *const *ys, const float *x, int n, const pm_tensor *const *Ws, int count);
/* 1 when pm_kern_gemm_bf16 is the fast path for W at the level in use: bf16 with AVX2 or better;
 * int8 (PM_DT_Q8, dequantized into the packed slivers) with AVX-512. Otherwise ops.c converts
 * panels for BLAS. */
int pm_kern_gemm_takes(const pm_tensor *W);
/* 1 when pm_kern_gemm_bf16 multiplies bf16 pairs for W (W->bf16_dot, bf16, the CPU has
 * AVX512-BF16 at the AVX-512 level: nn/gemm_dot.c); the _c twin does for any bf16_dot W. */
int pm_kern_gemm_dot_takes(const pm_tensor *W);
/* W (bf16, 2-D) packed once in the layout the AVX-512 GEMM packs per call, for W->gemm_pack: the
 * GEMM then reads it in place, no pack and no widening per call, same bits. A W that takes the
 * bf16-product path (pm_kern_gemm_dot_takes) is packed in that path's layout instead. NULL where
 * the CPU has no AVX-512 path, W is not bf16, or memory runs out. As many bytes as W (out rounded
 * up to 32, an odd in to even); the caller frees it. Threaded (call it outside a parallel region). */
uint16_t *pm_kern_gemm_pack(const pm_tensor *W);

/* y[i] = exp(x[i]) (Cephes polynomial, ~2 ulp; exactly 0 below -87.3; NaN passes). y may be x. */
void pm_kern_exp(float *y, const float *x, size_t n);
void pm_kern_exp_c(float *y, const float *x, size_t n);
/* In-place softmax of x[0..n) with that exp; an all -inf row becomes zeros. */
void pm_kern_softmax(float *x, int n);
void pm_kern_softmax_c(float *x, int n);
/* o[i] = u[i] * silu(g[i]) = u * g / (1 + exp(-g)); u == NULL: o[i] = silu(g[i]). o may alias g or u. */
void pm_kern_silu_mul(float *o, const float *g, const float *u, size_t n);
void pm_kern_silu_mul_c(float *o, const float *g, const float *u, size_t n);

/* Decode attention over n cached positions for g query heads sharing one KV head:
 * s[h*lds + t] = scale * dot(q + h*qs, K + t*ks) over D dims, for h < g, t < n. The SIMD paths
 * also prefetch rows t < n_ahead of `ahead` (same stride and D; NULL, 0: none), each line as they
 * load the same line of row t: the caller's next rows stream in while these compute, which a burst
 * of prefetches ahead of the arithmetic did not achieve. The results do not depend on it. */
void pm_kern_attn_scores(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D, float scale,
                         const float *ahead, int n_ahead);
void pm_kern_attn_scores_c(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D,
                           float scale);
/* o[h*os + d] += sum over t < n (in order) of p[h*ldp + t] * V[t*vs + d], for h < g, d < D; ahead,
 * n_ahead as above. */
void pm_kern_attn_accum(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D,
                        const float *ahead, int n_ahead);
void pm_kern_attn_accum_c(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D);
/* The same two with K / V rows of bf16 (a bf16 KV cache; ahead too): each value widened as it is
 * loaded, so the results are the fp32 kernels' on the rows widened, bit for bit. */
void pm_kern_attn_scores_bf16(float *s, size_t lds, const float *q, size_t qs, int g, const uint16_t *K, size_t ks, int n, int D,
                              float scale, const uint16_t *ahead, int n_ahead);
void pm_kern_attn_scores_bf16_c(float *s, size_t lds, const float *q, size_t qs, int g, const uint16_t *K, size_t ks, int n, int D,
                                float scale);
void pm_kern_attn_accum_bf16(float *o, size_t os, const float *p, size_t ldp, int g, const uint16_t *V, size_t vs, int n, int D,
                             const uint16_t *ahead, int n_ahead);
void pm_kern_attn_accum_bf16_c(float *o, size_t os, const float *p, size_t ldp, int g, const uint16_t *V, size_t vs, int n, int D);

/* Fused softmax attention of one KV head (flash.c). Query row r = (group g, row i), g < qgroups
 * (the query heads sharing the KV head; 0 counts as 1), i < nq, at q + g*ldqg + i*ldq, its output at
 * o + g*ldog + i*ldo:
 *   o[r][c] = sum_j p_rj v[j][c],  p_rj = softmax_j(scale * q[r] . k[j] + mask[j] + tbias[j - i])
 * over hd dims, keys j < nk, and j <= qpos0 + i when causal. mask: additive per key (0 or -FLT_MAX)
 * or NULL; tbias: a bias by j - i (relative position), indexable from 1 - nq to nk - 1, or NULL.
 * Keys: k + j*ldk and v + j*ldv, or, when key_block is set, key_block(ctx, 0 or 1, j0) gives the K
 * or V row of key j0 (a multiple of PM_FLASH_KEYS), the block's further rows ldk / ldv apart (a
 * paged cache). No more than a 12 x PM_FLASH_KEYS tile of scores exists at a time.
 * ws: pm_kern_flash_ws(nq * qgroups, hd) floats of scratch. pm_kern_flash_takes: 1 when a SIMD
 * path runs it; else pm_kern_flash is the slow portable twin (for tests), so keep a two-pass path
 * for those CPUs. */
#define PM_FLASH_KEYS 128
typedef struct {
    float *o;
    const float *q, *k, *v, *mask, *tbias;
    size_t ldo, ldq, ldk, ldv, ldog, ldqg;
    int nq, nk, hd, qgroups, causal, qpos0;
    float scale;
    const float *(*key_block)(const void *ctx, int kv, int j0);
    const void *ctx;
} pm_flash;
size_t pm_kern_flash_ws(int rows, int hd);
int pm_kern_flash_takes(void);
void pm_kern_flash(const pm_flash *a, float *ws);
void pm_kern_flash_c(const pm_flash *a, float *ws);

/* Dispatch levels, best last. A kernel runs the best path it has at or below the level in use. */
typedef enum { PM_KERN_PORTABLE, PM_KERN_AVX2, PM_KERN_AVX512 } pm_kern_level;
/* min(what the CPU offers, the cap). */
pm_kern_level pm_kern_level_in_use(void);
const char *pm_kern_level_name(pm_kern_level l);
/* 1 when the AVX2 (resp. AVX-512) paths are in use (for tests and the benchmark's report). */
int pm_kern_have_avx2(void);
int pm_kern_have_avx512(void);
/* 1 when the AVX-512 level is in use and the CPU has AVX512-BF16 (the GEMM's bf16-product path). */
int pm_kern_have_avx512bf16(void);
/* Caps the level (tests compare paths, the benchmark measures AVX2 against AVX-512). Not
 * thread-safe: call it with no kernel running. PM_KERN_AVX512 = no cap (the default). */
void pm_kern_cap(pm_kern_level max);
/* pm_kern_cap(on ? PM_KERN_PORTABLE : PM_KERN_AVX512). */
void pm_kern_force_portable(int on);

#endif
