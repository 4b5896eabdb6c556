/* test_kernels.c — every SIMD kernel of src/nn against its portable twin (identical bits by
 * design), against fp64 references (accuracy), and the decode determinism contract: a row's
 * result does not depend on the batch size n or on the thread count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "nn/kernels.h"
#include "nn/ops.h"
#include "gemv_check.h"
#include "test_util.h"

static uint32_t rng = 777;
static float frand(void) { return tu_frand_next(&rng); }
static pm_tensor make_bf16(int out, int in, uint16_t **store) { return tu_bf16_matrix(out, in, frand, 0, store); }

/* GEMV (gemv_check.h), on every SIMD level: SIMD == twin bit for bit and both == the fp64
 * reference, for tails (in % 32, in % 16 != 0), odd row counts, widths past the prefetch distance,
 * every n in 1..16, both modes; then the determinism contract on a wide matrix with a tail. */
static void test_gemv_twin_and_reference(void **state) {
    (void)state;
    int shapes[][2] = {{1, 3}, {5, 10}, {37, 19}, {64, 160}, {130, 96}, {77, 3072 / 8}, {9, 8}, {24, 33}, {16, 256}, {13, 1100}, {17, 2064}};
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++) {
        pm_kern_cap(lv[l]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            uint16_t *ws;
            pm_tensor W = make_bf16(shapes[s][0], shapes[s][1], &ws);
            gemv_check_twin_and_reference(&W, 0.5f, frand);
            free(ws);
        }
    }
    pm_kern_cap(PM_KERN_AVX512);
}

static void test_gemv_batch_and_thread_independent(void **state) {
    (void)state;
    uint16_t *ws;
    pm_tensor W = make_bf16(203, 1300, &ws);
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++) {
        pm_kern_cap(lv[l]);
        gemv_check_batch_and_threads(&W, frand);
    }
    pm_kern_cap(PM_KERN_AVX512);
    free(ws);
}

/* Weights that start anywhere in a cache line, as a checkpoint's tensors do (its header's length
 * decides): every byte offset in a line that a bf16 tensor can have, for rows of whole lines
 * (in % 32 == 0: every row at the same offset, the case gemv.c reads line by line) and not.
 * The same bits as an aligned copy for every n of the GEMV and of pm_kern_gemv_many, on every
 * SIMD level, and the twin's. */
static void test_gemv_line_offsets(void **state) {
    (void)state;
    int shapes[][2] = {{45, 768}, {20, 320}, {9, 100}};
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++) {
        pm_kern_cap(lv[l]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int out = shapes[s][0], in = shapes[s][1], nmax = 40;
            uint16_t *ws;
            pm_tensor W = make_bf16(out, in, &ws), A = W; /* A: the aligned copy */
            void *aligned = aligned_alloc(64, (A.nbytes + 63) & ~(size_t)63);
            A.data = memcpy(aligned, ws, A.nbytes);
            float *x = malloc(sizeof(float) * nmax * in), *y = malloc(sizeof(float) * nmax * out), *ya = malloc(sizeof(float) * nmax * out);
            for (int i = 0; i < nmax * in; i++) x[i] = frand();
            for (int off = 2; off < 64; off += 2) {
                uint8_t *buf = malloc(A.nbytes + 64), *at = buf + (((uintptr_t)off - (uintptr_t)buf) & 63); /* at % 64 == off */
                W.data = memcpy(at, ws, A.nbytes);
                for (int n = 1; n <= nmax; n += n < 16 ? 1 : 7) {
                    if (n <= PM_SMALL_N) {
                        pm_kern_gemv(ya, x, n, &A, 0.0f, 0);
                        pm_kern_gemv(y, x, n, &W, 0.0f, 0);
                    } else {
                        pm_kern_gemv_many(ya, x, n, &A, 0.0f, 0);
                        pm_kern_gemv_many(y, x, n, &W, 0.0f, 0);
                    }
                    assert_memory_equal(y, ya, sizeof(float) * n * out);
                }
                pm_kern_gemv_c(ya, x, 8, &A, 0.0f, 0);
                pm_kern_gemv(y, x, 8, &W, 0.0f, 0);
                assert_memory_equal(y, ya, sizeof(float) * 8 * out);
                free(buf);
            }
            free(aligned); free(ws); free(x); free(y); free(ya);
        }
    }
    pm_kern_cap(PM_KERN_AVX512);
}

