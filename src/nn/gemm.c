/* gemm.c — the prefill / encoder matmul on bf16 weights: y[n, out] (=|+=) alpha * x[n, in] @ W^T
 * for n > PM_SMALL_N, without converting W to fp32 first.
 *
 * BLIS structure. C[M = n, N = out] = A[M, K = in] (the activations) x B[K, N] (B[k][j] = W[j][k]).
 * Work items are blocks of NC output columns (weight rows), taken dynamically by the threads.
 * Per item and per KC-slice of K: the weight block is packed *as bf16* into 16-column slivers
 * (32 bytes per k: half the bytes of an fp32 pack, and no separate conversion pass over W), then
 * for each MC-row block of A, A is packed into 6-row slivers and the 6 x 16 micro-kernel runs over
 * every (A sliver, B sliver) pair: per k, one 32-byte load of B gives both 8-column halves (`<< 16`
 * and `& 0xffff0000`, the sliver is packed interleaved for that), 6 broadcasts of A, 12 FMAs into
 * 12 register accumulators.
 *
 * Arithmetic: each C element accumulates its KC-slice in k order with FMA from 0, then C =
 * (first slice ? beta * C : C) + alpha * slice. The portable twin does exactly that with fmaf
 * (identical bits; tested); it is too slow for production and only runs where the CPU has no
 * AVX2 (then ops.c uses BLAS on converted panels instead). */
#include "kernels.h"
#include "ops.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "simd.h"

#define MR 6
#define NR 16
#ifndef GEMM_KC
#define GEMM_KC 512
#endif
#ifndef GEMM_MC
#define GEMM_MC 72
#endif
#ifndef GEMM_NC
#define GEMM_NC 256
#endif

/* Packs W rows [j0, j0 + nc) x cols [k0, k0 + kc) into nc/16 slivers of [kc][16] bf16, each 16-group
 * interleaved as (col d, col 8 + d) pairs so that a dword's low half is column d and its high half
 * column 8 + d. Missing rows (past out) are zero. */
static void pack_b(uint16_t *bp, const uint16_t *w, int in, int out, int j0, int nc, int k0, int kc) {
    for (int s = 0; s < nc; s += NR) {
        uint16_t *dst = bp + (size_t)s * kc;
        const uint16_t *rows[NR];
        for (int c = 0; c < NR; c++) rows[c] = j0 + s + c < out ? w + (size_t)(j0 + s + c) * in + k0 : NULL;
        for (int d = 0; d < 8; d++) {
            const uint16_t *lo = rows[d], *hi = rows[8 + d];
            for (int k = 0; k < kc; k++) {
                dst[(size_t)k * NR + 2 * d] = lo ? lo[k] : 0;
                dst[(size_t)k * NR + 2 * d + 1] = hi ? hi[k] : 0;
            }
        }
    }
}

#ifdef PM_X86
/* Same as pack_b, 8 k at a time: per column pair (d, 8 + d) an unpack of the two rows' 8 bf16
 * gives 8 dwords over k; an 8 x 8 dword transpose turns them into 8 packed k-rows. */
__attribute__((target("avx2,fma"))) static void pack_b_avx2(uint16_t *bp, const uint16_t *w, int in, int out, int j0, int nc, int k0,
                                                            int kc, const uint16_t *zero) {
    for (int s = 0; s < nc; s += NR) {
        uint16_t *dst = bp + (size_t)s * kc;
        const uint16_t *rows[NR];
        for (int c = 0; c < NR; c++) rows[c] = j0 + s + c < out ? w + (size_t)(j0 + s + c) * in + k0 : zero;
        int k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            for (int d = 0; d < 8; d++) {
                __m128i lo = _mm_loadu_si128((const __m128i *)(rows[d] + k)), hi = _mm_loadu_si128((const __m128i *)(rows[8 + d] + k));
                r[d] = _mm256_castsi256_ps(_mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi)));
            }
            __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
            __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
            __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
            __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            float *o = (float *)(dst + (size_t)k * NR);
            _mm256_storeu_ps(o + 0 * 8, _mm256_permute2f128_ps(u0, u4, 0x20));
            _mm256_storeu_ps(o + 1 * 8, _mm256_permute2f128_ps(u1, u5, 0x20));
            _mm256_storeu_ps(o + 2 * 8, _mm256_permute2f128_ps(u2, u6, 0x20));
            _mm256_storeu_ps(o + 3 * 8, _mm256_permute2f128_ps(u3, u7, 0x20));
            _mm256_storeu_ps(o + 4 * 8, _mm256_permute2f128_ps(u0, u4, 0x31));
            _mm256_storeu_ps(o + 5 * 8, _mm256_permute2f128_ps(u1, u5, 0x31));
            _mm256_storeu_ps(o + 6 * 8, _mm256_permute2f128_ps(u2, u6, 0x31));
            _mm256_storeu_ps(o + 7 * 8, _mm256_permute2f128_ps(u3, u7, 0x31));
        }
        for (; k < kc; k++)
            for (int d = 0; d < 8; d++) {
                dst[(size_t)k * NR + 2 * d] = rows[d][k];
                dst[(size_t)k * NR + 2 * d + 1] = rows[8 + d][k];
            }
    }
}
#endif

