/* gemm.c — the prefill / encoder matmul on bf16 weights: y[n, out] (=|+=) alpha * x[n, in] @ W^T
 * for n > PM_SMALL_N, without converting W to fp32 first.
 *
 * BLIS structure. C[M = n, N = out] = A[M, K = in] (the activations) x B[K, N] (B[k][j] = W[j][k]).
 * Work items are blocks of NC output columns (weight rows), taken dynamically by the threads.
 * Per item and per K slice (gemm_kc): the weight block is packed *as bf16* into 16-column slivers
 * (32 bytes per k: half the bytes of an fp32 pack, and no separate conversion pass over W), then
 * for each MC-row block of A, A is packed into 6-row slivers and the 6 x 16 micro-kernel runs over
 * every (A sliver, B sliver) pair: per k, one 32-byte load of B gives both 8-column halves (`<< 16`
 * and `& 0xffff0000`, the sliver is packed interleaved for that), 6 broadcasts of A, 12 FMAs into
 * 12 register accumulators.
 *
 * The AVX-512 path is the same design at twice the width: 32-column slivers packed the same way
 * (pairs (d, 16 + d)), 12-row A slivers, a 12 x 32 micro-kernel with 24 zmm accumulators (4- to
 * 11-row instances for a last A sliver that short) that widens B in registers. (Widening each slice
 * to fp32 slivers first, so that the k loop had no shift / and µops, was 3-5 % slower on Zen 5 at
 * 128-2048 rows: twice the bytes through L2. Int8 weights are still dequantized into fp32 slivers.
 * For few rows, a variant with the operands' roles swapped was slower. An earlier 16 x 16
 * transpose pack that read each weight line in two visits gained nothing; pack_b_512, which loads
 * each line whole, does.) A weight packed once (W->gemm_pack, pm_kern_gemm_pack:
 * all its slivers in this layout) is read in place: no pack and no B buffer per call.
 *
 * Arithmetic: each C element accumulates its K slice in k order with FMA from 0, then C =
 * (first slice ? beta * C : C) + alpha * slice. That does not depend on the tile shape, so the
 * AVX-512 and AVX2 paths and the portable twin (fmaf) give identical bits (tested); the twin is too
 * slow for production and only runs where the CPU has no AVX2 (then ops.c uses BLAS on converted
 * panels instead). */
#include "gemm_dot.h"
#include "kernels.h"
#include "ops.h"
#include "quant.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "simd.h"

#define MR 6 /* AVX2 and portable tile */
#define NR 16
#define MR5 12 /* AVX-512 tile */
#define NR5 32
#ifndef GEMM_KC_MAX
#define GEMM_KC_MAX 4096 /* the widest K slice (gemm_kc) */
#endif
#ifndef GEMM_MC
#define GEMM_MC 72
#endif
#ifndef GEMM_NC
#define GEMM_NC 256 /* the most columns per work item; gemm_nc() may take fewer (small L2) */
#endif
#define PACK_PF 64 /* pack_b_avx2 prefetches each weight row this many bf16 (two lines) ahead */

/* Packs W rows [j0, j0 + nc) x cols [k0, k0 + kc) into nc/nr slivers of [kc][nr] bf16 (nr = 16 or
 * 32), each interleaved as (col d, col nr/2 + d) pairs so that a dword's low half is column d and its
 * high half column nr/2 + d. Missing rows (past out) are zero. */
static void pack_b(uint16_t *bp, const uint16_t *w, int in, int out, int j0, int nc, int k0, int kc, int nr) {
    int half = nr / 2;
    for (int s = 0; s < nc; s += nr) {
        uint16_t *dst = bp + (size_t)s * kc;
        const uint16_t *rows[NR5];
        for (int c = 0; c < nr; c++) rows[c] = j0 + s + c < out ? w + (size_t)(j0 + s + c) * in + k0 : NULL;
        for (int d = 0; d < half; d++) {
            const uint16_t *lo = rows[d], *hi = rows[half + d];
            for (int k = 0; k < kc; k++) {
                dst[(size_t)k * nr + 2 * d] = lo ? lo[k] : 0;
                dst[(size_t)k * nr + 2 * d + 1] = hi ? hi[k] : 0;
            }
        }
    }
}

#ifdef PM_X86
/* In-place 8 x 8 transpose of 32-bit lanes: r[i] lane j -> r[j] lane i. */
AVX2_INLINE void transpose8(__m256 *r) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* pack_a (below) 8 k at a time: rows in groups of 8 (missing rows read as zeros), one 8 x 8
 * transpose per group, each k-row's mr floats stored as 8 + 4 (mr = 12) or 4 + 2 (mr = 6). */
