/* simd.h — what the SIMD kernel files share (internal to src/nn): PM_X86 when compiling for
 * x86-64, the AVX2 / AVX-512 function attributes (each kernel is compiled for its ISA by attribute, so the
 * binary still runs on any x86-64; kernels.c dispatches at run time), and hsum256, the one lane
 * fold every 8-lane dot product uses ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); the portable twins
 * reproduce that order to get the same bits; and the decode kernels' chunk and k-block rules. */
#ifndef PM_NN_SIMD_H
#define PM_NN_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

/* exp's constants (Cephes expf), shared by vmath.c's 8-lane exp and its twin and flash.c's
 * 16-lane one: valid range, log2(e), ln 2 split in two, and the polynomial. */
#define PM_EXP_HI 88.0f
#define PM_EXP_LO -87.33654f
#define PM_EXP_LOG2E 1.44269504088896341f
#define PM_EXP_C1 0.693359375f
#define PM_EXP_C2 -2.12194440e-4f
#define PM_EXP_P0 1.9875691500E-4f
#define PM_EXP_P1 1.3981999507E-3f
#define PM_EXP_P2 8.3334519073E-3f
#define PM_EXP_P3 4.1665795894E-2f
#define PM_EXP_P4 1.6666665459E-1f
#define PM_EXP_P5 5.0000001201E-1f

#if defined(__x86_64__)
#include <immintrin.h>
#define PM_X86 1
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline
/* AVX-512 kernels (F + BW; kernels.c checks both) */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))
#define AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx2,fma"), always_inline)) static inline

AVX2_INLINE float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* The register tiles the 16-lane kernels share (compile-time rows and widths once inlined):
 * acc[i][h] += a[i] * b_h for i < rows: the broadcast step of the 12 x 32 tiles (gemm.c's GEMM,
 * flash.c's scores). */
AVX512_INLINE void pm_tile_fma_rows(__m512 acc[][2], const float *a, __m512 b0, __m512 b1, int rows) {
#pragma GCC unroll 12
    for (int i = 0; i < rows; i++) {
        __m512 av = _mm512_set1_ps(a[i]);
        acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
}

/* o[r*os + c + 16z] += sum over t < n, in order, of p[r*ldp + t] * V[t*vs + c + 16z], for r < R
 * (<= 4) and z < Z (<= 8; R * Z <= 24): weights x values, as attn.c's decode accumulation and
 * flash.c do it. Z > 6 (R <= 3) loads each row's values in two halves, so that R x Z accumulators,
 * Z / 2 values and the R weights fit the 32 registers. Rows t < npf of pf (stride vs) are prefetched
 * in lockstep, each line as the same line of V's row t is loaded (npf = 0: none). BF = 1: V and pf
 * hold bf16 (a bf16 KV cache), each value widened exactly as it is loaded, so the bits are those of
 * the fp32 rows widened. */
AVX512_INLINE __m512 pm_pv_load(const void *V, const void *pf, size_t at, int c, int z, int pre, int BF) {
    if (pre && (!BF || !((c + 16 * z) & 31))) _mm_prefetch((const char *)pf + (at + 16 * (size_t)z) * (BF ? 2 : 4), _MM_HINT_T0);
    return BF ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)V + at + 16 * z))), 16))
              : _mm512_loadu_ps((const float *)V + at + 16 * z);
}
AVX512_INLINE void pm_tile_pv_t(float *o, size_t os, const float *p, size_t ldp, const void *V, size_t vs, int n, int c, int R, int Z,
                                const void *pf, int npf, int BF) {
    __m512 acc[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int z = 0; z < Z; z++) acc[r][z] = _mm512_loadu_ps(o + (size_t)r * os + c + 16 * z);
    for (int t = 0; t < n; t++) {
        size_t at = (size_t)t * vs + (size_t)c;
        if (Z <= 6) {
            __m512 vv[6];
#pragma GCC unroll 6
            for (int z = 0; z < Z; z++) vv[z] = pm_pv_load(V, pf, at, c, z, t < npf, BF);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512 pv = _mm512_set1_ps(p[(size_t)r * ldp + t]);
#pragma GCC unroll 6
                for (int z = 0; z < Z; z++) acc[r][z] = _mm512_fmadd_ps(pv, vv[z], acc[r][z]);
            }
            continue;
        }
        __m512 pv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) pv[r] = _mm512_set1_ps(p[(size_t)r * ldp + t]);
#pragma GCC unroll 2
        for (int z0 = 0; z0 < Z; z0 += Z / 2) {
            __m512 vv[4];
#pragma GCC unroll 4
            for (int z = 0; z < Z / 2; z++) vv[z] = pm_pv_load(V, pf, at, c, z0 + z, t < npf, BF);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int z = 0; z < Z / 2; z++) acc[r][z0 + z] = _mm512_fmadd_ps(pv[r], vv[z], acc[r][z0 + z]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int z = 0; z < Z; z++) _mm512_storeu_ps(o + (size_t)r * os + c + 16 * z, acc[r][z]);
}
AVX512_INLINE void pm_tile_pv(float *o, size_t os, const float *p, size_t ldp, const float *V, size_t vs, int n, int c, int R, int Z,
                              const float *pf, int npf) {
    pm_tile_pv_t(o, os, p, ldp, V, vs, n, c, R, Z, pf, npf, 0);
}

