/* bench_llm.c — the decoder against the machine's limits.
 *
 * Decode: B sequences (B in --batches), each with a cache pre-filled to --ctx positions with
 * random K/V (the attention then reads a realistic context without spending minutes on prefill),
 * one warm-up step, then --decode-steps timed steps of one token per sequence in one batched
 * forward (logits for every sequence). Bound = (bf16 weight bytes + K/V bytes read) / measured
 * bandwidth; the compute bound (2 x params x B / compute peak) is reported next to it, as batches
 * of 8+ on few cores cross over from memory- to compute-bound. Each step also follows its own
 * bandwidth measurement: the median of those paired ratios is reported beside (bench.h).
 * Prefill: a fresh sequence of P random tokens fed in engine-sized chunks (--prefill-chunk,
 * default 512 like pm_engine), logits at the end. Bound = FLOPs (linear layers + causal attention
 * + one lm_head row) / measured compute peak. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "model/llm.h"
#include "nn/kernels.h"
#include "nn/ops.h"

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

/* Bytes a decode step streams for the base model: every projection + the lm_head (for int8 weights
 * nbytes is the packed size, scales included). */
static double weight_bytes(const pm_llm *m, int adapter) {
    double b = (double)m->lm_head->nbytes;
    for (int l = 0; l < m->c.n_layers; l++) {
        const pm_lora_linear *L[4] = {&m->layers[l].qkv, &m->layers[l].o, &m->layers[l].gate_up, &m->layers[l].down};
        for (int k = 0; k < 4; k++) {
            b += (double)L[k]->W->nbytes;
            if (adapter) b += (double)L[k]->A[adapter]->nbytes + (double)L[k]->B[adapter]->nbytes;
        }
    }
    return b;
}

/* Multiply-accumulates per token of the linear layers (no embedding / lm_head). */
static double linear_params(const pm_llm *m, int adapter) {
    double p = 0;
    for (int l = 0; l < m->c.n_layers; l++) {
        const pm_lora_linear *L[4] = {&m->layers[l].qkv, &m->layers[l].o, &m->layers[l].gate_up, &m->layers[l].down};
        for (int k = 0; k < 4; k++) {
            p += (double)L[k]->W->numel;
            if (adapter) p += (double)L[k]->A[adapter]->numel + (double)L[k]->B[adapter]->numel;
        }
    }
    return p;
}

static int embed_random(const pm_llm *m, int n, uint32_t seed, float *out, pm_err *e) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!ids) return pm_errf(e, PM_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(lcg(&seed) % 199000u);
    int rc = pm_llm_embed(m, ids, n, out, e);
    free(ids);
    return rc;
}

static void fill_cache(pm_kv_cache *kv, int n_layers, int ctx, uint32_t seed) {
    for (int l = 0; l < n_layers; l++)
        for (int p = 0; p < ctx; p++)
            for (int h = 0; h < kv->n_heads; h++)
                for (int i = 0; i < kv->head_dim; i++) {
                    float k = (float)((int)(lcg(&seed) >> 9) % 2001 - 1000) * 1e-3f, v = (float)((int)(lcg(&seed) >> 9) % 2001 - 1000) * 1e-3f;
                    if (kv->bf16) {
                        pm_kv_bf16(kv, l, 0, h, p)[i] = pm_f32_to_bf16(k);
                        pm_kv_bf16(kv, l, 1, h, p)[i] = pm_f32_to_bf16(v);
                    } else {
                        pm_kv_k(kv, l, h, p)[i] = k;
                        pm_kv_v(kv, l, h, p)[i] = v;
                    }
                }
    kv->len = ctx;
}

/* Bytes of K/V held for `positions` positions of a cache (its element type). */
static double kv_elem_bytes(const pm_kv_cache *kv, double positions) {
    return positions * kv->n_layers * 2.0 * kv->n_heads * kv->head_dim * (kv->bf16 ? 2.0 : 4.0);
}

