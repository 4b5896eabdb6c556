/* conformer_subsample.c — NeMo "dw_striding" subsampling of one clip (PIPELINE.md §3.2):
 *   [T, F] -> Conv2d(1, C, 3, stride 2, pad 1) -> ReLU
 *          -> (n_stages - 1) x [depthwise Conv2d(C, C, 3, s2, p1) -> Conv2d(C, C, 1) -> ReLU]
 *          -> [T', C, F'] flattened channel-major (index c*F' + f) -> Linear(C*F', D).
 * Each stride-2 stage maps L rows to (L-1)/2 + 1 (= ceil(L/2)), on time and mel axes alike.
 *
 * Activations are channel-last ([t][f][c]) so the 1x1 convs are GEMMs (pm_linear) and the 3x3
 * taps are contiguous channel loops. Real dims (C = 1024) make a whole clip's first feature map
 * huge (30 min of audio: ~15 GB), so the output is produced in tiles of TILE rows of T': each
 * tile computes just the rows of every level that its receptive field needs (row t of a level
 * reads rows 2t-1..2t+1 of the level below; rows outside [0, T_level) are the zero padding).
 * Finished rows collect in a flush buffer of FLUSH rows before the output Linear, so the big
 * out weight is converted to fp32 once per FLUSH rows rather than once per tile. */
#include "conformer_internal.h"

#include <stdlib.h>
#include <string.h>

#define TILE 16
#define FLUSH 128
#define MAX_STAGES 12

static int down(int n) { return (n - 1) / 2 + 1; }

/* First conv (1 input channel): out rows [lo, hi) of [T1][F1][C] from the input rows of xn. */
static void conv0(const pm_conformer *m, const float *xn, int t_in, int f_in, int lo, int hi, int f_out, float *out) {
    int C = m->c.conv_channels;
    long n = (long)(hi - lo) * f_out;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < n; p++) {
        int t = lo + (int)(p / f_out), f = (int)(p % f_out);
        float v[9];
        for (int kt = 0; kt < 3; kt++)
            for (int kf = 0; kf < 3; kf++) {
                int r = 2 * t - 1 + kt, q = 2 * f - 1 + kf;
                v[kt * 3 + kf] = (r >= 0 && r < t_in && q >= 0 && q < f_in) ? xn[(size_t)r * f_in + q] : 0.0f;
            }
        float *o = out + (size_t)p * C;
        const float *b0 = m->conv0_b, *w = m->conv0_w;
        const float *w0 = w, *w1 = w + C, *w2 = w + 2 * (size_t)C, *w3 = w + 3 * (size_t)C, *w4 = w + 4 * (size_t)C,
                    *w5 = w + 5 * (size_t)C, *w6 = w + 6 * (size_t)C, *w7 = w + 7 * (size_t)C, *w8 = w + 8 * (size_t)C;
        const float v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3], v4 = v[4], v5 = v[5], v6 = v[6], v7 = v[7], v8 = v[8];
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float acc = b0[c] + v0 * w0[c] + v1 * w1[c] + v2 * w2[c] + v3 * w3[c] + v4 * w4[c] + v5 * w5[c] + v6 * w6[c] +
                        v7 * w7[c] + v8 * w8[c];
            o[c] = acc > 0.0f ? acc : 0.0f;
        }
    }
}

/* Depthwise 3x3 stride 2: out rows [lo, hi) x f_out from `in`, which holds rows [in_lo, in_hi) of a
 * [t_in][f_in][C] map (every row of [0, t_in) that is read lies in it). */
static void dwconv(const pm_cf_stage *st, int C, const float *in, int in_lo, int t_in, int f_in, int lo, int hi, int f_out, float *out) {
    long n = (long)(hi - lo) * f_out;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < n; p++) {
        int t = lo + (int)(p / f_out), f = (int)(p % f_out);
        float *o = out + (size_t)p * C;
        memcpy(o, st->dw_b, (size_t)C * sizeof(float));
        for (int kt = 0; kt < 3; kt++) {
            int r = 2 * t - 1 + kt;
            if (r < 0 || r >= t_in) continue;
            for (int kf = 0; kf < 3; kf++) {
                int q = 2 * f - 1 + kf;
                if (q < 0 || q >= f_in) continue;
                const float *src = in + ((size_t)(r - in_lo) * f_in + q) * C, *wk = st->dw_w + (size_t)(kt * 3 + kf) * C;
#pragma omp simd
                for (int c = 0; c < C; c++) o[c] += src[c] * wk[c];
            }
        }
    }
}

