/* test_llm.c — the decoder alone on the tiny fixture: every case's stored input embeddings
 * through every layer, final norm and last-position logits, against the official outputs; the RoPE
 * tables; per-sequence LongRoPE switching and adapter isolation in a batch (bit for bit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "io/safetensors.h"
#include "model/llm.h"
#include "nn/kernels.h"
#include "test_util.h"

typedef struct fx {
    pm_weights *w;
    pm_llm llm;
    char dir[1024];
} fx;

static int setup(void **state) {
    static fx f;
    pm_err e = {0};
    snprintf(f.dir, sizeof f.dir, "%s/phi4mm-tiny", tu_fixtures());
    char p[1200], mdir[1100];
    snprintf(mdir, sizeof mdir, "%s/tiny_model", f.dir);
    if (pm_weights_open(&f.w, mdir, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    snprintf(p, sizeof p, "%s/config.json", mdir);
    json_t *cfg = json_load_file(p, 0, NULL);
    pm_llm_config c;
    if (!cfg || pm_llm_config_parse(cfg, NULL, &c, &e) || pm_llm_load(&f.llm, f.w, &c, &e)) {
        fprintf(stderr, "load: %s\n", e.msg);
        return -1;
    }
    json_decref(cfg);
    *state = &f;
    return 0;
}

static int teardown(void **state) {
    fx *f = *state;
    pm_llm_free(&f->llm);
    pm_weights_close(f->w);
    return 0;
}

static double maxabs(const float *a, const float *b, size_t n, double *refmax) {
    double m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > r) r = fabs(b[i]);
    }
    if (refmax) *refmax = r;
    return m;
}

static void run_case(fx *f, const char *cs, pm_adapter ad) {
    pm_err e = {0};
    char p[1400];
    pm_npy emb, ref;
    snprintf(p, sizeof p, "%s/ref/cases/%s/inputs_embeds.npy", f->dir, cs);
    assert_int_equal(pm_npy_load(&emb, p, &e), 0);
    int n = (int)emb.shape[0], H = f->llm.c.hidden, NL = f->llm.c.n_layers;
    float **lo = calloc((size_t)NL, sizeof *lo);
    for (int l = 0; l < NL; l++) lo[l] = malloc(sizeof(float) * (size_t)n * H);
    float *fn = malloc(sizeof(float) * (size_t)n * H), *logits = malloc(sizeof(float) * (size_t)f->llm.c.vocab);
    /* at the best level and, on AVX-512, again capped to AVX2: the prompt's attention fused, then on sgemm */
    int passes = pm_kern_level_in_use() == PM_KERN_AVX512 ? 2 : 1;
    for (int pass = 0; pass < passes; pass++) {
        pm_kern_cap(pass ? PM_KERN_AVX2 : PM_KERN_AVX512);
        printf("  %s at %s (attention %s)\n", cs, pm_kern_level_name(pm_kern_level_in_use()), pm_kern_flash_takes() ? "fused" : "on sgemm");
        pm_llm_trace tr = {lo, fn};
        pm_kv_cache kv = {0};
        pm_llm_chunk ch = {&kv, emb.data, n, ad, 0, logits, &tr, 0};
        assert_int_equal(pm_llm_forward(&f->llm, &ch, 1, &e), 0);
        pm_kern_cap(PM_KERN_AVX512);
        for (int l = 0; l < NL; l++) {
            snprintf(p, sizeof p, "%s/ref/cases/%s/decoder_layer%d_out.npy", f->dir, cs, l);
            assert_int_equal(pm_npy_load(&ref, p, &e), 0);
            double rm, d = maxabs(lo[l], ref.data, ref.numel, &rm);
            printf("  %s layer%d max_abs=%.3g (max|ref| %.3g)\n", cs, l, d, rm);
            assert_true(d <= 1e-4 * rm);
            pm_npy_free(&ref);
        }
        snprintf(p, sizeof p, "%s/ref/cases/%s/logits_last.npy", f->dir, cs);
        assert_int_equal(pm_npy_load(&ref, p, &e), 0);
        double d = maxabs(logits, ref.data, ref.numel, NULL);
        printf("  %s logits max_abs=%.3g\n", cs, d);
        assert_true(d <= 2e-3);
        pm_npy_free(&ref);
        pm_kv_free(&kv);
    }
    pm_npy_free(&emb);
    for (int l = 0; l < NL; l++) free(lo[l]);
    free(lo); free(fn); free(logits);
}