static int decode_one(bench_ctx *b, pm_kv_cache *kv, int B, int adapter, const char *section, const char *label, double *tps_out,
                      pm_err *e) {
    const pm_llm *m = &b->m->llm;
    const pm_llm_config *c = &m->c;
    int H = c->hidden, steps = b->o.decode_steps, ctx = b->o.decode_ctx;
    float *emb = malloc(sizeof(float) * (size_t)B * H), *logits = malloc(sizeof(float) * (size_t)B * c->vocab);
    pm_llm_chunk *ch = calloc((size_t)B, sizeof *ch);
    if (!emb || !logits || !ch) {
        free(emb); free(logits); free(ch);
        return pm_errf(e, PM_ENOMEM, "out of memory");
    }
    for (int s = 0; s < B; s++) kv[s].len = ctx;
    double avg_len = ctx + 1 + (steps + 1) / 2.0;
    double kv_bytes = (double)B * kv_elem_bytes(&kv[0], avg_len);
    double bytes = weight_bytes(m, adapter) + kv_bytes;
    size_t bn = 0;
    float *bwbuf = bench_bw_buffer((size_t)256 << 20, &bn); /* each step's own bandwidth (NULL: no paired ratio) */
    double *paired = malloc(sizeof(double) * (size_t)steps);
    int np = 0;
    double bw = bench_bw_now(b), peak = b->peak_gflops;
    double t = 0; /* the steps alone; step -1 warms up */
    for (int st = -1; st < steps && !e->code; st++) {
        double bw_i = st >= 0 && bwbuf ? bench_read_pass(bwbuf, bn, 3) : 0.0, t_i = bench_now(); /* as bench_bw_now */
        if (embed_random(m, B, 1000u + (uint32_t)st, emb, e)) break;
        for (int s = 0; s < B; s++) {
            pm_llm_chunk cc = {&kv[s], emb + (size_t)s * H, 1, (pm_adapter)adapter, 0, logits + (size_t)s * c->vocab, NULL, 0};
            ch[s] = cc;
        }
        pm_llm_forward(m, ch, B, e);
        t_i = bench_now() - t_i;
        if (st < 0) continue;
        t += t_i;
        if (bw_i > 0 && paired) paired[np++] = bytes / (bw_i * 1e9) / t_i;
    }
    free(emb); free(logits); free(ch); free(bwbuf);
    double paired_med = np ? bench_median(paired, np) : -1.0;
    free(paired);
    if (e->code) return e->code;
    bw = bench_bw_bracket(b, bw);
    double per_step = t / steps, toks = B * steps / t;
    double t_bw = bytes / (bw * 1e9);
    double flops = 2.0 * B * (linear_params(m, adapter) + (double)m->embed->numel) + 4.0 * B * avg_len * c->head_dim * c->n_heads * c->n_layers;
    double t_fl = flops / (peak * 1e9);
    double bound_tps = B / t_bw;
    json_t *x = json_pack("{s:i, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "batch", B, "ctx", ctx, "steps", steps, "adapter",
                          adapter == 1 ? "speech" : adapter == 2 ? "vision" : "none", "step_s", per_step, "bytes_per_step", bytes,
                          "bw_bound_step_s", t_bw, "compute_bound_step_s", t_fl, "roofline_ratio", (t_bw > t_fl ? t_bw : t_fl) / per_step, "bw_gbs_now", bw,
                          "paired_bw_ratio_median", paired_med);
    if (tps_out) *tps_out = toks;
    bench_row(b, section, label, toks, "tok/s", bound_tps, toks / bound_tps, x,
              "%.3f s/step; %.2f GB/step at %.1f GB/s = %.3f s; compute bound %.3f s -> roofline %.2f; paired bw %.2f", per_step, bytes / 1e9, bw,
              t_bw, t_fl, (t_bw > t_fl ? t_bw : t_fl) / per_step, paired_med);
    return PM_OK;
}

/* A fresh sequence of P random tokens through the decoder of m in chunks of `chunk` rows, logits at
 * the end: its seconds (the embedding and the cache come before the clock), or -1 with e set. */
double bench_prefill_seconds(const pm_model *pm, int P, int chunk, pm_err *e) {
    const pm_llm *m = &pm->llm;
    const pm_llm_config *c = &m->c;
    int H = c->hidden;
    float *emb = malloc(sizeof(float) * (size_t)P * H), *logits = malloc(sizeof(float) * (size_t)c->vocab);
    pm_kv_cache kv = {0};
    double t = -1;
    if (!emb || !logits) pm_errf(e, PM_ENOMEM, "out of memory");
    else if (!embed_random(m, P, 77u + (uint32_t)P, emb, e) && !pm_kv_reserve(&kv, c, P, e)) {
        double t0 = bench_now();
        for (int p = 0; p < P && !e->code; p += chunk) {
            int n = P - p < chunk ? P - p : chunk;
            pm_llm_chunk ch = {&kv, emb + (size_t)p * H, n, PM_ADAPTER_NONE, 0, p + n == P ? logits : NULL, NULL, 0};
            pm_llm_forward(m, &ch, 1, e);
        }
        t = e->code ? -1 : bench_now() - t0;
    }
    pm_kv_free(&kv);
    free(emb); free(logits);
    return t;
}

