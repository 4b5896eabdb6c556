/* llm.c — Phi-4-mini forward pass. Per layer: RMSNorm -> fused qkv (+LoRA) -> partial RoPE ->
 * causal GQA attention against the sequence's cache -> o_proj (+LoRA) -> residual -> RMSNorm ->
 * fused gate_up (+LoRA) -> up * silu(gate) -> down (+LoRA) -> residual. Shapes in comments use
 * N = total new rows of the batch, H = hidden, D = head_dim, KV = n_kv_heads * D.
 *
 * Attention reads the paged cache (llm.h) page by page. Rows of small chunks (decode tokens, short
 * tails) take the single-query path: per (row, KV head) the scores of the g query heads of the
 * group, softmax, weighted sum of V, with the SIMD kernels of nn/attn.c; its arithmetic depends
 * only on the row's own sequence, so batching keeps every sequence's bits. Longer chunks take a
 * flash-style path: per (KV head, block of 128 query rows) the fused kernel (nn/flash.c: 12 x 128
 * score tiles, online softmax), or, on CPUs without its SIMD path, per (head, block of 64 query
 * rows) one sgemm per cache page for the scores, an online softmax (running max and sum), one
 * sgemm per page into the output; no more than 64 x PM_KV_PAGE scores exist at a time, whatever
 * the context length. */
#include "llm.h"
#include "nn/kernels.h"
#include "nn/ops.h"
#include "nn/quant.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>


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
    m->lm_head = m->embed;
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
    for (int i = 0; i < m->n_q8; i++) pm_q8_free(&m->q8[i]);
    free(m->q8);
    memset(m, 0, sizeof *m);
}

int pm_kv_reserve(pm_kv_cache *kv, const pm_llm_config *c, int cap, pm_err *e) {
    if (kv->pages && (kv->n_heads != c->n_kv_heads || kv->head_dim != c->head_dim || kv->n_layers != c->n_layers))
        return pm_errf(e, PM_ESTATE, "KV cache was reserved for another model (%d KV heads of %d, %d layers)", kv->n_heads, kv->head_dim,
                       kv->n_layers);
    size_t bytes = pm_kv_bytes(c, 1, kv->bf16);
    if (kv->pages && kv->page_bytes != bytes)
        return pm_errf(e, PM_ESTATE, "KV cache was reserved with %s elements", kv->bf16 ? "fp32" : "bf16");
    if (cap <= kv->cap) return PM_OK;
    int need = (cap + PM_KV_PAGE - 1) / PM_KV_PAGE;
    if (need > kv->max_pages) {
        int nm = kv->max_pages ? kv->max_pages : 8;
        while (nm < need) nm *= 2;
        void **np = realloc(kv->pages, sizeof(void *) * (size_t)nm);
        if (!np) return pm_errf(e, PM_ENOMEM, "out of memory for a KV page table of %d pages", nm);
        kv->pages = np;
        kv->max_pages = nm;
    }
    while (kv->n_pages < need) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return pm_errf(e, PM_ENOMEM, "out of memory for a KV cache of %d positions (%zu MB per %d-position page)", cap, bytes >> 20,
                           PM_KV_PAGE);
        kv->pages[kv->n_pages++] = p;
        kv->cap = kv->n_pages * PM_KV_PAGE;
    }
    /* 2 MB pages where the kernel has them (THP "madvise" or "always"): a decode step reads the
     * cache in runs of 64 KB, 16 TLB entries each on 4 KB pages, and a TLB miss in a VM
     * costs a two-level walk. In one process on the full-size checkpoint (2 threads, alternating,
     * the same bits; measured with the former layout, rows of every head side by side), two
     * sessions of runs: decode step at 4096 cached positions 1.74-2.33 x
     * faster (0.705 -> 0.404 s, 6 of 6 pairs; 0.721 -> 0.310 s, 10 of 10), batch 8 at 512
     * 1.07-1.35 x (11 of 12; 10 of 10), batch 16 at 512 1.12 x (6 of 6), batch 1 at 512
     * 1.16-1.18 x (8 of 12; 7 of 10). Only pages the reservation covers whole are
     * advised: a huge page is resident as a whole, and a page's first rows already touch every
     * 2 MB of it (each writes into every head's run of every layer), so the growing last page of a
     * decoding sequence stays on 4 KB pages (advised too, RSS grew by up to 32 MB per sequence:
     * 1.07 x weights + KV in the bench) until the sequence passes it; then khugepaged may collapse
     * it. Advice only: refused or unavailable, the pages stay 4 KB. */
    for (; kv->n_huge < kv->n_pages && (kv->n_huge + 1) * PM_KV_PAGE <= cap; kv->n_huge++)
        madvise(kv->pages[kv->n_huge], bytes, MADV_HUGEPAGE);
    kv->n_layers = c->n_layers;
    kv->n_heads = c->n_kv_heads;
    kv->head_dim = c->head_dim;
    kv->page_bytes = bytes;
    return PM_OK;
}