static void test_text_case(void **state) { run_case(*state, "text", PM_ADAPTER_NONE); }
static void test_audio_case_speech_lora(void **state) { run_case(*state, "audio", PM_ADAPTER_SPEECH); }
static void test_image_case_vision_lora(void **state) { run_case(*state, "image", PM_ADAPTER_VISION); }

static void test_rope_tables(void **state) {
    fx *f = *state;
    pm_err e = {0};
    char p[1400];
    pm_npy pos, ref;
    snprintf(p, sizeof p, "%s/ref/rope/positions.npy", f->dir);
    assert_int_equal(pm_npy_load(&pos, p, &e), 0);
    int n = (int)pos.numel, rot = f->llm.c.rot_dims;
    int *pi = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) pi[i] = (int)pm_npy_get(&pos, (size_t)i);
    float *c = malloc(sizeof(float) * (size_t)n * rot), *s = malloc(sizeof(float) * (size_t)n * rot);
    const char *names[2][2] = {{"cos_short", "sin_short"}, {"cos_long", "sin_long"}};
    for (int lg = 0; lg < 2; lg++) {
        pm_llm_rope_table(&f->llm, lg, pi, n, c, s);
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/ref/rope/%s.npy", f->dir, names[lg][k]);
            assert_int_equal(pm_npy_load(&ref, p, &e), 0);
            double d = maxabs(k ? s : c, ref.data, ref.numel, NULL);
            printf("  rope %s max_abs=%.3g\n", names[lg][k], d);
            assert_true(d <= 1e-5);
            pm_npy_free(&ref);
        }
    }
    free(pi); free(c); free(s);
    pm_npy_free(&pos);
}

/* Embeddings of a deterministic pseudo-random token sequence. */
static float *embeds_for(fx *f, int n, uint32_t seed) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 8) % 199000u);
    }
    float *x = malloc(sizeof(float) * (size_t)n * f->llm.c.hidden);
    pm_err e = {0};
    assert_int_equal(pm_llm_embed(&f->llm, ids, n, x, &e), 0);
    free(ids);
    return x;
}

/* Decode `steps` tokens for each sequence (fixed token stream), either each alone or all in one
 * batch, returning the logits of every step; caches of fp32 or bf16 elements. */
static void run_seqs_kv(fx *f, int nseq, const int *plen, const pm_adapter *ad, int steps, int batched, float **logits_out, int bf16) {
    pm_err e = {0};
    int H = f->llm.c.hidden, V = f->llm.c.vocab;
    enum { MAXSEQ = 24 };
    assert_true(nseq <= MAXSEQ);
    pm_kv_cache kv[MAXSEQ] = {{0}};
    float *pe[MAXSEQ], *te[MAXSEQ];
    for (int s = 0; s < nseq; s++) kv[s].bf16 = bf16;
    for (int s = 0; s < nseq; s++) {
        pe[s] = embeds_for(f, plen[s], 77u + (uint32_t)s);
        te[s] = embeds_for(f, steps, 999u + (uint32_t)s);
    }
    int L0 = f->llm.c.orig_max_pos;
    for (int s = 0; s < nseq; s++) {  /* prefill each alone (prefill batching is not what we test) */
        pm_llm_chunk ch = {&kv[s], pe[s], plen[s], ad[s], plen[s] > L0, NULL, NULL, 0};
        assert_int_equal(pm_llm_forward(&f->llm, &ch, 1, &e), 0);
    }
    for (int t = 0; t < steps; t++) {
        pm_llm_chunk ch[MAXSEQ];
        for (int s = 0; s < nseq; s++) {
            pm_llm_chunk c = {&kv[s], te[s] + (size_t)t * H, 1, ad[s], kv[s].len + 1 > L0, logits_out[s] + (size_t)t * V, NULL, 0};
            ch[s] = c;
        }
        if (batched) assert_int_equal(pm_llm_forward(&f->llm, ch, nseq, &e), 0);
        else
            for (int s = 0; s < nseq; s++) assert_int_equal(pm_llm_forward(&f->llm, &ch[s], 1, &e), 0);
    }
    for (int s = 0; s < nseq; s++) {
        pm_kv_free(&kv[s]);
        free(pe[s]);
        free(te[s]);
    }
}

