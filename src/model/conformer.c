/* conformer.c — loading the speech Conformer and the forward driver (see conformer.h).
 *
 * Forward, as the official ConformerEncoder does it:
 *   1. x = (feats - global_mean) * global_invstd, padding included;
 *   2. NeMo dw-striding subsampling per clip (conformer_subsample.c) -> [n_clips, T', D];
 *   3. key masks: with a frame mask, keys t' >= ceil(frames/tr) are masked; without one, nothing
 *      is (the streaming mask is all true for chunk_size -1);
 *   4. T' > 500: each clip is zero-padded to a multiple of 500 and cut into 500-frame sequences
 *      that run independently (masks per chunk from the padded pad mask, or none);
 *   5. the blocks (conformer_block.c) with the T5 bias; chunks are glued back and the pad dropped.
 * Every sequence is independent through the blocks, so sequences run in groups of at most
 * PM_CF_GROUP_ROWS frames: memory stays bounded for long audio while the GEMMs stay large. */
#include "conformer_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define PFX "model.embed_tokens_extend.audio_embed.encoder."
#define PM_CF_GROUP_ROWS 2048

/* ---- loading ---- */

typedef struct loader {
    pm_weights *w;
    pm_err *e;
} loader;

static const pm_tensor *get(loader *L, int ndim, const int64_t *shape, const char *fmt, va_list ap) {
    char name[256];
    vsnprintf(name, sizeof name, fmt, ap);
    return pm_wget(L->w, L->e, ndim, shape, PFX "%s", name);
}

/* fp32 copy of a tensor of the given shape (NULL after the first error). */
static float *vecf(loader *L, int ndim, const int64_t *shape, const char *fmt, ...) PM_PRINTF(4, 5);
static float *vecf(loader *L, int ndim, const int64_t *shape, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const pm_tensor *t = get(L, ndim, shape, fmt, ap);
    va_end(ap);
    return t ? pm_tensor_f32_copy(t, L->e) : NULL;
}

/* 2-D [rows, numel/rows] view of a weight of the given shape. */
static void mat(loader *L, pm_tensor *dst, int ndim, const int64_t *shape, const char *fmt, ...) PM_PRINTF(5, 6);
static void mat(loader *L, pm_tensor *dst, int ndim, const int64_t *shape, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const pm_tensor *t = get(L, ndim, shape, fmt, ap);
    va_end(ap);
    memset(dst, 0, sizeof *dst);
    if (!t) return;
    *dst = *t;
    dst->ndim = 2;
    dst->shape[1] = t->numel / shape[0];
    for (int i = 2; i < PM_MAX_DIMS; i++) dst->shape[i] = 0;
}

/* [C][taps] kernel (as stored, one filter per channel) -> fp32 [taps][C]. */
static float *kernel_tap_major(loader *L, int ndim, const int64_t *shape, int C, int taps, const char *fmt, ...) PM_PRINTF(6, 7);
static float *kernel_tap_major(loader *L, int ndim, const int64_t *shape, int C, int taps, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const pm_tensor *t = get(L, ndim, shape, fmt, ap);
    va_end(ap);
    if (!t) return NULL;
    float *raw = pm_tensor_f32_copy(t, L->e), *out = raw ? pm_malloc((size_t)C * taps * sizeof(float), L->e) : NULL;
    if (out)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < taps; k++) out[(size_t)k * C + c] = raw[(size_t)c * taps + k];
    free(raw);
    return out;
}

static void load_ff(loader *L, pm_cf_ff *f, int i, const char *which, int D, int U) {
    f->ln_w = vecf(L, 1, (int64_t[]){D}, "encoders.%d.%s.layer_norm.weight", i, which);
    f->ln_b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.%s.layer_norm.bias", i, which);
    mat(L, &f->w1, 2, (int64_t[]){2 * U, D}, "encoders.%d.%s.net.0.linear.weight", i, which);
    f->b1 = vecf(L, 1, (int64_t[]){2 * U}, "encoders.%d.%s.net.0.linear.bias", i, which);
    mat(L, &f->w2, 2, (int64_t[]){D, U}, "encoders.%d.%s.net.2.weight", i, which);
    f->b2 = vecf(L, 1, (int64_t[]){D}, "encoders.%d.%s.net.2.bias", i, which);
}

