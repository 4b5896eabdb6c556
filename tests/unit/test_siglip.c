/* test_siglip.c — the vision tower and HD merge against the official outputs of the tiny fixture
 * (ref/cases/image/vit/ *.npy, computed from ref/image/input_image_embeds.npy and
 * image_attention_mask.npy), plus the NaViT position buckets, config parsing, weight consumption
 * and bad-input errors, and odd synthetic dims against a naive double-precision reference. Fixtures: $PHI4MM_FIXTURES (default ../shared/fixtures); missing = FAIL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/npy.h"
#include "io/safetensors.h"
#include "nn/kernels.h"
#include "nn/ops.h"
#include "vision/image_embed.h"
#include "vision/siglip.h"
#include "test_util.h"

static char g_fix[1024];

static const char *fixdir(void) {
    snprintf(g_fix, sizeof g_fix, "%s/phi4mm-tiny", tu_fixtures());
    return g_fix;
}

static json_t *load_config(void) {
    char p[1200];
    snprintf(p, sizeof p, "%s/tiny_model/config.json", fixdir());
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    if (!root) fail_msg("cannot read %s: %s", p, je.text);
    return root;
}

static void load_npy(pm_npy *a, const char *rel) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", fixdir(), rel);
    pm_err e = {0};
    if (pm_npy_load(a, p, &e)) fail_msg("fixture %s: %s", p, e.msg);
}

static float *npy_f32(const pm_npy *a) {
    float *f = malloc(sizeof(float) * a->numel);
    assert_non_null(f);
    for (size_t i = 0; i < a->numel; i++) f[i] = (float)pm_npy_get(a, i);
    return f;
}

static double max_abs_diff(const float *x, const pm_npy *ref, size_t n, double *max_ref) {
    assert_int_equal(ref->numel, n);
    double d = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double r = pm_npy_get(ref, i);
        double v = fabs((double)x[i] - r);
        if (!(v <= d)) d = v; /* NaN propagates */
        if (fabs(r) > mr) mr = fabs(r);
    }
    if (max_ref) *max_ref = mr;
    return d;
}

/* Position ids: torch (1.13, Debian) gives bucket floor(32*i/nb) for every nb in 1..32 (checked
 * with torch.arange/torch.bucketize exactly as the official embeddings call them). */
static void test_position_buckets(void **state) {
    (void)state;
    const int G = 32;
    float mask[32 * 32];
    int ids[32 * 32];
    pm_err e = {0};
    for (int nh = 1; nh <= G; nh++)
        for (int nw = 1; nw <= G; nw += (nh % 5) + 1) {
            for (int r = 0; r < G; r++)
                for (int c = 0; c < G; c++) mask[r * G + c] = (r < nh && c < nw) ? 1.0f : 0.0f;
            assert_int_equal(pm_siglip_position_ids(G, mask, ids, &e), 0);
            for (int r = 0; r < G; r++)
                for (int c = 0; c < G; c++) {
                    int want = (r < nh && c < nw) ? ((32 * r) / nh) * G + (32 * c) / nw : 0;
                    if (ids[r * G + c] != want) fail_msg("nb %dx%d patch (%d,%d): id %d, want %d", nh, nw, r, c, ids[r * G + c], want);
                }
        }
    /* full mask = identity */
    for (int i = 0; i < G * G; i++) mask[i] = 1.0f;
    assert_int_equal(pm_siglip_position_ids(G, mask, ids, &e), 0);
    for (int i = 0; i < G * G; i++) assert_int_equal(ids[i], i);
    /* empty mask: all zero, no error */
    memset(mask, 0, sizeof mask);
    assert_int_equal(pm_siglip_position_ids(G, mask, ids, &e), 0);
    /* a hole in the valid region: error naming the problem */
    for (int i = 0; i < G * G; i++) mask[i] = 1.0f;
    mask[5 * G + 7] = 0.0f;
    assert_int_equal(pm_siglip_position_ids(G, mask, ids, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "rectangle"));
}