AVX2 static void pack_a_avx2(float *dst, const float *const *src, int mr, int kc, const float *zero) {
    int k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int g = 0; g < mr; g += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps((g + i < mr ? src[g + i] : zero) + k);
            transpose8(r);
            int w = mr - g < 8 ? mr - g : 8;
            for (int i = 0; i < 8; i++) {
                float *d = dst + (size_t)(k + i) * mr + g;
                if (w == 8) _mm256_storeu_ps(d, r[i]);
                else {
                    _mm_storeu_ps(d, _mm256_castps256_ps128(r[i]));
                    if (w == 6) _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(r[i], 1));
                }
            }
        }
    for (; k < kc; k++)
        for (int r = 0; r < mr; r++) dst[(size_t)k * mr + r] = src[r][k];
}

/* Same as pack_b, 8 k at a time: per column pair (d, nr/2 + d) an unpack of the two rows' 8 bf16
 * gives 8 dwords over k; an 8 x 8 dword transpose per 8 pairs turns them into 8 packed k-rows. */
AVX2 static void pack_b_avx2(uint16_t *bp, const uint16_t *w, int in, int out, int j0, int nc, int k0, int kc, int nr,
                             const uint16_t *zero) {
    int half = nr / 2;
    for (int s = 0; s < nc; s += nr) {
        uint16_t *dst = bp + (size_t)s * kc;
        const uint16_t *rows[NR5];
        for (int c = 0; c < nr; c++) rows[c] = j0 + s + c < out ? w + (size_t)(j0 + s + c) * in + k0 : zero;
        int k = 0;
        for (; k + 8 <= kc; k += 8) {
            /* 16-32 row streams at once are more than the hardware prefetcher follows (Zen 5: +1-5 %) */
            if ((k & 31) == 0)
                for (int c = 0; c < nr; c++) _mm_prefetch((const char *)(rows[c] + k + PACK_PF), _MM_HINT_T0);
            for (int g = 0; g < half; g += 8) {
                __m256 r[8];
                for (int e = 0; e < 8; e++) {
                    __m128i lo = _mm_loadu_si128((const __m128i *)(rows[g + e] + k)),
                            hi = _mm_loadu_si128((const __m128i *)(rows[half + g + e] + k));
                    r[e] = _mm256_castsi256_ps(_mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi)));
                }
                transpose8(r);
                float *o = (float *)(dst + (size_t)k * nr) + g; /* k-row k + i starts i * half floats on */
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(o + i * half, r[i]);
            }
        }
        for (; k < kc; k++)
            for (int d = 0; d < half; d++) {
                dst[(size_t)k * nr + 2 * d] = rows[d][k];
                dst[(size_t)k * nr + 2 * d + 1] = rows[half + d][k];
            }
    }
}

/* pack_a for the 12-row AVX-512 sliver, 16 k at a time: each row's 64-byte line loaded whole, one
 * 16 x 16 transpose (4 rows of zeros), 12 floats stored per k-row (pack_a_avx2 loads half lines
 * and stores 8 + 4 floats per k-row; it was 3.4 % of SigLIP's samples). The whole GEMM in one
 * process (2 threads, alternating, 30 pairs): SigLIP's shapes at 2048 rows 1.015-1.016 x (19-21 of
 * 30 faster), the Conformer's and the decoder's 0.99-1.01 x; the same bits. */
AVX512 static void pack_a_512(float *dst, const float *const *src, int kc) {
    int k = 0;
    for (; k + 16 <= kc; k += 16) {
        __m512i r[16];
        for (int i = 0; i < MR5; i++) r[i] = _mm512_castps_si512(_mm512_loadu_ps(src[i] + k));
        for (int i = MR5; i < 16; i++) r[i] = _mm512_setzero_si512();
        pm_transpose16(r); /* r[j] lane i = src[i][k + j] */
        for (int j = 0; j < 16; j++) _mm512_mask_storeu_ps(dst + (size_t)(k + j) * MR5, (__mmask16)((1u << MR5) - 1), _mm512_castsi512_ps(r[j]));
    }
    for (; k < kc; k++)
        for (int r = 0; r < MR5; r++) dst[(size_t)k * MR5 + r] = src[r][k];
}
#endif

/* Packs the mr rows of x from row i0 x cols [k0, k0 + kc) into one sliver [kc][mr]; rows past M
 * are zero. */
static void pack_a(float *dst, const float *x, int in, int M, int i0, int mr, int k0, int kc, int simd, const float *zero) {
    const float *src[MR5];
    for (int r = 0; r < mr; r++) src[r] = i0 + r < M ? x + (size_t)(i0 + r) * in + k0 : zero;
#ifdef PM_X86
    if (simd && mr == MR5 && pm_kern_have_avx512()) {
        pack_a_512(dst, src, kc);
        return;
    }
    if (simd && (mr == 6 || mr == 12)) {
        pack_a_avx2(dst, src, mr, kc, zero);
        return;
    }
#endif
    for (int k = 0; k < kc; k++)
        for (int r = 0; r < mr; r++) dst[(size_t)k * mr + r] = src[r][k];
}

