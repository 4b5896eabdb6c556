/* llm.c — Phi-4-mini forward pass. Per layer: RMSNorm -> fused qkv (+LoRA) -> partial RoPE ->
 * causal GQA attention against the sequence's cache -> o_proj (+LoRA) -> residual -> RMSNorm ->
 * fused gate_up (+LoRA) -> up * silu(gate) -> down (+LoRA) -> residual. Shapes in comments use
 * N = total new rows of the batch, H = hidden, D = head_dim, KV = n_kv_heads * D. */
#include "llm.h"
#include "nn/ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *adapter_name[3] = {"none", "speech", "vision"};

static int load_lora_linear(pm_lora_linear *L, pm_weights *w, const pm_llm_config *c, int out, int in, const char *base, pm_err *e) {
    L->W = pm_wget(w, e, 2, (int64_t[]){out, in}, "%s.base_layer.weight", base);
    for (int a = PM_ADAPTER_SPEECH; a <= PM_ADAPTER_VISION && !e->code; a++) {
        char an[512], bn[512];
        snprintf(an, sizeof an, "%s.lora_A.%s.weight", base, adapter_name[a]);
        snprintf(bn, sizeof bn, "%s.lora_B.%s.weight", base, adapter_name[a]);
        int ha = pm_weights_find(w, an) != NULL, hb = pm_weights_find(w, bn) != NULL;
        if (!ha || !hb)
            return pm_errf(e, PM_EFORMAT, "incomplete LoRA pair for the %s adapter: '%s' is %s and '%s' is %s", adapter_name[a], an,
                           ha ? "present" : "missing", bn, hb ? "present" : "missing");
        int r = c->lora_r[a];
        const pm_tensor *A = pm_weights_find(w, an), *B = pm_weights_find(w, bn);
        if (A->ndim == 2 && B->ndim == 2 && (A->shape[0] != r || B->shape[1] != r) && A->shape[0] == B->shape[1])
            return pm_errf(e, PM_EFORMAT, "LoRA '%s' has rank %lld but config.json %s_lora.r is %d", an, (long long)A->shape[0],
                           adapter_name[a], r);
        L->A[a] = pm_wget(w, e, 2, (int64_t[]){r, in}, "%s", an);
        L->B[a] = pm_wget(w, e, 2, (int64_t[]){out, r}, "%s", bn);
        L->scale[a] = c->lora_alpha[a] / (float)r;
    }
    return e->code;
}

int pm_llm_load(pm_llm *m, pm_weights *w, const pm_llm_config *c, pm_err *e) {
    memset(m, 0, sizeof *m);
    m->c = *c;
    int H = c->hidden, KV = c->n_kv_heads * c->head_dim, FF = c->intermediate;
    m->embed = pm_wget(w, e, 2, (int64_t[]){c->vocab, H}, "model.embed_tokens.weight");
    m->final_norm = pm_tensor_f32_copy(pm_wget(w, e, 1, (int64_t[]){H}, "model.norm.weight"), e);
    m->layers = pm_calloc((size_t)c->n_layers, sizeof *m->layers, e);
    for (int l = 0; l < c->n_layers && !e->code; l++) {
        pm_llm_layer *L = &m->layers[l];
        char base[256];
        L->ln_attn = pm_tensor_f32_copy(pm_wget(w, e, 1, (int64_t[]){H}, "model.layers.%d.input_layernorm.weight", l), e);
        L->ln_mlp = pm_tensor_f32_copy(pm_wget(w, e, 1, (int64_t[]){H}, "model.layers.%d.post_attention_layernorm.weight", l), e);
        snprintf(base, sizeof base, "model.layers.%d.self_attn.qkv_proj", l);
        if (!e->code) load_lora_linear(&L->qkv, w, c, H + 2 * KV, H, base, e);
        snprintf(base, sizeof base, "model.layers.%d.self_attn.o_proj", l);
        if (!e->code) load_lora_linear(&L->o, w, c, H, c->n_heads * c->head_dim, base, e);
        snprintf(base, sizeof base, "model.layers.%d.mlp.gate_up_proj", l);
        if (!e->code) load_lora_linear(&L->gate_up, w, c, 2 * FF, H, base, e);
        snprintf(base, sizeof base, "model.layers.%d.mlp.down_proj", l);
        if (!e->code) load_lora_linear(&L->down, w, c, H, FF, base, e);
    }
    /* inv_freq = 1 / (ext * theta^(2i/rot)), float32 like the reference. */
    for (int f = 0; f < 2 && !e->code; f++) {
        m->inv_freq[f] = pm_malloc(sizeof(float) * (size_t)c->n_factors, e);
        if (!m->inv_freq[f]) break;
        for (int i = 0; i < c->n_factors; i++) {
            float ex = (float)(2 * i) / (float)c->rot_dims;
            float ext = f ? c->long_factor[i] : c->short_factor[i];
            m->inv_freq[f][i] = 1.0f / (ext * powf(c->rope_theta, ex));
        }
    }
    if (e->code) {
        pm_llm_free(m);
        return e->code;
    }
    return PM_OK;
}

