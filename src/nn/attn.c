/* attn.c — the two inner loops of single-query (decode) attention over a block of cached
 * positions, for the g query heads that share one KV head (GQA):
 *   scores  s[h][t] = scale * dot(q_h, K_t)
 *   accum   o_h    += sum_t p[h][t] * V_t     (t in order)
 * Reading each K/V row once for all g heads of its group keeps the cache traffic at one pass.
 * Every dot is one 8-lane FMA chain folded like hsum256, every accumulation an in-order FMA per
 * element (AVX-512 runs the dots two keys to a register and the accumulation 16 columns wide, the
 * same chains); the portable twins do the same with fmaf, so every path gives identical bits. */
#include "kernels.h"

#include <math.h>
#include <stddef.h>
#include "simd.h"

/* ---- portable ---- */

static float dot_c(const float *a, const float *b, int D) {
    float acc[8] = {0};
    int c = 0;
    for (; c + 8 <= D; c += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(a[c + l], b[c + l], acc[l]);
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (; c < D; c++) s += a[c] * b[c];
    return s;
}

void pm_kern_attn_scores_c(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D,
                           float scale) {
    for (int h = 0; h < g; h++)
        for (int t = 0; t < n; t++) s[(size_t)h * lds + t] = dot_c(K + (size_t)t * ks, q + (size_t)h * qs, D) * scale;
}

void pm_kern_attn_accum_c(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D) {
    for (int h = 0; h < g; h++) {
        float *oh = o + (size_t)h * os;
        for (int t = 0; t < n; t++) {
            float pt = p[(size_t)h * ldp + t];
            const float *v = V + (size_t)t * vs;
            for (int d = 0; d < D; d++) oh[d] = fmaf(pt, v[d], oh[d]);
        }
    }
}

/* ---- AVX2 ---- */

#ifdef PM_X86

/* TT keys x GH heads register tile (compile-time sizes). */
AVX2_INLINE void score_tile(float *s, size_t lds, const float *q, size_t qs, const float *K, size_t ks, int t0, int D, float scale,
                            int TT, int GH, const float *pf, int npf) {
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
            if (!(c & 15) && t0 + t < npf) _mm_prefetch((const char *)(pf + (size_t)(t0 + t) * ks + c), _MM_HINT_T0);
            __m256 kv = _mm256_loadu_ps(K + (size_t)(t0 + t) * ks + c);
#pragma GCC unroll 3
            for (int h = 0; h < GH; h++) acc[t][h] = _mm256_fmadd_ps(kv, qv[h], acc[t][h]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++)
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) {
            float v = hsum256(acc[t][h]);
            const float *k = K + (size_t)(t0 + t) * ks, *qh = q + (size_t)h * qs;
            for (int cc = c; cc < D; cc++) v += k[cc] * qh[cc];
            s[(size_t)h * lds + t0 + t] = v * scale;
        }
}

/* Keys from t on in tiles of 4, then one at a time (after the AVX-512 path's tiles of 8). */
#define SCORE_REST(GH)                                                                               \
    for (; t + 4 <= n; t += 4) score_tile(sh, lds, qh, qs, K, ks, t, D, scale, 4, GH, pf, npf);      \
    for (; t < n; t++) score_tile(sh, lds, qh, qs, K, ks, t, D, scale, 1, GH, pf, npf);
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

AVX2 static void scores_avx2(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D,
                             float scale, const float *pf, int npf) {
    SCORE_HEADS(SCORE_GROUP)
}

