/* bench_machine.c — the two limits the engine is measured against, at the thread count in use:
 * STREAM-style read bandwidth (every thread sums its share of a large buffer through 4 interleaved
 * streams, AVX2 loads when available, with and without software prefetch: the best counts) and the
 * compute peak: the larger of the linked BLAS sgemm (square NT product, the shape pm_linear uses) and
 * the engine's own bf16 GEMM on the same shape. The second matters where the BLAS runs below the
 * CPU's vector width (a machine here had OPENBLAS_CORETYPE=Haswell in its environment on a Zen 5,
 * AVX2 kernels at half our AVX-512 tile's speed): a bound the engine beats would only flatter the
 * ratios. Both report the best of several repetitions. For scale, the register-only FMA rate
 * (bench_fma_peak): what no product that loads its operands reaches, the ceiling of the silicon. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench.h"
#include "nn/kernels.h"
#include "nn/ops.h"

#if defined(__x86_64__)
/* 4 streams: the quarters of [p, p+n) walked together. pf > 0: software prefetch of every line pf
 * bytes ahead on each stream (what the decode kernels do; on some machines the hardware prefetcher
 * alone reaches much less). */
__attribute__((target("avx2"))) static float sum_avx2(const float *p, size_t n, int pf) {
    size_t q = n / 4 / 32 * 32;
    const float *s0 = p, *s1 = p + q, *s2 = p + 2 * q, *s3 = p + 3 * q;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t pfe = (size_t)pf / sizeof(float);
    for (size_t i = 0; i < q; i += 16) {
        if (pf) {
            _mm_prefetch((const char *)(s0 + i + pfe), _MM_HINT_T0);
            _mm_prefetch((const char *)(s1 + i + pfe), _MM_HINT_T0);
            _mm_prefetch((const char *)(s2 + i + pfe), _MM_HINT_T0);
            _mm_prefetch((const char *)(s3 + i + pfe), _MM_HINT_T0);
        }
        a0 = _mm256_add_ps(a0, _mm256_add_ps(_mm256_loadu_ps(s0 + i), _mm256_loadu_ps(s0 + i + 8)));
        a1 = _mm256_add_ps(a1, _mm256_add_ps(_mm256_loadu_ps(s1 + i), _mm256_loadu_ps(s1 + i + 8)));
        a2 = _mm256_add_ps(a2, _mm256_add_ps(_mm256_loadu_ps(s2 + i), _mm256_loadu_ps(s2 + i + 8)));
        a3 = _mm256_add_ps(a3, _mm256_add_ps(_mm256_loadu_ps(s3 + i), _mm256_loadu_ps(s3 + i + 8)));
    }
    float f[8];
    _mm256_storeu_ps(f, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#endif

static float sum_c(const float *p, size_t n) {
    size_t q = n / 4;
    float a[4] = {0};
    for (size_t i = 0; i < q; i++)
        for (int s = 0; s < 4; s++) a[s] += p[s * q + i];
    return a[0] + a[1] + a[2] + a[3];
}

float *bench_bw_buffer(size_t bytes, size_t *n) {
    *n = bytes / sizeof(float);
    float *buf = aligned_alloc(64, *n * sizeof(float));
    if (!buf) return NULL;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < *n; i++) buf[i] = 1.0f; /* first touch by the thread that reads it */
    return buf;
}

double bench_read_spans(const void *const *spans, const size_t *bytes, int n, int pf) {
    volatile float sink = 0.0f;
    double t0 = bench_now();
    float tot = 0.0f;
#pragma omp parallel reduction(+ : tot)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        for (int i = 0; i < n; i++) { /* every thread takes its share of every span: one region for all */
            size_t m = bytes[i] / sizeof(float), lo = m * (size_t)id / (size_t)nt, hi = m * (size_t)(id + 1) / (size_t)nt;
            const float *p = (const float *)spans[i];
#if defined(__x86_64__)
            tot += pm_kern_have_avx2() ? sum_avx2(p + lo, hi - lo, pf) : sum_c(p + lo, hi - lo);
#else
            (void)pf;
            tot += sum_c(p + lo, hi - lo);
#endif
        }
    }
    double t = bench_now() - t0;
    sink += tot;
    (void)sink;
    return t;
}

double bench_read_pass(const float *buf, size_t n, int reps) {
    const void *span = buf;
    size_t bytes = n * sizeof(float);
    double best = 1e30;
    /* each repetition tries the plain walk and the software-prefetched one; the best of all counts */
    for (int r = 0; r < 2 * reps; r++) {
        double t = bench_read_spans(&span, &bytes, 1, r % 2 ? 1024 : 0);
        if (t < best) best = t;
    }
    return (double)bytes / best / 1e9;
}