void pm_llm_free(pm_llm *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->c.n_layers; l++) {
            free(m->layers[l].ln_attn);
            free(m->layers[l].ln_mlp);
        }
    free(m->layers);
    free(m->final_norm);
    free(m->inv_freq[0]);
    free(m->inv_freq[1]);
    memset(m, 0, sizeof *m);
}

int pm_kv_reserve(pm_kv_cache *kv, const pm_llm_config *c, int cap, pm_err *e) {
    int row = c->n_kv_heads * c->head_dim;
    if (kv->k && kv->cap >= cap) return PM_OK;
    int ncap = kv->cap ? kv->cap : 64;
    while (ncap < cap) ncap *= 2;
    size_t per = pm_mul_size((size_t)ncap, (size_t)row);
    size_t total = pm_mul_size(per, (size_t)c->n_layers);
    float *nk = pm_malloc(total * sizeof(float), e), *nv = nk ? pm_malloc(total * sizeof(float), e) : NULL;
    if (!nk || !nv) {
        free(nk);
        return pm_errf(e, PM_ENOMEM, "out of memory for a KV cache of %d positions", ncap);
    }
    for (int l = 0; l < c->n_layers && kv->k; l++) {
        memcpy(nk + (size_t)l * per, kv->k + (size_t)l * kv->cap * row, (size_t)kv->len * row * sizeof(float));
        memcpy(nv + (size_t)l * per, kv->v + (size_t)l * kv->cap * row, (size_t)kv->len * row * sizeof(float));
    }
    free(kv->k);
    free(kv->v);
    kv->k = nk;
    kv->v = nv;
    kv->cap = ncap;
    kv->n_layers = c->n_layers;
    kv->row = row;
    return PM_OK;
}

void pm_kv_free(pm_kv_cache *kv) {
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

int pm_llm_embed(const pm_llm *m, const int32_t *ids, int n, float *out, pm_err *e) {
    int H = m->c.hidden;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->c.vocab)
            return pm_errf(e, PM_EINVAL, "token id %d at position %d is outside the vocabulary [0, %d)", ids[i], i, m->c.vocab);
        pm_tensor_read_f32(m->embed, (size_t)ids[i] * H, (size_t)H, out + (size_t)i * H);
    }
    return PM_OK;
}

void pm_llm_rope_table(const pm_llm *m, int rope_long, const int *pos, int n, float *cos_out, float *sin_out) {
    int half = m->c.n_factors, rot = m->c.rot_dims;
    const float *inv = m->inv_freq[rope_long ? 1 : 0];
    for (int j = 0; j < n; j++)
        for (int i = 0; i < rot; i++) {
            float f = (float)pos[j] * inv[i % half];
            cos_out[(size_t)j * rot + i] = cosf(f) * m->c.rope_scale;
            sin_out[(size_t)j * rot + i] = sinf(f) * m->c.rope_scale;
        }
}