/* FLOPs of a P-token prefill: linear layers + causal attention + one lm_head row. */
double bench_prefill_flops(const pm_model *pm, int P) {
    const pm_llm *m = &pm->llm;
    const pm_llm_config *c = &m->c;
    return 2.0 * P * linear_params(m, 0) + 2.0 * (double)P * P * c->head_dim * c->n_heads * c->n_layers + 2.0 * (double)m->embed->numel;
}

static int prefill_one(bench_ctx *b, int P, const char *section, double *tps_out, pm_err *e) {
    int chunk = b->o.prefill_chunk;
    {
        double peak = bench_peak_now(b);
        double t = bench_prefill_seconds(b->m, P, chunk, e);
        peak = bench_peak_bracket(b, peak);
        if (!e->code) {
            double flops = bench_prefill_flops(b->m, P);
            double gf = flops / t / 1e9, bound_tps = P / (flops / (peak * 1e9));
            char label[64];
            snprintf(label, sizeof label, "prefill %d tokens", P);
            json_t *x = json_pack("{s:i, s:i, s:f, s:f, s:f, s:f}", "tokens", P, "chunk", chunk, "seconds", t, "tflop", flops / 1e12,
                                  "gflops", gf, "peak_gflops_now", peak);
            if (tps_out) *tps_out = P / t;
            bench_row(b, section, label, P / t, "tok/s", bound_tps, gf / peak, x, "%.1f s, %.2f TFLOP, %.1f GFLOP/s vs compute peak %.1f (bracketing)", t,
                      flops / 1e12, gf, peak);
        }
    }
    return e->code;
}

/* Seconds of one decode step of B sequences at --ctx cached positions (each cache is reset to ctx
 * first, so every step reads the same context). */
static double step_at_ctx(bench_ctx *b, pm_kv_cache *kv, int B, uint32_t seed, float *emb, float *logits, pm_llm_chunk *ch, pm_err *e) {
    const pm_llm *m = &b->m->llm;
    int H = m->c.hidden;
    if (embed_random(m, B, seed, emb, e)) return 0;
    for (int s = 0; s < B; s++) {
        kv[s].len = b->o.decode_ctx;
        pm_llm_chunk cc = {&kv[s], emb + (size_t)s * H, 1, PM_ADAPTER_NONE, 0, logits + (size_t)s * m->c.vocab, NULL, 0};
        ch[s] = cc;
    }
    double t = bench_now();
    pm_llm_forward(m, ch, B, e);
    return bench_now() - t;
}

/* Batch-1 decode against a plain read of the very bytes it streams: the bf16 weights in their
 * mapping and the K/V it attends to. Each step follows such a read (the faster of a plain and a
 * prefetched pass); the median of t_read / t_step is how close the step comes to reading its bytes
 * as fast as a STREAM-style sum reads them, and the reads' GB/s against the bandwidth of their
 * moment show how much of the gap to the bound lies in the memory itself: a single walk over
 * gigabytes of mapped weights against the best of several passes over a 256 MB buffer. */
