/* flash.c — fused softmax attention of one KV head (kernels.h, pm_flash):
 *   O[r] = sum_j p_rj V[j],   p_rj = softmax_j(scale * Q[r] . K[j] + mask[j] + tbias[j - i]),
 * for query rows r (nq rows per group, qgroups groups sharing the keys: the query heads of one KV
 * head), keys j < nk, or j <= qpos0 + i when causal (i = the row's index in its group).
 *
 * Keys go in blocks of PM_FLASH_KEYS, each packed once per call: K transposed into 32-key slivers
 * and V into rows padded to 16 floats. Query rows are packed once into 12-row slivers; per (key
 * block, sliver) the 12 x 128 scores live in an L1 tile: a 12 x 32 register micro-kernel makes them,
 * an online softmax (running max and sum per row; the output row is rescaled when the max grows)
 * turns them into weights in place, and a 4-row register micro-kernel adds weights x V into the
 * sliver's output rows. No more than 12 x 128 scores exist at a time, and the scratch grows with
 * the query rows, not with the keys. Against the two-pass path (sgemm, softmax over the whole
 * [nq, nk] score matrix, sgemm): 1.25 x on one SigLIP head (1024 x 1024 x 72) on one thread,
 * 1.35 x over a layer's 32 heads on two (Zen 5); in the decoder see llm.c.
 *
 * A mask of -FLT_MAX (a padded key) is a finite score: a block of only masked keys first adds their
 * uniform average, and the first block with a real key rescales it by 2^(-FLT_MAX - m) = 0, so the
 * result is that of the two-pass softmax (a row whose keys are all masked averages them all, as
 * torch's finite mask does). AVX-512 only: pm_kern_flash_takes says when; callers keep a two-pass
 * path for other CPUs. The portable twin computes the same blocks and rescales in the same order;
 * it is not bit-equal (the tiles' FMAs and the exp round differently): tests compare both with a
 * double-precision reference. */
#include "kernels.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "simd.h"

#define FA_MR 12            /* query rows per sliver */
#define FA_KS 32            /* keys per packed K sliver */
#define FA_NK PM_FLASH_KEYS /* keys per score tile */
#define FA_PR 4             /* rows per weights x V micro-kernel */

static int round_up(int x, int m) { return (x + m - 1) / m * m; }
static int n_rows(const pm_flash *a) { return a->nq * (a->qgroups > 0 ? a->qgroups : 1); }

size_t pm_kern_flash_ws(int rows, int hd) {
    size_t nrp = (size_t)round_up(rows, FA_MR), hdp = (size_t)round_up(hd, 16);
    return (size_t)round_up((int)(nrp * hd), 16) + nrp * hdp + 2 * nrp + (size_t)FA_NK * hd + (size_t)FA_NK * hdp + (size_t)FA_MR * FA_NK + 16;
}

/* Row r's query, output and visible key count. */
static const float *q_row(const pm_flash *a, int r) { return a->q + (size_t)(r / a->nq) * a->ldqg + (size_t)(r % a->nq) * a->ldq; }
static float *o_row(const pm_flash *a, int r) { return a->o + (size_t)(r / a->nq) * a->ldog + (size_t)(r % a->nq) * a->ldo; }
static int visible(const pm_flash *a, int r) {
    int lim = a->causal ? a->qpos0 + r % a->nq + 1 : a->nk;
    return lim < a->nk ? lim : a->nk;
}

/* Rows of keys j0 .. j0 + n (n <= PM_FLASH_KEYS, one block): K (kv 0) or V (kv 1). */
static const float *key_rows(const pm_flash *a, int kv, int j0) {
    if (a->key_block) return a->key_block(a->ctx, kv, j0);
    return kv ? a->v + (size_t)j0 * a->ldv : a->k + (size_t)j0 * a->ldk;
}

/* ---- portable twin ---- */