/* Rotates the first rot dims of one head vector in place (rotate_half convention). */
static void rope_apply(float *v, const float *cs, const float *sn, int rot) {
    int half = rot / 2;
    float tmp[1024];
    for (int i = 0; i < half; i++) {
        tmp[i] = v[i] * cs[i] - v[i + half] * sn[i];
        tmp[i + half] = v[i + half] * cs[i + half] + v[i] * sn[i + half];
    }
    memcpy(v, tmp, sizeof(float) * (size_t)rot);
}

/* y[N, out] = x @ W^T, then each chunk's rows get their adapter's (alpha/r) * B(A x). */
static int lora_linear(float *y, const float *x, int N, const pm_lora_linear *L, const pm_llm_chunk *ch, int nc, const int *off,
                       pm_err *e) {
    int in = (int)L->W->shape[1], out = (int)L->W->shape[0];
    pm_linear(y, x, N, L->W, NULL);
    for (int a = PM_ADAPTER_SPEECH; a <= PM_ADAPTER_VISION; a++) {
        int na = 0;
        for (int c = 0; c < nc; c++) na += (int)ch[c].adapter == a ? ch[c].n : 0;
        if (!na) continue;
        int r = (int)L->A[a]->shape[0];
        float *xa = pm_malloc(sizeof(float) * (size_t)na * in, e), *t = pm_malloc(sizeof(float) * (size_t)na * r, e),
              *ya = pm_malloc(sizeof(float) * (size_t)na * out, e);
        if (!xa || !t || !ya) {
            free(xa); free(t); free(ya);
            return e->code;
        }
        int k = 0;
        for (int c = 0; c < nc; c++)
            if ((int)ch[c].adapter == a) {
                memcpy(xa + (size_t)k * in, x + (size_t)off[c] * in, sizeof(float) * (size_t)ch[c].n * in);
                k += ch[c].n;
            }
        pm_linear(t, xa, na, L->A[a], NULL);
        pm_linear(ya, t, na, L->B[a], NULL);
        k = 0;
        for (int c = 0; c < nc; c++)
            if ((int)ch[c].adapter == a) {
                float *yr = y + (size_t)off[c] * out;
                const float *src = ya + (size_t)k * out;
                for (size_t i = 0; i < (size_t)ch[c].n * out; i++) yr[i] += src[i] * L->scale[a];
                k += ch[c].n;
            }
        free(xa); free(t); free(ya);
    }
    return PM_OK;
}

/* Causal attention of one chunk (rows [0, n) at positions p0..p0+n-1) against its cache, which
 * already holds this chunk's K/V. q: [n, qkv_dim] rows (q part first), out: [n, H]. */