static void load_block(loader *L, pm_cf_block *b, int i, const pm_conformer_config *c) {
    int D = c->attention_dim, U = c->linear_units, k = c->kernel_size;
    load_ff(L, &b->ff_in, i, "feed_forward_in", D, U);
    load_ff(L, &b->ff_out, i, "feed_forward_out", D, U);
    b->ln_att_w = vecf(L, 1, (int64_t[]){D}, "encoders.%d.layer_norm_att.weight", i);
    b->ln_att_b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.layer_norm_att.bias", i);
    struct { pm_tensor *w; float **b; const char *n; } lin[] = {
        {&b->wq, &b->bq, "linear_q"}, {&b->wk, &b->bk, "linear_k"}, {&b->wv, &b->bv, "linear_v"}, {&b->wo, &b->bo, "linear_out"}};
    for (int j = 0; j < 4; j++) {
        mat(L, lin[j].w, 2, (int64_t[]){D, D}, "encoders.%d.self_attn.%s.weight", i, lin[j].n);
        *lin[j].b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.self_attn.%s.bias", i, lin[j].n);
    }
    b->conv_ln_w = vecf(L, 1, (int64_t[]){D}, "encoders.%d.conv.layer_norm.weight", i);
    b->conv_ln_b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.conv.layer_norm.bias", i);
    mat(L, &b->glu_w, 3, (int64_t[]){2 * D, D, 1}, "encoders.%d.conv.glu.ext_pw_conv_1d.weight", i);
    b->glu_bias = vecf(L, 1, (int64_t[]){2 * D}, "encoders.%d.conv.glu.ext_pw_conv_1d.bias", i);
    b->glu_b1 = vecf(L, 3, (int64_t[]){1, D, 1}, "encoders.%d.conv.glu.b1", i);
    b->glu_b2 = vecf(L, 3, (int64_t[]){1, D, 1}, "encoders.%d.conv.glu.b2", i);
    b->dw_w = kernel_tap_major(L, 3, (int64_t[]){D, 1, k}, D, k, "encoders.%d.conv.dw_sep_conv_1d.dw_conv.weight", i);
    b->dw_b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.conv.dw_sep_conv_1d.dw_conv.bias", i);
    mat(L, &b->pw_w, 3, (int64_t[]){D, D, 1}, "encoders.%d.conv.dw_sep_conv_1d.pw_conv.weight", i);
    b->pw_b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.conv.dw_sep_conv_1d.pw_conv.bias", i);
    mat(L, &b->ext_w, 3, (int64_t[]){D, D, 1}, "encoders.%d.conv.ext_pw_conv_1d.weight", i);
    b->ext_b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.conv.ext_pw_conv_1d.bias", i);
    b->ln_w = vecf(L, 1, (int64_t[]){D}, "encoders.%d.layer_norm.weight", i);
    b->ln_b = vecf(L, 1, (int64_t[]){D}, "encoders.%d.layer_norm.bias", i);
}

static void free_block(pm_cf_block *b) {
    pm_cf_ff *ff[2] = {&b->ff_in, &b->ff_out};
    for (int j = 0; j < 2; j++) {
        free(ff[j]->ln_w); free(ff[j]->ln_b); free(ff[j]->b1); free(ff[j]->b2);
    }
    float *v[] = {b->ln_att_w, b->ln_att_b, b->bq, b->bk, b->bv, b->bo, b->conv_ln_w, b->conv_ln_b, b->glu_bias, b->glu_b1,
                  b->glu_b2, b->dw_w, b->dw_b, b->pw_b, b->ext_b, b->ln_w, b->ln_b};
    for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) free(v[j]);
}