static void test_config(void **state) {
    (void)state;
    json_t *root = load_config();
    pm_siglip_config c;
    pm_err e = {0};
    assert_int_equal(pm_siglip_config_from_json(root, &c, &e), 0);
    assert_int_equal(c.hidden, 48);
    assert_int_equal(c.heads, 4);
    assert_int_equal(c.layers, 3);
    assert_int_equal(c.intermediate, 128);
    assert_int_equal(c.image_size, 448);
    assert_int_equal(c.patch_size, 14);
    assert_int_equal(c.layer_idx, -2);
    assert_int_equal(c.act, PM_SIGLIP_ACT_GELU_TANH);
    assert_true(fabsf(c.ln_eps - 1e-6f) < 1e-12f);
    /* without the oracle block: the real so400m dims */
    json_t *real = json_deep_copy(root);
    json_object_del(real, "_oracle_siglip_vision_config");
    assert_int_equal(pm_siglip_config_from_json(real, &c, &e), 0);
    assert_int_equal(c.hidden, 1152);
    assert_int_equal(c.heads, 16);
    assert_int_equal(c.layers, 27);
    assert_int_equal(c.intermediate, 4304);
    /* bad values are named */
    json_object_set_new(json_object_get(root, "_oracle_siglip_vision_config"), "num_attention_heads", json_integer(5));
    pm_err_clear(&e);
    assert_true(pm_siglip_config_from_json(root, &c, &e) < 0);
    assert_non_null(strstr(e.msg, "num_attention_heads"));
    json_decref(real);
    json_decref(root);
}

static void test_fixture_parity(void **state) {
    (void)state;
    char p[1200];
    snprintf(p, sizeof p, "%s/tiny_model", fixdir());
    pm_err e = {0};
    pm_weights *w = NULL;
    if (pm_weights_open(&w, p, &e)) fail_msg("%s", e.msg);
    json_t *root = load_config();
    pm_image_embed *m = NULL;
    if (pm_image_embed_load(&m, w, root, 64, &e)) fail_msg("%s", e.msg);
    /* every image_embed tensor is consumed by the loader */
    for (int i = 0; i < pm_weights_count(w); i++) {
        const pm_tensor *t = pm_weights_at(w, i);
        if (!strncmp(t->name, "model.embed_tokens_extend.image_embed.", 38) && !t->consumed) fail_msg("not consumed: %s", t->name);
    }

    pm_npy px, mk, sz, nt;
    load_npy(&px, "ref/image/input_image_embeds.npy");
    load_npy(&mk, "ref/image/image_attention_mask.npy");
    load_npy(&sz, "ref/image/image_sizes.npy");
    load_npy(&nt, "ref/image/num_img_tokens.npy");
    assert_int_equal(px.ndim, 5);
    const int n_crops = (int)px.shape[1];
    const int hc = (int)pm_npy_get(&sz, 0) / 448, wc = (int)pm_npy_get(&sz, 1) / 448;
    float *pix = npy_f32(&px), *mask = npy_f32(&mk);

    int ntok = 0;
    assert_int_equal(pm_image_embed_count_tokens(32, mask, n_crops, hc, wc, &ntok, &e), 0);
    assert_int_equal(ntok, (int)pm_npy_get(&nt, 0));

    float *out = NULL;
    pm_vit_trace tr;
    if (pm_image_embed_forward(m, pix, mask, n_crops, hc, wc, &out, &ntok, &tr, &e)) fail_msg("%s", e.msg);
    assert_int_equal(ntok, (int)pm_npy_get(&nt, 0));

    struct {
        const char *file;
        const float *got;
    } cmp[] = {
        {"ref/cases/image/vit/embeddings_out.npy", tr.embeddings_out},
        {"ref/cases/image/vit/layer_minus2_out.npy", tr.layer_minus2_out},
        {"ref/cases/image/vit/avgpool_out.npy", tr.avgpool_out},
        {"ref/cases/image/vit/hd_merged_features.npy", tr.hd_merged},
        {"ref/cases/image/vit/img_projection_out.npy", out},
    };
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        pm_npy r;
        load_npy(&r, cmp[i].file);
        double mr, d = max_abs_diff(cmp[i].got, &r, r.numel, &mr);
        printf("  %-44s max|d| = %.3e  (max|ref| = %.3g)\n", cmp[i].file + 20, d, mr);
        if (!(d <= 1e-3)) fail_msg("%s: max abs diff %g > 1e-3", cmp[i].file, d);
        pm_npy_free(&r);
    }

    /* bad inputs: wrong crop count, a hole in a sub-crop's mask */
    float *o2 = NULL;
    int n2 = 0;
    pm_err_clear(&e);
    assert_int_equal(pm_image_embed_forward(m, pix, mask, n_crops, 1, 2, &o2, &n2, NULL, &e), PM_EINVAL);
    assert_null(o2);
    assert_non_null(strstr(e.msg, "crops"));
    mask[2 * 1024 + 4 * 32 + 4] = 0.0f; /* crop 2, even row/col: breaks the rectangle */
    pm_err_clear(&e);
    assert_int_equal(pm_image_embed_forward(m, pix, mask, n_crops, hc, wc, &o2, &n2, NULL, &e), PM_EINVAL);
    assert_null(o2);
    mask[2 * 1024 + 4 * 32 + 4] = 1.0f;
    mask[2 * 1024 + 5 * 32 + 5] = 0.0f; /* odd row/col: invisible to the merge, caught by the tower */
    pm_err_clear(&e);
    assert_int_equal(pm_image_embed_forward(m, pix, mask, n_crops, hc, wc, &o2, &n2, NULL, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "rectangle"));

    free(out);
    free(tr.embeddings_out);
    free(tr.layer_minus2_out);
    free(tr.avgpool_out);
    free(tr.hd_merged);
    free(pix);
    free(mask);
    pm_npy_free(&px);
    pm_npy_free(&mk);
    pm_npy_free(&sz);
    pm_npy_free(&nt);
    pm_image_embed_free(m);
    json_decref(root);
    pm_weights_close(w);
}

