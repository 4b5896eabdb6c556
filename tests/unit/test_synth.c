/* test_synth.c — `phi4mm synth` writer: a tiny synthetic checkpoint opens with the safetensors
 * loader (269 tensors, 2 shards, shapes = layout, values = the documented generator, all finite),
 * the same seed gives the same bytes whatever the thread count, directories are protected, stale
 * shards go away, and the synthetic tokenizer.json has the fixture's JSON shape and round-trips
 * text through the project's tokenizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "model/ckpt_layout.h"
#include "model/synth_presets.h"
#include "model/synth_tokenizer.h"
#include "model/synth_writer.h"
#include "tok/tokenizer.h"
#include "test_util.h"

static void rm_rf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[1200];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static char *make_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *t = malloc(1024);
    snprintf(t, 1024, "%s/phi4mm-synth-test-XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(t));
    return t;
}

static int synth(const char *dir, uint64_t seed, int threads, int shards, int force, pm_err *e) {
    pm_synth_opts o = {.preset = "tiny", .out_dir = dir, .seed = seed, .threads = threads, .n_shards = shards, .force = force};
    pm_synth_result r;
    int rc = pm_synth_write(&o, &r, e);
    if (!rc) {
        assert_int_equal(r.n_tensors, 269);
        assert_int_equal(r.total_bytes, 27389632);
    }
    return rc;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_tiny_opens_and_matches_layout(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    pm_err e = {0};
    assert_int_equal(synth(dir, 7, 2, 0, 0, &e), PM_OK);

    pm_weights *w;
    int rc = pm_weights_open(&w, dir, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    assert_int_equal(rc, PM_OK);
    assert_int_equal(pm_weights_count(w), 269);
    assert_int_equal(pm_weights_num_shards(w), 2);
    assert_int_equal(pm_weights_total_bytes(w), 27389632);

    char *txt = pm_synth_preset_text("tiny", PM_SYNTH_FILE_CONFIG);
    json_t *cfg = json_loads(txt, 0, NULL);
    free(txt);
    pm_ckpt_entry *v;
    int n;
    assert_int_equal(pm_ckpt_layout(cfg, &v, &n, &e), PM_OK);
    int n_vocab = 0;
    char *tj;
    /* the writer sizes the printable embedding rows by the tokenizer it writes */
    assert_int_equal(pm_synth_tokenizer_json(&tj, &n_vocab, &e), PM_OK);
    free(tj);
    for (int i = 0; i < n; i++) {
        const pm_tensor *t = pm_weights_find(w, v[i].name);
        assert_non_null(t);
        assert_int_equal(t->dtype, PM_DT_BF16);
        assert_int_equal(t->ndim, v[i].ndim);
        for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], v[i].shape[d]);
        const uint16_t *data = t->data;
        int64_t cnt = t->numel < 4096 ? t->numel : 4096;
        uint16_t *ref = malloc(sizeof *ref * (size_t)cnt);
        pm_synth_values(&v[i], 64, n_vocab, 7, ref, cnt);
        assert_memory_equal(ref, data, (size_t)cnt * 2);
        free(ref);
        double s2 = 0;
        for (int64_t k = 0; k < t->numel; k++) {
            float x = bf16_to_f32(data[k]);
            assert_true(isfinite(x));
            s2 += (double)x * x;
        }
        /* norms ~1, log-mel stats positive, everything else non-zero and bounded */
        double rms = sqrt(s2 / (double)t->numel);
        assert_true(rms > 1e-4 && rms < 25);
        if (strstr(v[i].name, "global_invstd") || (strstr(v[i].name, "norm") && strstr(v[i].name, ".weight")))
            for (int64_t k = 0; k < t->numel; k++) assert_true(bf16_to_f32(data[k]) > 0.1f);
    }
    pm_ckpt_layout_free(v);
    json_decref(cfg);
    pm_weights_close(w);

    /* the index: metadata.total_size and one entry per tensor, in the two shard files */
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    json_t *idx = json_load_file(path, 0, NULL);
    assert_non_null(idx);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(idx, "metadata"), "total_size")), 27389632);
    assert_int_equal(json_object_size(json_object_get(idx, "weight_map")), 269);
    json_decref(idx);
    rm_rf(dir);
    free(dir);
}

static void test_deterministic(void **state) {
    (void)state;
    char *a = make_tmpdir(), *b = make_tmpdir(), *c = make_tmpdir();
    pm_err e = {0};
    assert_int_equal(synth(a, 42, 2, 0, 0, &e), PM_OK);
    assert_int_equal(synth(b, 42, 1, 0, 0, &e), PM_OK);
    assert_int_equal(synth(c, 43, 2, 0, 0, &e), PM_OK);
    for (int s = 1; s <= 2; s++) {
        char pa[1200], pb[1200], pc[1200];
        snprintf(pa, sizeof pa, "%s/model-%05d-of-00002.safetensors", a, s);
        snprintf(pb, sizeof pb, "%s/model-%05d-of-00002.safetensors", b, s);
        snprintf(pc, sizeof pc, "%s/model-%05d-of-00002.safetensors", c, s);
        size_t la, lb, lc;
        uint8_t *xa = tu_slurp(pa, &la), *xb = tu_slurp(pb, &lb), *xc = tu_slurp(pc, &lc);
        assert_true(xa && xb && xc);
        assert_int_equal(la, lb);
        assert_memory_equal(xa, xb, la);
        assert_int_equal(la, lc);
        assert_memory_not_equal(xa, xc, la);
        free(xa);
        free(xb);
        free(xc);
    }
    rm_rf(a);
    rm_rf(b);
    rm_rf(c);
    free(a);
    free(b);
    free(c);
}