static int decode_vs_read(bench_ctx *b, pm_kv_cache *kv, pm_err *e) {
    const pm_llm *m = &b->m->llm;
    const pm_llm_config *c = &m->c;
    int H = c->hidden, steps = b->o.decode_steps, ctx = b->o.decode_ctx, len = ctx + 1; /* the step reads len positions */
    int pages = (len + PM_KV_PAGE - 1) / PM_KV_PAGE, n = 1 + 4 * c->n_layers + 2 * pages * c->n_layers * c->n_kv_heads;
    const void **span = malloc(sizeof *span * (size_t)n);
    size_t *bytes = malloc(sizeof *bytes * (size_t)n);
    float *emb = malloc(sizeof(float) * (size_t)H), *logits = malloc(sizeof(float) * (size_t)c->vocab);
    double *ratio = malloc(sizeof(double) * (size_t)steps), *gbs = malloc(sizeof(double) * (size_t)steps);
    if (!span || !bytes || !emb || !logits || !ratio || !gbs) {
        free(span); free(bytes); free(emb); free(logits); free(ratio); free(gbs);
        return pm_errf(e, PM_ENOMEM, "out of memory");
    }
    int k = 0;
    double total = 0;
    span[k] = m->lm_head->data, bytes[k++] = m->lm_head->nbytes;
    for (int l = 0; l < c->n_layers; l++) {
        const pm_lora_linear *L[4] = {&m->layers[l].qkv, &m->layers[l].o, &m->layers[l].gate_up, &m->layers[l].down};
        for (int j = 0; j < 4; j++) span[k] = L[j]->W->data, bytes[k++] = L[j]->W->nbytes;
    }
    for (int p = 0; p < pages; p++)
        for (int l = 0; l < c->n_layers; l++) {
            int rows = len - p * PM_KV_PAGE < PM_KV_PAGE ? len - p * PM_KV_PAGE : PM_KV_PAGE;
            size_t run = (size_t)rows * kv->head_dim * sizeof(float);
            if (rows == PM_KV_PAGE) { /* a full page: the layer's K (V) runs of every head are one block */
                span[k] = pm_kv_k(kv, l, 0, p * PM_KV_PAGE), bytes[k++] = run * kv->n_heads;
                span[k] = pm_kv_v(kv, l, 0, p * PM_KV_PAGE), bytes[k++] = run * kv->n_heads;
            } else
                for (int h = 0; h < kv->n_heads; h++) {
                    span[k] = pm_kv_k(kv, l, h, p * PM_KV_PAGE), bytes[k++] = run;
                    span[k] = pm_kv_v(kv, l, h, p * PM_KV_PAGE), bytes[k++] = run;
                }
        }
    n = k; /* full pages took one span per layer and K / V */
    for (int i = 0; i < n; i++) total += (double)bytes[i];
    double bw = bench_bw_now(b), t_steps = 0;
    for (int st = -1; st < steps && !e->code; st++) { /* step -1 warms up */
        double t_a = bench_read_spans(span, bytes, n, 0), t_b = bench_read_spans(span, bytes, n, 1024);
        double t_read = t_a < t_b ? t_a : t_b;
        pm_llm_chunk ch;
        double t = step_at_ctx(b, kv, 1, 3000u + (uint32_t)st, emb, logits, &ch, e);
        if (st < 0 || e->code) continue;
        t_steps += t;
        ratio[st] = t_read / t;
        gbs[st] = total / t_read / 1e9;
    }
    kv->len = ctx;
    bw = bench_bw_bracket(b, bw);
    if (!e->code) {
        double r = bench_median(ratio, steps), g = bench_median(gbs, steps);
        bench_row(b, "decode", "batch 1 vs reading its bytes", r, "x", -1, r,
                  json_pack("{s:f, s:f, s:f, s:f}", "bytes_per_step", total, "read_gbs_median", g, "step_s_mean", t_steps / steps,
                            "read_vs_bw", g / bw),
                  "median of t_read / t_step, each step after a plain read of its %.2f GB (mapped weights + K/V): the read ran "
                  "%.1f GB/s = %.2f of the bandwidth bracketing the row (%.1f GB/s)",
                  total / 1e9, g, g / bw, bw);
    }
    free(span); free(bytes); free(emb); free(logits); free(ratio); free(gbs);
    return e->code;
}

/* Two kinds of decode step for interleave(): side s runs B[s] sequences on caches kv[s] of model
 * m[s]; use (NULL: nothing) switches anything else a side needs (a kernels cap). */
typedef struct interleaved {
    pm_model *m[2];
    pm_kv_cache *kv[2];
    int B[2];
    void (*use)(int side, void *arg);
    void *arg;
} interleaved;

static double side_step(bench_ctx *b, const interleaved *iv, int side, uint32_t seed, float *emb, float *logits, pm_llm_chunk *ch,
                        pm_err *e) {
    if (iv->use) iv->use(side, iv->arg);
    b->m = iv->m[side];
    return step_at_ctx(b, iv->kv[side], iv->B[side], seed, emb, logits, ch, e);
}

/* Steps of side 1 between steps of side 0 (side 0: the reference), after a warm-up step of side 1:
 * r[st] = (the mean time of the side-0 steps on either side) / (the side-1 step) for o.decode_steps
 * steps; *m0, *m1: the two sides' mean step times. The rows measured one after the other run seconds
 * or minutes apart, and on a VM whose bandwidth moves by half within seconds their quotient measures
 * the machine as much as the engine; these pairs share the moment. Leaves the switch at side 0, b->m
 * as it was and every cache at o.decode_ctx positions. */