/* Writes a finished tile t (row stride ldt) into C: rows < mr, cols < nr. */
void pm_gemm_store_tile(float *c, size_t ldc, const float *t, int ldt, int mr, int nr, float alpha, int first, int beta_one) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float *cc = c + (size_t)i * ldc + j;
            float prev = first ? (beta_one ? *cc : 0.0f) : *cc;
            *cc = prev + alpha * t[i * ldt + j];
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
    pm_gemm_store_tile(c, ldc, t, NR, mr, nr, alpha, first, beta_one);
}

/* 16 bf16 of column d (lo) and of column 16 + d (hi) -> 16 dwords, k' of the pair in dword k'. */
AVX512_INLINE __m512i merge_words(__m256i lo, __m256i hi) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

AVX512_INLINE void merge_pairs16(__m512i *r, const uint16_t *const *rows, int k) {
    for (int d = 0; d < 16; d++)
        r[d] = merge_words(_mm256_loadu_si256((const __m256i *)(rows[d] + k)), _mm256_loadu_si256((const __m256i *)(rows[16 + d] + k)));
}

/* r[d] (16 dwords over k' for pair d) -> the k-rows dst + (k + k') * 32. */
AVX512_INLINE void transpose_store16(__m512i *r, uint16_t *dst, int k) {
    pm_transpose16(r);
    for (int i = 0; i < 16; i++) _mm512_storeu_si512((void *)(dst + (size_t)(k + i) * NR5), r[i]);
}

/* pack_b for the 32-column AVX-512 sliver (same layout and bits as pack_b_avx2, tested against the
 * portable pack through the GEMM). Per column pair (d, 16 + d) the two rows' bf16 are widened to
 * dwords and merged (low half d, high half 16 + d); a 16 x 16 dword transpose turns 16 such
 * pair-vectors into 16 packed k-rows of 64 bytes. Each row's 64-byte line is loaded whole, once (32
 * k: the second 16 wait in a buffer): weight rows 6 or 16 KB apart share L1 sets, and the 8 x 8
 * version, which read a line in four visits 32 rows apart, lost it between them. On Zen 5, one
 * thread, a 128 x 512 block of Phi-4-mini's weights from DRAM: 7.3-9.1 us against 13.4-13.9 (in =
 * 3072) and 9.9-10.8 against 19.8-21.6 (in = 8192); the GEMM at 128-512 rows, 1.02-1.03 x (the pack
 * had been ~15 % of its time at 128 rows). */
AVX512 static void pack_b_512(uint16_t *bp, const uint16_t *w, int in, int out, int j0, int nc, int k0, int kc, const uint16_t *zero) {
    for (int s = 0; s < nc; s += NR5) {
        uint16_t *dst = bp + (size_t)s * kc;
        const uint16_t *rows[NR5];
        for (int c = 0; c < NR5; c++) rows[c] = j0 + s + c < out ? w + (size_t)(j0 + s + c) * in + k0 : zero;
        __m512i r[16], later[16];
        int k = 0;
        for (; k + 32 <= kc; k += 32) {
            for (int c = 0; c < NR5; c++) _mm_prefetch((const char *)(rows[c] + k + PACK_PF), _MM_HINT_T0);
            for (int d = 0; d < 16; d++) {
                __m512i a = _mm512_loadu_si512((const void *)(rows[d] + k)), b = _mm512_loadu_si512((const void *)(rows[16 + d] + k));
                r[d] = merge_words(_mm512_castsi512_si256(a), _mm512_castsi512_si256(b));
                later[d] = merge_words(_mm512_extracti64x4_epi64(a, 1), _mm512_extracti64x4_epi64(b, 1));
            }
            transpose_store16(r, dst, k);
            transpose_store16(later, dst, k + 16);
        }
        if (k + 16 <= kc) {
            merge_pairs16(r, rows, k);
            transpose_store16(r, dst, k);
            k += 16;
        }
        for (; k < kc; k++)
            for (int d = 0; d < 16; d++) {
                dst[(size_t)k * NR5 + 2 * d] = rows[d][k];
                dst[(size_t)k * NR5 + 2 * d + 1] = rows[16 + d][k];
            }
    }
}

/* Int8 weights (quant.h) straight into fp32 slivers [kc][32] for the AVX-512 kernel: each row's
 * blocks are dequantized ((float)q * scale, the decode kernel's w) into tmp [32][kc], then 8 x 8
 * transposes lay them out k-major. kc and k0 are multiples of the 32-weight block. */
