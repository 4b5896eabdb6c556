/* llm.h — the Phi-4-mini decoder: weights, per-sequence KV cache, and one batched forward step.
 *
 * A step takes any number of sequence chunks (a prefill chunk or one decode token each). Every
 * chunk carries its own LoRA adapter and its own RoPE factor choice, so sequences of different
 * modes share a batch: the base matmuls run once over all rows, the LoRA products run per
 * adapter group. Nothing about a sequence lives in the model. */
#ifndef PM_LLM_H
#define PM_LLM_H

#include <stdint.h>
#include "io/safetensors.h"
#include "model/llm_config.h"
#include "phi4mm.h"

/* One projection with its base weight and both adapters' A/B pairs (NULL when absent). */
typedef struct pm_lora_linear {
    const pm_tensor *W;          /* [out, in] */
    const pm_tensor *A[3], *B[3]; /* by pm_adapter: A [r, in], B [out, r] */
    float scale[3];              /* alpha / r */
} pm_lora_linear;

typedef struct pm_llm_layer {
    float *ln_attn, *ln_mlp;     /* fp32 copies [hidden] */
    pm_lora_linear qkv, o, gate_up, down;
} pm_llm_layer;

typedef struct pm_llm {
    pm_llm_config c;
    const pm_tensor *embed;      /* [vocab, hidden] input embeddings */
    const pm_tensor *lm_head;    /* the tied lm_head: embed, or its int8 copy under q8 */
    pm_tensor *q8;               /* owned int8 copies of the base weights (pm_llm_quantize), or NULL */
    int n_q8;
    float *final_norm;           /* [hidden] */
    pm_llm_layer *layers;
    float *inv_freq[2];          /* [n_factors] for short (0) and long (1) factors */
} pm_llm;

/* Loads every model.layers.*, model.embed_tokens, model.norm tensor with shape checks. A LoRA
 * A without its B (or the reverse), or a rank that disagrees with config.json, is an error. */
int pm_llm_load(pm_llm *m, pm_weights *w, const pm_llm_config *c, pm_err *e);
void pm_llm_free(pm_llm *m);

/* `--weights q8` (nn/quant.h): replaces every decoder base projection (qkv, o, gate_up, down) and
 * the lm_head by block-scaled int8 copies; the input embedding, norms and LoRA A/B stay as loaded.
 * The bf16 pages of the replaced weights are released from the resident set (pm_weights_release).
 * Weights whose width is not a multiple of PM_Q8_BLOCK stay bf16. Returns the int8 bytes held. */
int pm_llm_quantize(pm_llm *m, const pm_weights *w, size_t *q8_bytes, pm_err *e);

/* Key/value cache of one sequence, paged: page p holds positions [p*PM_KV_PAGE, (p+1)*PM_KV_PAGE)
 * of every layer, laid out [n_layers][K, V][n_kv_heads][PM_KV_PAGE][head_dim] fp32: the keys (and
 * the values) of one KV head in a page are one contiguous run (64 KB at Phi-4-mini's dims). The
 * threads of a decode step split the KV heads, so each streams whole runs; with rows of every head
 * side by side each thread read 2 KB of every 4 KB row, which the hardware prefetchers follow at
 * about half the speed of a contiguous read (a plain read on Zen 5: 34 GB/s against 67). A 4 KB
 * page of a run holds 8 positions, so a sequence's last page is resident 8 positions at a time
 * (at most 7 positions ahead: 1.75 MB at Phi-4-mini's dims).
 * Pages are separate anonymous mappings: a growing sequence never copies its cache, a finished one
 * returns every byte to the system, and concurrent sequences of any lengths never fragment a
 * shared heap. Untouched parts of a page cost no memory (pages a reservation covers whole are
 * advised to be transparent huge pages, for the TLB: pm_kv_reserve).
 * Elements are fp32 by default: the fixture parity budget (1e-4 x max|ref| per layer) has no room
 * for rounding K/V to 8 mantissa bits. bf16 (set `bf16` before the first reserve; `--kv-cache
 * bf16`) halves the cache, as the official model keeps it when it runs in bf16: K/V are rounded
 * to nearest even as they are stored; the decode kernels widen each value as they load it and the
 * prompt paths a page (or a 128-key block) at a time, so both compute in fp32 on the same widened
 * values and a sequence's bits still do not depend on its batch. A decode step reads half the K/V
 * bytes: in one process, alternating with an fp32 cache (full-size synthetic checkpoint, 2 threads),
 * 1.07-1.08 x per step at 4096 cached positions and 1.30 x at 16384.
 * Users read and write `len` only (0 = start over; the pages are reused). */