static void test_exp_softmax_silu(void **state) {
    (void)state;
    enum { N = 4099 };
    float *x = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N), *g = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = frand() * 95.0f;
    float edge[] = {-INFINITY, -1000.0f, -87.4f, -87.3f, -0.0f, 0.0f, 1e-8f, 87.9f, 88.0f, 88.5f, 1000.0f};
    memcpy(x, edge, sizeof edge);
    pm_kern_exp(a, x, N);
    pm_kern_exp_c(b, x, N);
    assert_memory_equal(a, b, sizeof(float) * N);
    assert_true(a[0] == 0.0f && a[1] == 0.0f);
    for (int i = 0; i < N; i++) {
        if (x[i] < -87.3f || x[i] > 88.0f) continue;
        double ref = exp((double)x[i]);
        assert_true(fabs(a[i] - ref) <= 4e-7 * ref);
    }
    float nanv = NAN;
    pm_kern_exp(a, &nanv, 1);
    assert_true(isnan(a[0]));
    /* softmax over lengths with and without an 8-tail, scores of realistic size */
    for (int n = 1; n < 60; n += 7) {
        for (int i = 0; i < n; i++) a[i] = b[i] = frand() * 20.0f;
        if (n > 3) a[2] = b[2] = -INFINITY;
        pm_kern_softmax(a, n);
        pm_kern_softmax_c(b, n);
        assert_memory_equal(a, b, sizeof(float) * n);
        double s = 0;
        for (int i = 0; i < n; i++) s += a[i];
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    for (int i = 0; i < 9; i++) a[i] = -INFINITY;
    pm_kern_softmax(a, 9);
    for (int i = 0; i < 9; i++) assert_true(a[i] == 0.0f);
    /* silu(g) * u */
    for (int i = 0; i < N; i++) {
        g[i] = frand() * 30.0f;
        x[i] = frand();
    }
    pm_kern_silu_mul(a, g, x, N);
    pm_kern_silu_mul_c(b, g, x, N);
    assert_memory_equal(a, b, sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        double ref = x[i] * (g[i] / (1.0 + exp(-(double)g[i])));
        assert_true(fabs(a[i] - ref) <= 1e-6 * (1.0 + fabs(ref)));
    }
    /* u == NULL: plain silu, in place */
    memcpy(a, g, sizeof(float) * N);
    memcpy(b, g, sizeof(float) * N);
    pm_kern_silu_mul(a, a, NULL, N);
    pm_kern_silu_mul_c(b, b, NULL, N);
    assert_memory_equal(a, b, sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        double ref = g[i] / (1.0 + exp(-(double)g[i]));
        assert_true(fabs(a[i] - ref) <= 1e-6 * (1.0 + fabs(ref)));
    }
    free(x); free(a); free(b); free(g);
}

/* Decode attention inner loops, on every SIMD level: SIMD == twin for g in 1..5 (3 is Phi-4-mini's
 * group), head dims with and without tails (past 128, 64, 16 and 8 columns), strided rows, with and
 * without rows to prefetch (some or all of n); and against a double reference. The bf16-row
 * kernels (a bf16 KV cache) == the fp32 twin on the rows widened. */
static void test_attention_kernels(void **state) {
    (void)state;
    int dims[] = {16, 128, 20, 40, 72, 200}; /* 128 and 200: the 128-column tile, 200 with a tail */
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        pm_kern_cap(lv[l]);
        int D = dims[di];
        for (int g = 1; g <= 5; g++) {
            int n = g % 2 ? 37 : 29, /* AVX-512 scores: tiles of 16 keys, then (29) of 8, 4 and 1 */
                ks = 3 * D + 8, qs = D + 4, lds = n + 3, os = D + 8;
            float *K = malloc(sizeof(float) * (size_t)n * ks), *q = malloc(sizeof(float) * (size_t)g * qs);
            float *s1 = calloc((size_t)g * lds, sizeof(float)), *s2 = calloc((size_t)g * lds, sizeof(float));
            float *o1 = malloc(sizeof(float) * (size_t)g * os), *o2 = malloc(sizeof(float) * (size_t)g * os);
            for (int i = 0; i < n * ks; i++) K[i] = frand();
            for (int i = 0; i < g * qs; i++) q[i] = frand();
            /* the rows to prefetch: none, the last 20 of K's, or n rows (other memory of the same shape) */
            const float *ahead = g % 3 == 0 ? NULL : g % 3 == 1 ? K + (size_t)(n - 20) * ks : K;
            int n_ahead = g % 3 == 0 ? 0 : g % 3 == 1 ? 20 : n;
            pm_kern_attn_scores(s1, lds, q, qs, g, K, ks, n, D, 0.125f, ahead, n_ahead);
            pm_kern_attn_scores_c(s2, lds, q, qs, g, K, ks, n, D, 0.125f);
            assert_memory_equal(s1, s2, sizeof(float) * (size_t)g * lds);
            for (int h = 0; h < g; h++)
                for (int t = 0; t < n; t++) {
                    double r = 0;
                    for (int d = 0; d < D; d++) r += (double)q[h * qs + d] * K[(size_t)t * ks + d];
                    assert_true(fabs(s1[h * lds + t] - 0.125 * r) < 1e-5);
                }
            for (int i = 0; i < g * os; i++) o1[i] = o2[i] = frand();
            const float *V = K + D; /* values interleaved with keys, as in the cache rows */
            pm_kern_attn_accum(o1, os, s1, lds, g, V, ks, n, D, ahead ? ahead + D : NULL, n_ahead);
            pm_kern_attn_accum_c(o2, os, s1, lds, g, V, ks, n, D);
            assert_memory_equal(o1, o2, sizeof(float) * (size_t)g * os);
            /* bf16 rows (a bf16 KV cache): == the fp32 twin on the rows widened, SIMD and twin alike */
            uint16_t *Kb = malloc(sizeof(uint16_t) * (size_t)n * ks);
            for (int i = 0; i < n * ks; i++) {
                Kb[i] = pm_f32_to_bf16(K[i]);
                K[i] = pm_bf16_to_f32(Kb[i]);
            }
            const uint16_t *ahb = g % 3 == 0 ? NULL : g % 3 == 1 ? Kb + (size_t)(n - 20) * ks : Kb;
            pm_kern_attn_scores_c(s2, lds, q, qs, g, K, ks, n, D, 0.125f);
            pm_kern_attn_scores_bf16(s1, lds, q, qs, g, Kb, ks, n, D, 0.125f, ahb, n_ahead);
            assert_memory_equal(s1, s2, sizeof(float) * (size_t)g * lds);
            memset(s1, 0, sizeof(float) * (size_t)g * lds);
            pm_kern_attn_scores_bf16_c(s1, lds, q, qs, g, Kb, ks, n, D, 0.125f);
            assert_memory_equal(s1, s2, sizeof(float) * (size_t)g * lds);
            float *o3 = malloc(sizeof(float) * (size_t)g * os);
            for (int i = 0; i < g * os; i++) o1[i] = o2[i] = o3[i] = frand();
            pm_kern_attn_accum_c(o2, os, s1, lds, g, V, ks, n, D);
            pm_kern_attn_accum_bf16(o1, os, s1, lds, g, Kb + D, ks, n, D, ahb ? ahb + D : NULL, n_ahead);
            pm_kern_attn_accum_bf16_c(o3, os, s1, lds, g, Kb + D, ks, n, D);
            assert_memory_equal(o1, o2, sizeof(float) * (size_t)g * os);
            assert_memory_equal(o3, o2, sizeof(float) * (size_t)g * os);
            free(Kb); free(o3);
            free(K); free(q); free(s1); free(s2); free(o1); free(o2);
        }
    }
    pm_kern_cap(PM_KERN_AVX512);
}