/* ---- synthetic dims vs a naive double-precision reference (odd sizes: exercises the tails of
 * the vector kernels, head_dim 5, a 3x3 patch grid, a padded crop) ---- */

typedef struct syn_t {
    char name[160];
    int ndim;
    int64_t shape[4];
    float *v; /* bf16-rounded values */
} syn_t;

static uint32_t srng = 777;
static float srand_f(float sd) { return tu_frand_next(&srng) * sd; }

static int syn_add(syn_t *t, int n, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3, float sd, float mean) {
    snprintf(t[n].name, sizeof t[n].name, "model.embed_tokens_extend.image_embed.img_processor.%s", name);
    t[n].ndim = ndim;
    int64_t d[4] = {d0, d1, d2, d3}, cnt = 1;
    for (int i = 0; i < ndim; i++) t[n].shape[i] = d[i], cnt *= d[i];
    t[n].v = malloc(sizeof(float) * cnt);
    for (int64_t i = 0; i < cnt; i++) t[n].v[i] = pm_bf16_to_f32(pm_f32_to_bf16(mean + srand_f(sd)));
    return n + 1;
}

static int64_t syn_numel(const syn_t *t) {
    int64_t c = 1;
    for (int i = 0; i < t->ndim; i++) c *= t->shape[i];
    return c;
}

static const float *syn_get(syn_t *t, int n, const char *suffix) {
    for (int i = 0; i < n; i++) {
        size_t ls = strlen(t[i].name), lx = strlen(suffix);
        if (ls >= lx && !strcmp(t[i].name + ls - lx, suffix)) return t[i].v;
    }
    fail_msg("no %s", suffix);
    return NULL;
}