void pm_conformer_free(pm_conformer *m) {
    if (!m) return;
    pm_cf_packs_free(m);
    free(m->mean); free(m->invstd); free(m->conv0_w); free(m->conv0_b); free(m->out_b); free(m->t5);
    if (m->stages)
        for (int s = 0; s < m->n_stages - 1; s++) {
            free(m->stages[s].dw_w); free(m->stages[s].dw_b); free(m->stages[s].pw_b);
        }
    free(m->stages);
    if (m->blocks)
        for (int i = 0; i < m->c.num_blocks; i++) free_block(&m->blocks[i]);
    free(m->blocks);
    free(m);
}

int pm_conformer_load(pm_conformer **out, pm_weights *w, const pm_conformer_config *c, pm_err *e) {
    *out = NULL;
    if (e->code) return e->code;
    pm_conformer *m = pm_calloc(1, sizeof *m, e);
    if (!m) return e->code;
    m->c = *c;
    int D = c->attention_dim, C = c->conv_channels, H = c->attention_heads, F = c->input_size;
    for (int r = c->time_reduction; r > 1; r >>= 1) m->n_stages++;
    m->freq_out = F;
    for (int s = 0; s < m->n_stages; s++) m->freq_out = (m->freq_out - 1) / 2 + 1;
    loader L = {w, e};
    m->mean = vecf(&L, 1, (int64_t[]){F}, "encoder_embedding.global_mean");
    m->invstd = vecf(&L, 1, (int64_t[]){F}, "encoder_embedding.global_invstd");
    m->conv0_w = kernel_tap_major(&L, 4, (int64_t[]){C, 1, 3, 3}, C, 9, "embed.conv.0.weight");
    m->conv0_b = vecf(&L, 1, (int64_t[]){C}, "embed.conv.0.bias");
    if (!e->code && m->n_stages > 1) m->stages = pm_calloc((size_t)m->n_stages - 1, sizeof *m->stages, e);
    for (int s = 0; !e->code && s < m->n_stages - 1; s++) {
        pm_cf_stage *st = &m->stages[s];
        int idw = 2 + 3 * s, ipw = 3 + 3 * s; /* Sequential indices: conv, ReLU, then (dw, pw, ReLU) per stage */
        st->dw_w = kernel_tap_major(&L, 4, (int64_t[]){C, 1, 3, 3}, C, 9, "embed.conv.%d.weight", idw);
        st->dw_b = vecf(&L, 1, (int64_t[]){C}, "embed.conv.%d.bias", idw);
        mat(&L, &st->pw_w, 4, (int64_t[]){C, C, 1, 1}, "embed.conv.%d.weight", ipw);
        st->pw_b = vecf(&L, 1, (int64_t[]){C}, "embed.conv.%d.bias", ipw);
    }
    mat(&L, &m->out_w, 2, (int64_t[]){D, (int64_t)C * m->freq_out}, "embed.out.weight");
    m->out_b = vecf(&L, 1, (int64_t[]){D}, "embed.out.bias");
    int md = c->t5_max_distance;
    float *t5 = vecf(&L, 2, (int64_t[]){2 * md, H}, "relative_attention_bias_layer.bias_values.weight");
    if (t5) { /* [2md][H] -> [H][2md] */
        m->t5 = pm_malloc((size_t)2 * md * H * sizeof(float), e);
        if (m->t5)
            for (int i = 0; i < 2 * md; i++)
                for (int h = 0; h < H; h++) m->t5[(size_t)h * 2 * md + i] = t5[(size_t)i * H + h];
        free(t5);
    }
    if (!e->code) m->blocks = pm_calloc((size_t)c->num_blocks, sizeof *m->blocks, e);
    for (int i = 0; !e->code && i < c->num_blocks; i++) load_block(&L, &m->blocks[i], i, c);
    if (!e->code) pm_cf_packs_new(m, w, e);
    /* a checkpoint with more blocks than num_blocks shows up as unconsumed tensors at model load */
    if (e->code) {
        int rc = e->code;
        pm_conformer_free(m);
        pm_err_ctx(e, "speech encoder: ");
        return rc;
    }
    *out = m;
    return PM_OK;
}

