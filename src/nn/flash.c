/* flash.c — fused softmax attention of one head over a whole key set, for the encoders:
 *   O[i] = sum_j p_ij V[j],   p_ij = softmax_j(scale * Q[i] . K[j] + mask[j] + tbias[j - i])
 * Query rows go in slivers of 12 and keys in blocks of FA_NK. Per (sliver, block) the 12 x FA_NK
 * scores live in an L1 tile: a 12 x 32 register micro-kernel makes them from K packed transposed
 * (once per call), an online softmax (running max and sum per row; the output rows are rescaled when
 * the max grows) turns them into weights in place, and a 4-row register micro-kernel adds weights x V
 * (V packed once, rows padded to 16 floats) into the sliver's output rows. At most 12 x FA_NK scores
 * exist at a time, whatever the key count; the two-pass path it replaces (sgemm, softmax over the
 * whole [nq, nk] score matrix in L3, sgemm) wrote, re-read and re-wrote 4 MB per SigLIP head.
 *
 * A mask of -FLT_MAX (a padded key) is a finite score: a block of only masked keys first adds their
 * uniform average, and the first block with a real key rescales it by exp(-FLT_MAX - m) = 0, so the
 * result is that of the two-pass softmax (a row whose keys are all masked averages them all, as
 * torch's finite mask does too). AVX-512 only: pm_kern_flash_takes says when; the caller keeps its
 * two-pass path for the rest. The portable twin runs the same blocks and rescales in the same
 * order (per-element, not bit-equal: the tiles' FMAs and the exp differ in rounding); tests compare
 * both with a double-precision reference. */
#include "kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include "simd.h"

#define FA_MR 12  /* query rows per sliver */
#define FA_KS 32  /* keys per packed K sliver */
#define FA_NK 128 /* keys per score tile */
#define FA_PR 4   /* rows per weights x V micro-kernel */

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

size_t pm_kern_flash_ws(int nk, int hd) {
    size_t nkp = (size_t)round_up(nk, FA_NK), hdp = (size_t)round_up(hd, 16);
    return nkp * (size_t)hd + nkp * hdp + (size_t)round_up(hd * FA_MR, 16) + (size_t)FA_MR * FA_NK + (size_t)FA_MR * hdp + 2 * FA_MR + 16;
}

/* ---- portable twin ---- */

void pm_kern_flash_c(const pm_flash *a, float *ws) {
    const int nq = a->nq, nk = a->nk, hd = a->hd;
    float *s = ws, *o = s + FA_NK; /* one row at a time: FA_NK scores, hd outputs */
    for (int i = 0; i < nq; i++) {
        const float *q = a->q + (size_t)i * a->ldq;
        float m = -INFINITY, l = 0.0f;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int j0 = 0; j0 < nk; j0 += FA_NK) {
            int nb = nk - j0 < FA_NK ? nk - j0 : FA_NK;
            float bm = -INFINITY;
            for (int j = 0; j < nb; j++) {
                const float *k = a->k + (size_t)(j0 + j) * a->ldk;
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
                const float *v = a->v + (size_t)(j0 + j) * a->ldv;
                for (int c = 0; c < hd; c++) o[c] = fmaf(s[j], v[c], o[c]);
            }
        }
        float inv = 1.0f / l;
        for (int c = 0; c < hd; c++) a->o[(size_t)i * a->ldo + c] = o[c] * inv;
    }
}

#ifdef PM_X86

#define EXP_LO -87.33654f
#define EXP_HI 88.0f

/* exp of 16 lanes (vmath.c's Cephes polynomial; below EXP_LO and -inf give 0). */
AVX512_INLINE __m512 exp16(__m512 x) {
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_NGE_UQ);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(fx, _mm512_set1_ps(-0.693359375f), xc);
    r = _mm512_fmadd_ps(fx, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~under, p, _mm512_castsi512_ps(e));
}