#define PM_KV_PAGE 128

typedef struct pm_kv_cache {
    void **pages;
    int n_pages, max_pages, n_huge; /* n_huge: pages [0, n_huge) advised MADV_HUGEPAGE (pm_kv_reserve) */
    int len, cap, n_layers, n_heads, head_dim; /* cap = n_pages * PM_KV_PAGE; n_heads: KV heads */
    int bf16;                                  /* element type: 0 fp32, 1 bf16; fixed by the first reserve */
    size_t page_bytes;
} pm_kv_cache;

/* Makes room for cap positions (allocates pages; never moves existing ones). */
int pm_kv_reserve(pm_kv_cache *kv, const pm_llm_config *c, int cap, pm_err *e);
void pm_kv_free(pm_kv_cache *kv);
/* Bytes the pages for `positions` positions take (whole pages), fp32 or bf16 elements. */
size_t pm_kv_bytes(const pm_llm_config *c, int positions, int bf16);

/* Element index, inside its page, of the key (v = 0) or value (v = 1) of KV head `head` at (layer,
 * pos). Consecutive positions of one head inside a page are head_dim elements apart; the next page
 * starts elsewhere. */
static inline size_t pm_kv_at(const pm_kv_cache *kv, int layer, int v, int head, int pos) {
    size_t run = (((size_t)layer * 2 + (size_t)v) * (size_t)kv->n_heads + (size_t)head) * PM_KV_PAGE;
    return (run + (size_t)(pos % PM_KV_PAGE)) * (size_t)kv->head_dim;
}
/* fp32 caches */
static inline float *pm_kv_k(const pm_kv_cache *kv, int layer, int head, int pos) {
    return (float *)kv->pages[pos / PM_KV_PAGE] + pm_kv_at(kv, layer, 0, head, pos);
}
static inline float *pm_kv_v(const pm_kv_cache *kv, int layer, int head, int pos) {
    return (float *)kv->pages[pos / PM_KV_PAGE] + pm_kv_at(kv, layer, 1, head, pos);
}
/* bf16 caches: key (v = 0) or value (v = 1) */
static inline uint16_t *pm_kv_bf16(const pm_kv_cache *kv, int layer, int v, int head, int pos) {
    return (uint16_t *)kv->pages[pos / PM_KV_PAGE] + pm_kv_at(kv, layer, v, head, pos);
}

/* Optional per-chunk captures (parity): layer_out[l] is [n, hidden] after decoder layer l;
 * final_norm is [n, hidden]. Caller-allocated; NULL entries are skipped. */
typedef struct pm_llm_trace {
    float **layer_out;
    float *final_norm;
} pm_llm_trace;

typedef struct pm_llm_chunk {
    pm_kv_cache *kv;       /* holds positions [0, kv->len); the chunk appends n positions */
    const float *embeds;   /* [n, hidden] input embeddings of the new positions */
    int n;
    pm_adapter adapter;
    int rope_long;         /* 1: long factors (sequence longer than orig_max_pos) */
    float *logits;         /* if non-NULL: [vocab] logits of the chunk's last position */
    pm_llm_trace *trace;   /* may be NULL */
    int n_logits;          /* with logits: the last n_logits positions' ([n_logits][vocab]; 0 means 1) */
} pm_llm_chunk;

/* Runs the decoder over all chunks, appends their K/V, writes requested logits. */
int pm_llm_forward(const pm_llm *m, pm_llm_chunk *chunks, int n_chunks, pm_err *e);

/* Token embedding rows: out[n, hidden] = embed[ids]. Ids must be in [0, vocab). */
int pm_llm_embed(const pm_llm *m, const int32_t *ids, int n, float *out, pm_err *e);

/* cos/sin tables [n, rot_dims] for positions (as the official rotary module returns them,
 * scale included). */
void pm_llm_rope_table(const pm_llm *m, int rope_long, const int *pos, int n, float *cos_out, float *sin_out);

#endif