static void run_seqs(fx *f, int nseq, const int *plen, const pm_adapter *ad, int steps, int batched, float **logits_out) {
    run_seqs_kv(f, nseq, plen, ad, steps, batched, logits_out, 0);
}

static void test_batch_isolation_bitexact(void **state) {
    fx *f = *state;
    int V = f->llm.c.vocab, steps = 3;
    int plen[3] = {9, 14, 5};
    pm_adapter ad[3] = {PM_ADAPTER_SPEECH, PM_ADAPTER_NONE, PM_ADAPTER_VISION};
    float *solo[3], *bat[3];
    for (int s = 0; s < 3; s++) {
        solo[s] = malloc(sizeof(float) * (size_t)steps * V);
        bat[s] = malloc(sizeof(float) * (size_t)steps * V);
    }
    run_seqs(f, 3, plen, ad, steps, 0, solo);
    run_seqs(f, 3, plen, ad, steps, 1, bat);
    for (int s = 0; s < 3; s++) assert_memory_equal(solo[s], bat[s], sizeof(float) * (size_t)steps * V);
    /* the single-query attention hands whole rows (every KV head) to one item when there are enough
     * rows per thread, one KV head per item otherwise: 4 rows on 1 thread take the first, the same
     * rows alone on 2 threads the second; the bits must not care */
    {
        int plen4[4] = {9, 14, 5, 21};
        pm_adapter ad4[4] = {PM_ADAPTER_SPEECH, PM_ADAPTER_NONE, PM_ADAPTER_VISION, PM_ADAPTER_NONE};
        float *s4[4], *b4[4];
        for (int k = 0; k < 4; k++) s4[k] = malloc(sizeof(float) * (size_t)steps * V), b4[k] = malloc(sizeof(float) * (size_t)steps * V);
        int nt = omp_get_max_threads();
        omp_set_num_threads(2);
        run_seqs(f, 4, plen4, ad4, steps, 0, s4);
        omp_set_num_threads(1);
        run_seqs(f, 4, plen4, ad4, steps, 1, b4);
        omp_set_num_threads(nt);
        for (int k = 0; k < 4; k++) assert_memory_equal(s4[k], b4[k], sizeof(float) * (size_t)steps * V);
        for (int k = 0; k < 4; k++) free(s4[k]), free(b4[k]);
    }
    /* two speech sequences around a plain one: batched, the adapter's rows are not one block and
     * lora_linear gathers them; alone, each is one block and B adds into y in place: same bits */
    {
        pm_adapter ad3[3] = {PM_ADAPTER_SPEECH, PM_ADAPTER_NONE, PM_ADAPTER_SPEECH};
        run_seqs(f, 3, plen, ad3, steps, 0, solo);
        run_seqs(f, 3, plen, ad3, steps, 1, bat);
        for (int s = 0; s < 3; s++) assert_memory_equal(solo[s], bat[s], sizeof(float) * (size_t)steps * V);
        run_seqs(f, 3, plen, ad, steps, 0, solo); /* back to the first set for the check below */
    }
    /* 20 sequences, past PM_SMALL_N: the linear layers take 20 rows at once on the few-row GEMV path
     * (AVX-512; elsewhere such rows go to the GEMM, whose rows may depend on n: not checked), 6-7 of
     * them through each LoRA */
    if (pm_kern_gemv_many_takes(f->llm.layers[0].qkv.W, 20)) {
        enum { NS = 20 };
        int plen20[NS];
        pm_adapter ad20[NS];
        float *s20[NS], *b20[NS];
        for (int k = 0; k < NS; k++) {
            plen20[k] = 3 + (k * 7) % 17;
            ad20[k] = (pm_adapter)(k % 3);
            s20[k] = malloc(sizeof(float) * (size_t)steps * V);
            b20[k] = malloc(sizeof(float) * (size_t)steps * V);
        }
        run_seqs(f, NS, plen20, ad20, steps, 0, s20);
        run_seqs(f, NS, plen20, ad20, steps, 1, b20);
        for (int k = 0; k < NS; k++) assert_memory_equal(s20[k], b20[k], sizeof(float) * (size_t)steps * V);
        for (int k = 0; k < NS; k++) free(s20[k]), free(b20[k]);
    }
    /* and the adapters really differ: the speech sequence without its adapter changes */
    pm_adapter ad2[3] = {PM_ADAPTER_NONE, PM_ADAPTER_NONE, PM_ADAPTER_VISION};
    run_seqs(f, 3, plen, ad2, steps, 1, bat);
    assert_true(memcmp(solo[0], bat[0], sizeof(float) * (size_t)V) != 0);
    for (int s = 0; s < 3; s++) { free(solo[s]); free(bat[s]); }
}