int pm_conformer_dim(const pm_conformer *m) { return m->c.attention_dim; }

int pm_conformer_out_len(const pm_conformer *m, int t_max) {
    return (t_max + m->c.time_reduction - 1) / m->c.time_reduction;
}

/* ---- work space ---- */

int pm_cf_work_init(pm_cf_work *w, const pm_conformer *m, int rows, int L, pm_err *e) {
    memset(w, 0, sizeof *w);
    int D = m->c.attention_dim, U = m->c.linear_units, dk = D / m->c.attention_heads;
    int wide = U > D ? U : D;
    w->rows = rows;
    w->L = L;
#ifdef _OPENMP
    w->n_threads = omp_get_max_threads();
#else
    w->n_threads = 1;
#endif
    size_t rd = (size_t)rows * D;
    float **bufs[] = {&w->h, &w->q, &w->k, &w->v, &w->qt, &w->kt, &w->vt, &w->att};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i] = pm_malloc(rd * sizeof(float), e))) goto fail;
    if (!(w->big = pm_malloc((size_t)rows * 2 * wide * sizeof(float), e))) goto fail;
    if (!(w->mid = pm_malloc((size_t)rows * wide * sizeof(float), e))) goto fail;
    w->per_thread = pm_cf_attn_scratch(L, dk);
    if (!(w->scratch = pm_malloc((size_t)w->n_threads * w->per_thread * sizeof(float), e))) goto fail;
    return PM_OK;
fail:
    pm_cf_work_free(w);
    return e->code;
}

void pm_cf_work_free(pm_cf_work *w) {
    float *bufs[] = {w->h, w->q, w->k, w->v, w->qt, w->kt, w->vt, w->att, w->big, w->mid, w->scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    memset(w, 0, sizeof *w);
}

/* ---- traces ---- */

void pm_conformer_trace_want_all(pm_conformer_trace *t, float **block_out) {
    void *mark = t; /* any non-NULL value means "wanted"; it is never dereferenced */
    t->normalized = t->subsample_out = t->t5_bias = t->encoder_out = mark;
    t->pad_mask = t->hs_mask = mark;
    t->block_out = block_out;
}

void pm_conformer_trace_free(pm_conformer_trace *t, int num_blocks) {
    if (!t) return;
    free(t->normalized); free(t->subsample_out); free(t->pad_mask); free(t->t5_bias); free(t->hs_mask); free(t->encoder_out);
    if (t->block_out)
        for (int i = 0; i < num_blocks; i++) {
            free(t->block_out[i]);
            t->block_out[i] = NULL;
        }
    t->normalized = t->subsample_out = t->t5_bias = t->encoder_out = NULL;
    t->pad_mask = t->hs_mask = NULL;
}

typedef struct want { int norm, sub, pad, t5, hs, blocks, enc; } want;

/* Reads the want-markers and clears every field, so that only filled buffers are ever returned. */
static want trace_take(pm_conformer_trace *t, int num_blocks) {
    want w = {0};
    if (!t) return w;
    w.norm = t->normalized != NULL;
    w.sub = t->subsample_out != NULL;
    w.pad = t->pad_mask != NULL;
    w.t5 = t->t5_bias != NULL;
    w.hs = t->hs_mask != NULL;
    w.enc = t->encoder_out != NULL;
    w.blocks = t->block_out != NULL;
    t->normalized = t->subsample_out = t->t5_bias = t->encoder_out = NULL;
    t->pad_mask = t->hs_mask = NULL;
    if (w.blocks)
        for (int i = 0; i < num_blocks; i++) t->block_out[i] = NULL;
    return w;
}

static float *dup_f32(const float *src, size_t n, pm_err *e) {
    float *p = pm_malloc(n * sizeof(float), e);
    if (p) memcpy(p, src, n * sizeof(float));
    return p;
}

static int fill_trace_masks(const pm_conformer *m, pm_conformer_trace *tr, want wt, int n_clips, int Tp, const int *valid, int N,
                            int L, const int *kv, pm_err *e) {
    int H = m->c.attention_heads;
    if (wt.pad) {
        if (!(tr->pad_mask = pm_malloc((size_t)n_clips * Tp, e))) return e->code;
        for (int b = 0; b < n_clips; b++)
            for (int t = 0; t < Tp; t++) tr->pad_mask[(size_t)b * Tp + t] = t < valid[b];
    }
    if (wt.t5) {
        if (!(tr->t5_bias = pm_malloc((size_t)H * L * L * sizeof(float), e))) return e->code;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++)
                for (int j = 0; j < L; j++) tr->t5_bias[((size_t)h * L + i) * L + j] = pm_cf_t5(m, h, i, j);
    }
    if (wt.hs) {
        if (!(tr->hs_mask = pm_malloc((size_t)N * L * L, e))) return e->code;
        for (int s = 0; s < N; s++)
            for (int i = 0; i < L; i++)
                for (int j = 0; j < L; j++) tr->hs_mask[((size_t)s * L + i) * L + j] = j < kv[s];
    }
    return PM_OK;
}

