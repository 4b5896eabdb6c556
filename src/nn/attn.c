/* attn.c — the two inner loops of single-query (decode) attention over a block of cached
 * positions, for the g query heads that share one KV head (GQA):
 *   scores  s[h][t] = scale * dot(q_h, K_t)
 *   accum   o_h    += sum_t p[h][t] * V_t     (t in order)
 * Reading each K/V row once for all g heads of its group keeps the cache traffic at one pass.
 * Every dot is one 8-lane FMA chain folded like hsum256, every accumulation an in-order FMA per
 * element (AVX-512 runs the dots two keys to a register and the accumulation 16 columns wide, the
 * same chains); the portable twins do the same with fmaf, so every path gives identical bits.
 * K and V rows are fp32 or, for a bf16 KV cache, bf16 (BF = 1, a compile-time constant at every
 * call): each element is widened exactly as it is loaded, so the bits are those of the fp32 kernels
 * on the rows widened. */
#include "kernels.h"

#include <math.h>
#include <stddef.h>
#include "ops.h"
#include "simd.h"

/* Element i of a row of fp32 (BF = 0) or bf16 (BF = 1) values. */
static inline float kv_at(const void *p, size_t i, int BF) {
    return BF ? pm_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* ---- portable ---- */

static float dot_c(const void *a, const float *b, int D, int BF) {
    float acc[8] = {0};
    int c = 0;
    for (; c + 8 <= D; c += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(kv_at(a, (size_t)(c + l), BF), b[c + l], acc[l]);
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (; c < D; c++) s += kv_at(a, (size_t)c, BF) * b[c];
    return s;
}

static void scores_c(float *s, size_t lds, const float *q, size_t qs, int g, const void *K, size_t ks, int n, int D, float scale, int BF) {
    for (int h = 0; h < g; h++)
        for (int t = 0; t < n; t++)
            s[(size_t)h * lds + t] = dot_c((const char *)K + (size_t)t * ks * (BF ? 2 : 4), q + (size_t)h * qs, D, BF) * scale;
}

static void accum_c(float *o, size_t os, const float *p, size_t ldp, int g, const void *V, size_t vs, int n, int D, int BF) {
    for (int h = 0; h < g; h++) {
        float *oh = o + (size_t)h * os;
        for (int t = 0; t < n; t++) {
            float pt = p[(size_t)h * ldp + t];
            for (int d = 0; d < D; d++) oh[d] = fmaf(pt, kv_at(V, (size_t)t * vs + (size_t)d, BF), oh[d]);
        }
    }
}

void pm_kern_attn_scores_c(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D,
                           float scale) {
    scores_c(s, lds, q, qs, g, K, ks, n, D, scale, 0);
}
void pm_kern_attn_scores_bf16_c(float *s, size_t lds, const float *q, size_t qs, int g, const uint16_t *K, size_t ks, int n, int D,
                                float scale) {
    scores_c(s, lds, q, qs, g, K, ks, n, D, scale, 1);
}
void pm_kern_attn_accum_c(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D) {
    accum_c(o, os, p, ldp, g, V, vs, n, D, 0);
}
void pm_kern_attn_accum_bf16_c(float *o, size_t os, const float *p, size_t ldp, int g, const uint16_t *V, size_t vs, int n, int D) {
    accum_c(o, os, p, ldp, g, V, vs, n, D, 1);
}

/* ---- AVX2 ---- */

#ifdef PM_X86

/* 8 values of a row from element i, widened when BF. */
AVX2_INLINE __m256 kv_load8(const void *p, size_t i, int BF) {
    if (BF) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))), 16));
    return _mm256_loadu_ps((const float *)p + i);
}

/* Prefetch of element i of a row (once per cache line: callers ask every 16 fp32 / 32 bf16). */
#define KV_PF(p, i, BF) _mm_prefetch((const char *)(p) + (size_t)(i) * ((BF) ? 2 : 4), _MM_HINT_T0)