static void test_longrope_per_sequence(void **state) {
    fx *f = *state;
    int V = f->llm.c.vocab, steps = 3, L0 = f->llm.c.orig_max_pos;
    /* sequence 0 crosses orig_max_pos during decode; sequence 1 stays short */
    int plen[2] = {L0 - 1, 12};
    pm_adapter ad[2] = {PM_ADAPTER_NONE, PM_ADAPTER_SPEECH};
    float *solo[2], *bat[2];
    for (int s = 0; s < 2; s++) {
        solo[s] = malloc(sizeof(float) * (size_t)steps * V);
        bat[s] = malloc(sizeof(float) * (size_t)steps * V);
    }
    run_seqs(f, 2, plen, ad, steps, 0, solo);
    run_seqs(f, 2, plen, ad, steps, 1, bat);
    assert_memory_equal(solo[1], bat[1], sizeof(float) * (size_t)steps * V);
    assert_memory_equal(solo[0], bat[0], sizeof(float) * (size_t)steps * V);
    for (int s = 0; s < 2; s++) { free(solo[s]); free(bat[s]); }
}

/* The two attention paths agree: the last token decoded as a 1-row chunk after its prompt (the
 * single-query path) against the same token inside one prompt chunk (the block path: fused on
 * AVX-512, sgemm elsewhere), over a few cache pages; the logits to 1e-5 of their largest. */
static void test_decode_matches_prompt_path(void **state) {
    fx *f = *state;
    pm_err e = {0};
    int H = f->llm.c.hidden, V = f->llm.c.vocab;
    static const int lens[] = {200, 256, 257, 300, 513, 700};
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    int passes = pm_kern_level_in_use() == PM_KERN_AVX512 ? 2 : 1;
    for (int pass = 0; pass < 2 * passes; pass++) {
        int bf16 = pass / passes; /* both element types of the cache: each path widens bf16 its own way */
        pm_kern_cap(pass % passes ? PM_KERN_AVX2 : PM_KERN_AVX512);
        for (size_t t = 0; t < sizeof lens / sizeof lens[0]; t++) {
            int L = lens[t];
            float *x = embeds_for(f, L, 4242u + (uint32_t)L);
            pm_kv_cache ka = {.bf16 = bf16}, kb = {.bf16 = bf16};
            pm_llm_chunk a = {&ka, x, L, PM_ADAPTER_NONE, 0, la, NULL, 0};
            assert_int_equal(pm_llm_forward(&f->llm, &a, 1, &e), 0);
            pm_llm_chunk b0 = {&kb, x, L - 1, PM_ADAPTER_NONE, 0, NULL, NULL, 0}, b1 = {&kb, x + (size_t)(L - 1) * H, 1, PM_ADAPTER_NONE, 0, lb, NULL, 0};
            assert_int_equal(pm_llm_forward(&f->llm, &b0, 1, &e), 0);
            assert_int_equal(pm_llm_forward(&f->llm, &b1, 1, &e), 0);
            double rm, d = maxabs(lb, la, (size_t)V, &rm);
            printf("  %s, %s cache, %d positions: last-token logits max_abs=%.3g (max|ref| %.3g)\n", pm_kern_level_name(pm_kern_level_in_use()),
                   bf16 ? "bf16" : "fp32", L, d, rm);
            assert_true(d <= 1e-5 * rm);
            pm_kv_free(&ka);
            pm_kv_free(&kb);
            free(x);
        }
    }
    pm_kern_cap(PM_KERN_AVX512);
    free(la);
    free(lb);
}