/* fp64 reference of pm_kern_flash: two passes over each row's whole score row. */
static void flash_ref(double *o, const pm_flash *a) {
    double *s = malloc(sizeof(double) * (size_t)a->nk);
    int groups = a->qgroups > 0 ? a->qgroups : 1;
    for (int r = 0; r < a->nq * groups; r++) {
        int g = r / a->nq, i = r % a->nq, nv = a->causal && a->qpos0 + i + 1 < a->nk ? a->qpos0 + i + 1 : a->nk;
        const float *q = a->q + (size_t)g * a->ldqg + (size_t)i * a->ldq;
        double m = -INFINITY, l = 0;
        for (int j = 0; j < nv; j++) {
            double d = 0;
            for (int c = 0; c < a->hd; c++) d += (double)q[c] * a->k[(size_t)j * a->ldk + c];
            s[j] = (double)(float)(d * a->scale) + (a->mask ? a->mask[j] : 0) + (a->tbias ? a->tbias[j - i] : 0);
            m = s[j] > m ? s[j] : m;
        }
        for (int j = 0; j < nv; j++) l += s[j] = exp(s[j] - m);
        for (int c = 0; c < a->hd; c++) {
            double v = 0;
            for (int j = 0; j < nv; j++) v += s[j] * a->v[(size_t)j * a->ldv + c];
            o[(size_t)r * a->hd + c] = v / l;
        }
    }
    free(s);
}

/* key_block over a copy of K and V cut into pages of PM_FLASH_KEYS rows, each page elsewhere. */
typedef struct {
    float **kp, **vp;
} paged_kv;
static const float *paged_rows(const void *ctx, int kv, int j0) {
    const paged_kv *p = ctx;
    return (kv ? p->vp : p->kp)[j0 / PM_FLASH_KEYS];
}

/* Fused attention (pm_kern_flash) and its portable twin against the fp64 reference: query rows
 * past and short of the 12-row sliver, keys past the 128-key tile and the 16-lane vector, head
 * dims with tails and past one 80-column pass (100, 128), strided rows, the -FLT_MAX key mask
 * (a first tile of masked keys only, and a row whose keys are all masked: their uniform average),
 * a relative-position bias, scores that grow from tile to tile (each new maximum rescales the
 * partial sums), query groups sharing the keys, causal rows (a chunk's queries after qpos0 cached
 * positions, slivers wholly before a key tile), and keys read from pages. Only the hd columns of
 * each output row are written. */