AVX512 static void pack_b_q8(float *dst, float *tmp, const pm_tensor *W, int out, int j0, int nc, int k0, int kc) {
    size_t nb = (size_t)W->shape[1] / PM_Q8_BLOCK;
    for (int s = 0; s < nc; s += NR5, dst += (size_t)NR5 * kc) {
        for (int c = 0; c < NR5; c++) {
            int j = j0 + s + c;
            float *t = tmp + (size_t)c * kc;
            if (j >= out) {
                memset(t, 0, sizeof(float) * (size_t)kc);
                continue;
            }
            for (int b = k0 / PM_Q8_BLOCK; b < (k0 + kc) / PM_Q8_BLOCK; b++, t += PM_Q8_BLOCK) {
                const uint8_t *rec = pm_q8_record(W, (size_t)j / PM_Q8_ROWS, (size_t)b, nb);
                const int8_t *q = pm_q8_quants(rec, j % PM_Q8_ROWS);
                __m512 sc = _mm512_set1_ps(pm_q8_scale(rec, j % PM_Q8_ROWS));
                for (int v = 0; v < PM_Q8_BLOCK; v += 16)
                    _mm512_storeu_ps(t + v, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + v)))), sc));
            }
        }
        for (int k = 0; k < kc; k += 8)
            for (int c = 0; c < NR5; c += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(tmp + (size_t)(c + i) * kc + k);
                transpose8(r);
                for (int i = 0; i < 8; i++) _mm256_store_ps(dst + (size_t)(k + i) * NR5 + c, r[i]);
            }
    }
}

/* The 12 x 32 micro-kernel: per k one 64-byte load of bf16 pairs that gives both 16-column halves
 * (b16 = 1: `<< 16` and `& 0xffff0000`) or two of fp32 B (b16 = 0: int8 weights' dequantized
 * slivers), 12 broadcasts of A, 24 FMAs into 24 zmm accumulators. The same products in the same
 * order either way. rows (4 to 12, a constant in each instance) computes the A sliver's first rows
 * only, for a last sliver of mr <= rows (a 13-row product ran 24 rows of FMAs). One instance per
 * row count from 4 up: with 4, 8 and 12 only, the 10 s clip's 125 rows (10 x 12 + 5) ran 8 rows of
 * FMAs in every last sliver; in one process, GEMMs on the Conformer's prepacked weights: 1.010 x at
 * 125 rows, 1.023 x at 137, 1.007 x at 113, and 0.995 x at 375 (a 3-row tail, which runs 4 either
 * way). */
AVX512_INLINE void kernel512(int kc, const float *a, const uint16_t *b, float *c, size_t ldc, int mr, int nr, float alpha, int first,
                             int beta_one, int b16, int rows) {
    __m512 acc[MR5][2];
#pragma GCC unroll 12
    for (int i = 0; i < rows; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
    for (int i = 0; i < mr; i++) {
        _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (size_t)i * ldc + 31), _MM_HINT_T0);
    }
    const float *bf = (const float *)b;
    for (int k = 0; k < kc; k++) {
        __m512 b0, b1;
        if (b16) {
            __m512i raw = _mm512_load_si512((const void *)(b + (size_t)k * NR5));
            b0 = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
            b1 = _mm512_castsi512_ps(_mm512_and_si512(raw, mask));
        } else {
            b0 = _mm512_load_ps(bf + (size_t)k * NR5);
            b1 = _mm512_load_ps(bf + (size_t)k * NR5 + 16);
        }
        pm_tile_fma_rows(acc, a + (size_t)k * MR5, b0, b1, rows);
    }
    pm_gemm_finish512(acc, rows, c, ldc, mr, nr, alpha, first, beta_one);
}

typedef void (*kernel512_fn)(int kc, const float *a, const uint16_t *b, float *c, size_t ldc, int mr, int nr, float alpha, int first,
                             int beta_one);
#define KERNEL512(B16, ROWS)                                                                                                          \
    AVX512 static void kernel512_##B16##_##ROWS(int kc, const float *a, const uint16_t *b, float *c, size_t ldc, int mr, int nr,      \
                                                float alpha, int first, int beta_one) {                                               \
        kernel512(kc, a, b, c, ldc, mr, nr, alpha, first, beta_one, B16, ROWS);                                                       \
    }
#define KERNEL512_ROWS(B16)                                                                                                           \
    KERNEL512(B16, 4) KERNEL512(B16, 5) KERNEL512(B16, 6) KERNEL512(B16, 7) KERNEL512(B16, 8) KERNEL512(B16, 9) KERNEL512(B16, 10)  \
    KERNEL512(B16, 11) KERNEL512(B16, 12)
KERNEL512_ROWS(0)
KERNEL512_ROWS(1)
#endif

/* Which path computes: the tile shape follows the kernel. MC (A rows per L2 block) is a multiple of
 * both MRs and does not change any result. PATH_DOT / PATH_DOT_C: the bf16-product path of a weight
 * with bf16_dot (gemm_dot.c; AVX512-BF16 and its twin), the AVX-512 tile's 12 x 32 shape. */
