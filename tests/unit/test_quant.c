/* test_quant.c — the opt-in int8 weights (nn/quant.h, nn/gemv_q8.c, `--weights q8`):
 *  - quantization: per-32-block scale = max|w| / 127, every element within half a step of its
 *    bf16 value, zero blocks exact, padding rows zero, widths not divisible by 32 refused; every
 *    reader (element, row dequantizer, its portable twin) sees the same values;
 *  - the AVX2 decode kernel == its portable twin bit for bit, both == an fp64 reference on the
 *    dequantized weights, for every n <= PM_SMALL_N, both modes, odd row counts;
 *  - the determinism contract (a row's bits independent of n and of the thread count);
 *  - the prefill path (n > PM_SMALL_N, dequantized panels + sgemm) agrees with the reference;
 *  - on the tiny fixture model: a q8 load replaces every decoder projection and the lm_head, the
 *    logits stay close to bf16's and the engine decodes; the bf16 model is untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "io/safetensors.h"
#include "nn/kernels.h"
#include "nn/ops.h"
#include "nn/quant.h"
#include "gemv_check.h"
#include "test_util.h"

static uint32_t rng = 4242;
static float frand(void) { return tu_frand_next(&rng); }
static pm_tensor make_bf16(int out, int in, uint16_t **store) { return tu_bf16_matrix(out, in, frand, 97, store); } /* some outliers */

static void test_quantize(void **state) {
    (void)state;
    int out = 13, in = 96;
    uint16_t *ws;
    pm_tensor W = make_bf16(out, in, &ws);
    for (int k = 0; k < 32; k++) ws[32 + k] = 0; /* row 0, block 1: all zero */
    pm_tensor Q;
    pm_err e = {0};
    assert_int_equal(pm_q8_quantize(&Q, &W, &e), PM_OK);
    assert_int_equal(Q.dtype, PM_DT_Q8);
    int ng = (out + 3) / 4, nb = in / 32;
    assert_int_equal(Q.nbytes, (size_t)ng * nb * PM_Q8_RECORD);
    for (int j = 0; j < ng * 4; j++)
        for (int b = 0; b < nb; b++) {
            const uint8_t *rec = pm_q8_record(&Q, (size_t)j / 4, (size_t)b, (size_t)nb);
            const int8_t *q = pm_q8_quants(rec, j % 4);
            float s = pm_q8_scale(rec, j % 4);
            if (j >= out) { /* zero padding rows of the last group */
                assert_true(s == 0.0f);
                for (int k = 0; k < 32; k++) assert_int_equal(q[k], 0);
                continue;
            }
            float amax = 0;
            for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(pm_bf16_to_f32(ws[j * in + b * 32 + k])));
            assert_true(s == amax / 127.0f);
            int hit = 0;
            for (int k = 0; k < 32; k++) {
                float w = pm_bf16_to_f32(ws[j * in + b * 32 + k]), d;
                pm_q8_read_f32(&Q, (size_t)j * in + b * 32 + k, 1, &d);
                assert_true(d == (float)q[k] * s);
                assert_true(q[k] >= -127 && q[k] <= 127);
                assert_true(fabsf(w - d) <= 0.5f * s * (1.0f + 1e-5f));
                hit |= abs(q[k]) == 127;
            }
            assert_true(hit || amax == 0.0f); /* the block maximum uses the full range */
        }
    const uint8_t *r0 = pm_q8_record(&Q, 0, 1, (size_t)nb);
    assert_true(pm_q8_scale(r0, 0) == 0.0f);
    for (int k = 0; k < 32; k++) assert_int_equal(pm_q8_quants(r0, 0)[k], 0);
    /* pm_tensor_read_f32 and the row dequantizer give the same values, across a row boundary */
    float a[150], b[150], c[96 * 3];
    pm_tensor_read_f32(&Q, 96 * 5 + 17, 150, a);
    pm_q8_read_f32(&Q, 96 * 5 + 17, 150, b);
    assert_memory_equal(a, b, sizeof a);
    pm_kern_dequant_q8_rows(c, &Q, 5, 3);
    assert_memory_equal(c + 17, a, sizeof a);
    pm_kern_force_portable(1);
    float c2[96 * 3];
    pm_kern_dequant_q8_rows(c2, &Q, 5, 3);
    pm_kern_force_portable(0);
    assert_memory_equal(c, c2, sizeof c);
    /* the portable quantizer gives the same bytes as the AVX2 one, also around NaN/Inf weights */
    ws[7] = 0x7fc0;  /* NaN */
    ws[40] = 0x7f80; /* +Inf */
    ws[100] = 0xff80; /* -Inf */
    pm_q8_free(&Q);
    pm_tensor Q2;
    assert_int_equal(pm_q8_quantize(&Q, &W, &e), PM_OK);
    pm_kern_force_portable(1);
    assert_int_equal(pm_q8_quantize(&Q2, &W, &e), PM_OK);
    pm_kern_force_portable(0);
    assert_int_equal(Q.nbytes, Q2.nbytes);
    assert_memory_equal(Q.data, Q2.data, Q.nbytes);
    pm_q8_free(&Q2);
    pm_q8_free(&Q);
    /* widths that are not a multiple of the block, and non-2-D tensors, are refused */
    pm_tensor odd = W;
    odd.shape[1] = 48;
    odd.shape[0] = out * 2;
    assert_false(pm_q8_supported(&odd));
    assert_int_equal(pm_q8_quantize(&Q, &odd, &e), PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "cannot be quantized"));
    pm_tensor one = W;
    one.ndim = 1;
    assert_false(pm_q8_supported(&one));
    free(ws);
}

