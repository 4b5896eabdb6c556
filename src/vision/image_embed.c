/* image_embed.c — see image_embed.h. One image per call; the official batch of images pads crops
 * and masks per image and runs each crop independently, so per-image calls give the same rows.
 *
 * Official details kept: AvgPool2d(2, 2) sums the 2x2 window row by row then divides by 4 (no
 * mask handling: padded patches are pooled like the rest and later cut away by the useful-region
 * crop, except in the always-full global view); the useful region is read from the mask sampled at
 * even rows/cols and arranged like the features; the token count is checked against the official
 * formula (which assumes top-left rectangular masks) exactly as the official assert does. */
#include "image_embed.h"

#include <stdlib.h>
#include <string.h>

#include "nn/ops.h"

#define PFX "model.embed_tokens_extend.image_embed."

struct pm_image_embed {
    pm_siglip *vit;
    int dv, hidden, grid, pooled; /* pooled = grid / 2 */
    int glb_first;                /* hd_transform_order "glb_sub" */
    int mlp;                      /* projection_cls "mlp" (else "linear") */
    float *glb_gn, *sub_gn;       /* [dv] fp32 */
    const pm_tensor *p0_w, *p0_b, *p2_w, *p2_b;
};

static const char *str_field(const json_t *o, const char *key, const char *def) {
    json_t *v = o ? json_object_get(o, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : (v && json_is_null(v) ? NULL : def);
}

static int bool_field(const json_t *o, const char *key, int def) {
    json_t *v = o ? json_object_get(o, key) : NULL;
    return json_is_boolean(v) ? json_is_true(v) : def;
}

int pm_image_embed_load(pm_image_embed **out, pm_weights *w, const json_t *root, int llm_hidden, pm_err *e) {
    *out = NULL;
    pm_siglip_config sc;
    int rc = pm_siglip_config_from_json(root, &sc, e);
    if (rc) return rc;
    const json_t *el = json_object_get(root, "embd_layer");
    const json_t *il = json_is_object(el) ? json_object_get(el, "image_embd_layer") : NULL;
    if (!json_is_object(il)) return pm_errf(e, PM_EFORMAT, "config.json: embd_layer.image_embd_layer is missing (the image embedding settings)");
    const char *w_ = "config.json: embd_layer.image_embd_layer";
    if (!bool_field(il, "use_hd_transform", 0) || !bool_field(il, "with_learnable_separator", 0))
        return pm_errf(e, PM_EUNSUPPORTED, "%s: only use_hd_transform = with_learnable_separator = true is supported", w_);
    const char *comp = str_field(il, "image_token_compression_cls", NULL);
    if (!comp || strcmp(comp, "avg_pool_2d"))
        return pm_errf(e, PM_EUNSUPPORTED, "%s: image_token_compression_cls %s%s%s is not supported (only \"avg_pool_2d\")", w_, comp ? "\"" : "",
                       comp ? comp : "null", comp ? "\"" : "");
    const char *order = str_field(il, "hd_transform_order", "glb_sub");
    if (!order || (strcmp(order, "sub_glb") && strcmp(order, "glb_sub")))
        return pm_errf(e, PM_EUNSUPPORTED, "%s: hd_transform_order must be \"sub_glb\" or \"glb_sub\"", w_);
    const char *proj = str_field(il, "projection_cls", "linear");
    if (!proj || (strcmp(proj, "mlp") && strcmp(proj, "linear")))
        return pm_errf(e, PM_EUNSUPPORTED, "%s: projection_cls must be \"mlp\" or \"linear\"", w_);
    json_t *cs = json_object_get(il, "crop_size");
    if (cs && !json_is_integer(cs)) return pm_errf(e, PM_EFORMAT, "%s: crop_size must be an integer", w_);
    long long crop = cs ? (long long)json_integer_value(cs) : 336; /* the official default */
    if (crop != sc.image_size)
        return pm_errf(e, PM_EUNSUPPORTED, "%s: crop_size %lld differs from the SigLIP image size %d", w_, crop, sc.image_size);
    int grid = sc.image_size / sc.patch_size;
    if (grid % 2)
        return pm_errf(e, PM_EUNSUPPORTED, "SigLIP patch grid %d x %d is odd: the reflection-padding path of the official code is not implemented",
                       grid, grid);
    if (llm_hidden <= 0) return pm_errf(e, PM_EINVAL, "image embedding: llm_hidden %d", llm_hidden);

    pm_image_embed *m = pm_calloc(1, sizeof *m, e);
    if (!m) return e->code;
    m->dv = sc.hidden;
    m->hidden = llm_hidden;
    m->grid = grid;
    m->pooled = grid / 2;
    m->glb_first = !strcmp(order, "glb_sub");
    m->mlp = !strcmp(proj, "mlp");
    if ((rc = pm_siglip_load(&m->vit, w, &sc, e))) goto fail;
    const int64_t D = m->dv, H = llm_hidden;
    const pm_tensor *g = pm_wget(w, e, 3, (int64_t[]){1, 1, D}, PFX "glb_GN");
    const pm_tensor *s = pm_wget(w, e, 4, (int64_t[]){1, 1, 1, D}, PFX "sub_GN");
    if (m->mlp) {
        m->p0_w = pm_wget(w, e, 2, (int64_t[]){H, D}, PFX "img_projection.0.weight");
        m->p0_b = pm_wget(w, e, 1, (int64_t[]){H}, PFX "img_projection.0.bias");
        m->p2_w = pm_wget(w, e, 2, (int64_t[]){H, H}, PFX "img_projection.2.weight");
        m->p2_b = pm_wget(w, e, 1, (int64_t[]){H}, PFX "img_projection.2.bias");
    } else {
        m->p0_w = pm_wget(w, e, 2, (int64_t[]){H, D}, PFX "img_projection.weight");
        m->p0_b = pm_wget(w, e, 1, (int64_t[]){H}, PFX "img_projection.bias");
    }
    if (e->code) goto fail;
    m->glb_gn = pm_tensor_f32_copy(g, e);
    m->sub_gn = pm_tensor_f32_copy(s, e);
    if (e->code) goto fail;
    *out = m;
    return PM_OK;
fail:
    pm_image_embed_free(m);
    return e->code ? e->code : PM_ESTATE;
}

void pm_image_embed_free(pm_image_embed *m) {
    if (!m) return;
    pm_siglip_free(m->vit);
    free(m->glb_gn);
    free(m->sub_gn);
    free(m);
}

const pm_siglip *pm_image_embed_siglip(const pm_image_embed *m) { return m->vit; }
int pm_image_embed_hidden(const pm_image_embed *m) { return m->hidden; }

/* The downsampled mask of sub-crop grid cell (r, c) of the (h*ps) x (w*ps) layout. */
static int sub_mask(const float *crop_mask, int grid, int ps, int w_crops, int r, int c) {
    int crop = 1 + (r / ps) * w_crops + c / ps;
    int y = (r % ps) * 2, x = (c % ps) * 2;
    return crop_mask[((size_t)crop * grid + y) * grid + x] != 0.0f;
}

/* Useful region (rows, cols) and the official token formula; errors when they disagree. */
static int useful_region(int grid, const float *crop_mask, int n_crops, int h_crops, int w_crops, int *uh, int *uw, int *tokens,
                         pm_err *e) {
    if (h_crops < 1 || w_crops < 1 || n_crops != 1 + h_crops * w_crops)
        return pm_errf(e, PM_EINVAL, "image: %d crops for a %d x %d HD grid (expected 1 global + %d)", n_crops, h_crops, w_crops,
                       h_crops * w_crops);
    if (grid % 2) return pm_errf(e, PM_EUNSUPPORTED, "image: odd patch grid %d", grid);
    const int ps = grid / 2, rows = h_crops * ps, cols = w_crops * ps;
    int h = 0, w = 0;
    for (int r = 0; r < rows; r++) h += sub_mask(crop_mask, grid, ps, w_crops, r, 0);
    for (int c = 0; c < cols; c++) w += sub_mask(crop_mask, grid, ps, w_crops, 0, c);
    long long msum = 0; /* Σ over the global and sub crops of the mask at even rows/cols */
    for (int k = 0; k < n_crops; k++)
        for (int y = 0; y < grid; y += 2)
            for (int x = 0; x < grid; x += 2) msum += crop_mask[((size_t)k * grid + y) * grid + x] != 0.0f;
    long long formula = msum + (h + 1) + ps;
    long long actual = (long long)h * (w + 1) + 1 + (long long)ps * (ps + 1);
    if (formula != actual)
        return pm_errf(e, PM_EINVAL,
                       "image patch mask: the valid region is not a top-left rectangle (%lld tokens by the official count, %lld laid "
                       "out; useful region %d x %d)",
                       formula, actual, h, w);
    *uh = h;
    *uw = w;
    *tokens = (int)actual;
    return PM_OK;
}

int pm_image_embed_count_tokens(int grid, const float *crop_mask, int n_crops, int h_crops, int w_crops, int *num_tokens, pm_err *e) {
    int uh, uw;
    return useful_region(grid, crop_mask, n_crops, h_crops, w_crops, &uh, &uw, num_tokens, e);
}

/* pooled[k][y][x][:] (NHWC, side ps) from feat[k][p][:] (side grid). */
static void avgpool2(const float *feat, int n_crops, int grid, int D, float *pooled) {
    const int ps = grid / 2;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < n_crops; k++)
        for (int y = 0; y < ps; y++)
            for (int x = 0; x < ps; x++) {
                const float *a = feat + ((size_t)k * grid * grid + (size_t)(2 * y) * grid + 2 * x) * D;
                const float *b = a + D, *c = a + (size_t)grid * D, *d = c + D;
                float *o = pooled + (((size_t)k * ps + y) * ps + x) * D;
                for (int i = 0; i < D; i++) {
                    float s = 0.0f;
                    s += a[i];
                    s += b[i];
                    s += c[i];
                    s += d[i];
                    o[i] = s / 4.0f;
                }
            }
}