/* A bf16 cache: half the bytes; a sequence's bits do not depend on its batch; the logits stay near
 * the fp32 cache's but differ (the rounding is real); a cache keeps the element type it was first
 * reserved with. The tiny random model is touchy: K/V rounded to 8 mantissa bits move its logits
 * by 1.5-4 % of their largest after a few steps, and rounding an fp32 cache's earlier positions by
 * hand between the steps moves them as much (0.5-1.4 %). */
static void test_kv_bf16(void **state) {
    fx *f = *state;
    const pm_llm_config *c = &f->llm.c;
    assert_int_equal(2 * pm_kv_bytes(c, 1, 1), pm_kv_bytes(c, 1, 0));
    assert_int_equal(2 * pm_kv_bytes(c, 3 * PM_KV_PAGE + 1, 1), pm_kv_bytes(c, 3 * PM_KV_PAGE + 1, 0));
    int V = c->vocab, steps = 3;
    int plen[3] = {9, 140, 5}; /* one sequence past a page */
    pm_adapter ad[3] = {PM_ADAPTER_SPEECH, PM_ADAPTER_NONE, PM_ADAPTER_VISION};
    float *solo[3], *bat[3], *f32[3];
    for (int s = 0; s < 3; s++) {
        solo[s] = malloc(sizeof(float) * (size_t)steps * V);
        bat[s] = malloc(sizeof(float) * (size_t)steps * V);
        f32[s] = malloc(sizeof(float) * (size_t)steps * V);
    }
    run_seqs_kv(f, 3, plen, ad, steps, 0, solo, 1);
    run_seqs_kv(f, 3, plen, ad, steps, 1, bat, 1);
    run_seqs_kv(f, 3, plen, ad, steps, 0, f32, 0);
    for (int s = 0; s < 3; s++) {
        assert_memory_equal(solo[s], bat[s], sizeof(float) * (size_t)steps * V);
        double rm, d = maxabs(solo[s], f32[s], (size_t)steps * V, &rm);
        printf("  sequence %d (%d prompt positions): bf16 against fp32 cache, logits max_abs=%.3g (max|ref| %.3g)\n", s, plen[s], d, rm);
        assert_true(d > 0.0);
        assert_true(d <= 0.1 * rm); /* a misplaced K or V row moves them by about max|ref| */
    }
    for (int s = 0; s < 3; s++) { free(solo[s]); free(bat[s]); free(f32[s]); }
    pm_err e = {0};
    pm_kv_cache kv = {.bf16 = 1};
    assert_int_equal(pm_kv_reserve(&kv, c, 10, &e), 0);
    assert_int_equal(kv.page_bytes, pm_kv_bytes(c, 1, 1));
    kv.bf16 = 0;
    assert_int_equal(pm_kv_reserve(&kv, c, 2 * PM_KV_PAGE, &e), PM_ESTATE);
    printf("  %s\n", e.msg);
    pm_kv_free(&kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_case),
        cmocka_unit_test(test_audio_case_speech_lora),
        cmocka_unit_test(test_image_case_vision_lora),
        cmocka_unit_test(test_rope_tables),
        cmocka_unit_test(test_batch_isolation_bitexact),
        cmocka_unit_test(test_longrope_per_sequence),
        cmocka_unit_test(test_decode_matches_prompt_path),
        cmocka_unit_test(test_kv_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