double bench_read_bandwidth(size_t bytes, int reps) {
    size_t n;
    float *buf = bench_bw_buffer(bytes, &n);
    if (!buf) return 0.0;
    double v = bench_read_pass(buf, n, reps);
    free(buf);
    return v;
}

double bench_median(double *v, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: a handful of values */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n < 1 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_sgemm_peak(int n, int reps) {
    size_t nn = (size_t)n * n;
    float *A = malloc(nn * sizeof(float)), *B = malloc(nn * sizeof(float)), *C = malloc(nn * sizeof(float));
    if (!A || !B || !C) {
        free(A); free(B); free(C);
        return 0.0;
    }
    for (size_t i = 0; i < nn; i++) {
        A[i] = (float)(i % 17) * 0.01f;
        B[i] = (float)(i % 13) * 0.01f;
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    free(A); free(B); free(C);
    return 2.0 * n * (double)nn / best / 1e9;
}

double bench_engine_gemm_peak(int n, int reps) {
    size_t nn = (size_t)n * n;
    uint16_t *w = malloc(nn * sizeof(uint16_t));
    float *x = malloc(nn * sizeof(float)), *y = malloc(nn * sizeof(float));
    double best = 1e30;
    pm_tensor W = {.name = "bench", .dtype = PM_DT_BF16, .ndim = 2, .shape = {n, n}, .numel = (int64_t)nn, .data = w,
                   .nbytes = nn * sizeof(uint16_t)};
    if (w && x && y && pm_kern_gemm_takes(&W)) {
        for (size_t i = 0; i < nn; i++) {
            w[i] = pm_f32_to_bf16((float)(i % 13) * 0.01f);
            x[i] = (float)(i % 17) * 0.01f;
        }
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now();
            pm_kern_gemm_bf16(y, x, n, &W, 1.0f, 0);
            double t = bench_now() - t0;
            if (t < best) best = t;
        }
    }
    free(w); free(x); free(y);
    return best < 1e30 ? 2.0 * n * (double)nn / best / 1e9 : 0.0;
}

#if defined(__x86_64__)
/* Independent accumulators (16 zmm, 12 ymm), one FMA each an iteration: more chains than 2 FMA
 * pipes of 4-cycle latency need; the empty asm keeps the operands in registers (no load, no store). */
__attribute__((target("avx512f"))) static float fma_loop512(long iters) {
    __m512 a[16], x = _mm512_set1_ps(1e-7f), y = _mm512_set1_ps(1.0f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    __asm__("" : "+v"(x), "+v"(y));
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(x, y, a[i]);
    for (int i = 1; i < 16; i++) a[0] = _mm512_add_ps(a[0], a[i]);
    return _mm512_reduce_add_ps(a[0]);
}
__attribute__((target("avx2,fma"))) static float fma_loop256(long iters) {
    __m256 a[12], x = _mm256_set1_ps(1e-7f), y = _mm256_set1_ps(1.0f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    __asm__("" : "+x"(x), "+x"(y));
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(x, y, a[i]);
    for (int i = 1; i < 12; i++) a[0] = _mm256_add_ps(a[0], a[i]);
    float f[8];
    _mm256_storeu_ps(f, a[0]);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#endif

double bench_fma_peak(int reps) {
#if defined(__x86_64__)
    pm_kern_level lv = pm_kern_level_in_use();
    if (lv == PM_KERN_PORTABLE) return 0.0;
    long iters = 4000000;
    double flops = (double)omp_get_max_threads() * iters * (lv == PM_KERN_AVX512 ? 16 * 16 : 12 * 8) * 2, best = 1e30;
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        float s = 0;
#pragma omp parallel reduction(+ : s)
        s += lv == PM_KERN_AVX512 ? fma_loop512(iters) : fma_loop256(iters);
        double t = bench_now() - t0;
        sink += s;
        if (t < best) best = t;
    }
    (void)sink;
    return flops / best / 1e9;
#else
    (void)reps;
    return 0.0;
#endif
}

double bench_compute_peak(int n, int reps) {
    double s = bench_sgemm_peak(n, reps), g = bench_engine_gemm_peak(n, reps);
    return s > g ? s : g;
}

double bench_bw_now(bench_ctx *b) {
    if (b->o.quick && b->bw_gbs > 0) return b->bw_gbs;
    double v = bench_read_bandwidth((size_t)256 << 20, 3);
    if (v > b->bw_best) b->bw_best = v;
    return v;
}

double bench_peak_now(bench_ctx *b) {
    if (b->o.quick && b->peak_gflops > 0) return b->peak_gflops;
    double v = bench_compute_peak(2048, 2);
    if (v > b->peak_best) b->peak_best = v;
    return v;
}

double bench_bw_bracket(bench_ctx *b, double before) {
    double after = bench_bw_now(b);
    return after > before ? after : before;
}

double bench_peak_bracket(bench_ctx *b, double before) {
    double after = bench_peak_now(b);
    return after > before ? after : before;
}