typedef enum { PATH_C, PATH_AVX2, PATH_AVX512, PATH_DOT, PATH_DOT_C } gemm_path;
static int is_dot(gemm_path p) { return p == PATH_DOT || p == PATH_DOT_C; }
typedef struct {
    gemm_path path;
    int mr, nr, mc, nc, kc; /* kc: the K slice width of this product (gemm_kc) */
} gemm_geom;

/* The K slice width for a product of depth `in`: as few slices as GEMM_KC_MAX allows, all of one
 * width (a multiple of 32, the pack's step) but the last, so that no short slice is left over
 * (Phi-4-mini's 3072, SigLIP's 1152 and the Conformer's 1024 and 1536 are one slice; 8192 is two
 * of 4096, 4304 is 2176 + 2128). Every slice is one more pass over C (its partial sums re-read, added
 * to and stored) and one more start of every micro-kernel, while the tile keeps up with operands
 * streamed from L2 or L3 (per k it reads 64 bytes of B and 12 floats of A for 24 FMAs). Against
 * the fixed 512 of before (Zen 5, 2 threads, one process, alternating): Phi-4-mini's four
 * projections 1.05 x at 128 rows, 1.15 x at 512, 1.27 x at 2048; the Conformer's prepacked ones
 * 1.11 x at 125 rows, 1.10 x at 375; SigLIP's 1.14-1.32 x at 1024; 4096 beat 2048 by 3-5 % and
 * tied with 8192. Whole passes: a 128-token prefill 1.05 x, 512 tokens 1.07 x, the 10 s clip's
 * Conformer 1.03 x, the 448 x 448 image 1.10 x. The slices partition the sum (C = C + alpha *
 * slice), so the width sets the bits; it depends on `in` only, and every path takes the same. */
static int gemm_kc(int in) {
    int slices = (in + GEMM_KC_MAX - 1) / GEMM_KC_MAX, kc = (in + slices - 1) / slices;
    return (kc + 31) & ~31;
}

/* Columns per work item: its packed weight block (one K slice) should fill at most half of L2, the
 * rest holding the A panel, at 6 bytes per weight on AVX-512 (int8: the bf16-sized scratch + fp32
 * slivers; bf16 needs 2), and no fewer than 64. With 512-wide slices that was 128 columns on Zen 5's
 * 1 MB L2 (256 put 1 MB of packed data through it: -6-20 % on the Conformer's 125-row products);
 * there it is 64 for every slice wider than ~680, which with 1024-wide slices beat 128 columns by
 * 0-6 % (128-512 rows). Same bits: NC only partitions the columns. */
static int gemm_nc(gemm_path p, int kc) {
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l2 < (128 << 10) || l2 > (64L << 20)) return GEMM_NC; /* unknown */
    int bytes = p == PATH_AVX512 ? 6 : 2; /* the dot path's pack is bf16 too */
    int nc = (int)(l2 / 2 / ((long)kc * bytes)) & ~63;
    return nc < 64 ? 64 : nc > GEMM_NC ? GEMM_NC : nc;
}

static gemm_geom geom_for(gemm_path p, int in) {
    int kc = gemm_kc(in);
    gemm_geom g = {p, MR, NR, GEMM_MC, gemm_nc(p, kc), kc};
    if (p == PATH_AVX512 || is_dot(p)) g = (gemm_geom){p, MR5, NR5, 2 * GEMM_MC, g.nc, kc};
    return g;
}

/* b16: on the AVX-512 path, bs is a sliver of bf16 pairs (else fp32: int8 weights). The AVX2 and
 * portable tiles always read bf16 pairs. */
static void run_tile(const gemm_geom *g, int kc, const float *as, const uint16_t *bs, int b16, float *c, size_t ldc, int mr, int nr,
                     float alpha, int first, int beta_one) {
    if (is_dot(g->path)) {
        pm_dot_tile(kc, (const uint32_t *)as, (const uint32_t *)bs, c, ldc, mr, nr, alpha, first, beta_one, g->path == PATH_DOT);
        return;
    }
#ifdef PM_X86
    if (g->path == PATH_AVX512) {
        /* a last sliver of mr rows runs max(mr, 4) rows of FMAs (below 4, fewer accumulators than
         * the FMA latency needs gain nothing) */
        static const kernel512_fn k[2][9] = {
            {kernel512_0_4, kernel512_0_5, kernel512_0_6, kernel512_0_7, kernel512_0_8, kernel512_0_9, kernel512_0_10, kernel512_0_11,
             kernel512_0_12},
            {kernel512_1_4, kernel512_1_5, kernel512_1_6, kernel512_1_7, kernel512_1_8, kernel512_1_9, kernel512_1_10, kernel512_1_11,
             kernel512_1_12}};
        k[b16][(mr < 4 ? 4 : mr) - 4](kc, as, bs, c, ldc, mr, nr, alpha, first, beta_one);
        return;
    }
    if (g->path == PATH_AVX2) {
        kernel_avx2(kc, as, bs, c, ldc, mr, nr, alpha, first, beta_one);
        return;
    }
#endif
    float t[MR * NR];
    kernel_c(kc, as, bs, t);
    pm_gemm_store_tile(c, ldc, t, NR, mr, nr, alpha, first, beta_one);
}