size_t pm_kv_bytes(const pm_llm_config *c, int positions, int bf16) {
    size_t pages = positions > 0 ? ((size_t)positions + PM_KV_PAGE - 1) / PM_KV_PAGE : 0;
    size_t row = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t page = pm_mul_size(pm_mul_size((size_t)2 * PM_KV_PAGE * (size_t)c->n_layers, row), bf16 ? sizeof(uint16_t) : sizeof(float));
    return pm_mul_size(pages, page);
}

void pm_kv_free(pm_kv_cache *kv) {
    for (int i = 0; i < kv->n_pages; i++) munmap(kv->pages[i], kv->page_bytes);
    free(kv->pages);
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

/* Row qkv = [q | k | v] of position pos: rotates the query heads of KV heads [kh0, kh1) and those
 * keys, then stores those keys and values at pos in the cache of layer `layer`. */
static void rope_store(const pm_llm_config *c, pm_kv_cache *kv, int layer, float *qkv, const float *cr, const float *sr, int pos, int kh0,
                       int kh1) {
    int D = c->head_dim, g = c->n_heads / c->n_kv_heads, rot = c->rot_dims;
    float *k = qkv + c->hidden, *v = k + (size_t)c->n_kv_heads * D;
    for (int h = kh0 * g; h < kh1 * g; h++) rope_apply(qkv + (size_t)h * D, cr, sr, rot);
    for (int h = kh0; h < kh1; h++) {
        rope_apply(k + (size_t)h * D, cr, sr, rot);
        if (kv->bf16) {
            uint16_t *kb = pm_kv_bf16(kv, layer, 0, h, pos), *vb = pm_kv_bf16(kv, layer, 1, h, pos);
            for (int d = 0; d < D; d++) {
                kb[d] = pm_f32_to_bf16(k[(size_t)h * D + d]);
                vb[d] = pm_f32_to_bf16(v[(size_t)h * D + d]);
            }
            continue;
        }
        memcpy(pm_kv_k(kv, layer, h, pos), k + (size_t)h * D, sizeof(float) * (size_t)D);
        memcpy(pm_kv_v(kv, layer, h, pos), v + (size_t)h * D, sizeof(float) * (size_t)D);
    }
}

/* y[N, out] = x @ W^T, then each chunk's rows get their adapter's (alpha/r) * B(A x). */
static int lora_linear(float *y, const float *x, int N, const pm_lora_linear *L, const pm_llm_chunk *ch, int nc, const int *off,
                       pm_err *e) {
    int in = (int)L->W->shape[1], out = (int)L->W->shape[0];
    pm_linear(y, x, N, L->W, NULL);
    for (int a = PM_ADAPTER_SPEECH; a <= PM_ADAPTER_VISION; a++) {
        int na = 0, first = -1, run = 1; /* run: the adapter's rows are one block of consecutive rows */
        for (int c = 0; c < nc; c++)
            if ((int)ch[c].adapter == a) {
                if (first < 0) first = off[c];
                else if (off[c] != first + na) run = 0;
                na += ch[c].n;
            }
        if (!na) continue;
        int r = (int)L->A[a]->shape[0];
        if (run) {
            /* The usual case (one request, or like requests side by side): A reads the rows in place
             * and B adds scale * (t B^T) straight into them: no gathered copy of x, no [na, out]
             * product to allocate (up to 26 MB for gate_up at a 400-row prompt), no serial add.
             * prev + scale * dot, as below: the same bits while r fits one GEMM slice (r <= 512). */
            float *t = pm_malloc(sizeof(float) * (size_t)na * r, e);
            if (!t) return e->code;
            pm_linear(t, x + (size_t)first * in, na, L->A[a], NULL);
            pm_linear_acc(y + (size_t)first * out, t, na, L->B[a], L->scale[a]);
            free(t);
            continue;
        }
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

enum { ROW_AHEAD = 32 }; /* keys prefetched ahead of the one the single-query kernels are reading */
/* Rows [t0, t0 + n) (inside one page) of the keys (v = 0) or values (v = 1) of KV head kh as fp32
 * rows head_dim apart, for the prompt paths (BLAS and the fused kernel take fp32): the cache's own,
 * or a bf16 cache's widened into wb (n x head_dim floats), once per page or key block for a whole
 * block of query rows. */
static const float *kv_rows(const pm_kv_cache *kv, int layer, int v, int kh, int t0, int n, float *wb) {
    if (!kv->bf16) return v ? pm_kv_v(kv, layer, kh, t0) : pm_kv_k(kv, layer, kh, t0);
    pm_kern_bf16_to_f32(wb, pm_kv_bf16(kv, layer, v, kh, t0), (size_t)n * (size_t)kv->head_dim);
    return wb;
}

/* The keys ahead of the run `base` of tn keys (head k of nh in a page) that the kernels may prefetch
 * as they read it: the run's own, and past its end the next head's run (the next one read) when
 * the page is full; the last head's run ends the pass over the page (*n: how many keys). */
static const void *run_ahead(const void *base, size_t elt, int tn, int k, int nh, int D, int *n) {
    *n = k + 1 < nh && tn == PM_KV_PAGE ? tn : tn - ROW_AHEAD > 0 ? tn - ROW_AHEAD : 0;
    return *n ? (const char *)base + (size_t)ROW_AHEAD * D * elt : NULL;
}

/* One query row (at position pos) against cache positions [0, pos], for KV heads [kh0, kh1) and
 * their query heads: out[(kh - kh0) * g * D ...]. Page by page, each KV head's run of the page in
 * one call: a thread's heads are adjacent runs, so it reads one contiguous block per page (K, then
 * V), prefetching ROW_AHEAD keys ahead as it goes. Per head the scores are the same dots and the
 * weighted sum the same in-order chains as one head at a time, so the bits do not depend on the
 * range. s: scratch [(kh1 - kh0) * g * (pos + 1)]. A bf16 cache goes to the kernels' bf16 twins,
 * which widen each value as they load it (the same bits as fp32 rows of the widened values). */
static void attend_row(const pm_llm_config *c, const pm_kv_cache *kv, int layer, const float *q, int pos, int kh0, int kh1, float *out,
                       float *s) {
    int D = c->head_dim, g = c->n_heads / c->n_kv_heads, len = pos + 1, nh = kh1 - kh0, na;
    size_t ldh = (size_t)g * len; /* scratch per KV head */
    float scale = 1.0f / sqrtf((float)D);
    for (int t0 = 0; t0 < len; t0 += PM_KV_PAGE) {
        int tn = len - t0 < PM_KV_PAGE ? len - t0 : PM_KV_PAGE;
        for (int k = 0; k < nh; k++) {
            if (kv->bf16) {
                const uint16_t *K = pm_kv_bf16(kv, layer, 0, kh0 + k, t0), *KA = run_ahead(K, 2, tn, k, nh, D, &na);
                pm_kern_attn_scores_bf16(s + (size_t)k * ldh + t0, (size_t)len, q + (size_t)k * g * D, (size_t)D, g, K, (size_t)D, tn, D, scale,
                                         KA, na);
                continue;
            }
            const float *K = pm_kv_k(kv, layer, kh0 + k, t0), *KA = run_ahead(K, 4, tn, k, nh, D, &na);
            pm_kern_attn_scores(s + (size_t)k * ldh + t0, (size_t)len, q + (size_t)k * g * D, (size_t)D, g, K, (size_t)D, tn, D, scale, KA, na);
        }
    }
    for (int h = 0; h < nh * g; h++) pm_kern_softmax(s + (size_t)h * len, len);
    memset(out, 0, sizeof(float) * (size_t)nh * g * D);
    for (int t0 = 0; t0 < len; t0 += PM_KV_PAGE) {
        int tn = len - t0 < PM_KV_PAGE ? len - t0 : PM_KV_PAGE;
        for (int k = 0; k < nh; k++) {
            if (kv->bf16) {
                const uint16_t *V = pm_kv_bf16(kv, layer, 1, kh0 + k, t0), *VA = run_ahead(V, 2, tn, k, nh, D, &na);
                pm_kern_attn_accum_bf16(out + (size_t)k * g * D, (size_t)D, s + (size_t)k * ldh + t0, (size_t)len, g, V, (size_t)D, tn, D, VA,
                                        na);
                continue;
            }
            const float *V = pm_kv_v(kv, layer, kh0 + k, t0), *VA = run_ahead(V, 4, tn, k, nh, D, &na);
            pm_kern_attn_accum(out + (size_t)k * g * D, (size_t)D, s + (size_t)k * ldh + t0, (size_t)len, g, V, (size_t)D, tn, D, VA, na);
        }
    }
}

enum { FLASH_BQ = 64 };

/* Flash-style causal attention of query rows [j0, j0 + bq) of one chunk (positions p0 + j) for
 * head h. q: the chunk's qkv rows (stride qkv_dim), out: [bq, H] rows (stride H). ws: scratch of
 * FLASH_BQ * (PM_KV_PAGE + D + 2) floats; wb: PM_KV_PAGE x D floats for a bf16 cache's page. */
static void attend_block(const pm_llm_config *c, const pm_kv_cache *kv, int layer, const float *q, int qkv_dim, int p0, int j0, int bq,
                         int h, float *out, float *ws, float *wb) {
    int D = c->head_dim, kh = h / (c->n_heads / c->n_kv_heads), H = c->hidden;
    float scale = 1.0f / sqrtf((float)D);
    float *S = ws, *O = S + (size_t)FLASH_BQ * PM_KV_PAGE, *m = O + (size_t)FLASH_BQ * D, *l = m + FLASH_BQ;
    for (int j = 0; j < bq; j++) {
        m[j] = -INFINITY;
        l[j] = 0.0f;
    }
    memset(O, 0, sizeof(float) * (size_t)bq * D);
    const float *qb = q + (size_t)j0 * qkv_dim + (size_t)h * D;
    int kend = p0 + j0 + bq; /* keys [0, kend) */
    for (int t0 = 0; t0 < kend; t0 += PM_KV_PAGE) {
        int tn = kend - t0 < PM_KV_PAGE ? kend - t0 : PM_KV_PAGE;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, tn, D, scale, qb, qkv_dim, kv_rows(kv, layer, 0, kh, t0, tn, wb), D,
                    0.0f, S, PM_KV_PAGE);
        for (int j = 0; j < bq; j++) {
            float *sr = S + (size_t)j * PM_KV_PAGE;
            int valid = p0 + j0 + j + 1 - t0; /* keys of this page the row may see */
            if (valid > tn) valid = tn;
            if (valid <= 0) {
                memset(sr, 0, sizeof(float) * (size_t)tn);
                continue;
            }
            float mx = m[j];
            for (int t = 0; t < valid; t++) mx = sr[t] > mx ? sr[t] : mx;
            float corr = m[j] == -INFINITY ? 0.0f : expf(m[j] - mx);
            for (int t = 0; t < valid; t++) sr[t] -= mx;
            pm_kern_exp(sr, sr, (size_t)valid);
            float sum = 0.0f;
            for (int t = 0; t < valid; t++) sum += sr[t];
            for (int t = valid; t < tn; t++) sr[t] = 0.0f;
            l[j] = l[j] * corr + sum;
            m[j] = mx;
            if (corr != 1.0f)
                for (int d = 0; d < D; d++) O[(size_t)j * D + d] *= corr;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, D, tn, 1.0f, S, PM_KV_PAGE, kv_rows(kv, layer, 1, kh, t0, tn, wb), D, 1.0f,
                    O, D);
    }
    for (int j = 0; j < bq; j++) {
        float inv = 1.0f / l[j], *o = out + (size_t)j * H + (size_t)h * D;
        for (int d = 0; d < D; d++) o[d] = O[(size_t)j * D + d] * inv;
    }
}

/* The fused path (pm_kern_flash) for large chunks: per (q-block of FUSED_BQ rows, KV head), the g
 * query heads of the KV head at once (each key block packed once for all of them), causal, keys
 * read page by page from the cache. Against attend_block's two sgemm calls per page and head, in
 * one process on Zen 5 (2 threads, alternating), the whole forward of a 512-row chunk: 1.07 x after
 * 1536 cached positions (5 of 5 pairs), 1.16 x after 3584 (2 of 3). */
enum { FUSED_BQ = 128 };
_Static_assert(PM_KV_PAGE % PM_FLASH_KEYS == 0, "a key block of the fused kernel must not cross a cache page");

typedef struct {
    const pm_kv_cache *kv;
    int layer, head;
    float *wb[2]; /* a bf16 cache's K and V block widened (the kernel holds both at once) */
} kv_head;

static const float *kv_head_rows(const void *ctx, int which, int j0) {
    const kv_head *h = ctx;
    return kv_rows(h->kv, h->layer, which, h->head, j0, PM_FLASH_KEYS, h->wb[which]);
}

/* wb: 2 x PM_FLASH_KEYS x D floats for a bf16 cache. */
static void attend_fused(const pm_llm_config *c, const pm_kv_cache *kv, int layer, const float *q, int qkv_dim, int p0, int j0, int bq,
                         int kh, float *out, float *ws, float *wb) {
    int D = c->head_dim, g = c->n_heads / c->n_kv_heads;
    kv_head ctx = {kv, layer, kh, {wb, wb + (size_t)PM_FLASH_KEYS * D}};
    pm_flash a = {.o = out + (size_t)kh * g * D, .q = q + (size_t)j0 * qkv_dim + (size_t)kh * g * D, .ldo = (size_t)c->hidden,
                  .ldq = (size_t)qkv_dim, .ldk = (size_t)D, .ldv = (size_t)D, .ldog = (size_t)D, .ldqg = (size_t)D, .nq = bq,
                  .nk = p0 + j0 + bq, .hd = D, .qgroups = g, .causal = 1, .qpos0 = p0 + j0, .scale = 1.0f / sqrtf((float)D),
                  .key_block = kv_head_rows, .ctx = &ctx};
    pm_kern_flash(&a, ws);
}

/* Attention of every chunk of the step for layer `layer`. A chunk of several rows has its new K/V
 * in the cache at positions [len, len + n) already; a chunk of one row (a decoding sequence) has
 * them rotated and stored here, each work item its own KV heads (rope_store) before it attends:
 * those stores fault in a fresh 4 KB page of every head's run each 8 positions (the growing last
 * page stays on 4 KB pages, pm_kv_reserve), 11-13 us a fault on the 2-vCPU VM, which a serial
 * loop paid on one thread (7-10 ms of a 0.33 s batch-8 step). Small chunks go row by row (bitwise
 * batch-independent), large ones block by block; all work items of the batch share one parallel
 * region. */
static int attend_all(const pm_llm *m, const pm_llm_chunk *ch, int nc, const int *off, int layer, float *qkv, int qkv_dim, const float *cs,
                      const float *sn, float *att, pm_err *e) {
    const pm_llm_config *c = &m->c;
    int D = c->head_dim, g = c->n_heads / c->n_kv_heads, H = c->hidden;
    /* work items: (chunk, row, range of hpi kv heads) for small chunks, (chunk, q-block, head) for
     * large ones. Every KV head of a row in one item reads the cache best (adjacent heads' runs are
     * adjacent: one block per page); with fewer rows than threads the ranges halve until every
     * thread has an item (a row alone on 2 threads: 2 items of 4 heads, each a block of 256 KB per
     * page and K / V at Phi-4-mini's dims). */
    long n_items = 0, small_rows = 0;
    int maxlen = 1, nt = omp_get_max_threads(), hpi = c->n_kv_heads, fused = pm_kern_flash_takes();
    int bq = fused ? FUSED_BQ : FLASH_BQ, heads = fused ? c->n_kv_heads : c->n_heads; /* large chunks: items of bq rows x heads */
    for (int i = 0; i < nc; i++)
        if (ch[i].n <= PM_SMALL_N) small_rows += ch[i].n;
    while (hpi > 1 && small_rows * ((c->n_kv_heads + hpi - 1) / hpi) < nt) hpi = (hpi + 1) / 2;
    int ranges = (c->n_kv_heads + hpi - 1) / hpi;
    for (int i = 0; i < nc; i++) {
        int n = ch[i].n, L = ch[i].kv->len + n;
        if (n <= PM_SMALL_N) {
            n_items += (long)n * ranges;
            if (L > maxlen) maxlen = L;
        } else n_items += (long)((n + bq - 1) / bq) * heads;
    }
    size_t per = (size_t)g * maxlen * hpi;
    size_t fl = fused ? pm_kern_flash_ws(FUSED_BQ * g, D) : (size_t)FLASH_BQ * (PM_KV_PAGE + D + 2);
    if (fl > per) per = fl;
    size_t wide = 0; /* a bf16 cache's rows widened for the prompt paths: a page of K or V per block, K and V per fused block */
    for (int i = 0; i < nc; i++)
        if (ch[i].kv->bf16) wide = (size_t)2 * PM_KV_PAGE * D;
    per += wide;
    float *ws = pm_malloc(sizeof(float) * per * (size_t)nt, e);
    if (!ws) return e->code;
#pragma omp parallel for schedule(dynamic, 1)
    for (long it = 0; it < n_items; it++) {
        float *w = ws + per * (size_t)omp_get_thread_num(), *wb = w + per - wide;
        long k = it;
        int i = 0;
        for (;; i++) { /* find the chunk of item `it` */
            int n = ch[i].n;
            long cnt = n <= PM_SMALL_N ? (long)n * ranges : (long)((n + bq - 1) / bq) * heads;
            if (k < cnt) break;
            k -= cnt;
        }
        const pm_kv_cache *kv = ch[i].kv;
        const float *q = qkv + (size_t)off[i] * qkv_dim;
        float *o = att + (size_t)off[i] * H;
        if (ch[i].n <= PM_SMALL_N) {
            int j = (int)(k / ranges), kh0 = (int)(k % ranges) * hpi, kh1 = kh0 + hpi < c->n_kv_heads ? kh0 + hpi : c->n_kv_heads;
            if (ch[i].n == 1)
                rope_store(c, ch[i].kv, layer, qkv + (size_t)off[i] * qkv_dim, cs + (size_t)off[i] * c->rot_dims, sn + (size_t)off[i] * c->rot_dims,
                           kv->len, kh0, kh1);
            attend_row(c, kv, layer, q + (size_t)j * qkv_dim + (size_t)kh0 * g * D, kv->len + j, kh0, kh1, o + (size_t)j * H + (size_t)kh0 * g * D,
                       w);
        } else {
            int b = (int)(k / heads), h = (int)(k % heads), j0 = b * bq, rows = ch[i].n - j0 < bq ? ch[i].n - j0 : bq;
            if (fused) attend_fused(c, kv, layer, q, qkv_dim, kv->len, j0, rows, h, o + (size_t)j0 * H, w, wb);
            else attend_block(c, kv, layer, q, qkv_dim, kv->len, j0, rows, h, o + (size_t)j0 * H, w, wb);
        }
    }
    free(ws);
    return PM_OK;
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
            if (ch[i].n == 1) continue; /* a decoding sequence's: in attend_all's work items */
            for (int j = 0; j < ch[i].n; j++) {
                int r = off[i] + j;
                rope_store(c, ch[i].kv, l, qkv + (size_t)r * QKV, cs + (size_t)r * rot, sn + (size_t)r * rot, ch[i].kv->len + j, 0, c->n_kv_heads);
            }
        }
        if (attend_all(m, ch, nc, off, l, qkv, QKV, cs, sn, att, e)) goto done;
        if (lora_linear(tmp, att, N, &L->o, ch, nc, off, e)) goto done;
        pm_add_inplace(x, tmp, NH);
        pm_rmsnorm(xn, x, L->ln_mlp, N, H, c->rms_eps);
        if (lora_linear(gu, xn, N, &L->gate_up, ch, nc, off, e)) goto done;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < N; r++) pm_kern_silu_mul(hb + (size_t)r * FF, gu + (size_t)r * 2 * FF, gu + (size_t)r * 2 * FF + FF, (size_t)FF);
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
        int k = ch[i].n_logits > 1 && ch[i].n_logits <= ch[i].n ? ch[i].n_logits : 1;
        if (ch[i].logits) {
            pm_rmsnorm(xn + (size_t)nl * H, x + (size_t)(off[i] + ch[i].n - k) * H, m->final_norm, k, H, c->rms_eps);
            nl += k;
        }
    }
    if (nl) {
        float *lg = pm_malloc(sizeof(float) * (size_t)nl * c->vocab, e);
        if (!lg) goto done;
        pm_linear(lg, xn, nl, m->lm_head, NULL);
        size_t r = 0;
        for (int i = 0; i < nc; i++) {
            size_t k = ch[i].n_logits > 1 && ch[i].n_logits <= ch[i].n ? (size_t)ch[i].n_logits : 1;
            if (!ch[i].logits) continue;
            memcpy(ch[i].logits, lg + r * c->vocab, sizeof(float) * k * (size_t)c->vocab);
            r += k;
        }
        free(lg);
    }
done:
    free(off); free(x); free(xn); free(att); free(tmp); free(qkv); free(gu); free(hb); free(cs); free(sn); free(pos);
    return e->code;
}
