/* test_ops.c — kernels against their references: the AVX2 GEMV vs the portable one vs fp64;
 * the determinism contract (a row's result does not depend on the batch around it); safetensors
 * header validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "nn/kernels.h"
#include "nn/ops.h"
#include "test_util.h"

static uint32_t rng = 12345;
static float frand(void) { return tu_frand_next(&rng); }
static pm_tensor make_bf16(int out, int in, uint16_t **store) { return tu_bf16_matrix(out, in, frand, 0, store); }

static void test_gemv_matches_reference(void **state) {
    (void)state;
    int shapes[][3] = {{1, 5, 3}, {3, 37, 19}, {16, 64, 160}, {2, 130, 96}, {20, 33, 70}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
        uint16_t *ws;
        pm_tensor W = make_bf16(out, in, &ws);
        float *x = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out), *r = malloc(sizeof(float) * n * out);
        for (int i = 0; i < n * in; i++) x[i] = frand();
        pm_linear_ref(r, x, n, &W, NULL);
        pm_linear(y, x, n, &W, NULL);
        for (int i = 0; i < n * out; i++) assert_true(fabsf(y[i] - r[i]) <= 1e-4f * (1.0f + fabsf(r[i])));
        pm_kern_force_portable(1);
        pm_linear(y, x, n, &W, NULL);
        pm_kern_force_portable(0);
        for (int i = 0; i < n * out; i++) assert_true(fabsf(y[i] - r[i]) <= 1e-4f * (1.0f + fabsf(r[i])));
        free(x); free(y); free(r); free(ws);
    }
}

static void test_gemv_batch_independent(void **state) {
    (void)state;
    int out = 77, in = 96, n = 9;
    uint16_t *ws;
    pm_tensor W = make_bf16(out, in, &ws);
    float *x = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out), *y1 = malloc(sizeof(float) * out);
    for (int i = 0; i < n * in; i++) x[i] = frand();
    pm_linear(y, x, n, &W, NULL);
    for (int i = 0; i < n; i++) {
        pm_linear(y1, x + (size_t)i * in, 1, &W, NULL);
        assert_memory_equal(y1, y + (size_t)i * out, sizeof(float) * out);
    }
    free(x); free(y); free(y1); free(ws);
}

/* LayerNorm against an fp64 two-pass reference: rows in parallel (n >= 16) and alone, dims with a
 * tail (% 4), a large common offset (the variance must not cancel), with and without bias, and in
 * place. */
static void test_layernorm(void **state) {
    (void)state;
    int dims[] = {1, 7, 64, 1027};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        int n = 21, dim = dims[d];
        float *x = malloc(sizeof(float) * n * dim), *y = malloc(sizeof(float) * n * dim), *w = malloc(sizeof(float) * dim),
              *b = malloc(sizeof(float) * dim), *y1 = malloc(sizeof(float) * dim);
        for (int i = 0; i < n * dim; i++) x[i] = 100.0f + frand();
        for (int c = 0; c < dim; c++) w[c] = 1.0f + 0.5f * frand(), b[c] = frand();
        for (int withb = 0; withb <= 1; withb++) {
            pm_layernorm(y, x, w, withb ? b : NULL, n, dim, 1e-5f);
            for (int i = 0; i < n; i++) {
                const float *xi = x + (size_t)i * dim;
                double mean = 0, var = 0;
                for (int c = 0; c < dim; c++) mean += xi[c];
                mean /= dim;
                for (int c = 0; c < dim; c++) var += (xi[c] - mean) * (xi[c] - mean);
                var /= dim;
                for (int c = 0; c < dim; c++) {
                    double ref = (xi[c] - mean) / sqrt(var + 1e-5) * w[c] + (withb ? b[c] : 0.0);
                    assert_true(fabs(y[(size_t)i * dim + c] - ref) <= 2e-4 * (1.0 + fabs(ref)));
                }
                pm_layernorm(y1, xi, w, withb ? b : NULL, 1, dim, 1e-5f); /* a row alone == the row in a batch */
                assert_memory_equal(y1, y + (size_t)i * dim, sizeof(float) * dim);
            }
        }
        /* the AVX2 path (where the CPU has it) gives the portable loop's bits */
        pm_kern_cap(PM_KERN_PORTABLE);
        pm_layernorm(y, x, w, b, n, dim, 1e-5f);
        pm_kern_cap(PM_KERN_AVX512);
        {
            float *ys = malloc(sizeof(float) * n * dim);
            pm_layernorm(ys, x, w, b, n, dim, 1e-5f);
            assert_memory_equal(ys, y, sizeof(float) * n * dim);
            pm_layernorm(ys, x, w, NULL, n, dim, 1e-5f);
            pm_kern_cap(PM_KERN_PORTABLE);
            pm_layernorm(y, x, w, NULL, n, dim, 1e-5f);
            pm_kern_cap(PM_KERN_AVX512);
            assert_memory_equal(ys, y, sizeof(float) * n * dim);
            free(ys);
        }
        pm_layernorm(y, x, w, b, n, dim, 1e-5f); /* in place == out of place */
        pm_layernorm(x, x, w, b, n, dim, 1e-5f);
        assert_memory_equal(x, y, sizeof(float) * n * dim);
        free(x); free(y); free(w); free(b); free(y1);
    }
}

static void test_safetensors_rejects_bad_headers(void **state) {
    (void)state;
    pm_tensor *t;
    int n;
    pm_err e = {0};
    const char *cases[] = {
        "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}}",           /* size mismatch */
        "{\"a\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}",             /* unknown dtype */
        "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[2,6]}}",
        "{\"a\":{\"dtype\":\"BF16\",\"shape\":[-2],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,400]}}",         /* out of bounds */
        "[1,2]",
        "{\"a\":",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t hl = strlen(cases[i]);
        uint8_t buf[512] = {0};
        for (int b = 0; b < 8; b++) buf[b] = (uint8_t)(hl >> (8 * b));
        memcpy(buf + 8, cases[i], hl);
        pm_err_clear(&e);
        int rc = pm_safetensors_parse(buf, 8 + hl + 8, "test", &t, &n, &e);
        assert_true(rc < 0);
        assert_true(strlen(e.msg) > 0);
    }
    /* a good one */
    const char *good = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},\"__metadata__\":{\"format\":\"pt\"}}";
    size_t hl = strlen(good);
    uint8_t buf[512] = {0};
    for (int b = 0; b < 8; b++) buf[b] = (uint8_t)(hl >> (8 * b));
    memcpy(buf + 8, good, hl);
    pm_err_clear(&e);
    assert_int_equal(pm_safetensors_parse(buf, 8 + hl + 8, "test", &t, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(t[0].shape[1], 2);
    pm_safetensors_free_tensors(t, n);
    /* truncated: header says more than the file has */
    pm_err_clear(&e);
    assert_true(pm_safetensors_parse(buf, 8 + hl - 3, "test", &t, &n, &e) < 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemv_matches_reference),
        cmocka_unit_test(test_gemv_batch_independent),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_safetensors_rejects_bad_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