/* TT keys x GH heads register tile (compile-time sizes). */
AVX2_INLINE void score_tile(float *s, size_t lds, const float *q, size_t qs, const void *K, size_t ks, int t0, int D, float scale,
                            int TT, int GH, const void *pf, int npf, int BF) {
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) acc[t][h] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= D; c += 8) {
        __m256 qv[3];
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) qv[h] = _mm256_loadu_ps(q + (size_t)h * qs + c);
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            if (!(c & (BF ? 31 : 15)) && t0 + t < npf) KV_PF(pf, (size_t)(t0 + t) * ks + c, BF);
            __m256 kv = kv_load8(K, (size_t)(t0 + t) * ks + c, BF);
#pragma GCC unroll 3
            for (int h = 0; h < GH; h++) acc[t][h] = _mm256_fmadd_ps(kv, qv[h], acc[t][h]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) {
            float v = hsum256(acc[t][h]);
            const float *qh = q + (size_t)h * qs;
            for (int cc = c; cc < D; cc++) v += kv_at(K, (size_t)(t0 + t) * ks + cc, BF) * qh[cc];
            s[(size_t)h * lds + t0 + t] = v * scale;
        }
}

/* Keys from t on in tiles of 4, then one at a time (after the AVX-512 path's tiles of 8). */
#define SCORE_REST(GH)                                                                               \
    for (; t + 4 <= n; t += 4) score_tile(sh, lds, qh, qs, K, ks, t, D, scale, 4, GH, pf, npf, BF);  \
    for (; t < n; t++) score_tile(sh, lds, qh, qs, K, ks, t, D, scale, 1, GH, pf, npf, BF);
#define SCORE_GROUP(GH)                                                                              \
    do {                                                                                             \
        int t = 0;                                                                                   \
        SCORE_REST(GH)                                                                               \
    } while (0)

/* The query heads of one KV head in groups of 3 (Phi-4-mini's g), then 2 or 1. */
#define SCORE_HEADS(GROUP)                                                                           \
    for (int h0 = 0; h0 < g; h0 += 3, npf = 0) { /* the first head group prefetches */             \
        int gh = g - h0 < 3 ? g - h0 : 3;                                                            \
        float *sh = s + (size_t)h0 * lds;                                                            \
        const float *qh = q + (size_t)h0 * qs;                                                       \
        if (gh == 3) GROUP(3);                                                                       \
        else if (gh == 2) GROUP(2);                                                                  \
        else GROUP(1);                                                                               \
    }

/* The typed body called with BF as a literal (the tiles take it as a constant once inlined): one
 * copy of each loop per element type. */
#define BY_TYPE(fn, ...) (BF ? fn(__VA_ARGS__, 1) : fn(__VA_ARGS__, 0))

AVX2_INLINE void scores_avx2_t(float *s, size_t lds, const float *q, size_t qs, int g, const void *K, size_t ks, int n, int D,
                               float scale, const void *pf, int npf, int BF) {
    SCORE_HEADS(SCORE_GROUP)
}
AVX2 static void scores_avx2(float *s, size_t lds, const float *q, size_t qs, int g, const void *K, size_t ks, int n, int D, float scale,
                             const void *pf, int npf, int BF) {
    BY_TYPE(scores_avx2_t, s, lds, q, qs, g, K, ks, n, D, scale, pf, npf);
}

/* o_h[c .. c+8*CB) += sum_t p[h][t] V_t[...] for GH heads: 4 x 3 accumulators at CB = 4. */
AVX2_INLINE void accum_tile(float *o, size_t os, const float *p, size_t ldp, const void *V, size_t vs, int n, int c, int CB, int GH,
                            const void *pf, int npf, int BF) {
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int h = 0; h < GH; h++)
#pragma GCC unroll 4
        for (int b = 0; b < CB; b++) acc[h][b] = _mm256_loadu_ps(o + (size_t)h * os + c + 8 * b);
    for (int t = 0; t < n; t++) {
        size_t at = (size_t)t * vs + (size_t)c;
        __m256 vv[4];
#pragma GCC unroll 4
        for (int b = 0; b < CB; b++) {
            if (!((c + 8 * b) & (BF ? 31 : 15)) && t < npf) KV_PF(pf, at + 8 * (size_t)b, BF);
            vv[b] = kv_load8(V, at + 8 * (size_t)b, BF);
        }
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) {
            __m256 pv = _mm256_broadcast_ss(p + (size_t)h * ldp + t);
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) acc[h][b] = _mm256_fmadd_ps(pv, vv[b], acc[h][b]);
        }
    }