void pm_kern_flash_c(const pm_flash *a, float *ws) {
    const int hd = a->hd, rows = n_rows(a);
    float *s = ws, *o = s + FA_NK; /* one row at a time: FA_NK scores, hd outputs */
    for (int r = 0; r < rows; r++) {
        const float *q = q_row(a, r);
        int i = r % a->nq, nv = visible(a, r);
        float m = -INFINITY, l = 0.0f;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int j0 = 0; j0 < nv; j0 += FA_NK) {
            int nb = nv - j0 < FA_NK ? nv - j0 : FA_NK;
            const float *K = key_rows(a, 0, j0), *V = key_rows(a, 1, j0);
            float bm = -INFINITY;
            for (int j = 0; j < nb; j++) {
                const float *k = K + (size_t)j * a->ldk;
                float d = 0.0f;
                for (int c = 0; c < hd; c++) d = fmaf(q[c], k[c], d);
                s[j] = d * a->scale;
                if (a->mask) s[j] += a->mask[j0 + j];
                if (a->tbias) s[j] += a->tbias[j0 + j - i];
                bm = s[j] > bm ? s[j] : bm;
            }
            float mn = bm > m ? bm : m, alpha = expf(m - mn), sum = 0.0f;
            for (int j = 0; j < nb; j++) {
                s[j] = expf(s[j] - mn);
                sum += s[j];
            }
            l = l * alpha + sum;
            m = mn;
            for (int c = 0; c < hd; c++) o[c] *= alpha;
            for (int j = 0; j < nb; j++) {
                const float *v = V + (size_t)j * a->ldv;
                for (int c = 0; c < hd; c++) o[c] = fmaf(s[j], v[c], o[c]);
            }
        }
        float inv = 1.0f / l, *dst = o_row(a, r);
        for (int c = 0; c < hd; c++) dst[c] = o[c] * inv;
    }
}

#ifdef PM_X86

/* 2^x of 16 lanes, x <= 0 (the scores times log2(e), minus their row's max): Cephes' exp2f
 * polynomial on [-0.5, 0.5] (relative error < 8e-8 measured) and vscalefps for the power of two;
 * below -126 (and -inf) exactly 0, so no denormal reaches the weights. 11 operations against 18 for
 * vmath's exp (its range reduction by ln 2 in two parts, the exponent built by hand): the fused
 * kernel 1.06-1.07 x on SigLIP's and the Conformer's heads (in one process, 20 pairs, 16-18 faster),
 * its errors against the fp64 reference of test_flash_attention as before (worst 0.73 of the
 * tolerance against 0.85). */
AVX512_INLINE __m512 exp2_16(__m512 x) {
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f)); /* -inf: no inf - inf below */
    __m512 fx = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), r = _mm512_sub_ps(x, fx);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, p, fx);
}

/* s[i][0..32) = Q sliver row i . the 32 keys of one K sliver, over hd (qs: [hd][12], kt: [hd][32]). */
AVX512_INLINE void scores_12x32(float *s, const float *qs, const float *kt, int hd) {
    __m512 acc[FA_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < FA_MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 b0 = _mm512_load_ps(kt + (size_t)d * FA_KS), b1 = _mm512_load_ps(kt + (size_t)d * FA_KS + 16);
        pm_tile_fma_rows(acc, qs + (size_t)d * FA_MR, b0, b1, FA_MR);
    }
#pragma GCC unroll 12
    for (int i = 0; i < FA_MR; i++) {
        _mm512_store_ps(s + (size_t)i * FA_NK, acc[i][0]);
        _mm512_store_ps(s + (size_t)i * FA_NK + 16, acc[i][1]);
    }
}

/* o[r][c0 .. c0 + 16 NZ) += sum_j<nb p[r][j] vp[j] for 4 rows r (p: row stride FA_NK; vp and o:
 * row stride hdp). */
AVX512_INLINE void pv_4rows(float *o, const float *p, const float *vp, int nb, int hdp, int c0, int NZ) {
    pm_tile_pv(o, (size_t)hdp, p, FA_NK, vp, (size_t)hdp, nb, c0, FA_PR, NZ, NULL, 0);
}

#define PV_N(NZ)                                                                                                             \
    AVX512 static void pv_4rows_##NZ(float *o, const float *p, const float *vp, int nb, int hdp, int c0) {                  \
        pv_4rows(o, p, vp, nb, hdp, c0, NZ);                                                                                 \
    }
PV_N(1) PV_N(2) PV_N(3) PV_N(4) PV_N(5) PV_N(6)
typedef void (*pv_fn)(float *o, const float *p, const float *vp, int nb, int hdp, int c0);