static int interleave(bench_ctx *b, const interleaved *iv, uint32_t seed, double *r, double *m0, double *m1, pm_err *e) {
    pm_model *keep = b->m;
    const pm_llm_config *c = &iv->m[0]->llm.c; /* both sides have the same dims */
    int steps = b->o.decode_steps, maxB = iv->B[0] > iv->B[1] ? iv->B[0] : iv->B[1];
    float *emb = malloc(sizeof(float) * (size_t)maxB * c->hidden), *logits = malloc(sizeof(float) * (size_t)maxB * c->vocab);
    pm_llm_chunk *ch = calloc((size_t)maxB, sizeof *ch);
    if (!emb || !logits || !ch) {
        free(emb); free(logits); free(ch);
        return pm_errf(e, PM_ENOMEM, "out of memory");
    }
    side_step(b, iv, 1, seed, emb, logits, ch, e); /* warm-up */
    double t0 = side_step(b, iv, 0, seed + 1, emb, logits, ch, e), s0 = 0, s1 = 0;
    for (int st = 0; st < steps && !e->code; st++) {
        double t1 = side_step(b, iv, 1, seed + 100 + (uint32_t)st, emb, logits, ch, e);
        double t0b = side_step(b, iv, 0, seed + 200 + (uint32_t)st, emb, logits, ch, e);
        r[st] = 0.5 * (t0 + t0b) / t1;
        s0 += 0.5 * (t0 + t0b), s1 += t1;
        t0 = t0b;
    }
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < iv->B[side]; k++) iv->kv[side][k].len = b->o.decode_ctx;
    b->m = keep;
    *m0 = s0 / steps, *m1 = s1 / steps;
    free(emb); free(logits); free(ch);
    return e->code;
}

/* Aggregate tok/s of B concurrent sequences over batch 1, interleaved: B x (the batch-1 steps on
 * either side of a batch-B step) / its time, median over the batch-B steps. The decode rows above
 * run one batch size after the other, seconds apart. */
static int batch_speedup(bench_ctx *b, pm_kv_cache *kv, int B, pm_err *e) {
    int steps = b->o.decode_steps;
    double *r = malloc(sizeof(double) * (size_t)steps), m1 = 0, mB = 0;
    if (!r) return pm_errf(e, PM_ENOMEM, "out of memory");
    interleaved iv = {{b->m, b->m}, {kv, kv}, {1, B}, NULL, NULL};
    if (!interleave(b, &iv, 4000u, r, &m1, &mB, e)) {
        for (int st = 0; st < steps; st++) r[st] *= B;
        char label[64];
        snprintf(label, sizeof label, "batch %d / batch 1 interleaved", B);
        bench_row(b, "decode", label, bench_median(r, steps), "x", -1, -1, json_pack("{s:i, s:f, s:f}", "batch", B, "batch1_step_s", m1, "batchB_step_s", mB),
                  "median over %d batch-%d steps of %d x (batch-1 step time on either side) / its time; mean steps %.3f s (batch 1) and %.3f s (batch %d)",
                  steps, B, B, m1, mB, B);
    }
    free(r);
    return e->code;
}

/* Filled caches for up to maxB sequences, fp32 or bf16 elements (NULL and e set on failure). */
static pm_kv_cache *caches_new(bench_ctx *b, int maxB, int bf16, pm_err *e) {
    const pm_llm_config *c = &b->m->llm.c;
    pm_kv_cache *kv = calloc((size_t)maxB, sizeof *kv);
    if (!kv) {
        pm_errf(e, PM_ENOMEM, "out of memory");
        return NULL;
    }
    for (int s = 0; s < maxB; s++) kv[s].bf16 = bf16;
    for (int s = 0; s < maxB && !e->code; s++)
        if (!pm_kv_reserve(&kv[s], c, b->o.decode_ctx + b->o.decode_steps + 2, e)) fill_cache(&kv[s], c->n_layers, b->o.decode_ctx, 5u + (uint32_t)s);
    return kv;
}

static void caches_free(pm_kv_cache *kv, int maxB) {
    for (int s = 0; kv && s < maxB; s++) pm_kv_free(&kv[s]);
    free(kv);
}

/* Batch-1 steps on a bf16 cache against the same on an fp32 one (both filled from the same
 * values), interleaved: the median of (the fp32 steps on either side) / (the bf16 step). */