#pragma GCC unroll 3
    for (int h = 0; h < GH; h++)
#pragma GCC unroll 4
        for (int b = 0; b < CB; b++) _mm256_storeu_ps(o + (size_t)h * os + c + 8 * b, acc[h][b]);
}

/* The column blocks of one head group: tiles of TOP (a literal: the widest the level's registers
 * take for 3 heads), 4 and 1 vectors of W lanes, then a scalar tail (the same in-order chain per
 * element, so the bits do not depend on the split). TOP = 8 at AVX-512 (128 columns: each row of V
 * read once, where tiles of 4 read it in two passes of half rows 512 bytes apart, the second from
 * L2). In one process against tiles of 4 (a decode step's attention over 32 layers at 4096 cached
 * positions, fp32 cache, Zen 5, 2 threads, alternating, the same bits): the value pass 1.25 x (8 of
 * 8), the whole attention 1.08 x (8 of 8, 7 of 8), 1.07 x at 512 positions (19 of 20). */
#define ACCUM_GROUP(TILE, W, GH, TOP)                                                                \
    do {                                                                                             \
        int c = 0;                                                                                   \
        if ((TOP) > 4)                                                                               \
            for (; c + (TOP) * (W) <= D; c += (TOP) * (W)) TILE(oh, os, ph, ldp, V, vs, n, c, TOP, GH, pf, npf, BF); \
        for (; c + 4 * (W) <= D; c += 4 * (W)) TILE(oh, os, ph, ldp, V, vs, n, c, 4, GH, pf, npf, BF); \
        for (; c + (W) <= D; c += (W)) TILE(oh, os, ph, ldp, V, vs, n, c, 1, GH, pf, npf, BF);     \
        for (; c < D; c++)                                                                           \
            for (int h = 0; h < GH; h++)                                                             \
                for (int t = 0; t < n; t++)                                                          \
                    oh[(size_t)h * os + c] = fmaf(ph[(size_t)h * ldp + t], kv_at(V, (size_t)t * vs + c, BF), oh[(size_t)h * os + c]); \
    } while (0)

/* The query heads of one KV head in groups of 3 (Phi-4-mini's g), then 2 or 1. */
#define ACCUM_HEADS(TILE, W, TOP)                                                                    \
    for (int h0 = 0; h0 < g; h0 += 3, npf = 0) { /* the first head group prefetches */             \
        int gh = g - h0 < 3 ? g - h0 : 3;                                                            \
        float *oh = o + (size_t)h0 * os;                                                             \
        const float *ph = p + (size_t)h0 * ldp;                                                      \
        if (gh == 3) ACCUM_GROUP(TILE, W, 3, TOP);                                                   \
        else if (gh == 2) ACCUM_GROUP(TILE, W, 2, TOP);                                              \
        else ACCUM_GROUP(TILE, W, 1, TOP);                                                           \
    }

AVX2_INLINE void accum_avx2_t(float *o, size_t os, const float *p, size_t ldp, int g, const void *V, size_t vs, int n, int D,
                              const void *pf, int npf, int BF) {
    ACCUM_HEADS(accum_tile, 8, 4)
}
AVX2 static void accum_avx2(float *o, size_t os, const float *p, size_t ldp, int g, const void *V, size_t vs, int n, int D, const void *pf,
                            int npf, int BF) {
    BY_TYPE(accum_avx2_t, o, os, p, ldp, g, V, vs, n, D, pf, npf);
}
#endif