static void test_flash_attention(void **state) {
    (void)state;
    rng = 777; /* its own data, whatever the tests before it drew */
    /* nq, nk, hd, mask (0 none, 1 some, 2 the first 130 keys, 3 all), tbias, groups, causal qpos0 (-1 none), paged */
    int cases[][8] = {{1, 1, 8, 0, 0, 1, -1, 0},      {5, 1, 8, 0, 1, 1, -1, 0},      {13, 29, 64, 1, 0, 1, -1, 0},
                      {37, 300, 72, 1, 1, 1, -1, 0},  {12, 128, 72, 0, 0, 1, -1, 0},  {25, 257, 100, 2, 1, 1, -1, 0},
                      {7, 140, 128, 3, 0, 1, -1, 0},  {40, 200, 16, 0, 1, 1, -1, 0},  {3, 1000, 72, 1, 0, 1, -1, 0},
                      {9, 9, 5, 1, 1, 1, -1, 0},      {70, 70, 96, 0, 0, 3, 0, 0},    {50, 350, 96, 0, 0, 3, 300, 1},
                      {130, 400, 64, 0, 0, 2, 270, 1}, {20, 300, 40, 1, 0, 1, -1, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int nq = cases[ci][0], nk = cases[ci][1], hd = cases[ci][2], mk = cases[ci][3], tb = cases[ci][4], ng = cases[ci][5];
        int causal = cases[ci][6] >= 0, paged = cases[ci][7];
        size_t ld = (size_t)hd + 7, n = (size_t)(nq > nk ? nq : nk), rows = (size_t)nq * ng;
        float *q = malloc(sizeof(float) * rows * ld), *k = malloc(sizeof(float) * n * ld), *v = malloc(sizeof(float) * n * ld);
        float *mask = malloc(sizeof(float) * nk), *bias = malloc(sizeof(float) * (nq + nk)), *o[2];
        for (size_t i = 0; i < rows * ld; i++) q[i] = 3 * frand();
        for (size_t i = 0; i < n * ld; i++) k[i] = 3 * frand(), v[i] = frand();
        for (int j = 0; j < nk; j++) { /* later keys score higher: the running max moves */
            for (int c = 0; c < hd; c++) k[(size_t)j * ld + c] += 0.004f * j * (c % 2 ? 1.0f : -1.0f);
            mask[j] = (mk == 1 && j % 7 == 3) || (mk == 2 && j < 130) || mk == 3 ? -FLT_MAX : 0.0f;
        }
        for (int r = 0; r < nq + nk; r++) bias[r] = frand();
        unsigned np = (unsigned)(nk + PM_FLASH_KEYS - 1) / PM_FLASH_KEYS;
        paged_kv pg = {calloc(np, sizeof(float *)), calloc(np, sizeof(float *))};
        for (unsigned p = 0; paged && p < np; p++) {
            pg.kp[p] = malloc(sizeof(float) * PM_FLASH_KEYS * ld);
            pg.vp[p] = malloc(sizeof(float) * PM_FLASH_KEYS * ld);
            int cnt = nk - (int)p * PM_FLASH_KEYS < PM_FLASH_KEYS ? nk - (int)p * PM_FLASH_KEYS : PM_FLASH_KEYS;
            memcpy(pg.kp[p], k + (size_t)p * PM_FLASH_KEYS * ld, sizeof(float) * cnt * ld);
            memcpy(pg.vp[p], v + (size_t)p * PM_FLASH_KEYS * ld, sizeof(float) * cnt * ld);
        }
        pm_flash a = {.q = q, .k = k, .v = v, .mask = mk ? mask : NULL, .tbias = tb ? bias + nq - 1 : NULL, .ldo = ld, .ldq = ld,
                      .ldk = ld, .ldv = ld, .ldog = (size_t)nq * ld, .ldqg = (size_t)nq * ld, .nq = nq, .nk = nk, .hd = hd,
                      .qgroups = ng, .causal = causal, .qpos0 = causal ? cases[ci][6] : 0, .scale = 1.0f / sqrtf((float)hd)};
        double *ref = malloc(sizeof(double) * rows * hd);
        flash_ref(ref, &a);
        if (paged) a.k = a.v = NULL, a.key_block = paged_rows, a.ctx = &pg;
        float *ws = malloc(sizeof(float) * pm_kern_flash_ws((int)rows, hd));
        for (int t = 0; t < 2; t++) {
            o[t] = malloc(sizeof(float) * rows * ld);
            for (size_t i = 0; i < rows * ld; i++) o[t][i] = 12345.0f;
            a.o = o[t];
            if (t == 0) pm_kern_flash(&a, ws);
            else pm_kern_flash_c(&a, ws);
            for (size_t r = 0; r < rows; r++) {
                for (int c = 0; c < hd; c++) {
                    double want = ref[r * hd + c];
                    /* fp32 rounding: both paths' largest error over 9 data sets was 1.0-2.1e-6 */
                    if (fabs(o[t][r * ld + c] - want) > 4e-6 * (1 + fabs(want)))
                        fail_msg("case %zu (%s) row %zu col %d: %.9g, reference %.9g", ci, t ? "portable" : "best", r, c,
                                 o[t][r * ld + c], want);
                }
                for (size_t c = (size_t)hd; c < ld; c++) assert_true(o[t][r * ld + c] == 12345.0f);
            }
        }
        if (mk == 3) /* all keys masked: the plain average of the values */
            for (int c = 0; c < hd; c++) {
                double avg = 0;
                for (int j = 0; j < nk; j++) avg += v[(size_t)j * ld + c];
                assert_true(fabs(ref[c] - avg / nk) < 1e-6);
            }
        for (unsigned p = 0; paged && p < np; p++) free(pg.kp[p]), free(pg.vp[p]);
        free(pg.kp); free(pg.vp);
        free(q); free(k); free(v); free(mask); free(bias); free(ref); free(ws); free(o[0]); free(o[1]);
    }
}

/* Many-input GEMV (pm_kern_gemv_many): == the twin bit for bit at every level, for ragged shapes
 * (n % 4, out % 4 and % 32, in % 32) in both modes; each row == its one-input GEMV (so rows do
 * not depend on n, nor on the thread count); pm_linear routes n > PM_SMALL_N to it exactly where
 * pm_kern_gemv_many_takes says so. */
static void test_gemv_many(void **state) {
    (void)state;
    int shapes[][3] = {{17, 37, 64}, {37, 203, 1030}, {96, 70, 512}, {130, 33, 96}, {21, 4, 31}, {45, 20, 4000}};
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            pm_kern_cap(lv[l]);
            int n = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
            uint16_t *ws;
            pm_tensor W = make_bf16(out, in, &ws);
            float *x = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out), *yc = malloc(sizeof(float) * n * out),
                  *y1 = malloc(sizeof(float) * out);
            for (int i = 0; i < n * in; i++) x[i] = frand();
            pm_kern_gemv_many(y, x, n, &W, 0.0f, 0);
            pm_kern_gemv_c(yc, x, n, &W, 0.0f, 0);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            for (int i = 0; i < n; i += 5) {
                pm_kern_gemv(y1, x + (size_t)i * in, 1, &W, 0.0f, 0);
                assert_memory_equal(y1, y + (size_t)i * out, sizeof(float) * out);
            }
            int nt = omp_get_max_threads();
            omp_set_num_threads(1);
            pm_kern_gemv_many(yc, x, n, &W, 0.0f, 0);
            omp_set_num_threads(nt);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            for (int i = 0; i < n * out; i++) y[i] = yc[i] = (float)(i % 5) - 2.0f;
            pm_kern_gemv_many(y, x, n, &W, 0.5f, 1);
            pm_kern_gemv_c(yc, x, n, &W, 0.5f, 1);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            pm_linear(y, x, n, &W, NULL);
            if (pm_kern_gemv_many_takes(&W, n)) pm_kern_gemv_c(yc, x, n, &W, 0.0f, 0);
            else pm_kern_gemm_bf16(yc, x, n, &W, 1.0f, 0);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            free(x); free(y); free(yc); free(y1); free(ws);
        }
    pm_kern_cap(PM_KERN_AVX512);
    /* where it applies: few rows, short inputs, bf16, AVX-512 */
    uint16_t *ws;
    pm_tensor W = make_bf16(8, 512, &ws);
    assert_int_equal(pm_kern_gemv_many_takes(&W, 40), pm_kern_have_avx512());
    assert_false(pm_kern_gemv_many_takes(&W, 41));
    free(ws);
    W = make_bf16(8, 8192, &ws); /* long inputs: up to 24 rows */
    assert_int_equal(pm_kern_gemv_many_takes(&W, 24), pm_kern_have_avx512());
    assert_false(pm_kern_gemv_many_takes(&W, 25));
    free(ws);
}