static int kv_bf16_speedup(bench_ctx *b, pm_kv_cache *k32, pm_kv_cache *k16, pm_err *e) {
    int steps = b->o.decode_steps;
    double *r = malloc(sizeof(double) * (size_t)steps), m32 = 0, m16 = 0;
    if (!r) return pm_errf(e, PM_ENOMEM, "out of memory");
    interleaved iv = {{b->m, b->m}, {k32, k16}, {1, 1}, NULL, NULL};
    if (!interleave(b, &iv, 7000u, r, &m32, &m16, e)) {
        char label[80];
        snprintf(label, sizeof label, "bf16 / fp32 KV at ctx %d interleaved", b->o.decode_ctx);
        bench_row(b, "decode", label, bench_median(r, steps), "x", -1, -1, json_pack("{s:i, s:f, s:f}", "ctx", b->o.decode_ctx, "fp32_step_s", m32, "bf16_step_s", m16),
                  "median over %d bf16-cache steps of (fp32-cache step time on either side) / its time; mean steps %.3f s (fp32) and %.3f s (bf16); "
                  "K/V %.2f GB against %.2f GB per step", steps, m32, m16, kv_elem_bytes(k16, b->o.decode_ctx + 1) / 1e9,
                  kv_elem_bytes(k32, b->o.decode_ctx + 1) / 1e9);
    }
    free(r);
    return e->code;
}

int bench_llm(bench_ctx *b) {
    pm_err e = {0};
    const pm_llm *m = &b->m->llm;
    int maxB = 1;
    for (int i = 0; i < b->o.n_batches; i++) maxB = b->o.batches[i] > maxB ? b->o.batches[i] : maxB;
    bench_progress("decode: filling %d caches of %d positions", maxB, b->o.decode_ctx);
    pm_kv_cache *kv = caches_new(b, maxB, 0, &e);
    if (!kv) return e.code;
    for (int i = 0; i < b->o.n_batches && !e.code; i++) {
        int B = b->o.batches[i];
        char label[64];
        snprintf(label, sizeof label, "decode batch %d", B);
        bench_progress("%s", label);
        decode_one(b, kv, B, 0, "decode", label, &b->decode_tps[i], &e);
        if (B == 1 && !e.code) {
            bench_progress("decode batch 1 against a plain read of its bytes");
            decode_vs_read(b, kv, &e);
        }
        if (B == 1 && !e.code && m->layers[0].qkv.A[1]) {
            bench_progress("decode batch 1, speech LoRA");
            decode_one(b, kv, 1, 1, "decode", "decode batch 1 +speech LoRA", NULL, &e);
        }
    }
    for (int i = 0; i < b->o.n_batches && !e.code; i++)
        if (b->o.batches[i] > 1) {
            bench_progress("decode batch %d against batch 1, interleaved", b->o.batches[i]);
            batch_speedup(b, kv, b->o.batches[i], &e);
        }
    size_t rss, anon, file, hwm;
    bench_rss(&rss, &anon, &file, &hwm);
    double kvb = 0;
    for (int s = 0; s < maxB; s++) kvb += kv_elem_bytes(&kv[s], kv[s].len);
    double wb = weight_bytes(m, 1);
    if (!e.code)
        bench_row(b, "memory", "RSS after decode", rss / 1e9, "GB", (wb + kvb) / 1e9, rss / (wb + kvb),
                  json_pack("{s:f, s:f, s:f, s:f}", "rss_anon_gb", anon / 1e9, "rss_file_gb", file / 1e9, "llm_weights_gb", wb / 1e9,
                            "kv_gb", kvb / 1e9),
                  "anon %.2f GB (KV %.2f GB) + file %.2f GB (LLM+speech-LoRA weights %.2f GB); bound = weights + KV", anon / 1e9,
                  kvb / 1e9, file / 1e9, wb / 1e9);
    caches_free(kv, maxB);
    if (b->o.long_ctx > 0 && !e.code) {
        /* Batch 1 again after a long context: the attention's reads grow with it (1.07 GB of K/V at
         * 4096 positions against the weights' 7.7 GB), and so does its arithmetic. The rows above
         * read b->o.decode_ctx; this one borrows it. */
        int ctx = b->o.decode_ctx;
        char label[80];
        b->o.decode_ctx = b->o.long_ctx;
        snprintf(label, sizeof label, "decode batch 1 at ctx %d", b->o.long_ctx);
        bench_progress("decode: filling a cache of %d positions", b->o.long_ctx);
        kv = caches_new(b, 1, 0, &e);
        if (kv && !e.code) {
            bench_progress("%s", label);
            decode_one(b, kv, 1, 0, "decode", label, NULL, &e);
        }
        /* the same with a bf16 cache (--kv-cache bf16): its own row, then steps of the two
         * alternating, each bf16 step against the fp32 steps on either side */
        pm_kv_cache *kh = e.code ? NULL : caches_new(b, 1, 1, &e);
        if (kh && !e.code) {
            snprintf(label, sizeof label, "decode batch 1 at ctx %d, bf16 KV", b->o.long_ctx);
            bench_progress("%s", label);
            decode_one(b, kh, 1, 0, "decode", label, NULL, &e);
            if (!e.code) kv_bf16_speedup(b, kv, kh, &e);
        }
        caches_free(kh, 1);
        caches_free(kv, 1);
        b->o.decode_ctx = ctx;
    }
    for (int i = 0; i < b->o.n_prefill && !e.code; i++) {
        bench_progress("prefill %d tokens", b->o.prefill[i]);
        prefill_one(b, b->o.prefill[i], "prefill", &b->prefill_tps[i], &e);
    }
    if (e.code) fprintf(stderr, "phi4mm bench: decoder: %s\n", e.msg);
    return e.code;
}