/* 1 when this call reads W's prepacked slivers in place (W->gemm_pack, made for the AVX-512 tile, or
 * in the dot layout for the AVX512-BF16 one: pm_kern_gemm_pack packs a bf16_dot weight that way
 * exactly where PATH_DOT will take it). */
static int prepacked(const gemm_geom *g, const pm_tensor *W) {
    return (g->path == PATH_AVX512 || g->path == PATH_DOT) && W->gemm_pack && W->dtype == PM_DT_BF16;
}

/* One NC-column work item: every KC slice, every MC block. apk: A packed for every slice
 * (slice p at p * Mr * g->kc, mr-row slivers of [kc][mr]). */
static void gemm_item(const gemm_geom *g, float *y, const float *apk, int M, int Mr, const pm_tensor *W, int out, int in, int j0, int nc,
                      float alpha, int beta_one, uint16_t *bp, float *bpf, const uint16_t *zero) {
    int ncr = (nc + g->nr - 1) / g->nr * g->nr, pre = prepacked(g, W);
    const uint16_t *w = (const uint16_t *)W->data;
    for (int k0 = 0, p = 0; k0 < in; k0 += g->kc, p++) {
        int kc = in - k0 < g->kc ? in - k0 : g->kc, first = k0 == 0, b16 = 1;
        const float *ap = apk + (size_t)p * Mr * g->kc;
        const uint16_t *bsrc = bp;
        size_t bstep = (size_t)kc; /* bf16 units from one sliver to the next, per column */
        if (is_dot(g->path) && pre) { /* sliver (j0 + s) / 32 at (j0 + s) * in2 dwords, this slice at k0 / 2 * 32 in it */
            size_t in2 = (size_t)(in + 1) / 2;
            bsrc = (const uint16_t *)((const uint32_t *)W->gemm_pack + (size_t)j0 * in2 + (size_t)k0 / 2 * NR5);
            bstep = 2 * in2;
        } else if (is_dot(g->path)) {
            pm_dot_pack_b((uint32_t *)bp, w, in, out, j0, ncr, k0, kc, zero, g->path == PATH_DOT);
            bstep = 2 * (size_t)((kc + 1) / 2);
        } else
#ifdef PM_X86
            if (pre) { /* sliver (j0 + s) / 32 at (j0 + s) * in, this slice at k0 * 32 in it */
            bsrc = W->gemm_pack + (size_t)j0 * in + (size_t)k0 * NR5;
            bstep = (size_t)in;
        } else if (W->dtype == PM_DT_Q8) { /* AVX-512 only (pm_kern_gemm_bf16 checks) */
            pack_b_q8(bpf, (float *)bp, W, out, j0, ncr, k0, kc);
            bsrc = (const uint16_t *)bpf;
            bstep = 2 * (size_t)kc;
            b16 = 0;
        } else if (g->path == PATH_AVX512)
            pack_b_512(bp, w, in, out, j0, ncr, k0, kc, zero);
        else if (g->path != PATH_C)
            pack_b_avx2(bp, w, in, out, j0, ncr, k0, kc, g->nr, zero);
        else
#endif
            pack_b(bp, w, in, out, j0, ncr, k0, kc, g->nr);
        for (int i0 = 0; i0 < M; i0 += g->mc) {
            int mc = M - i0 < g->mc ? M - i0 : g->mc, mcr = (mc + g->mr - 1) / g->mr * g->mr;
            for (int s = 0; s < ncr; s += g->nr) {
                int nr = nc - s < g->nr ? nc - s : g->nr;
                for (int r = 0; r < mcr; r += g->mr) {
                    int mr = mc - r < g->mr ? mc - r : g->mr;
                    run_tile(g, kc, ap + (size_t)(i0 + r) * kc, bsrc + (size_t)s * bstep, b16, y + (size_t)(i0 + r) * out + j0 + s,
                             (size_t)out, mr, nr, alpha, first, beta_one);
                }
            }
        }
    }
}

/* Rows [0, n) of several products that share x (same in): A is packed once, and the work items of
 * every weight go to the threads in one parallel region. */