/* ---- forward ---- */

/* Copies the rows of group sequences [s0, s0+g) that are real frames (t < Tp) into dst [n_clips, Tp, D]. */
static void scatter_rows(float *dst, const float *x, int s0, int g, int nch, int L, int Tp, int D) {
    for (int s = s0; s < s0 + g; s++) {
        int b = s / nch, c = s % nch;
        for (int i = 0; i < L; i++) {
            int t = c * L + i;
            if (t >= Tp) break;
            memcpy(dst + ((size_t)b * Tp + t) * D, x + ((size_t)(s - s0) * L + i) * D, (size_t)D * sizeof(float));
        }
    }
}

/* Fills x [g*L, D] with sequences [s0, s0+g): chunk rows past T' are zeros (the unfold padding). */
static void gather_rows(float *x, const float *sub, int s0, int g, int nch, int L, int Tp, int D) {
    for (int s = s0; s < s0 + g; s++) {
        int b = s / nch, c = s % nch;
        for (int i = 0; i < L; i++) {
            int t = c * L + i;
            float *dst = x + ((size_t)(s - s0) * L + i) * D;
            if (t < Tp) memcpy(dst, sub + ((size_t)b * Tp + t) * D, (size_t)D * sizeof(float));
            else memset(dst, 0, (size_t)D * sizeof(float));
        }
    }
}