/* The first run (side 0: model m[0]) against a variant (side 1: m[1], and use(1) where set), steps
 * interleaved at batch B: "variant / first run" in speed (invert = 1: its inverse), the median over
 * the variant's steps. The rerun rows come minutes after the first run's: on the Zen 5 VM a phase of
 * slow memory between them once read "q8 / bf16" 1.95 x and "AVX-512 / AVX2" 0.64 x at batch 1.
 * Leaves the variant in use. */
static int variant_interleaved(bench_ctx *b, pm_kv_cache *kv, int B, pm_model *const *m, void (*use)(int, void *), int invert,
                               const char *section, const char *name, const char *tag, const char *base, pm_err *e) {
    int steps = b->o.decode_steps;
    double *r = malloc(sizeof(double) * (size_t)steps), m0 = 0, m1 = 0;
    if (!r) return pm_errf(e, PM_ENOMEM, "out of memory");
    interleaved iv = {{m[0], m[1]}, {kv, kv}, {B, B}, use, NULL};
    if (!interleave(b, &iv, 8000u, r, &m0, &m1, e)) {
        for (int st = 0; invert && st < steps; st++) r[st] = 1.0 / r[st];
        bench_row(b, section, name, bench_median(r, steps), "x", -1, -1, json_pack("{s:i, s:f, s:f}", "batch", B, "base_step_s", m0, "variant_step_s", m1),
                  "median over %d %s steps of %s; mean steps %.3f s (%s) and %.3f s (%s)", steps, tag,
                  invert ? "its time / the mean time of the steps on either side" : "the mean time of the steps on either side / its time", m0,
                  base, m1, tag);
    }
    if (use) use(1, NULL);
    b->m = m[1];
    free(r);
    return e->code;
}

/* A variant of the decoder runs (another weight format, capped kernels): decode at the batch sizes
 * o.batches[idx[k]] and prefill at o.prefill[0] again, each row followed by "variant / first run"
 * (invert = 0) or "first run / variant" (invert = 1) as a speedup row. `tag` names the variant in
 * labels and notes, `base` the first run. */
static int rerun_decoder(bench_ctx *b, const char *section, const char *tag, const char *base, const int *idx, int n_idx, int invert,
                         const char *decode_name, const char *prefill_name, const char *prefill_note, pm_model *const *m,
                         void (*use)(int, void *), pm_err *e) {
    int maxB = 1;
    for (int k = 0; k < n_idx; k++) maxB = b->o.batches[idx[k]] > maxB ? b->o.batches[idx[k]] : maxB;
    pm_kv_cache *kv = caches_new(b, maxB, 0, e);
    for (int k = 0; kv && k < n_idx && !e->code; k++) {
        int i = idx[k], B = b->o.batches[i];
        char label[64];
        double tps = 0, ref = b->decode_tps[i];
        snprintf(label, sizeof label, "%s decode batch %d", tag, B);
        bench_progress("%s", label);
        decode_one(b, kv, B, 0, section, label, &tps, e);
        if (!e->code && tps > 0 && ref > 0)
            bench_row(b, section, decode_name, invert ? ref / tps : tps / ref, "x", -1, -1, json_pack("{s:i}", "batch", B),
                      "batch %d: %.2f tok/s (%s) / %.2f tok/s (%s)", B, invert ? ref : tps, invert ? base : tag, invert ? tps : ref,
                      invert ? tag : base);
        if (!e->code) {
            char name[96]; /* "q8 / bf16 interleaved, batch 1", "avx512 / avx2 interleaved, batch 1" */
            snprintf(name, sizeof name, "%s / %s interleaved, batch %d", invert ? base : tag, invert ? tag : base, B);
            bench_progress("%s against %s, interleaved, batch %d", tag, base, B);
            variant_interleaved(b, kv, B, m, use, invert, section, name, tag, base, e);
        }
    }
    caches_free(kv, maxB);
    if (!e->code && b->o.n_prefill > 0) {
        double tps = 0, ref = b->prefill_tps[0];
        int P = b->o.prefill[0];
        bench_progress("%s prefill %d tokens", tag, P);
        prefill_one(b, P, section, &tps, e);
        if (!e->code && tps > 0 && ref > 0)
            bench_row(b, section, prefill_name, invert ? ref / tps : tps / ref, "x", -1, -1, json_pack("{s:i}", "tokens", P),
                      "%d tokens: %.1f tok/s (%s) / %.1f tok/s (%s); %s", P, invert ? ref : tps, invert ? base : tag, invert ? tps : ref,
                      invert ? tag : base, prefill_note);
    }
    return e->code;
}