/* Packs x rows [i0, i0 + mc) x cols [k0, k0 + kc) into 6-row slivers [kc][6]; missing rows zero. */
static void pack_a(float *ap, const float *x, int in, int M, int i0, int mc, int k0, int kc) {
    for (int s = 0; s < mc; s += MR) {
        float *dst = ap + (size_t)s * kc;
        for (int r = 0; r < MR; r++) {
            int i = i0 + s + r;
            if (i < M) {
                const float *src = x + (size_t)i * in + k0;
                for (int k = 0; k < kc; k++) dst[(size_t)k * MR + r] = src[k];
            } else
                for (int k = 0; k < kc; k++) dst[(size_t)k * MR + r] = 0.0f;
        }
    }
}

/* Writes a finished 6 x 16 tile t (row stride NR) into C: rows < mr, cols < nr. */
static void store_tile(float *c, size_t ldc, const float *t, int mr, int nr, float alpha, int first, int beta_one) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float *cc = c + (size_t)i * ldc + j;
            float prev = first ? (beta_one ? *cc : 0.0f) : *cc;
            *cc = prev + alpha * t[i * NR + j];
        }
}

static void kernel_c(int kc, const float *a, const uint16_t *b, float *t) {
    for (int i = 0; i < MR * NR; i++) t[i] = 0.0f;
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < MR; i++) {
            float ai = a[(size_t)k * MR + i];
            for (int d = 0; d < 8; d++) {
                t[i * NR + d] = fmaf(ai, pm_bf16_to_f32(b[(size_t)k * NR + 2 * d]), t[i * NR + d]);
                t[i * NR + 8 + d] = fmaf(ai, pm_bf16_to_f32(b[(size_t)k * NR + 2 * d + 1]), t[i * NR + 8 + d]);
            }
        }
}

#ifdef PM_X86

/* The 6 x 16 micro-kernel; writes the slice result straight into C when the tile is full. */
AVX2 static void kernel_avx2(int kc, const float *a, const uint16_t *b, float *c, size_t ldc, int mr, int nr, float alpha, int first,
                             int beta_one) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00, c40 = c00,
           c41 = c00, c50 = c00, c51 = c00;
    const __m256i mask = _mm256_set1_epi32((int)0xffff0000u);
    /* C rows are a whole output row apart: fetch the tile now, the k loop hides the latency */
    for (int i = 0; i < mr; i++) _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
    for (int i = 0; i < mr; i++) _mm_prefetch((const char *)(c + (size_t)i * ldc + 15), _MM_HINT_T0);
    for (int k = 0; k < kc; k++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(b + (size_t)k * NR));
        __m256 b0 = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16)), b1 = _mm256_castsi256_ps(_mm256_and_si256(raw, mask));
        const float *ak = a + (size_t)k * MR;
        __m256 av = _mm256_broadcast_ss(ak + 0);
        c00 = _mm256_fmadd_ps(av, b0, c00);
        c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(ak + 1);
        c10 = _mm256_fmadd_ps(av, b0, c10);
        c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(ak + 2);
        c20 = _mm256_fmadd_ps(av, b0, c20);
        c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(ak + 3);
        c30 = _mm256_fmadd_ps(av, b0, c30);
        c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(ak + 4);
        c40 = _mm256_fmadd_ps(av, b0, c40);
        c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(ak + 5);
        c50 = _mm256_fmadd_ps(av, b0, c50);
        c51 = _mm256_fmadd_ps(av, b1, c51);
    }
    __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    if (mr == MR && nr == NR) {
        __m256 al = _mm256_set1_ps(alpha);
        for (int i = 0; i < MR; i++)
            for (int h = 0; h < 2; h++) {
                float *cc = c + (size_t)i * ldc + 8 * h;
                __m256 prev = first && !beta_one ? _mm256_setzero_ps() : _mm256_loadu_ps(cc);
                /* prev + alpha * acc, rounded like the scalar twin: mul then add, no fusion */
                _mm256_storeu_ps(cc, _mm256_add_ps(prev, _mm256_mul_ps(al, acc[i][h])));
            }
        return;
    }
    float t[MR * NR];
    for (int i = 0; i < MR; i++) {
        _mm256_storeu_ps(t + i * NR, acc[i][0]);
        _mm256_storeu_ps(t + i * NR + 8, acc[i][1]);
    }
    store_tile(c, ldc, t, mr, nr, alpha, first, beta_one);
}
#endif