static int count_shards(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, "model-", 6)) n++;
    closedir(d);
    return n;
}

static void test_directory_protection(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    char p[1200];
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    FILE *f = fopen(p, "w");
    fputs("mine\n", f);
    fclose(f);
    pm_err e = {0};
    assert_int_equal(synth(dir, 1, 2, 0, 0, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "--force"));
    assert_non_null(strstr(e.msg, "notes.txt"));
    snprintf(p, sizeof p, "%s/config.json", dir);
    assert_int_not_equal(access(p, F_OK), 0); /* nothing written */
    pm_err_clear(&e);
    assert_int_equal(synth(dir, 1, 2, 3, 1, &e), PM_OK); /* --force, 3 shards */
    assert_int_equal(count_shards(dir), 3);
    pm_err_clear(&e);
    assert_int_equal(synth(dir, 1, 2, 0, 0, &e), PM_OK); /* earlier synth output: allowed; stale shard removed */
    assert_int_equal(count_shards(dir), 2);
    pm_weights *w;
    assert_int_equal(pm_weights_open(&w, dir, &e), PM_OK);
    pm_weights_close(w);
    rm_rf(dir);
    free(dir);

    /* a file where the directory should be */
    char *d2 = make_tmpdir();
    snprintf(p, sizeof p, "%s/file", d2);
    f = fopen(p, "w");
    fclose(f);
    pm_err_clear(&e);
    pm_synth_opts o = {.preset = "tiny", .out_dir = p};
    pm_synth_result r;
    assert_int_equal(pm_synth_write(&o, &r, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "not a directory"));
    pm_err_clear(&e);
    o.preset = "huge";
    assert_int_equal(pm_synth_write(&o, &r, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "unknown preset"));
    rm_rf(d2);
    free(d2);
}

static void test_tokenizer(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    pm_err e = {0};
    assert_int_equal(synth(dir, 0, 2, 0, 0, &e), PM_OK);
    char p[1200];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    json_t *tj = json_load_file(p, 0, NULL);
    assert_non_null(tj);

    /* same JSON shape as the fixture's tokenizer.json: keys, pre-tokenizer, decoder, added tokens */
    char fp[1200];
    snprintf(fp, sizeof fp, "%s/phi4mm-tiny/tiny_model/tokenizer.json", tu_fixtures());
    json_t *fx = json_load_file(fp, 0, NULL);
    assert_non_null(fx);
    const char *same[] = {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        assert_true(json_equal(json_object_get(tj, same[i]), json_object_get(fx, same[i])));
    assert_int_equal(json_object_size(tj), json_object_size(fx));
    json_t *m = json_object_get(tj, "model"), *fm = json_object_get(fx, "model");
    const char *k;
    json_t *val;
    json_object_foreach(fm, k, val) {
        assert_non_null(json_object_get(m, k));
        if (strcmp(k, "vocab") && strcmp(k, "merges")) assert_true(json_equal(val, json_object_get(m, k)));
    }
    /* the 256 byte tokens have the fixture's ids; merges are "a b" of known tokens */
    json_t *vocab = json_object_get(m, "vocab"), *fv = json_object_get(fm, "vocab");
    json_object_foreach(vocab, k, val) {
        if (json_integer_value(val) < 256) assert_true(json_equal(val, json_object_get(fv, k)));
    }
    size_t nm = json_array_size(json_object_get(m, "merges"));
    assert_true(nm >= 200 && nm <= 600);
    assert_int_equal(json_object_size(vocab), 256 + nm + 14);
    json_decref(fx);
    json_decref(tj);

    /* loads with the project's tokenizer and round-trips text with special tokens */
    pm_tokenizer *t;
    int rc = pm_tok_load(&t, dir, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    assert_int_equal(rc, PM_OK);
    const char *s = "<|system|>You are helpful.<|end|><|user|>How is the weather today? 1234 \xc3\xbc<|end|><|assistant|>";
    int32_t *ids;
    size_t n;
    assert_int_equal(pm_tok_encode(t, s, strlen(s), 1, &ids, &n, &e), PM_OK);
    assert_int_equal(ids[0], 200022);
    assert_int_equal(ids[n - 1], 200019);
    assert_true(n < strlen(s) / 2); /* merges apply */
    char *out;
    size_t ol;
    assert_int_equal(pm_tok_decode(t, ids, n, 0, &out, &ol, &e), PM_OK);
    assert_string_equal(out, s);
    assert_int_equal(pm_tok_id(t, "<|endoftext11|>"), 200011);
    assert_true(pm_tok_id(t, "\xc4\xa0the") >= 256); /* "Ġthe" is a learned token */
    free(out);
    free(ids);
    pm_tok_free(t);
    rm_rf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_opens_and_matches_layout),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_directory_protection),
        cmocka_unit_test(test_tokenizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