static void attend_chunk(const pm_llm *m, const pm_kv_cache *kv, int layer, const float *qkv, int qkv_dim, int n, int p0, float *out) {
    const pm_llm_config *c = &m->c;
    int D = c->head_dim, group = c->n_heads / c->n_kv_heads, row = kv->row, H = c->hidden;
    const float *K = kv->k + (size_t)layer * kv->cap * row, *V = kv->v + (size_t)layer * kv->cap * row;
    float sq = sqrtf((float)D);
    int L = p0 + n;
    if (n <= PM_SMALL_N) {
#pragma omp parallel for schedule(static)
        for (int h = 0; h < c->n_heads; h++) {
            int kh = h / group;
            float *s = malloc(sizeof(float) * (size_t)L);
            PM_ASSERT(s);
            for (int j = 0; j < n; j++) {
                const float *q = qkv + (size_t)j * qkv_dim + (size_t)h * D;
                int len = p0 + j + 1;
                for (int t = 0; t < len; t++) {
                    const float *k = K + (size_t)t * row + (size_t)kh * D;
                    float d = 0.0f;
                    for (int i = 0; i < D; i++) d += q[i] * k[i];
                    s[t] = d / sq;
                }
                pm_softmax_inplace(s, len);
                float *o = out + (size_t)j * H + (size_t)h * D;
                for (int i = 0; i < D; i++) o[i] = 0.0f;
                for (int t = 0; t < len; t++) {
                    const float *v = V + (size_t)t * row + (size_t)kh * D;
                    float p = s[t];
                    for (int i = 0; i < D; i++) o[i] += p * v[i];
                }
            }
            free(s);
        }
        return;
    }
    /* Prefill: per head, blocks of query rows through sgemm; scores never exceed BLK x L. */
    enum { BLK = 256 };
#pragma omp parallel for schedule(dynamic)
    for (int h = 0; h < c->n_heads; h++) {
        int kh = h / group;
        float *s = malloc(sizeof(float) * (size_t)BLK * L);
        PM_ASSERT(s);
        for (int j0 = 0; j0 < n; j0 += BLK) {
            int bn = n - j0 < BLK ? n - j0 : BLK, len = p0 + j0 + bn;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bn, len, D, 1.0f, qkv + (size_t)j0 * qkv_dim + (size_t)h * D, qkv_dim,
                        K + (size_t)kh * D, row, 0.0f, s, len);
            for (int j = 0; j < bn; j++) {
                float *sr = s + (size_t)j * len;
                int valid = p0 + j0 + j + 1;
                for (int t = 0; t < valid; t++) sr[t] /= sq;
                for (int t = valid; t < len; t++) sr[t] = -INFINITY;
                pm_softmax_inplace(sr, len);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bn, D, len, 1.0f, s, len, V + (size_t)kh * D, row, 0.0f,
                        out + (size_t)j0 * H + (size_t)h * D, H);
        }
        free(s);
    }
}