/* Scores of one sliver's rows (st, nb keys from key j0) -> weights in place, with the running max
 * m and sum l of each row and its output rows ot rescaled. Rows with no visible key in the block
 * get zero weights and keep their state. */
AVX512_INLINE void softmax_tile(const pm_flash *a, float *st, float *ot, float *m, float *l, int r0, int mr, int j0, int nb, int hdp) {
    const __m512 sc = _mm512_set1_ps(a->scale * PM_EXP_LOG2E), l2e = _mm512_set1_ps(PM_EXP_LOG2E), ninf = _mm512_set1_ps(-INFINITY),
                 lowest = _mm512_set1_ps(-FLT_MAX);
    const int nbs = round_up(nb, 16);
    for (int i = 0; i < mr; i++) {
        float *srow = st + (size_t)i * FA_NK;
        int nv = visible(a, r0 + i) - j0, qi = (r0 + i) % a->nq;
        if (nv > nb) nv = nb;
        if (nv <= 0) {
            memset(srow, 0, sizeof(float) * (size_t)nbs);
            continue;
        }
        __m512 bm = ninf;
        for (int j = 0; j < nbs; j += 16) {
            __mmask16 live = j + 16 <= nv ? (__mmask16)0xffff : j < nv ? (__mmask16)((1u << (nv - j)) - 1) : 0;
            __m512 x = _mm512_mul_ps(_mm512_load_ps(srow + j), sc);
            if (a->mask) /* -FLT_MAX * log2(e) overflows: a masked key stays the finite lowest score */
                x = _mm512_max_ps(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, a->mask + j0 + j), l2e, x), lowest);
            if (a->tbias) x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(live, a->tbias + j0 + j - qi), l2e, x);
            x = _mm512_mask_blend_ps(live, ninf, x);
            _mm512_store_ps(srow + j, x);
            bm = _mm512_max_ps(bm, x);
        }
        float m0 = m[i], mn = _mm512_reduce_max_ps(bm);
        mn = mn > m0 ? mn : m0;
        __m512 mv = _mm512_set1_ps(mn), sum = _mm512_setzero_ps();
        for (int j = 0; j < nbs; j += 16) {
            __m512 p = exp2_16(_mm512_sub_ps(_mm512_load_ps(srow + j), mv));
            _mm512_store_ps(srow + j, p);
            sum = _mm512_add_ps(sum, p);
        }
        float alpha = _mm512_cvtss_f32(exp2_16(_mm512_set1_ps(m0 - mn)));
        l[i] = l[i] * alpha + _mm512_reduce_add_ps(sum);
        m[i] = mn;
        if (alpha != 1.0f) {
            __m512 av = _mm512_set1_ps(alpha);
            for (int c = 0; c < hdp; c += 16) _mm512_store_ps(ot + (size_t)i * hdp + c, _mm512_mul_ps(av, _mm512_load_ps(ot + (size_t)i * hdp + c)));
        }
    }
}

/* K^T slivers: kt[t][c][l] = key 32t + l, dim c, for nbk keys (those past nb zero), 16 keys x 16
 * dims per transpose (a scalar scatter of the same took a quarter of the kernel's time at 4096
 * keys, 384 query rows per call). */
AVX512_INLINE void pack_keys(float *kt, const float *K, size_t ldk, int nb, int nbk, int hd) {
    for (int j0 = 0; j0 < nbk; j0 += 16)
        for (int c = 0; c < hd; c += 16) {
            int w = hd - c < 16 ? hd - c : 16;
            __mmask16 live = (__mmask16)((1u << w) - 1);
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = j0 + i < nb ? _mm512_castps_si512(_mm512_maskz_loadu_ps(live, K + (size_t)(j0 + i) * ldk + c)) : _mm512_setzero_si512();
            pm_transpose16(r);
            float *d = kt + (size_t)(j0 / FA_KS) * hd * FA_KS + (size_t)c * FA_KS + j0 % FA_KS;
            for (int i = 0; i < w; i++) _mm512_store_ps(d + (size_t)i * FA_KS, _mm512_castsi512_ps(r[i]));
        }
}