/* Prefill GEMM on bf16: every SIMD path the CPU has (AVX-512 12 x 32 tiles, AVX2 6 x 16) == the
 * twin bit for bit; close to fp64; both modes; ragged shapes (M % 12 from 1 to 11, every last-sliver tile of the AVX-512
 * path; M % 6, N % 32, N % 16, K % 8, K past one K slice, M past one AVX-512 MC block, M in several row blocks); and pm_linear
 * routes n > PM_SMALL_N to it. */
static void test_gemm_bf16(void **state) {
    (void)state;
    /* the last shape's packed A (1400 rows x 4400 floats, two K slices) is past GEMM_APK_MAX: the call runs in row blocks */
    int shapes[][3] = {{17, 16, 8}, {23, 37, 19}, {64, 100, 600}, {7 + PM_SMALL_N, 300, 1100}, {40, 5, 3}, {150, 70, 1030}, {13, 33, 64},
                       {14, 16, 40}, {15, 20, 33}, {19, 40, 70}, {20, 33, 530}, {21, 64, 37}, {22, 48, 100}, {1400, 20, 4400}};
    pm_kern_level levels[3];
    int nl = simd_levels(levels);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int l = 0; l < nl; l++) {
            pm_kern_cap(levels[l]);
            int n = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
            uint16_t *ws;
            pm_tensor W = make_bf16(out, in, &ws);
            float *x = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out), *yc = malloc(sizeof(float) * n * out),
                  *r = malloc(sizeof(float) * n * out);
            for (int i = 0; i < n * in; i++) x[i] = frand();
            pm_linear_ref(r, x, n, &W, NULL);
            pm_kern_gemm_bf16(y, x, n, &W, 1.0f, 0);
            pm_kern_gemm_bf16_c(yc, x, n, &W, 1.0f, 0);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            for (int i = 0; i < n * out; i++) assert_true(fabsf(y[i] - r[i]) <= 1e-5f * (1.0f + sqrtf((float)in)));
            pm_linear(yc, x, n, &W, NULL);
            if (n > PM_SMALL_N && !pm_kern_gemv_many_takes(&W, n)) assert_memory_equal(y, yc, sizeof(float) * n * out);
            for (int i = 0; i < n * out; i++) y[i] = yc[i] = (float)(i % 7) - 3.0f;
            pm_kern_gemm_bf16(y, x, n, &W, 0.25f, 1);
            pm_kern_gemm_bf16_c(yc, x, n, &W, 0.25f, 1);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            for (int i = 0; i < n * out; i++)
                assert_true(fabsf(y[i] - ((float)(i % 7) - 3.0f + 0.25f * r[i])) <= 1e-4f * (1.0f + sqrtf((float)in)));
            free(x); free(y); free(yc); free(r); free(ws);
            pm_kern_cap(PM_KERN_AVX512);
        }
}

