/* conformer_block.c — one Macaron Conformer block on G independent sequences of L frames
 * (PIPELINE.md §3.6, official ConformerEncoderLayer):
 *   x += 0.5 * FF_in(x)          FF: LN -> Linear(D, 2U) -> a * act(g) -> Linear(U, D)
 *   x += MHSA(LN_att(x))         q/k/v with bias, q / sqrt(dk), + T5 bias, key mask, softmax, @ v
 *   x += Conv(x)                 LN -> pw Conv1d(D, 2D) -> (a + b1) * act(g + b2) -> depthwise
 *                                Conv1d(k) (causal: sees frames t-k+1..t) -> pw Conv1d -> act
 *                                -> ext pw Conv1d
 *   x += 0.5 * FF_out(x)
 *   x = LN(x)
 * Rows are [G][L][D]; the depthwise conv and the attention never cross a sequence boundary.
 * The big products go through pm_linear (bf16 weights, sgemm); attention runs per (sequence,
 * head) on per-head contiguous copies, parallel over pairs: fused (pm_kern_flash, the T5 bias as
 * its relative-position term) where the CPU has its SIMD path, else pm_matmul_nt, a softmax over
 * the [L, n] scores and pm_matmul_nn.
 * A masked key gets exactly zero weight, so each row's softmax runs over the kv_len unmasked keys
 * only; a sequence with no unmasked key gets a zero attention output (the official masked
 * softmax fills such rows with 0). */
#include "conformer_internal.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "nn/kernels.h"

static void feed_forward(const pm_conformer *m, const pm_cf_ff *ff, float *x, int R, pm_cf_work *w) {
    int D = m->c.attention_dim, U = m->c.linear_units;
    pm_cf_act act = m->c.ff_act;
    pm_layernorm(w->h, x, ff->ln_w, ff->ln_b, R, D, PM_CF_LN_EPS);
    pm_linear(w->big, w->h, R, &ff->w1, NULL);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *a = w->big + (size_t)r * 2 * U, *g = a + U;
        float *o = w->mid + (size_t)r * U;
        if (act == PM_CF_ACT_SWISH) { /* the vectorised exp: the scalar one cost as much as the matmuls */
            for (int j = 0; j < U; j++) {
                a[j] += ff->b1[j];
                g[j] += ff->b1[U + j];
            }
            pm_kern_silu_mul(o, g, a, (size_t)U);
        } else
            for (int j = 0; j < U; j++) o[j] = (a[j] + ff->b1[j]) * pm_cf_apply(act, g[j] + ff->b1[U + j]);
    }
    pm_linear(w->h, w->mid, R, &ff->w2, NULL);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *xr = x + (size_t)r * D;
        const float *hr = w->h + (size_t)r * D;
        for (int j = 0; j < D; j++) xr[j] += 0.5f * (hr[j] + ff->b2[j]);
    }
}

/* [G*L, D] (+ bias, * scale) -> [G][H][L][dk] */
static void to_heads(float *dst, const float *src, const float *bias, float scale, int G, int L, int H, int dk) {
    int D = H * dk;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < G * L; r++) {
        int s = r / L, i = r % L;
        const float *sr = src + (size_t)r * D;
        for (int h = 0; h < H; h++) {
            float *d = dst + (((size_t)s * H + h) * L + i) * dk;
            for (int c = 0; c < dk; c++) d[c] = (sr[h * dk + c] + bias[h * dk + c]) * scale;
        }
    }
}

static void self_attention(const pm_conformer *m, const pm_cf_block *b, const float *x, int G, int L, const int *kv_len, pm_cf_work *w) {
    int D = m->c.attention_dim, H = m->c.attention_heads, dk = D / H, R = G * L;
    pm_layernorm(w->h, x, b->ln_att_w, b->ln_att_b, R, D, PM_CF_LN_EPS);
    float *qkv[3] = {w->q, w->k, w->v};
    const pm_tensor *w3[3] = {&b->wq, &b->wk, &b->wv};
    pm_linear_many(qkv, w->h, R, w3, NULL, 3);
    to_heads(w->qt, w->q, b->bq, 1.0f / sqrtf((float)dk), G, L, H, dk);
    to_heads(w->kt, w->k, b->bk, 1.0f, G, L, H, dk);
    to_heads(w->vt, w->v, b->bv, 1.0f, G, L, H, dk);
    const int fused = pm_kern_flash_takes();
    const size_t per_thread = w->per_thread;
#pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < G * H; p++) {
        int s = p / H, h = p % H, n = kv_len[s];
#ifdef _OPENMP
        int tid = omp_get_thread_num();
#else
        int tid = 0;
#endif
        float *S = w->scratch + (size_t)tid * per_thread, *O = S + (size_t)L * L;
        const float *Q = w->qt + (size_t)p * L * dk, *K = w->kt + (size_t)p * L * dk, *V = w->vt + (size_t)p * L * dk;
        if (n > 0 && fused) {
            /* tb[r] = the T5 bias at j - i = r, for r in [1 - L, n - 1] */
            float *tb = S + pm_kern_flash_ws(L, dk) + (size_t)(L - 1);
            for (int r = 1 - L; r < n; r++) tb[r] = pm_cf_t5(m, h, 0, r);
            pm_flash a = {.o = w->att + (size_t)s * L * D + (size_t)h * dk, .q = Q, .k = K, .v = V, .tbias = tb, .ldo = (size_t)D,
                          .ldq = (size_t)dk, .ldk = (size_t)dk, .ldv = (size_t)dk, .nq = L, .nk = n, .hd = dk, .scale = 1.0f};
            pm_kern_flash(&a, S);
            continue;
        }
        if (n <= 0) {
            memset(O, 0, (size_t)L * dk * sizeof(float));
        } else {
            pm_matmul_nt(S, Q, K, L, n, dk); /* S [L, n] */
            for (int i = 0; i < L; i++) {
                float *row = S + (size_t)i * n;
                for (int j = 0; j < n; j++) row[j] += pm_cf_t5(m, h, i, j);
                pm_kern_softmax(row, n);
            }
            pm_matmul_nn(O, S, V, L, dk, n); /* O [L, dk] */
        }
        for (int i = 0; i < L; i++) memcpy(w->att + ((size_t)s * L + i) * D + (size_t)h * dk, O + (size_t)i * dk, (size_t)dk * sizeof(float));
    }
}

