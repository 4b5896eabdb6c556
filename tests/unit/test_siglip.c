/* test_siglip.c — the vision tower and HD merge against the official outputs of the tiny fixture
 * (ref/cases/image/vit/ *.npy, computed from ref/image/input_image_embeds.npy and
 * image_attention_mask.npy), plus the NaViT position buckets, config parsing, weight consumption
 * and bad-input errors. Fixtures: $PHI4MM_FIXTURES (default ../shared/fixtures); missing = FAIL. */
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

#include "io/npy.h"
#include "io/safetensors.h"
#include "vision/image_embed.h"
#include "vision/siglip.h"

static char g_fix[1024];

static const char *fixdir(void) {
    const char *d = getenv("PHI4MM_FIXTURES");
    snprintf(g_fix, sizeof g_fix, "%s/phi4mm-tiny", d && *d ? d : "../shared/fixtures");
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_position_buckets),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_fixture_parity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