static void test_gemv_q8_twin_and_reference(void **state) {
    (void)state;
    int shapes[][2] = {{1, 32}, {5, 64}, {37, 96}, {64, 160}, {130, 384}, {9, 32}, {24, 3072 / 8}, {8, 1024}};
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++) {
        pm_kern_cap(lv[l]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            uint16_t *ws;
            pm_tensor W = make_bf16(shapes[s][0], shapes[s][1], &ws), Q;
            pm_err e = {0};
            assert_int_equal(pm_q8_quantize(&Q, &W, &e), PM_OK);
            gemv_check_twin_and_reference(&Q, -0.5f, frand); /* the reference reads the dequantized weights */
            pm_q8_free(&Q);
            free(ws);
        }
    }
    pm_kern_cap(PM_KERN_AVX512);
}

static void test_gemv_q8_batch_and_thread_independent(void **state) {
    (void)state;
    uint16_t *ws;
    pm_tensor W = make_bf16(203, 288, &ws), Q;
    pm_err e = {0};
    assert_int_equal(pm_q8_quantize(&Q, &W, &e), PM_OK);
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++) {
        pm_kern_cap(lv[l]);
        gemv_check_batch_and_threads(&Q, frand);
    }
    pm_kern_cap(PM_KERN_AVX512);
    pm_q8_free(&Q);
    free(ws);
}

/* n > PM_SMALL_N on every level: AVX-512 packs the int8 weights straight into the GEMM's fp32
 * slivers, the others dequantize panels for sgemm; both within 1e-4 of the fp64 reference on the
 * same dequantized weights, K over one 512-column slice, ragged N; on the GEMM path a row's result
 * does not depend on how many rows the call has (the first 17 rows alone == the same rows of 40),
 * and accumulate mode adds alpha times the product. */
static void test_linear_q8_prefill(void **state) {
    (void)state;
    int out = 600, in = 640, n = 40;
    uint16_t *ws;
    pm_tensor W = make_bf16(out, in, &ws), Q;
    pm_err e = {0};
    assert_int_equal(pm_q8_quantize(&Q, &W, &e), PM_OK);
    float *x = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out), *r = malloc(sizeof(float) * n * out),
          *y17 = malloc(sizeof(float) * 17 * out);
    for (int i = 0; i < n * in; i++) x[i] = frand();
    pm_linear_ref(r, x, n, &Q, NULL);
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++) {
        pm_kern_cap(lv[l]);
        pm_linear(y, x, n, &Q, NULL);
        for (int i = 0; i < n * out; i++) assert_true(fabsf(y[i] - r[i]) <= 1e-4f * (1.0f + fabsf(r[i])));
        if (pm_kern_gemm_takes(&Q)) {
            pm_linear(y17, x, 17, &Q, NULL);
            assert_memory_equal(y17, y, sizeof(float) * 17 * out);
        }
        for (int i = 0; i < n * out; i++) y[i] = 1.0f;
        pm_linear_acc(y, x, n, &Q, 0.5f);
        for (int i = 0; i < n * out; i++) assert_true(fabsf(y[i] - (1.0f + 0.5f * r[i])) <= 1e-4f * (1.0f + fabsf(r[i])));
    }
    pm_kern_cap(PM_KERN_AVX512);
    float *row = malloc(sizeof(float) * out * in);
    pm_kern_convert_rows(row, &Q, 0, (size_t)out);
    float d0;
    pm_q8_read_f32(&Q, (size_t)out * in - 1, 1, &d0);
    assert_true(row[(size_t)out * in - 1] == d0);
    free(row); free(x); free(y); free(r); free(y17); free(ws);
    pm_q8_free(&Q);
}

static int count_token(void *user, int32_t token, const char *text, size_t len) {
    (void)token, (void)text, (void)len;
    ++*(int *)user;
    return 0;
}