int pm_image_embed_forward(const pm_image_embed *m, const float *pixels, const float *crop_mask, int n_crops, int h_crops,
                           int w_crops, float **out, int *num_tokens, pm_vit_trace *trace, pm_err *e) {
    *out = NULL;
    *num_tokens = 0;
    if (trace) memset(trace, 0, sizeof *trace);
    const int grid = m->grid, ps = m->pooled, D = m->dv, H = m->hidden, np = grid * grid;
    int uh, uw, N;
    int rc = useful_region(grid, crop_mask, n_crops, h_crops, w_crops, &uh, &uw, &N, e);
    if (rc) return rc;

    const size_t feat_n = (size_t)n_crops * np * D;
    float *feat = pm_malloc(feat_n * sizeof(float), e);
    float *emb = trace ? pm_malloc(feat_n * sizeof(float), e) : NULL;
    float *pooled = pm_malloc((size_t)n_crops * ps * ps * D * sizeof(float), e);
    float *merged = pm_malloc((size_t)N * D * sizeof(float), e);
    float *y = NULL, *mid = NULL;
    if (e->code) goto done;
    if ((rc = pm_siglip_forward(m->vit, pixels, crop_mask, n_crops, feat, emb, e))) goto done;
    avgpool2(feat, n_crops, grid, D, pooled);

    /* HD merge */
    {
        float *dst = merged;
        const size_t row = sizeof(float) * D;
        for (int part = 0; part < 2; part++) {
            int glb = (part == 0) == (m->glb_first != 0);
            if (glb) {
                for (int yy = 0; yy < ps; yy++) {
                    memcpy(dst, pooled + (size_t)yy * ps * D, row * ps);
                    dst += (size_t)ps * D;
                    memcpy(dst, m->sub_gn, row);
                    dst += D;
                }
            } else {
                for (int r = 0; r < uh; r++) {
                    for (int c = 0; c < uw; c++) {
                        int crop = 1 + (r / ps) * w_crops + c / ps;
                        memcpy(dst, pooled + (((size_t)crop * ps + r % ps) * ps + c % ps) * D, row);
                        dst += D;
                    }
                    memcpy(dst, m->sub_gn, row);
                    dst += D;
                }
            }
            if (part == 0) {
                memcpy(dst, m->glb_gn, row);
                dst += D;
            }
        }
        PM_ASSERT(dst == merged + (size_t)N * D);
    }

    /* img_projection */
    y = pm_malloc((size_t)N * H * sizeof(float), e);
    if (!y) goto done;
    if (m->mlp) {
        mid = pm_malloc((size_t)N * H * sizeof(float), e);
        if (!mid) goto done;
        pm_linear(mid, merged, N, m->p0_w, m->p0_b);
        for (size_t i = 0; i < (size_t)N * H; i++) mid[i] = pm_gelu_erf(mid[i]);
        pm_linear(y, mid, N, m->p2_w, m->p2_b);
    } else {
        pm_linear(y, merged, N, m->p0_w, m->p0_b);
    }
    *out = y;
    y = NULL;
    *num_tokens = N;

    if (trace) {
        trace->embeddings_out = emb;
        emb = NULL;
        trace->layer_minus2_out = feat;
        feat = NULL;
        trace->hd_merged = merged;
        merged = NULL;
        trace->avgpool_out = pm_malloc((size_t)n_crops * ps * ps * D * sizeof(float), e);
        if (trace->avgpool_out) /* NHWC -> NCHW */
            for (int k = 0; k < n_crops; k++)
                for (int p = 0; p < ps * ps; p++)
                    for (int i = 0; i < D; i++)
                        trace->avgpool_out[((size_t)k * D + i) * ps * ps + p] = pooled[((size_t)k * ps * ps + p) * D + i];
    }
done:
    rc = e->code;
    if (rc) {
        free(*out);
        *out = NULL;
        *num_tokens = 0;
        if (trace) {
            free(trace->embeddings_out);
            free(trace->layer_minus2_out);
            free(trace->avgpool_out);
            free(trace->hd_merged);
            memset(trace, 0, sizeof *trace);
        }
    }
    free(feat); free(emb); free(pooled); free(merged); free(y); free(mid);
    return rc;
}