/* The bf16-product path (W->bf16_dot, gemm_dot.c): the AVX512-BF16 code == its twin bit for bit
 * where the CPU has it (else the twin runs alone); both modes; ragged shapes (every last-sliver row
 * count, N % 32, odd K, K past one slice, several row blocks); close to fp64 on x rounded to bf16;
 * pm_linear and pm_linear_many route big products to it; no prepacked copy is made for it; the
 * twin's rounding of denormal, NaN and halfway inputs is the instruction's. */
static void test_gemm_dot(void **state) {
    (void)state;
    int shapes[][3] = {{17, 16, 8}, {23, 37, 19}, {64, 100, 600}, {150, 70, 1030}, {13, 33, 64}, {14, 32, 33},
                       {15, 20, 1}, {19, 40, 70}, {125, 64, 1024}, {20, 33, 4301}, {1400, 20, 4400}, {24, 64, 3072}};
    pm_kern_level lv[3];
    int nl = simd_levels(lv); /* below AVX-512 the GEMM takes the fp32 path: what a CPU without AVX512-BF16 does */
    for (size_t q = 0; q < nl * (sizeof shapes / sizeof shapes[0]); q++) {
        size_t s = q % (sizeof shapes / sizeof shapes[0]);
        pm_kern_cap(lv[q / (sizeof shapes / sizeof shapes[0])]);
        int n = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
        uint16_t *ws;
        pm_tensor W = make_bf16(out, in, &ws);
        W.bf16_dot = 1;
        float *x = malloc(sizeof(float) * n * in), *xr = malloc(sizeof(float) * n * in), *y = malloc(sizeof(float) * n * out),
              *yc = malloc(sizeof(float) * n * out), *r = malloc(sizeof(float) * n * out);
        for (int i = 0; i < n * in; i++) x[i] = frand(), xr[i] = pm_bf16_to_f32(pm_f32_to_bf16(x[i]));
        pm_tensor Wf = W;
        Wf.bf16_dot = 0;
        pm_linear_ref(r, xr, n, &Wf, NULL);
        pm_kern_gemm_bf16_c(yc, x, n, &W, 1.0f, 0);
        for (int i = 0; i < n * out; i++) assert_true(fabsf(yc[i] - r[i]) <= 1e-5f * (1.0f + sqrtf((float)in)));
        pm_kern_gemm_bf16(y, x, n, &W, 1.0f, 0);
        if (pm_kern_gemm_dot_takes(&W)) assert_memory_equal(y, yc, sizeof(float) * n * out);
        if (n > PM_SMALL_N && pm_kern_gemm_dot_takes(&W)) { /* from 17 rows, never the fp32 GEMV */
            assert_false(pm_kern_gemv_many_takes(&W, n));
            pm_linear(y, x, n, &W, NULL);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            float *y2 = malloc(sizeof(float) * n * out), *ys[2] = {y, y2};
            const pm_tensor *Ws[2] = {&W, &W};
            pm_linear_many(ys, x, n, Ws, NULL, 2);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            assert_memory_equal(y2, yc, sizeof(float) * n * out);
            free(y2);
        }
        for (int i = 0; i < n * out; i++) y[i] = yc[i] = (float)(i % 7) - 3.0f;
        pm_kern_gemm_bf16(y, x, n, &W, 0.25f, 1);
        pm_kern_gemm_bf16_c(yc, x, n, &W, 0.25f, 1);
        if (pm_kern_gemm_dot_takes(&W)) assert_memory_equal(y, yc, sizeof(float) * n * out);
        for (int i = 0; i < n * out; i++)
            assert_true(fabsf(yc[i] - ((float)(i % 7) - 3.0f + 0.25f * r[i])) <= 1e-4f * (1.0f + sqrtf((float)in)));
        /* a prepacked copy (the dot layout) gives the same bits, in both modes */
        pm_tensor Wp = W;
        Wp.gemm_pack = pm_kern_gemm_pack(&W);
        assert_int_equal(Wp.gemm_pack != NULL, pm_kern_gemm_dot_takes(&W));
        if (Wp.gemm_pack) {
            for (int i = 0; i < n * out; i++) y[i] = (float)(i % 7) - 3.0f;
            pm_kern_gemm_bf16(y, x, n, &Wp, 0.25f, 1);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            pm_kern_gemm_bf16(y, x, n, &Wp, 1.0f, 0);
            pm_kern_gemm_bf16_c(yc, x, n, &W, 1.0f, 0);
            assert_memory_equal(y, yc, sizeof(float) * n * out);
            free((void *)Wp.gemm_pack);
        }
        free(x); free(xr); free(y); free(yc); free(r); free(ws);
    }
    pm_kern_cap(PM_KERN_AVX512);
    /* rounding: halfway cases to even, a denormal to 0, NaN stays NaN; 13 rows x 32 columns, K = 2 */
    uint16_t *ws;
    pm_tensor W = make_bf16(32, 2, &ws);
    W.bf16_dot = 1;
    for (int i = 0; i < 64; i++) ws[i] = 0x3f80; /* 1.0 */
    float x[13 * 2], y[13 * 32], yc[13 * 32];
    union { uint32_t u; float f; } v;
    uint32_t bits[13 * 2] = {0x3f808000u, 0, 0x3f818000u, 0, 0x00400000u, 0x3f800000u, 0x7fc00001u, 0, 0xff800000u, 0, 0x3f807fffu, 0,
                             0x3f808001u, 0, 0x80000001u, 0x40000000u, 0x7f7fffffu, 0, 0x3f800000u, 0x3f808000u, 0, 0, 0xbf808000u, 0, 1, 0};
    for (int i = 0; i < 26; i++) v.u = bits[i], x[i] = v.f;
    pm_kern_gemm_bf16_c(yc, x, 13, &W, 1.0f, 0);
    float want[13] = {1.0f, 1.015625f, 1.0f, NAN, -INFINITY, 1.0f, 1.0078125f, 2.0f, 0, 2.0f, 0, -1.0f, 0};
    v.u = 0x7f800000u; /* 0x7f7fffff rounds up to inf */
    want[8] = v.f;
    for (int i = 0; i < 13; i++) {
        if (isnan(want[i])) assert_true(isnan(yc[i * 32]));
        else assert_true(yc[i * 32] == want[i]);
    }
    if (pm_kern_gemm_dot_takes(&W)) {
        pm_kern_gemm_bf16(y, x, 13, &W, 1.0f, 0);
        assert_memory_equal(y, yc, sizeof y);
    }
    free(ws);
}