static void gemm_rows(const gemm_geom *geom, float *const *ys, const float *x, int n, const pm_tensor *const *Ws, int count, float alpha,
                      int accumulate) {
    gemm_geom g = *geom;
    gemm_path path = g.path;
    int in = (int)Ws[0]->shape[1], nt = omp_get_max_threads(), own = 0, q8 = 0;
    /* Work items: runs of whole slivers, at most g.nc columns each, per weight as many as a multiple
     * of the thread count and equal to within one sliver (1152 columns on 2 threads: 6 x 192, not
     * 4 x 256 + 128, which left one thread idle for a tenth of the call). first[w]: weight w's first. */
    int first[PM_GEMM_MANY_MAX + 1];
    first[0] = 0;
    for (int w = 0; w < count; w++) {
        const pm_tensor *W = Ws[w];
        PM_ASSERT(W->dtype == PM_DT_BF16 || (W->dtype == PM_DT_Q8 && path == PATH_AVX512));
        PM_ASSERT(!is_dot(path) || W->dtype == PM_DT_BF16);
        PM_ASSERT((int)W->shape[1] == in);
        int S = ((int)W->shape[0] + g.nr - 1) / g.nr, per = g.nc / g.nr, items = (S + per - 1) / per;
        if (items % nt && items < S) items = (items + nt - 1) / nt * nt < S ? (items + nt - 1) / nt * nt : S;
        first[w + 1] = first[w] + items;
        own |= !prepacked(&g, W); /* else nothing to pack into */
        q8 |= W->dtype == PM_DT_Q8;
    }
    int slices = (in + g.kc - 1) / g.kc, Mr = (n + g.mr - 1) / g.mr * g.mr;
    int slivers = Mr / g.mr;
    float a = accumulate ? alpha : 1.0f;
    float *apk = aligned_alloc(64, sizeof(float) * (size_t)slices * Mr * g.kc);
    uint16_t *zero = calloc(g.kc + 16, sizeof(uint16_t));
    float *zero_f = calloc(g.kc + 16, sizeof(float)); /* the rows past M */
    PM_ASSERT(apk && zero && zero_f);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long q = 0; q < (long)slices * slivers; q++) {
            int p = (int)(q / slivers), sv = (int)(q % slivers), k0 = p * g.kc, kc = in - k0 < g.kc ? in - k0 : g.kc;
            float *dst = apk + (size_t)p * Mr * g.kc + (size_t)sv * g.mr * kc; /* a dot sliver needs half of it */
            if (is_dot(path)) {
                const float *src[MR5];
                for (int r = 0; r < MR5; r++) src[r] = sv * g.mr + r < n ? x + (size_t)(sv * g.mr + r) * in + k0 : zero_f;
                pm_dot_pack_a((uint32_t *)dst, src, kc, path == PATH_DOT);
            } else
                pack_a(dst, x, in, n, sv * g.mr, g.mr, k0, kc, path != PATH_C, zero_f);
        }
        uint16_t *bp = own ? aligned_alloc(64, sizeof(uint16_t) * g.nc * (g.kc + 2)) : NULL; /* + 2: an odd dot slice's pad */
        float *bpf = own && q8 ? aligned_alloc(64, sizeof(float) * g.nc * g.kc) : NULL; /* int8: fp32 slivers */
        PM_ASSERT(!own || (bp && (bpf || !q8)));
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < first[count]; it++) {
            int w = 0;
            while (it >= first[w + 1]) w++;
            int out = (int)Ws[w]->shape[0], S = (out + g.nr - 1) / g.nr, items = first[w + 1] - first[w], i = it - first[w];
            int s0 = (int)((long)i * S / items), s1 = (int)((long)(i + 1) * S / items);
            int j0 = s0 * g.nr, nc = (s1 * g.nr < out ? s1 * g.nr : out) - j0;
            gemm_item(&g, ys[w], apk, n, Mr, Ws[w], out, in, j0, nc, a, accumulate, bp, bpf, zero);
        }
        free(bp);
        free(bpf);
    }
    free(apk);
    free(zero);
    free(zero_f);
}

/* A is packed whole per call (every slice), and every work item streams all of it (one MC block
 * after another, per slice). Row blocks keep the packed A under GEMM_APK_MAX; rows do not depend
 * on each other, so the bits are the same, and the weights are packed once more per block. The
 * cap was first 24 MB, to stay under glibc's largest mmap threshold (a 75 MB buffer for SigLIP's
 * 4096-row chunks was mapped, faulted and zeroed afresh by every call: ~12 % of a 1344 x 896
 * image). 8 MB is faster on Zen 5's 32 MB L3 (2 threads, one process, alternating): 1.01-1.16 x
 * at 2048 rows over SigLIP's and Phi-4-mini's shapes, up to 1.19 x for SigLIP's fc2 (in = 4304)
 * at 512-1024 rows; 4 and 2 MB lost again (more weight packing). */