int pm_llm_forward(const pm_llm *m, pm_llm_chunk *ch, int nc, pm_err *e) {
    const pm_llm_config *c = &m->c;
    int H = c->hidden, D = c->head_dim, KV = c->n_kv_heads * D, FF = c->intermediate, QKV = H + 2 * KV, rot = c->rot_dims;
    int N = 0;
    int *off = pm_malloc(sizeof(int) * (size_t)(nc + 1), e);
    if (!off) return e->code;
    for (int i = 0; i < nc; i++) {
        off[i] = N;
        N += ch[i].n;
        if (ch[i].n <= 0) {
            free(off);
            return pm_errf(e, PM_ESTATE, "empty chunk in a forward step");
        }
        if (pm_kv_reserve(ch[i].kv, c, ch[i].kv->len + ch[i].n, e)) {
            free(off);
            return e->code;
        }
    }
    off[nc] = N;
    size_t NH = (size_t)N * H;
    float *x = pm_malloc(sizeof(float) * NH, e), *xn = pm_malloc(sizeof(float) * NH, e), *att = pm_malloc(sizeof(float) * NH, e),
          *tmp = pm_malloc(sizeof(float) * NH, e), *qkv = pm_malloc(sizeof(float) * (size_t)N * QKV, e),
          *gu = pm_malloc(sizeof(float) * (size_t)N * 2 * FF, e), *hb = pm_malloc(sizeof(float) * (size_t)N * FF, e),
          *cs = pm_malloc(sizeof(float) * (size_t)N * rot, e), *sn = pm_malloc(sizeof(float) * (size_t)N * rot, e);
    int *pos = pm_malloc(sizeof(int) * (size_t)N, e);
    if (e->code) goto done;
    for (int i = 0; i < nc; i++) {
        memcpy(x + (size_t)off[i] * H, ch[i].embeds, sizeof(float) * (size_t)ch[i].n * H);
        for (int j = 0; j < ch[i].n; j++) pos[off[i] + j] = ch[i].kv->len + j;
        pm_llm_rope_table(m, ch[i].rope_long, pos + off[i], ch[i].n, cs + (size_t)off[i] * rot, sn + (size_t)off[i] * rot);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const pm_llm_layer *L = &m->layers[l];
        pm_rmsnorm(xn, x, L->ln_attn, N, H, c->rms_eps);
        if (lora_linear(qkv, xn, N, &L->qkv, ch, nc, off, e)) goto done;
        for (int i = 0; i < nc; i++) {
            pm_kv_cache *kv = ch[i].kv;
            float *K = kv->k + (size_t)l * kv->cap * KV, *V = kv->v + (size_t)l * kv->cap * KV;
            for (int j = 0; j < ch[i].n; j++) {
                int r = off[i] + j;
                float *q = qkv + (size_t)r * QKV, *k = q + H, *v = k + KV;
                const float *cr = cs + (size_t)r * rot, *sr = sn + (size_t)r * rot;
                for (int h = 0; h < c->n_heads; h++) rope_apply(q + (size_t)h * D, cr, sr, rot);
                for (int h = 0; h < c->n_kv_heads; h++) rope_apply(k + (size_t)h * D, cr, sr, rot);
                memcpy(K + (size_t)(kv->len + j) * KV, k, sizeof(float) * (size_t)KV);
                memcpy(V + (size_t)(kv->len + j) * KV, v, sizeof(float) * (size_t)KV);
            }
            attend_chunk(m, kv, l, qkv + (size_t)off[i] * QKV, QKV, ch[i].n, kv->len, att + (size_t)off[i] * H);
        }
        if (lora_linear(tmp, att, N, &L->o, ch, nc, off, e)) goto done;
        pm_add_inplace(x, tmp, NH);
        pm_rmsnorm(xn, x, L->ln_mlp, N, H, c->rms_eps);
        if (lora_linear(gu, xn, N, &L->gate_up, ch, nc, off, e)) goto done;
        for (int r = 0; r < N; r++) {
            const float *g = gu + (size_t)r * 2 * FF, *u = g + FF;
            float *o = hb + (size_t)r * FF;
            for (int t = 0; t < FF; t++) o[t] = u[t] * pm_silu(g[t]);
        }
        if (lora_linear(tmp, hb, N, &L->down, ch, nc, off, e)) goto done;
        pm_add_inplace(x, tmp, NH);
        for (int i = 0; i < nc; i++)
            if (ch[i].trace && ch[i].trace->layer_out && ch[i].trace->layer_out[l])
                memcpy(ch[i].trace->layer_out[l], x + (size_t)off[i] * H, sizeof(float) * (size_t)ch[i].n * H);
    }
    for (int i = 0; i < nc; i++) ch[i].kv->len += ch[i].n;
    /* Final norm and tied lm_head, only where asked; all logit rows in one pass over the embedding. */
    int nl = 0;
    for (int i = 0; i < nc; i++) {
        if (ch[i].trace && ch[i].trace->final_norm)
            pm_rmsnorm(ch[i].trace->final_norm, x + (size_t)off[i] * H, m->final_norm, ch[i].n, H, c->rms_eps);
        if (ch[i].logits) pm_rmsnorm(xn + (size_t)(nl++) * H, x + (size_t)(off[i] + ch[i].n - 1) * H, m->final_norm, 1, H, c->rms_eps);
    }
    if (nl) {
        float *lg = pm_malloc(sizeof(float) * (size_t)nl * c->vocab, e);
        if (!lg) goto done;
        pm_linear(lg, xn, nl, m->embed, NULL);
        int k = 0;
        for (int i = 0; i < nc; i++)
            if (ch[i].logits) memcpy(ch[i].logits, lg + (size_t)(k++) * c->vocab, sizeof(float) * (size_t)c->vocab);
        free(lg);
    }
done:
    free(off); free(x); free(xn); free(att); free(tmp); free(qkv); free(gu); free(hb); free(cs); free(sn); free(pos);
    return e->code;
}