static void ref_ln(double *y, const double *x, const float *w, const float *b, int n, int d) {
    for (int i = 0; i < n; i++) {
        double m = 0, v = 0;
        for (int c = 0; c < d; c++) m += x[i * d + c];
        m /= d;
        for (int c = 0; c < d; c++) v += (x[i * d + c] - m) * (x[i * d + c] - m);
        v /= d;
        for (int c = 0; c < d; c++) y[i * d + c] = (x[i * d + c] - m) / sqrt(v + 1e-6) * w[c] + b[c];
    }
}

static void ref_lin(double *y, const double *x, int n, int in, int out, const float *w, const float *b) {
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double a = b[o];
            for (int c = 0; c < in; c++) a += (double)w[o * in + c] * x[i * in + c];
            y[i * out + o] = a;
        }
}

static void test_synthetic_dims(void **state) {
    (void)state;
    enum { D = 20, HEADS = 4, HD = 5, I = 37, L = 3, IMG = 42, P = 14, G = 3, NP = 9, K = 3 * P * P, NC = 2 };
    syn_t t[64];
    int n = 0;
    char nm[128];
    n = syn_add(t, n, "embeddings.patch_embedding.weight", 4, D, 3, P, P, 0.05f, 0);
    n = syn_add(t, n, "embeddings.patch_embedding.bias", 1, D, 0, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "embeddings.position_embedding.weight", 2, NP, D, 0, 0, 0.5f, 0);
    for (int l = 0; l < L; l++) {
        const char *lin[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int j = 0; j < 4; j++) {
            snprintf(nm, sizeof nm, "encoder.layers.%d.self_attn.%s.weight", l, lin[j]);
            n = syn_add(t, n, nm, 2, D, D, 0, 0, 0.6f, 0);
            snprintf(nm, sizeof nm, "encoder.layers.%d.self_attn.%s.bias", l, lin[j]);
            n = syn_add(t, n, nm, 1, D, 0, 0, 0, 0.1f, 0);
        }
        snprintf(nm, sizeof nm, "encoder.layers.%d.mlp.fc1.weight", l), n = syn_add(t, n, nm, 2, I, D, 0, 0, 0.4f, 0);
        snprintf(nm, sizeof nm, "encoder.layers.%d.mlp.fc1.bias", l), n = syn_add(t, n, nm, 1, I, 0, 0, 0, 0.1f, 0);
        snprintf(nm, sizeof nm, "encoder.layers.%d.mlp.fc2.weight", l), n = syn_add(t, n, nm, 2, D, I, 0, 0, 0.3f, 0);
        snprintf(nm, sizeof nm, "encoder.layers.%d.mlp.fc2.bias", l), n = syn_add(t, n, nm, 1, D, 0, 0, 0, 0.1f, 0);
        for (int j = 1; j <= 2; j++) {
            snprintf(nm, sizeof nm, "encoder.layers.%d.layer_norm%d.weight", l, j), n = syn_add(t, n, nm, 1, D, 0, 0, 0, 0.2f, 1);
            snprintf(nm, sizeof nm, "encoder.layers.%d.layer_norm%d.bias", l, j), n = syn_add(t, n, nm, 1, D, 0, 0, 0, 0.1f, 0);
        }
    }
    n = syn_add(t, n, "post_layernorm.weight", 1, D, 0, 0, 0, 0.1f, 1);
    n = syn_add(t, n, "post_layernorm.bias", 1, D, 0, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.probe", 3, 1, 1, D, 0, 0.1f, 0);
    n = syn_add(t, n, "head.attention.in_proj_weight", 2, 3 * D, D, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.attention.in_proj_bias", 1, 3 * D, 0, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.attention.out_proj.weight", 2, D, D, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.attention.out_proj.bias", 1, D, 0, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.layernorm.weight", 1, D, 0, 0, 0, 0.1f, 1);
    n = syn_add(t, n, "head.layernorm.bias", 1, D, 0, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.mlp.fc1.weight", 2, I, D, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.mlp.fc1.bias", 1, I, 0, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.mlp.fc2.weight", 2, D, I, 0, 0, 0.1f, 0);
    n = syn_add(t, n, "head.mlp.fc2.bias", 1, D, 0, 0, 0, 0.1f, 0);

    /* write a safetensors file */
    char dir[] = "/tmp/test_siglip_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    json_t *hdr = json_object();
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *sh = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(sh, json_integer(t[i].shape[d]));
        int64_t nb = syn_numel(&t[i]) * 2;
        json_object_set_new(hdr, t[i].name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", "BF16", "shape", sh, "data_offsets", (json_int_t)off,
                                                      (json_int_t)(off + nb)));
        off += nb;
    }
    char *hs = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = strlen(hs);
    fwrite(&hl, 8, 1, f);
    fwrite(hs, 1, hl, f);
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < syn_numel(&t[i]); j++) {
            uint16_t b = pm_f32_to_bf16(t[i].v[j]);
            fwrite(&b, 2, 1, f);
        }
    fclose(f);
    free(hs);

    pm_err e = {0};
    pm_weights *w = NULL;
    if (pm_weights_open(&w, dir, &e)) fail_msg("%s", e.msg);
    json_t *root = json_pack("{s:{s:i,s:i,s:i,s:i,s:i,s:i}}", "_oracle_siglip_vision_config", "hidden_size", D, "intermediate_size", I,
                             "num_attention_heads", HEADS, "num_hidden_layers", L, "image_size", IMG, "patch_size", P);
    pm_siglip_config c;
    assert_int_equal(pm_siglip_config_from_json(root, &c, &e), 0);
    pm_siglip *m = NULL;
    if (pm_siglip_load(&m, w, &c, &e)) fail_msg("%s", e.msg);
    assert_int_equal(pm_weights_check_consumed(w, &e), 0);

    float *pix = malloc(sizeof(float) * NC * 3 * IMG * IMG), mask[NC * NP];
    for (int i = 0; i < NC * 3 * IMG * IMG; i++) pix[i] = srand_f(1.0f);
    for (int i = 0; i < NP; i++) mask[i] = 1.0f;                           /* crop 0 full */
    for (int i = 0; i < NP; i++) mask[NP + i] = (i / G < 2 && i % G < 2); /* crop 1: 2x2 valid */
    float feat[NC * NP * D], emb[NC * NP * D];
    for (int level = PM_KERN_AVX512; level >= PM_KERN_PORTABLE; level--) { /* every path this CPU has */
        pm_kern_cap((pm_kern_level)level);
        if (pm_siglip_forward(m, pix, mask, NC, feat, emb, &e)) fail_msg("%s", e.msg);
        pm_kern_cap(PM_KERN_AVX512);

        /* reference */
        double x[NC * NP * D], h[NC * NP * D], q[NC * NP * D], k[NC * NP * D], v[NC * NP * D], a[NC * NP * D], mid[NC * NP * I];
        const float *pw = syn_get(t, n, "patch_embedding.weight"), *pb = syn_get(t, n, "patch_embedding.bias");
        const float *pe = syn_get(t, n, "position_embedding.weight");
        for (int cr = 0; cr < NC; cr++) {
            int ids[NP];
            for (int p = 0; p < NP; p++) ids[p] = 0;
            int nh = 0, nw = 0, kk = 0;
            for (int r = 0; r < G; r++) nh += mask[cr * NP + r * G] != 0;
            for (int cc = 0; cc < G; cc++) nw += mask[cr * NP + cc] != 0;
            for (int p = 0; p < NP; p++)
                if (mask[cr * NP + p] != 0) ids[p] = (G * (kk / nw) / nh) * G + G * (kk % nw) / nw, kk++;
            for (int p = 0; p < NP; p++)
                for (int o = 0; o < D; o++) {
                    double s = pb[o];
                    for (int ch = 0; ch < 3; ch++)
                        for (int ky = 0; ky < P; ky++)
                            for (int kx = 0; kx < P; kx++)
                                s += (double)pw[((o * 3 + ch) * P + ky) * P + kx] *
                                     pix[((size_t)(cr * 3 + ch) * IMG + (p / G) * P + ky) * IMG + (p % G) * P + kx];
                    x[(cr * NP + p) * D + o] = s + pe[ids[p] * D + o];
                }
        }
        double de = 0;
        for (int i = 0; i < NC * NP * D; i++) de = fmax(de, fabs(x[i] - emb[i]));
        for (int l = 0; l < L - 1; l++) {
            char b1[96], b2[96];
#define W_(s) (snprintf(b1, sizeof b1, "layers.%d.%s.weight", l, s), syn_get(t, n, b1))
#define B_(s) (snprintf(b2, sizeof b2, "layers.%d.%s.bias", l, s), syn_get(t, n, b2))
            ref_ln(h, x, W_("layer_norm1"), B_("layer_norm1"), NC * NP, D);
            ref_lin(q, h, NC * NP, D, D, W_("self_attn.q_proj"), B_("self_attn.q_proj"));
            ref_lin(k, h, NC * NP, D, D, W_("self_attn.k_proj"), B_("self_attn.k_proj"));
            ref_lin(v, h, NC * NP, D, D, W_("self_attn.v_proj"), B_("self_attn.v_proj"));
            for (int cr = 0; cr < NC; cr++)
                for (int hh = 0; hh < HEADS; hh++)
                    for (int i = 0; i < NP; i++) {
                        double s[NP], mx = -1e300, sum = 0;
                        for (int j = 0; j < NP; j++) {
                            double d = 0;
                            for (int c2 = 0; c2 < HD; c2++) d += q[(cr * NP + i) * D + hh * HD + c2] * k[(cr * NP + j) * D + hh * HD + c2];
                            s[j] = mask[cr * NP + j] != 0 ? d / sqrt((double)HD) : -1e300;
                            mx = fmax(mx, s[j]);
                        }
                        for (int j = 0; j < NP; j++) sum += (s[j] = exp(s[j] - mx));
                        for (int c2 = 0; c2 < HD; c2++) {
                            double o = 0;
                            for (int j = 0; j < NP; j++) o += s[j] / sum * v[(cr * NP + j) * D + hh * HD + c2];
                            a[(cr * NP + i) * D + hh * HD + c2] = o;
                        }
                    }
            ref_lin(h, a, NC * NP, D, D, W_("self_attn.out_proj"), B_("self_attn.out_proj"));
            for (int i = 0; i < NC * NP * D; i++) x[i] += h[i];
            ref_ln(h, x, W_("layer_norm2"), B_("layer_norm2"), NC * NP, D);
            ref_lin(mid, h, NC * NP, D, I, W_("mlp.fc1"), B_("mlp.fc1"));
            for (int i = 0; i < NC * NP * I; i++) {
                double u = mid[i];
                mid[i] = 0.5 * u * (1 + tanh(sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
            }
            ref_lin(h, mid, NC * NP, I, D, W_("mlp.fc2"), B_("mlp.fc2"));
            for (int i = 0; i < NC * NP * D; i++) x[i] += h[i];
#undef W_
#undef B_
        }
        double df = 0, mr = 0;
        for (int i = 0; i < NC * NP * D; i++) df = fmax(df, fabs(x[i] - feat[i])), mr = fmax(mr, fabs(x[i]));
        printf("  synthetic dims (%s): embeddings max|d| = %.3e, features max|d| = %.3e (max|ref| = %.3g)\n",
               pm_kern_level_name(pm_kern_level_in_use()), de, df, mr);
        assert_true(de <= 1e-4);
        assert_true(df <= 1e-4 * (1 + mr));
    }
    free(pix);
    for (int i = 0; i < n; i++) free(t[i].v);
    pm_siglip_free(m);
    pm_weights_close(w);
    json_decref(root);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_position_buckets),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_fixture_parity),
        cmocka_unit_test(test_synthetic_dims),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