#ifdef PM_X86
/* Scores of 2 NP keys (NP = 4 or 8 pairs) x GH heads at 16 lanes with the AVX2 path's arithmetic:
 * each zmm holds two keys' 8-lane chains (lanes 0-7 key t, 8-15 key t+1) against the head's 8
 * columns in both halves, so every key's dot is the same FMA chain; each 8 folds of a head are done
 * together in hsum256's order (halves, then (l, l + 2), then (0, 1)). Half the FMAs of the AVX2 tile
 * for the same keys. D must be a multiple of 8 (no scalar tail). In one process against the AVX2
 * tiles (32 layers of a decode step's attention, Zen 5, 2 threads, alternating, the same bits):
 * cache-resident 1.15 x (20 of 20), from memory 1.04-1.06 x at 4096 cached positions (27 of 30) and
 * 1.04 x at 512. 16 keys a tile (24 chains in flight for 3 heads) against 8 (12): the keys' pass
 * 1.11-1.14 x (8 of 8, 7 of 8), the whole attention 1.10-1.13 x at 4096 positions and 1.05 x at 512
 * (20 of 20), though the 16 row addresses leave the compiler short of registers. */
AVX512_INLINE void score_tile512(float *s, size_t lds, const float *q, size_t qs, const void *K, size_t ks, int t0, int D, float scale,
                                 int GH, int NP, const void *pf, int npf, int BF) {
    __m512 acc[8][3];
#pragma GCC unroll 8
    for (int p = 0; p < NP; p++)
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) acc[p][h] = _mm512_setzero_ps();
    for (int c = 0; c < D; c += 8) {
        __m512 qv[3];
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) qv[h] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q + (size_t)h * qs + c))));
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) {
            size_t i0 = (size_t)(t0 + 2 * p) * ks + (size_t)c, i1 = i0 + ks;
            if (!(c & (BF ? 31 : 15))) {
                if (t0 + 2 * p < npf) KV_PF(pf, i0, BF);
                if (t0 + 2 * p + 1 < npf) KV_PF(pf, i1, BF);
            }
            __m512 kp; /* lanes 0-7: key t's 8 values at c, 8-15: key t + 1's */
            if (BF) {
                const uint16_t *kb = K;
                __m256i pair = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(kb + i0))),
                                                       _mm_loadu_si128((const __m128i *)(kb + i1)), 1);
                kp = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(pair), 16));
            } else {
                const float *kf = K;
                kp = _mm512_castpd_ps(
                    _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(kf + i0))), _mm256_castps_pd(_mm256_loadu_ps(kf + i1)), 1));
            }
#pragma GCC unroll 3
            for (int h = 0; h < GH; h++) acc[p][h] = _mm512_fmadd_ps(kp, qv[h], acc[p][h]);
        }
    }
#pragma GCC unroll 3
    for (int h = 0; h < GH; h++) {
#pragma GCC unroll 2
        for (int p0 = 0; p0 < NP; p0 += 4) {
            __m512 p[4] = {acc[p0][h], acc[p0 + 1][h], acc[p0 + 2][h], acc[p0 + 3][h]};
            _mm256_storeu_ps(s + (size_t)h * lds + t0 + 2 * p0, _mm256_mul_ps(pm_hsum256_x8(p), _mm256_set1_ps(scale)));
        }
    }
}

#define SCORE_GROUP512(GH)                                                                           \
    do {                                                                                             \
        int t = 0;                                                                                   \
        for (; t + 16 <= n; t += 16) score_tile512(sh, lds, qh, qs, K, ks, t, D, scale, GH, 8, pf, npf, BF); \
        for (; t + 8 <= n; t += 8) score_tile512(sh, lds, qh, qs, K, ks, t, D, scale, GH, 4, pf, npf, BF); \
        SCORE_REST(GH)                                                                               \
    } while (0)

AVX512_INLINE void scores_avx512_t(float *s, size_t lds, const float *q, size_t qs, int g, const void *K, size_t ks, int n, int D,
                                   float scale, const void *pf, int npf, int BF) {
    SCORE_HEADS(SCORE_GROUP512)
}
AVX512 static void scores_avx512(float *s, size_t lds, const float *q, size_t qs, int g, const void *K, size_t ks, int n, int D, float scale,
                                 const void *pf, int npf, int BF) {
    BY_TYPE(scores_avx512_t, s, lds, q, qs, g, K, ks, n, D, scale, pf, npf);
}