/* One NC-column work item: every KC slice, every MC block. apk: A packed for every slice
 * (slice p at p * Mr * GEMM_KC, 6-row slivers of [kc][6]). */
static void gemm_item(float *y, const float *apk, int M, int Mr, const uint16_t *w, int out, int in, int j0, int nc, float alpha,
                      int beta_one, uint16_t *bp, const uint16_t *zero, int simd) {
    int ncr = (nc + NR - 1) / NR * NR;
    for (int k0 = 0, p = 0; k0 < in; k0 += GEMM_KC, p++) {
        int kc = in - k0 < GEMM_KC ? in - k0 : GEMM_KC, first = k0 == 0;
        const float *ap = apk + (size_t)p * Mr * GEMM_KC;
#ifdef PM_X86
        if (simd) pack_b_avx2(bp, w, in, out, j0, ncr, k0, kc, zero);
        else
#endif
            pack_b(bp, w, in, out, j0, ncr, k0, kc);
        for (int i0 = 0; i0 < M; i0 += GEMM_MC) {
            int mc = M - i0 < GEMM_MC ? M - i0 : GEMM_MC, mcr = (mc + MR - 1) / MR * MR;
            for (int s = 0; s < ncr; s += NR) {
                int nr = nc - s < NR ? nc - s : NR;
                for (int r = 0; r < mcr; r += MR) {
                    int mr = mc - r < MR ? mc - r : MR;
                    float *c = y + (size_t)(i0 + r) * out + j0 + s;
                    const float *as = ap + (size_t)(i0 + r) * kc;
#ifdef PM_X86
                    if (simd) {
                        kernel_avx2(kc, as, bp + (size_t)s * kc, c, (size_t)out, mr, nr, alpha, first, beta_one);
                        continue;
                    }
#endif
                    float t[MR * NR];
                    kernel_c(kc, as, bp + (size_t)s * kc, t);
                    store_tile(c, (size_t)out, t, mr, nr, alpha, first, beta_one);
                }
            }
        }
    }
}

static void gemm_run(float *y, const float *x, int n, const pm_tensor *W, float alpha, int accumulate, int simd) {
    int out = (int)W->shape[0], in = (int)W->shape[1];
    const uint16_t *w = (const uint16_t *)W->data;
    int items = (out + GEMM_NC - 1) / GEMM_NC, slices = (in + GEMM_KC - 1) / GEMM_KC, Mr = (n + MR - 1) / MR * MR;
    int slivers = Mr / MR;
    float a = accumulate ? alpha : 1.0f;
    float *apk = aligned_alloc(64, sizeof(float) * (size_t)slices * Mr * GEMM_KC);
    uint16_t *zero = calloc(GEMM_KC + 16, sizeof(uint16_t));
    PM_ASSERT(apk && zero);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long q = 0; q < (long)slices * slivers; q++) {
            int p = (int)(q / slivers), sv = (int)(q % slivers), k0 = p * GEMM_KC, kc = in - k0 < GEMM_KC ? in - k0 : GEMM_KC;
            pack_a(apk + (size_t)p * Mr * GEMM_KC + (size_t)sv * MR * kc, x, in, n, sv * MR, MR, k0, kc);
        }
        uint16_t *bp = aligned_alloc(64, sizeof(uint16_t) * GEMM_NC * GEMM_KC);
        PM_ASSERT(bp);
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            int j0 = it * GEMM_NC, nc = out - j0 < GEMM_NC ? out - j0 : GEMM_NC;
            gemm_item(y, apk, n, Mr, w, out, in, j0, nc, a, accumulate, bp, zero, simd);
        }
        free(bp);
    }
    free(apk);
    free(zero);
}

void pm_kern_gemm_bf16_c(float *y, const float *x, int n, const pm_tensor *W, float alpha, int accumulate) {
    gemm_run(y, x, n, W, alpha, accumulate, 0);
}

void pm_kern_gemm_bf16(float *y, const float *x, int n, const pm_tensor *W, float alpha, int accumulate) {
    gemm_run(y, x, n, W, alpha, accumulate, pm_kern_have_avx2());
}