int pm_conformer_forward(const pm_conformer *m, const float *feats, int n_clips, int t_max, const int *frames, int has_frame_mask,
                         float **out, int *t_out, pm_conformer_trace *trace, pm_err *e) {
    const pm_conformer_config *c = &m->c;
    want wt = trace_take(trace, c->num_blocks);
    *out = NULL;
    *t_out = 0;
    if (!feats || !frames || n_clips < 1 || t_max < 1)
        return pm_errf(e, PM_EINVAL, "speech encoder: need at least one clip of at least one frame (n_clips %d, t_max %d)", n_clips, t_max);
    if (t_max > (1 << 26) / n_clips)
        return pm_errf(e, PM_EINVAL, "speech encoder: %d clips of %d frames is too long for one call", n_clips, t_max);
    for (int b = 0; b < n_clips; b++)
        if (frames[b] < 1 || frames[b] > t_max)
            return pm_errf(e, PM_EINVAL, "speech encoder: clip %d has %d frames, outside [1, %d]", b, frames[b], t_max);
    int D = c->attention_dim, F = c->input_size, tr = c->time_reduction;
    int Tp = pm_conformer_out_len(m, t_max);
    int L = Tp > PM_CONFORMER_MAX_SEQ ? PM_CONFORMER_MAX_SEQ : Tp;
    int nch = (Tp + L - 1) / L, N = n_clips * nch;
    size_t nfeat = (size_t)n_clips * t_max * F, nout = (size_t)n_clips * Tp * D;
    float *xn = NULL, *sub = NULL, *res = NULL, *x = NULL;
    int *valid = NULL, *kv = NULL;
    pm_cf_work w = {0};
    int rc;

    pm_cf_packs_ensure(m);
    if (!(xn = pm_malloc(nfeat * sizeof(float), e)) || !(sub = pm_malloc(nout * sizeof(float), e)) ||
        !(res = pm_malloc(nout * sizeof(float), e)) || !(valid = pm_malloc((size_t)n_clips * sizeof(int), e)) ||
        !(kv = pm_malloc((size_t)N * sizeof(int), e)))
        goto fail;

    /* 1. global mean / invstd (padding frames too) */
    for (size_t r = 0; r < (size_t)n_clips * t_max; r++)
        for (int f = 0; f < F; f++) xn[r * F + f] = (feats[r * F + f] - m->mean[f]) * m->invstd[f];
    if (wt.norm && !(trace->normalized = dup_f32(xn, nfeat, e))) goto fail;

    /* 2. subsampling, clip by clip */
    for (int b = 0; b < n_clips; b++)
        if ((rc = pm_cf_subsample(m, xn + (size_t)b * t_max * F, t_max, sub + (size_t)b * Tp * D, e))) goto fail;
    free(xn);
    xn = NULL;
    if (wt.sub && !(trace->subsample_out = dup_f32(sub, nout, e))) goto fail;

    /* 3-4. key lengths per (clip, chunk) sequence */
    for (int b = 0; b < n_clips; b++) valid[b] = has_frame_mask ? (frames[b] + tr - 1) / tr : Tp;
    for (int s = 0; s < N; s++) {
        int b = s / nch, ch = s % nch, n = has_frame_mask ? valid[b] - ch * L : L;
        kv[s] = n < 0 ? 0 : n > L ? L : n;
    }
    if (trace && fill_trace_masks(m, trace, wt, n_clips, Tp, valid, N, L, kv, e)) goto fail;
    if (wt.blocks)
        for (int i = 0; i < c->num_blocks; i++)
            if (!(trace->block_out[i] = pm_malloc(nout * sizeof(float), e))) goto fail;

    /* 5. blocks, by groups of whole sequences */
    int G = PM_CF_GROUP_ROWS / L;
    if (G < 1) G = 1;
    if (G > N) G = N;
    if (pm_cf_work_init(&w, m, G * L, L, e)) goto fail;
    if (!(x = pm_malloc((size_t)G * L * D * sizeof(float), e))) goto fail;
    for (int s0 = 0; s0 < N; s0 += G) {
        int g = N - s0 < G ? N - s0 : G;
        gather_rows(x, sub, s0, g, nch, L, Tp, D);
        for (int i = 0; i < c->num_blocks; i++) {
            if (pm_err_stopped(e, "the Conformer")) goto fail;
            pm_cf_block_forward(m, &m->blocks[i], x, g, L, kv + s0, &w);
            if (wt.blocks) scatter_rows(trace->block_out[i], x, s0, g, nch, L, Tp, D);
        }
        scatter_rows(res, x, s0, g, nch, L, Tp, D);
    }
    if (wt.enc && !(trace->encoder_out = dup_f32(res, nout, e))) goto fail;
    free(x);
    pm_cf_work_free(&w);
    free(sub);
    free(valid);
    free(kv);
    *out = res;
    *t_out = Tp;
    return PM_OK;

fail:
    rc = e->code ? e->code : PM_ENOMEM;
    pm_cf_work_free(&w);
    free(x); free(xn); free(sub); free(res); free(valid); free(kv);
    pm_conformer_trace_free(trace, c->num_blocks);
    return rc;
}