/* s[i][0..32) = Q sliver row i . the 32 keys of one K sliver, over hd (qs: [hd][12], kt: [hd][32]). */
AVX512_INLINE void scores_12x32(float *s, const float *qs, const float *kt, int hd) {
    __m512 acc[FA_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < FA_MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 b0 = _mm512_load_ps(kt + (size_t)d * FA_KS), b1 = _mm512_load_ps(kt + (size_t)d * FA_KS + 16);
        const float *a = qs + (size_t)d * FA_MR;
#pragma GCC unroll 12
        for (int i = 0; i < FA_MR; i++) {
            __m512 av = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < FA_MR; i++) {
        _mm512_store_ps(s + (size_t)i * FA_NK, acc[i][0]);
        _mm512_store_ps(s + (size_t)i * FA_NK + 16, acc[i][1]);
    }
}

/* o[r][0..16 NZ) += sum_j p[r][j] vp[j] for 4 rows r, nb keys (p: row stride FA_NK; vp: row
 * stride hdp; o: row stride hdp), NZ vectors of 16 columns from column c0. */
AVX512_INLINE void pv_4rows(float *o, const float *p, const float *vp, int nb, int hdp, int c0, int NZ) {
    __m512 acc[FA_PR][5];
#pragma GCC unroll 4
    for (int r = 0; r < FA_PR; r++)
#pragma GCC unroll 5
        for (int z = 0; z < NZ; z++) acc[r][z] = _mm512_load_ps(o + (size_t)r * hdp + c0 + 16 * z);
    for (int j = 0; j < nb; j++) {
        __m512 v[5];
        const float *vr = vp + (size_t)j * hdp + c0;
#pragma GCC unroll 5
        for (int z = 0; z < NZ; z++) v[z] = _mm512_load_ps(vr + 16 * z);
#pragma GCC unroll 4
        for (int r = 0; r < FA_PR; r++) {
            __m512 pv = _mm512_set1_ps(p[(size_t)r * FA_NK + j]);
#pragma GCC unroll 5
            for (int z = 0; z < NZ; z++) acc[r][z] = _mm512_fmadd_ps(pv, v[z], acc[r][z]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < FA_PR; r++)
#pragma GCC unroll 5
        for (int z = 0; z < NZ; z++) _mm512_store_ps(o + (size_t)r * hdp + c0 + 16 * z, acc[r][z]);
}

#define PV_N(NZ)                                                                                                             \
    AVX512 static void pv_4rows_##NZ(float *o, const float *p, const float *vp, int nb, int hdp, int c0) {                  \
        pv_4rows(o, p, vp, nb, hdp, c0, NZ);                                                                                 \
    }
PV_N(1) PV_N(2) PV_N(3) PV_N(4) PV_N(5)
typedef void (*pv_fn)(float *o, const float *p, const float *vp, int nb, int hdp, int c0);

AVX512 static void flash_avx512(const pm_flash *a, float *ws) {
    static const pv_fn pv[5] = {pv_4rows_1, pv_4rows_2, pv_4rows_3, pv_4rows_4, pv_4rows_5};
    const int nq = a->nq, nk = a->nk, hd = a->hd, nkp = round_up(nk, FA_NK), hdp = round_up(hd, 16);
    const float *mask = a->mask, *tbias = a->tbias;
    /* every region starts on a 64-byte line (aligned loads and stores) */
    float *kt = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63); /* [nkp / 32][hd][32] */
    float *vp = kt + (size_t)nkp * hd;                              /* [nkp][hdp] */
    float *qs = vp + (size_t)nkp * hdp;                             /* [hd][12] */
    float *st = qs + round_up(hd * FA_MR, 16);                      /* [12][FA_NK] */
    float *ot = st + (size_t)FA_MR * FA_NK;                         /* [12][hdp] */
    float *mrow = ot + (size_t)FA_MR * hdp, *lrow = mrow + FA_MR;

    /* K transposed into 32-key slivers, V into padded rows; keys past nk are zero */
    for (int j = 0; j < nkp; j++) {
        float *kd = kt + (size_t)(j / FA_KS) * hd * FA_KS + j % FA_KS, *vd = vp + (size_t)j * hdp;
        if (j < nk) {
            const float *kr = a->k + (size_t)j * a->ldk;
            for (int d = 0; d < hd; d++) kd[(size_t)d * FA_KS] = kr[d];
            memcpy(vd, a->v + (size_t)j * a->ldv, sizeof(float) * (size_t)hd);
            memset(vd + hd, 0, sizeof(float) * (size_t)(hdp - hd));
        } else {
            for (int d = 0; d < hd; d++) kd[(size_t)d * FA_KS] = 0.0f;
            memset(vd, 0, sizeof(float) * (size_t)hdp);
        }
    }
    const __m512 sc = _mm512_set1_ps(a->scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int i0 = 0; i0 < nq; i0 += FA_MR) {
        int mr = nq - i0 < FA_MR ? nq - i0 : FA_MR;
        for (int d = 0; d < hd; d++)
            for (int i = 0; i < FA_MR; i++) qs[(size_t)d * FA_MR + i] = i < mr ? a->q[(size_t)(i0 + i) * a->ldq + d] : 0.0f;
        memset(ot, 0, sizeof(float) * (size_t)FA_MR * hdp);
        for (int i = 0; i < FA_MR; i++) mrow[i] = -INFINITY, lrow[i] = 0.0f;
        for (int j0 = 0; j0 < nk; j0 += FA_NK) {
            int nb = nk - j0 < FA_NK ? nk - j0 : FA_NK, nbs = round_up(nb, 16);
            for (int t = 0; t < nb; t += FA_KS) scores_12x32(st + t, qs, kt + (size_t)(j0 + t) * hd, hd);
            for (int i = 0; i < mr; i++) {
                float *srow = st + (size_t)i * FA_NK;
                __m512 bm = ninf;
                for (int j = 0; j < nbs; j += 16) {
                    __mmask16 live = j + 16 <= nb ? (__mmask16)0xffff : (__mmask16)((1u << (nb - j)) - 1);
                    __m512 x = _mm512_mul_ps(_mm512_load_ps(srow + j), sc);
                    if (mask) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(live, mask + j0 + j));
                    if (tbias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(live, tbias + j0 + j - (i0 + i)));
                    x = _mm512_mask_blend_ps(live, ninf, x);
                    _mm512_store_ps(srow + j, x);
                    bm = _mm512_max_ps(bm, x);
                }
                float m0 = mrow[i], mn = _mm512_reduce_max_ps(bm);
                mn = mn > m0 ? mn : m0;
                __m512 mv = _mm512_set1_ps(mn), sum = _mm512_setzero_ps();
                for (int j = 0; j < nbs; j += 16) {
                    __m512 p = exp16(_mm512_sub_ps(_mm512_load_ps(srow + j), mv));
                    _mm512_store_ps(srow + j, p);
                    sum = _mm512_add_ps(sum, p);
                }
                float alpha = _mm512_cvtss_f32(exp16(_mm512_set1_ps(m0 - mn)));
                lrow[i] = lrow[i] * alpha + _mm512_reduce_add_ps(sum);
                mrow[i] = mn;
                if (alpha != 1.0f) {
                    __m512 av = _mm512_set1_ps(alpha);
                    for (int c = 0; c < hdp; c += 16) _mm512_store_ps(ot + (size_t)i * hdp + c, _mm512_mul_ps(av, _mm512_load_ps(ot + (size_t)i * hdp + c)));
                }
            }
            for (int r = 0; r < mr; r += FA_PR)
                for (int c0 = 0; c0 < hdp; c0 += 80) {
                    int nz = (hdp - c0) / 16 < 5 ? (hdp - c0) / 16 : 5;
                    pv[nz - 1](ot + (size_t)r * hdp, st + (size_t)r * FA_NK, vp + (size_t)j0 * hdp, nb, hdp, c0);
                }
        }
        for (int i = 0; i < mr; i++) {
            __m512 inv = _mm512_set1_ps(1.0f / lrow[i]);
            float *dst = a->o + (size_t)(i0 + i) * a->ldo;
            for (int c = 0; c < hd; c += 16) {
                __mmask16 live = c + 16 <= hd ? (__mmask16)0xffff : (__mmask16)((1u << (hd - c)) - 1);
                _mm512_mask_storeu_ps(dst + c, live, _mm512_mul_ps(inv, _mm512_load_ps(ot + (size_t)i * hdp + c)));
            }
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