/* The accumulation at 16 lanes: every element is the same in-order FMA chain, so the bits equal the
 * AVX2 path's and the twin's. 3 heads x 4 zmm = 64 columns per tile. */
AVX512_INLINE void accum_tile512(float *o, size_t os, const float *p, size_t ldp, const void *V, size_t vs, int n, int c, int CB,
                                 int GH, const void *pf, int npf, int BF) {
    pm_tile_pv_t(o, os, p, ldp, V, vs, n, c, GH, CB, pf, npf, BF);
}

AVX512_INLINE void accum_avx512_t(float *o, size_t os, const float *p, size_t ldp, int g, const void *V, size_t vs, int n, int D,
                                  const void *pf, int npf, int BF) {
    ACCUM_HEADS(accum_tile512, 16, 8)
}
AVX512 static void accum_avx512(float *o, size_t os, const float *p, size_t ldp, int g, const void *V, size_t vs, int n, int D,
                                const void *pf, int npf, int BF) {
    BY_TYPE(accum_avx512_t, o, os, p, ldp, g, V, vs, n, D, pf, npf);
}
#endif

/* The dispatch of both element types: the best level the CPU has. */
static void scores_any(float *s, size_t lds, const float *q, size_t qs, int g, const void *K, size_t ks, int n, int D, float scale,
                       const void *ahead, int n_ahead, int BF) {
#ifdef PM_X86
    if (!ahead) n_ahead = 0;
    if (pm_kern_have_avx512() && D % 8 == 0) {
        scores_avx512(s, lds, q, qs, g, K, ks, n, D, scale, ahead, n_ahead, BF);
        return;
    }
    if (pm_kern_have_avx2()) {
        scores_avx2(s, lds, q, qs, g, K, ks, n, D, scale, ahead, n_ahead, BF);
        return;
    }
#else
    (void)ahead, (void)n_ahead;
#endif
    scores_c(s, lds, q, qs, g, K, ks, n, D, scale, BF);
}

static void accum_any(float *o, size_t os, const float *p, size_t ldp, int g, const void *V, size_t vs, int n, int D, const void *ahead,
                      int n_ahead, int BF) {
#ifdef PM_X86
    if (!ahead) n_ahead = 0;
    if (pm_kern_have_avx512()) {
        accum_avx512(o, os, p, ldp, g, V, vs, n, D, ahead, n_ahead, BF);
        return;
    }
    if (pm_kern_have_avx2()) {
        accum_avx2(o, os, p, ldp, g, V, vs, n, D, ahead, n_ahead, BF);
        return;
    }
#else
    (void)ahead, (void)n_ahead;
#endif
    accum_c(o, os, p, ldp, g, V, vs, n, D, BF);
}

void pm_kern_attn_scores(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D, float scale,
                         const float *ahead, int n_ahead) {
    scores_any(s, lds, q, qs, g, K, ks, n, D, scale, ahead, n_ahead, 0);
}
void pm_kern_attn_scores_bf16(float *s, size_t lds, const float *q, size_t qs, int g, const uint16_t *K, size_t ks, int n, int D,
                              float scale, const uint16_t *ahead, int n_ahead) {
    scores_any(s, lds, q, qs, g, K, ks, n, D, scale, ahead, n_ahead, 1);
}
void pm_kern_attn_accum(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D,
                        const float *ahead, int n_ahead) {
    accum_any(o, os, p, ldp, g, V, vs, n, D, ahead, n_ahead, 0);
}
void pm_kern_attn_accum_bf16(float *o, size_t os, const float *p, size_t ldp, int g, const uint16_t *V, size_t vs, int n, int D,
                             const uint16_t *ahead, int n_ahead) {
    accum_any(o, os, p, ldp, g, V, vs, n, D, ahead, n_ahead, 1);
}