/* The decode batches and the first prefill length again on a q8 load of the same checkpoint, as
 * speedups over the bf16 rows of this run, and each batch interleaved with the bf16 model. The bf16
 * model stays loaded (its pages are file-backed); the q8 copies are the anon growth reported. */
int bench_q8(bench_ctx *b) {
    pm_err e = {0};
    char err[1024];
    size_t r0, a0, f0, h0;
    bench_rss(&r0, &a0, &f0, &h0);
    bench_progress("q8: loading %s with --weights q8", b->o.model_dir);
    pm_model *mq = NULL, *mb = b->m;
    pm_load_options lo = {.weights = PM_WEIGHTS_Q8, .mlock = b->o.mlock};
    double t0 = bench_now();
    if (pm_model_load_opts(&mq, b->o.model_dir, &lo, err, sizeof err)) {
        fprintf(stderr, "phi4mm bench: q8: %s\n", err);
        return PM_EINVAL;
    }
    double tl = bench_now() - t0;
    pm_model_info info;
    pm_model_get_info(mq, &info);
    size_t r1, a1, f1, h1;
    bench_rss(&r1, &a1, &f1, &h1);
    bench_row(b, "q8", "load + quantize (warm cache)", tl, "s", -1, -1, json_pack("{s:f}", "q8_gb", info.q8_bytes / 1e9),
              "%.2f GB of int8 weights + scales; anon RSS grew %.2f GB", info.q8_bytes / 1e9, ((double)a1 - (double)a0) / 1e9);
    b->m = mq;
    int idx[8];
    for (int i = 0; i < b->o.n_batches; i++) idx[i] = i;
    pm_model *models[2] = {mb, mq};
    rerun_decoder(b, "q8", "q8", "bf16", idx, b->o.n_batches, 0, "decode speedup vs bf16", "prefill speedup vs bf16",
                  pm_kern_have_avx512() ? "q8 prefill packs int8 into the GEMM" : "q8 prefill: dequantized panels + sgemm", models, NULL, &e);
    b->m = mb;
    pm_model_free(mq);
    if (e.code) fprintf(stderr, "phi4mm bench: q8: %s\n", e.msg);
    return e.code;
}

/* The kernels rows' switch: no cap (side 0) or AVX2 (1). */
static void use_cap(int side, void *arg) {
    (void)arg;
    pm_kern_cap(side ? PM_KERN_AVX2 : PM_KERN_AVX512);
}

/* The same decoder rows with the kernels capped at AVX2, when this CPU has AVX-512: the speedup of
 * the AVX-512 paths measured in this run (decode at the first and last batch size, also
 * interleaved, and the first prefill length). */
int bench_kernels(bench_ctx *b) {
    if (!pm_kern_have_avx512()) {
        bench_progress("kernels: no AVX-512 on this CPU, nothing to compare");
        return 0;
    }
    pm_err e = {0};
    int idx[2] = {0, b->o.n_batches - 1}, n_idx = b->o.n_batches > 1 ? 2 : 1;
    pm_kern_cap(PM_KERN_AVX2);
    pm_model *models[2] = {b->m, b->m};
    rerun_decoder(b, "kernels", "avx2", "avx512", idx, n_idx, 1, "decode avx512 / avx2", "prefill avx512 / avx2", "same weights", models,
                  use_cap, &e);
    pm_kern_cap(PM_KERN_AVX512);
    if (e.code) fprintf(stderr, "phi4mm bench: kernels: %s\n", e.msg);
    return e.code;
}
