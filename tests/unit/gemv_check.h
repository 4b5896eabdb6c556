/* gemv_check.h — the decode-matmul checks every weight format must pass (included by
 * test_kernels.c for bf16 and test_quant.c for int8; needs cmocka.h, math.h, omp.h first).
 * `rnd` gives uniform floats in [-1, 1). */
#ifndef PM_TEST_GEMV_CHECK_H
#define PM_TEST_GEMV_CHECK_H

#include <stdlib.h>
#include "nn/kernels.h"
#include "nn/ops.h"

/* The SIMD levels this CPU has, best first (the portable level alone when it has none); tests run
 * once per level with pm_kern_cap and restore PM_KERN_AVX512 after. */
static int simd_levels(pm_kern_level *out) {
    int k = 0;
    for (int l = PM_KERN_AVX512; l >= PM_KERN_AVX2; l--)
        if (pm_kern_level_in_use() >= (pm_kern_level)l) out[k++] = (pm_kern_level)l;
    if (!k) out[k++] = PM_KERN_PORTABLE;
    return k;
}

/* SIMD == portable twin bit for bit, both within 1e-5 (scaled by sqrt(in)) of the fp64 reference
 * (pm_linear_ref, which reads the weights through pm_tensor_read_f32), for n = 1..PM_SMALL_N + 3 in both
 * modes: y = dot, and y += acc_scale * dot. */
static void gemv_check_twin_and_reference(const pm_tensor *W, float acc_scale, float (*rnd)(void)) {
    int out = (int)W->shape[0], in = (int)W->shape[1];
    for (int n = 1; n <= PM_SMALL_N + 3; n += (n < 4 ? 1 : 5)) { /* 19: split into calls of PM_SMALL_N */
        float *x = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out), *yc = malloc(sizeof(float) * n * out),
              *r = malloc(sizeof(float) * n * out);
        for (int i = 0; i < n * in; i++) x[i] = rnd();
        pm_linear_ref(r, x, n, W, NULL);
        pm_kern_gemv(y, x, n, W, 0.0f, 0);
        pm_kern_gemv_c(yc, x, n, W, 0.0f, 0);
        assert_memory_equal(y, yc, sizeof(float) * n * out);
        for (int i = 0; i < n * out; i++) assert_true(fabsf(y[i] - r[i]) <= 1e-5f * (1.0f + sqrtf((float)in)));
        for (int i = 0; i < n * out; i++) y[i] = yc[i] = (float)i * 0.25f;
        pm_kern_gemv(y, x, n, W, acc_scale, 1);
        pm_kern_gemv_c(yc, x, n, W, acc_scale, 1);
        assert_memory_equal(y, yc, sizeof(float) * n * out);
        for (int i = 0; i < n * out; i++)
            assert_true(fabsf(y[i] - ((float)i * 0.25f + acc_scale * r[i])) <= 1e-4f * (1.0f + fabsf(y[i])));
        free(x); free(y); free(yc); free(r);
    }
}

/* Determinism contract (ops.h): row i of an n-row call == the same row alone, for every n up to
 * PM_SMALL_N, and 1 thread == 2 threads == 3 threads. */
static void gemv_check_batch_and_threads(const pm_tensor *W, float (*rnd)(void)) {
    int out = (int)W->shape[0], in = (int)W->shape[1], n = PM_SMALL_N;
    float *x = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out), *y1 = malloc(sizeof(float) * out),
          *yt = malloc(sizeof(float) * n * out);
    for (int i = 0; i < n * in; i++) x[i] = rnd();
    for (int nn = 1; nn <= n; nn++) {
        pm_kern_gemv(y, x, nn, W, 0.0f, 0);
        for (int i = 0; i < nn; i++) {
            pm_kern_gemv(y1, x + (size_t)i * in, 1, W, 0.0f, 0);
            assert_memory_equal(y1, y + (size_t)i * out, sizeof(float) * out);
        }
    }
    int nt = omp_get_max_threads();
    pm_kern_gemv(y, x, n, W, 0.0f, 0);
    omp_set_num_threads(1);
    pm_kern_gemv(yt, x, n, W, 0.0f, 0);
    omp_set_num_threads(3);
    pm_kern_gemv(y1, x, 1, W, 0.0f, 0);
    omp_set_num_threads(nt);
    assert_memory_equal(y, yt, sizeof(float) * n * out);
    assert_memory_equal(y1, y, sizeof(float) * out);
    free(x); free(y); free(y1); free(yt);
}

#endif