static void bias_relu(float *y, long rows, const float *b, int C) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        float *o = y + (size_t)r * C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float v = o[c] + b[c];
            o[c] = v > 0.0f ? v : 0.0f;
        }
    }
}

int pm_cf_subsample(const pm_conformer *m, const float *xn, int t_max, float *out, pm_err *e) {
    int n = m->n_stages, C = m->c.conv_channels, D = m->c.attention_dim;
    PM_ASSERT(n >= 1 && n <= MAX_STAGES);
    int T[MAX_STAGES + 1], F[MAX_STAGES + 1], rows_max[MAX_STAGES + 1], lo[MAX_STAGES + 1], hi[MAX_STAGES + 1];
    T[0] = t_max;
    F[0] = m->c.input_size;
    for (int k = 1; k <= n; k++) {
        T[k] = down(T[k - 1]);
        F[k] = down(F[k - 1]);
    }
    PM_ASSERT(F[n] == m->freq_out);
    rows_max[n] = TILE;
    for (int k = n - 1; k >= 1; k--) rows_max[k] = 2 * rows_max[k + 1] + 1;

    float *lvl[MAX_STAGES + 1] = {0}, *tmp = NULL, *flush = NULL;
    size_t tmp_n = 0;
    int rc = PM_OK;
    for (int k = 1; k <= n; k++) {
        size_t sz = (size_t)rows_max[k] * F[k] * C;
        if (!(lvl[k] = pm_malloc(sz * sizeof(float), e))) goto done;
        if (k >= 2 && sz > tmp_n) tmp_n = sz;
    }
    if (tmp_n && !(tmp = pm_malloc(tmp_n * sizeof(float), e))) goto done;
    int width = C * F[n];
    if (!(flush = pm_malloc((size_t)FLUSH * width * sizeof(float), e))) goto done;

    int flush_t0 = 0, flush_rows = 0;
    for (int a = 0; a < T[n]; a += TILE) {
        lo[n] = a;
        hi[n] = a + TILE < T[n] ? a + TILE : T[n];
        for (int k = n - 1; k >= 1; k--) {
            lo[k] = 2 * lo[k + 1] - 1 < 0 ? 0 : 2 * lo[k + 1] - 1;
            hi[k] = 2 * hi[k + 1] < T[k] ? 2 * hi[k + 1] : T[k];
        }
        conv0(m, xn, T[0], F[0], lo[1], hi[1], F[1], lvl[1]);
        for (int k = 2; k <= n; k++) {
            const pm_cf_stage *st = &m->stages[k - 2];
            long rows = (long)(hi[k] - lo[k]) * F[k];
            dwconv(st, C, lvl[k - 1], lo[k - 1], T[k - 1], F[k - 1], lo[k], hi[k], F[k], tmp);
            pm_linear(lvl[k], tmp, (int)rows, &st->pw_w, NULL);
            bias_relu(lvl[k], rows, st->pw_b, C);
        }
        /* [t][f][c] -> [t][c * F' + f] */
        for (int t = 0; t < hi[n] - lo[n]; t++) {
            float *dst = flush + (size_t)(flush_rows + t) * width;
            const float *src = lvl[n] + (size_t)t * F[n] * C;
            for (int f = 0; f < F[n]; f++)
                for (int c = 0; c < C; c++) dst[(size_t)c * F[n] + f] = src[(size_t)f * C + c];
        }
        flush_rows += hi[n] - lo[n];
        if (flush_rows + TILE > FLUSH || hi[n] == T[n]) {
            float *y = out + (size_t)flush_t0 * D;
            pm_linear(y, flush, flush_rows, &m->out_w, NULL);
            for (int r = 0; r < flush_rows; r++)
                for (int j = 0; j < D; j++) y[(size_t)r * D + j] += m->out_b[j];
            flush_t0 += flush_rows;
            flush_rows = 0;
        }
    }
    PM_ASSERT(flush_t0 == T[n]);
done:
    rc = e->code;
    for (int k = 1; k <= n; k++) free(lvl[k]);
    free(tmp);
    free(flush);
    return rc;
}