AVX512 static void flash_avx512(const pm_flash *a, float *ws) {
    static const pv_fn pv[6] = {pv_4rows_1, pv_4rows_2, pv_4rows_3, pv_4rows_4, pv_4rows_5, pv_4rows_6};
    const int hd = a->hd, hdp = round_up(hd, 16), rows = n_rows(a), nsl = (rows + FA_MR - 1) / FA_MR;
    const int nrp = nsl * FA_MR;
    /* weights x V in passes of at most 6 vectors (24 accumulators), as even as they go: 96 columns
     * in one pass of 6, not 5 + 1 (a 1-vector pass is bound by its broadcasts) */
    const int zs = hdp / 16, passes = (zs + 5) / 6, pz = (zs + passes - 1) / passes;
    /* every region starts on a 64-byte line (aligned loads and stores) */
    float *qs = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63); /* [nsl][hd][12] */
    float *ot = qs + round_up(nrp * hd, 16);                        /* [nrp][hdp] */
    float *kt = ot + (size_t)nrp * hdp;                             /* [FA_NK / 32][hd][32] */
    float *vp = kt + (size_t)FA_NK * hd;                            /* [FA_NK][hdp] */
    float *st = vp + (size_t)FA_NK * hdp;                           /* [12][FA_NK] */
    float *m = st + (size_t)FA_MR * FA_NK, *l = m + nrp;            /* per row */

    for (int r = 0; r < nrp; r++) {
        const float *q = r < rows ? q_row(a, r) : NULL;
        float *d = qs + (size_t)(r / FA_MR) * hd * FA_MR + r % FA_MR;
        for (int c = 0; c < hd; c++) d[(size_t)c * FA_MR] = q ? q[c] : 0.0f;
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(ot, 0, sizeof(float) * (size_t)nrp * hdp);
    int last = 0; /* keys any row sees */
    for (int r = 0; r < rows; r++) last = visible(a, r) > last ? visible(a, r) : last;
    for (int j0 = 0; j0 < last; j0 += FA_NK) {
        int nb = last - j0 < FA_NK ? last - j0 : FA_NK, nbk = round_up(nb, FA_KS);
        const float *K = key_rows(a, 0, j0), *V = key_rows(a, 1, j0);
        pack_keys(kt, K, a->ldk, nb, nbk, hd);
        for (int j = 0; j < nb; j++) {
            float *vd = vp + (size_t)j * hdp;
            memcpy(vd, V + (size_t)j * a->ldv, sizeof(float) * (size_t)hd);
            memset(vd + hd, 0, sizeof(float) * (size_t)(hdp - hd));
        }
        for (int sl = 0; sl < nsl; sl++) {
            int r0 = sl * FA_MR, mr = rows - r0 < FA_MR ? rows - r0 : FA_MR, any = 0;
            for (int i = 0; i < mr && !any; i++) any = visible(a, r0 + i) > j0;
            if (!any) continue; /* causal: the whole sliver is before this block */
            float *o = ot + (size_t)r0 * hdp;
            for (int t = 0; t < nb; t += FA_KS) scores_12x32(st + t, qs + (size_t)sl * hd * FA_MR, kt + (size_t)t * hd, hd);
            softmax_tile(a, st, o, m + r0, l + r0, r0, mr, j0, nb, hdp);
            for (int r = 0; r < mr; r += FA_PR)
                for (int z0 = 0; z0 < zs; z0 += pz) {
                    int nz = zs - z0 < pz ? zs - z0 : pz;
                    pv[nz - 1](o + (size_t)r * hdp, st + (size_t)r * FA_NK, vp, nb, hdp, 16 * z0);
                }
        }
    }
    for (int r = 0; r < rows; r++) {
        __m512 inv = _mm512_set1_ps(1.0f / l[r]);
        float *dst = o_row(a, r);
        for (int c = 0; c < hd; c += 16) {
            __mmask16 live = c + 16 <= hd ? (__mmask16)0xffff : (__mmask16)((1u << (hd - c)) - 1);
            _mm512_mask_storeu_ps(dst + c, live, _mm512_mul_ps(inv, _mm512_load_ps(ot + (size_t)r * hdp + c)));
        }
    }
}
#endif

int pm_kern_flash_takes(void) {
#ifdef PM_X86
    return pm_kern_have_avx512();
#else
    return 0;
#endif
}

void pm_kern_flash(const pm_flash *a, float *ws) {
#ifdef PM_X86
    if (pm_kern_have_avx512()) {
        flash_avx512(a, ws);
        return;
    }
#endif
    pm_kern_flash_c(a, ws);
}
