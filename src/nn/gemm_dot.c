/* gemm_dot.c — the GEMM's opt-in bf16-product path (`--compute bf16`, a weight's `bf16_dot`): the
 * activations are rounded to bf16 (round to nearest even) as A is packed, and the micro-kernel
 * multiplies bf16 pairs with VDPBF16PS (AVX512-BF16), accumulating in fp32. That is how a bf16
 * model runs on a GPU (inputs bf16, fp32 accumulation); one instruction does 32 multiply-adds
 * where an fp32 FMA does 16, and Zen 5 issues both at the same rate (measured: 6.1-6.3 G
 * instructions/s per core for either), so the compute-bound products (prefill, encoders) get up to
 * twice the arithmetic. The default fp32 path rounds nothing; this one changes the bits (phi4mm
 * parity --compute bf16 reports the agreement).
 *
 * Layout: K is taken in pairs (k, k + 1), a dword each, low half k (an odd slice width ends in a
 * pair padded with 0). A sliver: 12 rows, [kc2][12] dwords. B sliver: 32 weight rows (output
 * columns), [kc2][32] dwords: a weight row's pair is already adjacent in W, so packing is a dword
 * transpose, no widening. Per pair the tile loads two 64-byte B vectors, broadcasts 12 A dwords and
 * runs 24 VDPBF16PS into 24 zmm accumulators.
 *
 * Arithmetic (the portable twin reproduces it bit for bit, tests/unit/test_kernels.c): per pair,
 * acc = fma(a_odd, b_odd, acc) then acc = fma(a_even, b_even, acc) (the products of two bf16 are
 * exact in fp32), the order the instruction uses (checked on Zen 5 against both orders and against
 * one rounded pair sum: only this matches); inputs that are denormal count as 0 and denormal
 * results flush to 0, as the instruction does. The C update is gemm.c's (C = prev + alpha * slice). */
#include "gemm_dot.h"
#include "ops.h"

#include <math.h>
#include <string.h>
#include "simd.h"

#define MR 12
#define NR 32

/* ---- the portable twin ---- */

static float f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* VCVTNE2PS2BF16 on one value: NaN quietened, denormals to signed 0, else round to nearest even. */
static uint16_t round_bf16(float f) {
    uint32_t u = bits_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float daz(uint16_t h) { return (h & 0x7f80u) ? f32_bits((uint32_t)h << 16) : 0.0f; }

static float ftz(float f) { return (bits_f32(f) & 0x7f800000u) ? f : f32_bits(bits_f32(f) & 0x80000000u); }

static void pack_a_c(uint32_t *dst, const float *const *src, int kc) {
    for (int k = 0; k < kc; k += 2)
        for (int r = 0; r < MR; r++) {
            uint32_t lo = round_bf16(src[r][k]), hi = k + 1 < kc ? round_bf16(src[r][k + 1]) : 0;
            dst[(size_t)(k / 2) * MR + r] = lo | hi << 16;
        }
}

static void pack_b_c(uint32_t *dst, const uint16_t *const *rows, int kc) {
    for (int k = 0; k < kc; k += 2)
        for (int c = 0; c < NR; c++) {
            uint32_t lo = rows[c][k], hi = k + 1 < kc ? rows[c][k + 1] : 0;
            dst[(size_t)(k / 2) * NR + c] = lo | hi << 16;
        }
}

static void tile_c(int kc2, const uint32_t *a, const uint32_t *b, float *t) {
    for (int i = 0; i < MR * NR; i++) t[i] = 0.0f;
    for (int p = 0; p < kc2; p++)
        for (int i = 0; i < MR; i++) {
            uint32_t ap = a[(size_t)p * MR + i];
            for (int j = 0; j < NR; j++) {
                uint32_t bp = b[(size_t)p * NR + j];
                float acc = t[i * NR + j];
                acc = ftz(fmaf(daz((uint16_t)(ap >> 16)), daz((uint16_t)(bp >> 16)), acc));
                t[i * NR + j] = ftz(fmaf(daz((uint16_t)ap), daz((uint16_t)bp), acc));
            }
        }
}

/* ---- AVX512-BF16 ---- */

#ifdef PM_X86
#define DOT512 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma")))
#define DOT512_INLINE __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma"), always_inline)) static inline

/* 16 k of each of the 12 rows (16 zero rows padded to 16) rounded into 8 pairs, 16 k at a time
 * through one transpose: r[j] lane i = row i's pair j. */
DOT512 static void pack_a_512(uint32_t *dst, const float *const *src, int kc) {
    int k = 0;
    for (; k + 32 <= kc; k += 32) {
        __m512i r[16];
        for (int i = 0; i < MR; i++)
            r[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src[i] + k + 16), _mm512_loadu_ps(src[i] + k));
        for (int i = MR; i < 16; i++) r[i] = _mm512_setzero_si512();
        pm_transpose16(r);
        for (int j = 0; j < 16; j++) _mm512_mask_storeu_epi32(dst + (size_t)(k / 2 + j) * MR, (__mmask16)((1u << MR) - 1), r[j]);
    }
    if (k < kc) {
        const float *rest[MR];
        for (int i = 0; i < MR; i++) rest[i] = src[i] + k;
        pack_a_c(dst + (size_t)(k / 2) * MR, rest, kc - k);
    }
}