/* W->gemm_pack (pm_kern_gemm_pack): the GEMM reading the prepacked slivers in place gives the bits of
 * the per-call pack at every n (ragged out, in past one K slice and not a multiple of 8), pm_linear /
 * pm_linear_acc take that GEMM even for n <= PM_SMALL_N, and a level without the AVX-512 tile ignores
 * the copy (same bits again). */
static void test_gemm_prepacked(void **state) {
    (void)state;
    int shapes[][3] = {{1, 70, 600}, {5, 33, 37}, {13, 64, 1024}, {17, 70, 600}, {40, 33, 37}, {125, 64, 1030}, {130, 96, 520}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
        uint16_t *ws;
        pm_tensor W = make_bf16(out, in, &ws), Wp = W;
        uint16_t *pk = pm_kern_gemm_pack(&W);
        if (!pm_kern_have_avx512()) {
            assert_null(pk);
            free(ws);
            continue;
        }
        assert_non_null(pk);
        Wp.gemm_pack = pk;
        float *x = malloc(sizeof(float) * n * in), *y0 = malloc(sizeof(float) * n * out), *y1 = malloc(sizeof(float) * n * out);
        for (int i = 0; i < n * in; i++) x[i] = frand();
        pm_kern_gemm_bf16(y0, x, n, &W, 1.0f, 0);
        pm_kern_gemm_bf16(y1, x, n, &Wp, 1.0f, 0);
        assert_memory_equal(y0, y1, sizeof(float) * n * out);
        memset(y1, 0, sizeof(float) * n * out);
        pm_linear(y1, x, n, &Wp, NULL);
        assert_memory_equal(y0, y1, sizeof(float) * n * out);
        for (int i = 0; i < n * out; i++) y0[i] = y1[i] = (float)(i % 7) - 3.0f;
        pm_kern_gemm_bf16(y0, x, n, &W, 0.25f, 1);
        pm_linear_acc(y1, x, n, &Wp, 0.25f);
        assert_memory_equal(y0, y1, sizeof(float) * n * out);
        pm_kern_cap(PM_KERN_AVX2);
        pm_kern_gemm_bf16(y1, x, n, &Wp, 1.0f, 0);
        pm_kern_cap(PM_KERN_AVX512);
        pm_kern_gemm_bf16(y0, x, n, &Wp, 1.0f, 0);
        assert_memory_equal(y0, y1, sizeof(float) * n * out);
        free(x); free(y0); free(y1); free(ws); free(pk);
    }
}