/* In-place transpose of a 16 x 16 dword matrix: r[i] lane j -> r[j] lane i (gemm.c packs bf16 pairs
 * with it, flash.c keys). */
AVX512_INLINE void pm_transpose16(__m512i *r) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) { /* lane L of t[i], t[i+1]: rows i, i+1 at columns 4L .. 4L+3 */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* lane L of r[i + b]: rows i .. i+3 at column 4L + b */
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int b = 0; b < 4; b++) {
        __m512i vl = _mm512_shuffle_i32x4(r[b], r[4 + b], 0x88), vh = _mm512_shuffle_i32x4(r[b], r[4 + b], 0xdd);
        __m512i wl = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0x88), wh = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0xdd);
        r[b] = _mm512_shuffle_i32x4(vl, wl, 0x88);
        r[4 + b] = _mm512_shuffle_i32x4(vh, wh, 0x88);
        r[8 + b] = _mm512_shuffle_i32x4(vl, wl, 0xdd);
        r[12 + b] = _mm512_shuffle_i32x4(vh, wh, 0xdd);
    }
}

/* 16-lane fold: lanes (l, l + 8) first, then hsum256's order (the 16-lane twins reproduce it). */
AVX512_INLINE float hsum512(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum256(_mm256_add_ps(lo, hi));
}

/* hsum256 of 8 vectors at once, held two per zmm (lanes 0-7 v[2p], 8-15 v[2p + 1]): lane k of the
 * result is hsum256(v[k]), the same bits, its folds done side by side (halves, then (l, l + 2),
 * then (0, 1)) instead of one latency chain each. */
AVX512_INLINE __m256 pm_hsum256_x8(const __m512 *p) {
    /* [v0 lo, v1 lo, v2 lo, v3 lo] + [v0 hi, ...]: each 128-bit lane b = (a0+a4, a1+a5, a2+a6, a3+a7) */
    __m512 b03 = _mm512_add_ps(_mm512_shuffle_f32x4(p[0], p[1], 0x88), _mm512_shuffle_f32x4(p[0], p[1], 0xdd));
    __m512 b47 = _mm512_add_ps(_mm512_shuffle_f32x4(p[2], p[3], 0x88), _mm512_shuffle_f32x4(p[2], p[3], 0xdd));
    /* lane i: (b0+b2, b1+b3) of vector i, then of vector i + 4 */
    __m512 c = _mm512_add_ps(_mm512_shuffle_ps(b03, b47, 0x44), _mm512_shuffle_ps(b03, b47, 0xee));
    /* lane i: the sums of vectors i and i + 4 */
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(c, c, 0x88), _mm512_shuffle_ps(c, c, 0xdd));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, r));
}

/* out[k] = hsum512(a[k]) for 16 vectors, the same bits: each pair's (l, l + 8) folds share a zmm,
 * then pm_hsum256_x8. (The decode GEMV's tiles end in up to 16 sums per 4 rows: one at a time they
 * were 5 % of a batch-8 step.) */
AVX512_INLINE void pm_hsum512_x16(const __m512 *a, float *out) {
    __m512 p[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        p[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44), _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xee));
    _mm256_storeu_ps(out, pm_hsum256_x8(p));
    _mm256_storeu_ps(out + 8, pm_hsum256_x8(p + 4));
}
#endif

/* Dynamic-schedule chunk of the decode kernels: ~512 KB of weights per grab (one long sequential
 * stream for the prefetchers; a descheduled thread does not leave the others idle at the barrier
 * with half the matrix undone), at least 4 grabs per thread, at least one block. */
static inline int pm_gemv_chunk(int blocks, size_t block_bytes, int threads) {
    long chunk = (long)((512u << 10) / (block_bytes ? block_bytes : 1));
    if (chunk > blocks / (4 * threads)) chunk = blocks / (4 * threads);
    return chunk < 1 ? 1 : (int)chunk;
}

/* The L1 data cache in bytes; unknown: the smallest L1 of AVX2 parts. */
static inline long pm_l1d_bytes(void) {
    long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return l1 < 16384 || l1 > (1 << 20) ? 32768 : l1;
}

/* k-block length (a multiple of 32) of the batched decode kernels for n inputs: their slices of
 * the block fill half of the L1 data cache, the other half holds the weights' slice and the next
 * one being prefetched. */
static inline int pm_gemv_kblock(int n) {
    long l1 = pm_l1d_bytes();
    int kb = (int)(l1 / 2 / (long)sizeof(float) / (n > 0 ? n : 1)) & ~31;
    return kb < 128 ? 128 : kb;
}

#endif