/* o_h[c .. c+8*CB) += sum_t p[h][t] V_t[...] for GH heads: 4 x 3 accumulators at CB = 4. */
AVX2_INLINE void accum_tile(float *o, size_t os, const float *p, size_t ldp, const float *V, size_t vs, int n, int c, int CB, int GH,
                            const float *pf, int npf) {
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int h = 0; h < GH; h++)
#pragma GCC unroll 4
        for (int b = 0; b < CB; b++) acc[h][b] = _mm256_loadu_ps(o + (size_t)h * os + c + 8 * b);
    for (int t = 0; t < n; t++) {
        const float *v = V + (size_t)t * vs + c;
        __m256 vv[4];
#pragma GCC unroll 4
        for (int b = 0; b < CB; b++) {
            if (!((c + 8 * b) & 15) && t < npf) _mm_prefetch((const char *)(pf + (size_t)t * vs + c + 8 * b), _MM_HINT_T0);
            vv[b] = _mm256_loadu_ps(v + 8 * b);
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

/* The column blocks of one head group: tiles of 4 and 1 vectors of W lanes, then a scalar tail
 * (the same in-order chain per element, so the bits do not depend on the split). */
#define ACCUM_GROUP(TILE, W, GH)                                                                     \
    do {                                                                                             \
        int c = 0;                                                                                   \
        for (; c + 4 * (W) <= D; c += 4 * (W)) TILE(oh, os, ph, ldp, V, vs, n, c, 4, GH, pf, npf);   \
        for (; c + (W) <= D; c += (W)) TILE(oh, os, ph, ldp, V, vs, n, c, 1, GH, pf, npf);           \
        for (; c < D; c++)                                                                           \
            for (int h = 0; h < GH; h++)                                                             \
                for (int t = 0; t < n; t++)                                                          \
                    oh[(size_t)h * os + c] = fmaf(ph[(size_t)h * ldp + t], V[(size_t)t * vs + c], oh[(size_t)h * os + c]); \
    } while (0)

/* The query heads of one KV head in groups of 3 (Phi-4-mini's g), then 2 or 1. */
#define ACCUM_HEADS(TILE, W)                                                                         \
    for (int h0 = 0; h0 < g; h0 += 3, npf = 0) { /* the first head group prefetches */             \
        int gh = g - h0 < 3 ? g - h0 : 3;                                                            \
        float *oh = o + (size_t)h0 * os;                                                             \
        const float *ph = p + (size_t)h0 * ldp;                                                      \
        if (gh == 3) ACCUM_GROUP(TILE, W, 3);                                                        \
        else if (gh == 2) ACCUM_GROUP(TILE, W, 2);                                                   \
        else ACCUM_GROUP(TILE, W, 1);                                                                \
    }

AVX2 static void accum_avx2(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D,
                            const float *pf, int npf) {
    ACCUM_HEADS(accum_tile, 8)
}
#endif

#ifdef PM_X86
/* Scores of 8 keys x GH heads at 16 lanes with the AVX2 path's arithmetic: each zmm holds two keys'
 * 8-lane chains (lanes 0-7 key t, 8-15 key t+1) against the head's 8 columns in both halves, so every
 * key's dot is the same FMA chain; the 8 folds of a head are done together in hsum256's order
 * (halves, then (l, l + 2), then (0, 1)). Half the FMAs of the AVX2 tile for the same keys. D must
 * be a multiple of 8 (no scalar tail). In one process against the AVX2 tiles (32 layers of a decode
 * step's attention, Zen 5, 2 threads, alternating, the same bits): cache-resident 1.15 x (20 of 20),
 * from memory 1.04-1.06 x at 4096 cached positions (27 of 30) and 1.04 x at 512. */
AVX512_INLINE void score_tile512(float *s, size_t lds, const float *q, size_t qs, const float *K, size_t ks, int t0, int D, float scale,
                                 int GH, const float *pf, int npf) {
    __m512 acc[4][3];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) acc[p][h] = _mm512_setzero_ps();
    for (int c = 0; c < D; c += 8) {
        __m512 qv[3];
#pragma GCC unroll 3
        for (int h = 0; h < GH; h++) qv[h] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q + (size_t)h * qs + c))));
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const float *k0 = K + (size_t)(t0 + 2 * p) * ks + c, *k1 = k0 + ks;
            if (!(c & 15)) {
                if (t0 + 2 * p < npf) _mm_prefetch((const char *)(pf + (size_t)(t0 + 2 * p) * ks + c), _MM_HINT_T0);
                if (t0 + 2 * p + 1 < npf) _mm_prefetch((const char *)(pf + (size_t)(t0 + 2 * p + 1) * ks + c), _MM_HINT_T0);
            }
            __m512d kp = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(k0))), _mm256_castps_pd(_mm256_loadu_ps(k1)), 1);
#pragma GCC unroll 3
            for (int h = 0; h < GH; h++) acc[p][h] = _mm512_fmadd_ps(_mm512_castpd_ps(kp), qv[h], acc[p][h]);
        }
    }
#pragma GCC unroll 3
    for (int h = 0; h < GH; h++) {
        __m512 p[4] = {acc[0][h], acc[1][h], acc[2][h], acc[3][h]};
        _mm256_storeu_ps(s + (size_t)h * lds + t0, _mm256_mul_ps(pm_hsum256_x8(p), _mm256_set1_ps(scale)));
    }
}

#define SCORE_GROUP512(GH)                                                                           \
    do {                                                                                             \
        int t = 0;                                                                                   \
        for (; t + 8 <= n; t += 8) score_tile512(sh, lds, qh, qs, K, ks, t, D, scale, GH, pf, npf);  \
        SCORE_REST(GH)                                                                               \
    } while (0)

AVX512 static void scores_avx512(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D,
                                 float scale, const float *pf, int npf) {
    SCORE_HEADS(SCORE_GROUP512)
}

/* The accumulation at 16 lanes: every element is the same in-order FMA chain, so the bits equal the
 * AVX2 path's and the twin's. 3 heads x 4 zmm = 64 columns per tile. */
AVX512_INLINE void accum_tile512(float *o, size_t os, const float *p, size_t ldp, const float *V, size_t vs, int n, int c, int CB,
                                 int GH, const float *pf, int npf) {
    pm_tile_pv(o, os, p, ldp, V, vs, n, c, GH, CB, pf, npf);
}

AVX512 static void accum_avx512(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D,
                                const float *pf, int npf) {
    ACCUM_HEADS(accum_tile512, 16)
}
#endif

void pm_kern_attn_scores(float *s, size_t lds, const float *q, size_t qs, int g, const float *K, size_t ks, int n, int D, float scale,
                         const float *ahead, int n_ahead) {
#ifdef PM_X86
    if (pm_kern_have_avx512() && D % 8 == 0) {
        scores_avx512(s, lds, q, qs, g, K, ks, n, D, scale, ahead, ahead ? n_ahead : 0);
        return;
    }
    if (pm_kern_have_avx2()) {
        scores_avx2(s, lds, q, qs, g, K, ks, n, D, scale, ahead, ahead ? n_ahead : 0);
        return;
    }
#else
    (void)ahead, (void)n_ahead;
#endif
    pm_kern_attn_scores_c(s, lds, q, qs, g, K, ks, n, D, scale);
}

void pm_kern_attn_accum(float *o, size_t os, const float *p, size_t ldp, int g, const float *V, size_t vs, int n, int D,
                        const float *ahead, int n_ahead) {
#ifdef PM_X86
    if (ahead == NULL) n_ahead = 0;
    if (pm_kern_have_avx512()) {
        accum_avx512(o, os, p, ldp, g, V, vs, n, D, ahead, n_ahead);
        return;
    }
    if (pm_kern_have_avx2()) {
        accum_avx2(o, os, p, ldp, g, V, vs, n, D, ahead, n_ahead);
        return;
    }
#else
    (void)ahead, (void)n_ahead;
#endif
    pm_kern_attn_accum_c(o, os, p, ldp, g, V, vs, n, D);
}