/* pm_linear_many == one pm_linear per weight, bit for bit, on every SIMD level: the GEMM route
 * (several outs, one prepacked, biases or none, n in several row blocks) and the fallbacks (n <=
 * PM_SMALL_N: the GEMV; a single weight). */
static void test_linear_many(void **state) {
    (void)state;
    enum { NW = 3 };
    int outs[NW] = {33, 70, 64}, ns[] = {5, 40, 150, 500}, ins[] = {37, 1030, 4400};
    pm_kern_level lv[3];
    for (int l = 0, nl = simd_levels(lv); l < nl; l++)
        for (size_t a = 0; a < sizeof ins / sizeof ins[0]; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
                pm_kern_cap(lv[l]);
                int n = ns[b], in = ins[a];
                if (n == 500 && in != 4400) continue; /* 500 rows of 4400: packed A past GEMM_APK_MAX, row blocks */
                uint16_t *ws[NW];
                pm_tensor W[NW], B[NW];
                float *bias[NW], *y0[NW], *y1[NW], *x = malloc(sizeof(float) * n * in);
                for (int i = 0; i < n * in; i++) x[i] = frand();
                for (int w = 0; w < NW; w++) {
                    W[w] = make_bf16(outs[w], in, &ws[w]);
                    bias[w] = malloc(sizeof(float) * outs[w]);
                    for (int j = 0; j < outs[w]; j++) bias[w][j] = frand();
                    B[w] = (pm_tensor){.name = "b", .dtype = PM_DT_F32, .ndim = 1, .shape = {outs[w]}, .numel = outs[w], .data = bias[w],
                                       .nbytes = sizeof(float) * outs[w]};
                    y0[w] = malloc(sizeof(float) * n * outs[w]);
                    y1[w] = malloc(sizeof(float) * n * outs[w]);
                }
                if (lv[l] == PM_KERN_AVX512) W[1].gemm_pack = pm_kern_gemm_pack(&W[1]);
                const pm_tensor *Wp[NW] = {&W[0], &W[1], &W[2]}, *Bp[NW] = {&B[0], NULL, &B[2]};
                for (int w = 0; w < NW; w++) pm_linear(y0[w], x, n, Wp[w], Bp[w]);
                pm_linear_many(y1, x, n, Wp, Bp, NW);
                for (int w = 0; w < NW; w++) assert_memory_equal(y0[w], y1[w], sizeof(float) * n * outs[w]);
                pm_linear_many(y1, x, n, Wp, NULL, NW);
                for (int w = 0; w < NW; w++) pm_linear(y0[w], x, n, Wp[w], NULL);
                for (int w = 0; w < NW; w++) assert_memory_equal(y0[w], y1[w], sizeof(float) * n * outs[w]);
                pm_linear_many(y1, x, n, Wp, Bp, 1); /* one weight alone: pm_linear */
                pm_linear(y0[0], x, n, Wp[0], Bp[0]);
                assert_memory_equal(y0[0], y1[0], sizeof(float) * n * outs[0]);
                for (int w = 0; w < NW; w++) {
                    free((void *)W[w].gemm_pack); free(ws[w]); free(bias[w]); free(y0[w]); free(y1[w]);
                }
                free(x);
                pm_kern_cap(PM_KERN_AVX512);
            }
}

static void test_convert_rows(void **state) {
    (void)state;
    uint16_t *ws;
    pm_tensor W = make_bf16(13, 37, &ws);
    float *a = malloc(sizeof(float) * 13 * 37), *b = malloc(sizeof(float) * 13 * 37);
    pm_kern_convert_rows(a, &W, 2, 9);
    pm_kern_convert_rows_1t(b, &W, 2, 9);
    assert_memory_equal(a, b, sizeof(float) * 9 * 37);
    for (int i = 0; i < 9 * 37; i++) assert_true(a[i] == pm_bf16_to_f32(ws[2 * 37 + i]));
    free(a); free(b); free(ws);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemv_twin_and_reference),
        cmocka_unit_test(test_gemv_batch_and_thread_independent),
        cmocka_unit_test(test_gemv_many),
        cmocka_unit_test(test_gemv_line_offsets),
        cmocka_unit_test(test_exp_softmax_silu),
        cmocka_unit_test(test_attention_kernels),
        cmocka_unit_test(test_flash_attention),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_gemm_dot),
        cmocka_unit_test(test_gemm_prepacked),
        cmocka_unit_test(test_linear_many),
        cmocka_unit_test(test_convert_rows),
    };
    printf("kernels: best path %s%s\n", pm_kern_level_name(pm_kern_level_in_use()),
           pm_kern_have_avx2() ? "" : " (twins compared with themselves)");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