#ifndef GEMM_APK_MAX
#define GEMM_APK_MAX (8u << 20)
#endif
static void gemm_run(float *const *ys, const float *x, int n, const pm_tensor *const *Ws, int count, float alpha, int accumulate,
                     gemm_path path) {
    int in = (int)Ws[0]->shape[1];
    gemm_geom g = geom_for(path, in);
    size_t row_bytes = sizeof(float) * (size_t)((in + g.kc - 1) / g.kc) * g.kc;
    int cap = (int)(GEMM_APK_MAX / row_bytes) / g.mc * g.mc;
    if (cap < g.mc) cap = g.mc;
    int blocks = (n + cap - 1) / cap, rows = ((n + blocks - 1) / blocks + g.mr - 1) / g.mr * g.mr; /* even blocks, whole tiles */
    for (int i0 = 0; i0 < n; i0 += rows) {
        float *yb[PM_GEMM_MANY_MAX];
        for (int w = 0; w < count; w++) yb[w] = ys[w] + (size_t)i0 * Ws[w]->shape[0];
        gemm_rows(&g, yb, x + (size_t)i0 * in, n - i0 < rows ? n - i0 : rows, Ws, count, alpha, accumulate);
    }
}

/* A weight marked bf16_dot takes the dot path where the CPU has AVX512-BF16 (else the fp32 one). */
static int takes_dot(const pm_tensor *W) { return W->bf16_dot && W->dtype == PM_DT_BF16 && pm_kern_have_avx512bf16(); }

static gemm_path best_path(const pm_tensor *W) {
    return takes_dot(W) ? PATH_DOT : pm_kern_have_avx512() ? PATH_AVX512 : pm_kern_have_avx2() ? PATH_AVX2 : PATH_C;
}

/* The twin of a bf16_dot weight is the dot path's twin whatever the CPU (tests run it anywhere). */
void pm_kern_gemm_bf16_c(float *y, const float *x, int n, const pm_tensor *W, float alpha, int accumulate) {
    gemm_run(&y, x, n, &W, 1, alpha, accumulate, W->bf16_dot && W->dtype == PM_DT_BF16 ? PATH_DOT_C : PATH_C);
}

void pm_kern_gemm_bf16(float *y, const float *x, int n, const pm_tensor *W, float alpha, int accumulate) {
    gemm_run(&y, x, n, &W, 1, alpha, accumulate, best_path(W));
}

void pm_kern_gemm_bf16_many(float *const *ys, const float *x, int n, const pm_tensor *const *Ws, int count) {
    PM_ASSERT(count >= 1 && count <= PM_GEMM_MANY_MAX);
    for (int w = 1; w < count; w++) PM_ASSERT(takes_dot(Ws[w]) == takes_dot(Ws[0]));
    gemm_run(ys, x, n, Ws, count, 1.0f, 0, best_path(Ws[0]));
}

int pm_kern_gemm_dot_takes(const pm_tensor *W) { return takes_dot(W); }

int pm_kern_gemm_takes(const pm_tensor *W) {
    return W->dtype == PM_DT_BF16 ? pm_kern_have_avx2() : W->dtype == PM_DT_Q8 ? pm_kern_have_avx512() : 0;
}

uint16_t *pm_kern_gemm_pack(const pm_tensor *W) {
#ifdef PM_X86
    if (W->dtype != PM_DT_BF16 || W->ndim != 2 || !pm_kern_have_avx512() || W->shape[0] < 1 || W->shape[1] < 1) return NULL;
    int out = (int)W->shape[0], in = (int)W->shape[1], S = (out + NR5 - 1) / NR5, kc = gemm_kc(in);
    if (takes_dot(W)) { /* the dot layout, whole K: [ceil(in / 2)][32] pair dwords per sliver */
        size_t in2 = (size_t)(in + 1) / 2;
        uint32_t *pd = aligned_alloc(64, sizeof(uint32_t) * (size_t)S * NR5 * in2);
        uint16_t *z = calloc((size_t)in + 16, sizeof(uint16_t));
        if (pd && z) {
#pragma omp parallel for schedule(dynamic, 4)
            for (int s = 0; s < S; s++) pm_dot_pack_b(pd + (size_t)s * NR5 * in2, (const uint16_t *)W->data, in, out, s * NR5, NR5, 0, in, z, 1);
        } else {
            free(pd);
            pd = NULL;
        }
        free(z);
        return (uint16_t *)pd;
    }
    uint16_t *pk = aligned_alloc(64, sizeof(uint16_t) * (size_t)S * NR5 * in), *zero = calloc(kc + 16, sizeof(uint16_t));
    if (!pk || !zero) {
        free(pk);
        free(zero);
        return NULL;
    }
#pragma omp parallel for schedule(dynamic, 4)
    for (int s = 0; s < S; s++)
        for (int k0 = 0; k0 < in; k0 += kc) /* the layout does not depend on the slices it is packed in */
            pack_b_512(pk + (size_t)s * NR5 * in + (size_t)k0 * NR5, (const uint16_t *)W->data, in, out, s * NR5, NR5, k0,
                       in - k0 < kc ? in - k0 : kc, zero);
    free(zero);
    return pk;
#else
    (void)W;
    return NULL;
#endif
}