size_t pm_cf_attn_scratch(int L, int dk) {
    size_t two_pass = (size_t)L * L + (size_t)L * dk, fused = pm_kern_flash_ws(L, dk) + 2 * (size_t)L;
    return two_pass > fused ? two_pass : fused;
}

static void conv_module(const pm_conformer *m, const pm_cf_block *b, float *x, int G, int L, pm_cf_work *w) {
    int D = m->c.attention_dim, R = G * L, k = m->c.kernel_size;
    int pad = m->c.causal ? k - 1 : (k - 1) / 2;
    pm_cf_act gact = m->c.conv_glu_act, act = m->c.conv_act;
    pm_layernorm(w->h, x, b->conv_ln_w, b->conv_ln_b, R, D, PM_CF_LN_EPS);
    pm_linear(w->big, w->h, R, &b->glu_w, NULL); /* [R, 2D] */
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *a = w->big + (size_t)r * 2 * D, *g = a + D;
        float *o = w->mid + (size_t)r * D;
        if (gact == PM_CF_ACT_SWISH) {
            for (int j = 0; j < D; j++) {
                a[j] = (a[j] + b->glu_bias[j]) + b->glu_b1[j];
                g[j] = (g[j] + b->glu_bias[D + j]) + b->glu_b2[j];
            }
            pm_kern_silu_mul(o, g, a, (size_t)D);
        } else
            for (int j = 0; j < D; j++)
                o[j] = ((a[j] + b->glu_bias[j]) + b->glu_b1[j]) * pm_cf_apply(gact, (g[j] + b->glu_bias[D + j]) + b->glu_b2[j]);
    }
    /* depthwise conv along time within each sequence: out[t] = b + sum_j w[j] * in[t + j - pad] */
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        int s = r / L, t = r % L;
        float *o = w->h + (size_t)r * D;
        memcpy(o, b->dw_b, (size_t)D * sizeof(float));
        for (int j = 0; j < k; j++) {
            int ti = t + j - pad;
            if (ti < 0 || ti >= L) continue;
            const float *src = w->mid + ((size_t)s * L + ti) * D, *wj = b->dw_w + (size_t)j * D;
#pragma omp simd
            for (int c = 0; c < D; c++) o[c] += src[c] * wj[c];
        }
    }
    pm_linear(w->q, w->h, R, &b->pw_w, NULL);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *o = w->q + (size_t)r * D;
        if (act == PM_CF_ACT_SWISH) {
            for (int j = 0; j < D; j++) o[j] += b->pw_b[j];
            pm_kern_silu_mul(o, o, NULL, (size_t)D);
        } else
            for (int j = 0; j < D; j++) o[j] = pm_cf_apply(act, o[j] + b->pw_b[j]);
    }
    pm_linear(w->h, w->q, R, &b->ext_w, NULL);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *xr = x + (size_t)r * D;
        const float *hr = w->h + (size_t)r * D;
        for (int j = 0; j < D; j++) xr[j] += hr[j] + b->ext_b[j];
    }
}

void pm_cf_block_forward(const pm_conformer *m, const pm_cf_block *b, float *x, int G, int L, const int *kv_len, pm_cf_work *w) {
    int D = m->c.attention_dim, R = G * L;
    PM_ASSERT(R <= w->rows && L == w->L);
    feed_forward(m, &b->ff_in, x, R, w);
    self_attention(m, b, x, G, L, kv_len, w);
    pm_linear(w->h, w->att, R, &b->wo, NULL);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++) {
        float *xr = x + (size_t)r * D;
        const float *hr = w->h + (size_t)r * D;
        for (int j = 0; j < D; j++) xr[j] += hr[j] + b->bo[j];
    }
    conv_module(m, b, x, G, L, w);
    feed_forward(m, &b->ff_out, x, R, w);
    pm_layernorm(x, x, b->ln_w, b->ln_b, R, D, PM_CF_LN_EPS);
}