/* 32 k of 16 rows are 16 rows of 16 pairs: one transpose gives 16 packed pair-rows' half. */
DOT512 static void pack_b_512(uint32_t *dst, const uint16_t *const *rows, int kc) {
    int k = 0;
    for (; k + 32 <= kc; k += 32) {
        for (int h = 0; h < 2; h++) {
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                _mm_prefetch((const char *)(rows[16 * h + i] + k + 64), _MM_HINT_T0);
                r[i] = _mm512_loadu_si512((const void *)(rows[16 * h + i] + k));
            }
            pm_transpose16(r);
            for (int j = 0; j < 16; j++) _mm512_store_si512((void *)(dst + (size_t)(k / 2 + j) * NR + 16 * h), r[j]);
        }
    }
    if (k < kc) {
        const uint16_t *rest[NR];
        for (int c = 0; c < NR; c++) rest[c] = rows[c] + k;
        pack_b_c(dst + (size_t)(k / 2) * NR, rest, kc - k);
    }
}

DOT512_INLINE void tile512(int kc2, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, int mr, int nr, float alpha, int first,
                           int beta_one, int rows) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < rows; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int i = 0; i < mr; i++) {
        _mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + (size_t)i * ldc + 31), _MM_HINT_T0);
    }
    for (int p = 0; p < kc2; p++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)(b + (size_t)p * NR)),
                 b1 = (__m512bh)_mm512_load_si512((const void *)(b + (size_t)p * NR + 16));
        const uint32_t *ap = a + (size_t)p * MR;
#pragma GCC unroll 12
        for (int i = 0; i < rows; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
    pm_gemm_finish512(acc, rows, c, ldc, mr, nr, alpha, first, beta_one);
}

typedef void (*tile_fn)(int kc2, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, int mr, int nr, float alpha, int first,
                        int beta_one);
#define TILE512(ROWS)                                                                                                               \
    DOT512 static void tile512_##ROWS(int kc2, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, int mr, int nr,        \
                                      float alpha, int first, int beta_one) {                                                     \
        tile512(kc2, a, b, c, ldc, mr, nr, alpha, first, beta_one, ROWS);                                                           \
    }
TILE512(4) TILE512(5) TILE512(6) TILE512(7) TILE512(8) TILE512(9) TILE512(10) TILE512(11) TILE512(12)
#endif

/* ---- entry points (gemm_dot.h) ---- */

void pm_dot_pack_a(uint32_t *dst, const float *const *src, int kc, int simd) {
#ifdef PM_X86
    if (simd) {
        pack_a_512(dst, src, kc);
        return;
    }
#endif
    (void)simd;
    pack_a_c(dst, src, kc);
}

void pm_dot_pack_b(uint32_t *dst, const uint16_t *w, int in, int out, int j0, int nc, int k0, int kc, const uint16_t *zero, int simd) {
    size_t sliver = (size_t)NR * ((kc + 1) / 2);
    for (int s = 0; s < nc; s += NR, dst += sliver) {
        const uint16_t *rows[NR];
        for (int c = 0; c < NR; c++) rows[c] = j0 + s + c < out ? w + (size_t)(j0 + s + c) * in + k0 : zero;
#ifdef PM_X86
        if (simd) {
            pack_b_512(dst, rows, kc);
            continue;
        }
#endif
        pack_b_c(dst, rows, kc);
    }
}

void pm_dot_tile(int kc, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, int mr, int nr, float alpha, int first, int beta_one,
                 int simd) {
    int kc2 = (kc + 1) / 2;
#ifdef PM_X86
    if (simd) {
        static const tile_fn k[9] = {tile512_4, tile512_5, tile512_6, tile512_7, tile512_8, tile512_9, tile512_10, tile512_11, tile512_12};
        k[(mr < 4 ? 4 : mr) - 4](kc2, a, b, c, ldc, mr, nr, alpha, first, beta_one);
        return;
    }
#endif
    (void)simd;
    float t[MR * NR];
    tile_c(kc2, a, b, t);
    pm_gemm_store_tile(c, ldc, t, NR, mr, nr, alpha, first, beta_one);
}