static void test_model_q8(void **state) {
    (void)state;
    char p[2048], err[1024];
    snprintf(p, sizeof p, "%s/phi4mm-tiny/tiny_model", tu_fixtures());
    pm_model *mb = NULL, *mq = NULL;
    pm_load_options lo = {.weights = PM_WEIGHTS_Q8};
    assert_int_equal(pm_model_load(&mb, p, err, sizeof err), 0);
    assert_int_equal(pm_model_load_opts(&mq, p, &lo, err, sizeof err), 0);
    pm_model_info ib, iq;
    pm_model_get_info(mb, &ib);
    pm_model_get_info(mq, &iq);
    assert_int_equal(ib.weights, PM_WEIGHTS_BF16);
    assert_int_equal(iq.weights, PM_WEIGHTS_Q8);
    assert_int_equal(ib.q8_bytes, 0);
    const pm_llm *lb = &mb->llm, *lq = &mq->llm;
    assert_int_equal(lq->n_q8, 4 * lq->c.n_layers + 1);
    assert_true(lb->lm_head == lb->embed && lb->lm_head->dtype == PM_DT_BF16);
    assert_int_equal(lq->lm_head->dtype, PM_DT_Q8);
    assert_int_equal(lq->embed->dtype, PM_DT_BF16);
    size_t expect = 0;
    for (int l = 0; l < lq->c.n_layers; l++) {
        const pm_lora_linear *ps[4] = {&lq->layers[l].qkv, &lq->layers[l].o, &lq->layers[l].gate_up, &lq->layers[l].down};
        for (int k = 0; k < 4; k++) {
            assert_int_equal(ps[k]->W->dtype, PM_DT_Q8);
            assert_int_equal(ps[k]->A[PM_ADAPTER_SPEECH]->dtype, PM_DT_BF16); /* LoRA stays as loaded */
            expect += ps[k]->W->nbytes;
            assert_int_equal(ps[k]->W->nbytes, (size_t)((ps[k]->W->shape[0] + 3) / 4) * 4 * ps[k]->W->shape[1] * 9 / 8);
        }
        assert_int_equal(lb->layers[l].qkv.W->dtype, PM_DT_BF16);
    }
    expect += lq->lm_head->nbytes;
    assert_int_equal(iq.q8_bytes, expect);
    /* one forward over a short prompt: logits close to bf16's, not identical */
    int32_t ids[6] = {200022, 9906, 11, 1495, 553, 200020};
    int H = lb->c.hidden, V = lb->c.vocab, n = 6;
    float *emb = malloc(sizeof(float) * n * H), *gb = malloc(sizeof(float) * V), *gq = malloc(sizeof(float) * V);
    pm_err e = {0};
    assert_int_equal(pm_llm_embed(lb, ids, n, emb, &e), 0);
    pm_kv_cache kb = {0}, kq = {0};
    pm_llm_chunk cb = {&kb, emb, n, PM_ADAPTER_NONE, 0, gb, NULL, 0}, cq = {&kq, emb, n, PM_ADAPTER_NONE, 0, gq, NULL, 0};
    assert_int_equal(pm_llm_forward(lb, &cb, 1, &e), 0);
    assert_int_equal(pm_llm_forward(lq, &cq, 1, &e), 0);
    double mx = 0, md = 0;
    for (int i = 0; i < V; i++) {
        mx = fmax(mx, fabs(gb[i]));
        md = fmax(md, fabs(gb[i] - gq[i]));
    }
    printf("q8 vs bf16 logits: max |diff| %.4g, max |logit| %.4g\n", md, mx);
    assert_true(md > 0.0);
    assert_true(md < 0.05 * mx);
    pm_kv_free(&kb);
    pm_kv_free(&kq);
    free(emb); free(gb); free(gq);
    /* the engine decodes with the q8 model */
    int ntok = 0;
    pm_callbacks cbk = {.on_token = count_token, .user = &ntok};
    assert_int_equal(pm_generate(mq, &(pm_request){.prompt = "<|user|>Hello<|end|><|assistant|>", .max_tokens = 5}, NULL, &cbk, err, sizeof err), 0);
    assert_int_equal(ntok, 5);
    pm_model_free(mb);
    pm_model_free(mq);
    /* an unknown format is refused */
    lo.weights = (pm_weight_format)7;
    assert_int_not_equal(pm_model_load_opts(&mq, p, &lo, err, sizeof err), 0);
    assert_non_null(strstr(err, "weight format"));
    pm_weight_format f;
    assert_int_equal(pm_weight_format_parse("q8", &f), 0);
    assert_int_equal(f, PM_WEIGHTS_Q8);
    assert_int_equal(pm_weight_format_parse("int8", &f), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_gemv_q8_twin_and_reference),
        cmocka_unit_test(test_gemv_q8_batch_and_thread_independent),
        cmocka_unit_test(test_linear_q8_prefill),
        cmocka_unit_test(test_model_q8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
