/* ops.c — see ops.h. pm_linear dispatches to the SIMD kernels (nn/gemv.c for n <= PM_SMALL_N and
 * for the few-row products pm_kern_gemv_many_takes accepts, nn/gemm.c above, all runtime-dispatched
 * in kernels.c); the norms and the softmax here are plain C loops, LayerNorm's rows also on AVX2
 * with the same bits. */
#include "ops.h"
#include "kernels.h"
#include "quant.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "simd.h"

float pm_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, ex = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (ex == 0) {
        if (m == 0) u = s;
        else { /* subnormal */
            ex = 127 - 15 + 1;
            while (!(m & 0x400)) { m <<= 1; ex--; }
            m &= 0x3ff;
            u = s | (ex << 23) | (m << 13);
        }
    } else if (ex == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((ex + 127 - 15) << 23) | (m << 13);
    union { uint32_t u; float f; } v = {u};
    return v.f;
}

uint16_t pm_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* NaN stays NaN */
    uint32_t r = v.u + 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(r >> 16);
}

void pm_tensor_read_f32(const pm_tensor *t, size_t off, size_t count, float *out) {
    if (t->dtype == PM_DT_F32) {
        memcpy(out, (const float *)t->data + off, count * sizeof(float));
    } else if (t->dtype == PM_DT_BF16) {
        pm_kern_bf16_to_f32(out, (const uint16_t *)t->data + off, count);
    } else if (t->dtype == PM_DT_Q8) {
        pm_q8_read_f32(t, off, count, out);
    } else {
        const uint16_t *p = (const uint16_t *)t->data + off;
        for (size_t i = 0; i < count; i++) out[i] = pm_f16_to_f32(p[i]);
    }
}

float *pm_tensor_f32_copy(const pm_tensor *t, pm_err *e) {
    if (!t) return NULL;
    float *p = pm_malloc((size_t)t->numel * sizeof(float), e);
    if (p) pm_tensor_read_f32(t, 0, (size_t)t->numel, p);
    return p;
}

void pm_matmul_nt(float *C, const float *A, const float *B, int m, int n, int k) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, A, k, B, k, 0.0f, C, n);
}

void pm_matmul_nn(float *C, const float *A, const float *B, int m, int n, int k) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, k, B, n, 0.0f, C, n);
}

void pm_linear_ref(float *y, const float *x, int n, const pm_tensor *W, const pm_tensor *b) {
    int out = (int)W->shape[0], in = (int)W->shape[1];
    float *row = malloc((size_t)in * sizeof(float));
    PM_ASSERT(row);
    for (int j = 0; j < out; j++) {
        pm_tensor_read_f32(W, (size_t)j * in, (size_t)in, row);
        float bj = 0.0f;
        if (b) pm_tensor_read_f32(b, (size_t)j, 1, &bj);
        for (int i = 0; i < n; i++) {
            double acc = 0.0;
            for (int c = 0; c < in; c++) acc += (double)row[c] * x[(size_t)i * in + c];
            y[(size_t)i * out + j] = (float)acc + bj;
        }
    }
    free(row);
}

/* Big-n path. bf16 weights on an AVX2 or AVX-512 machine, int8 ones on AVX-512: our own blocked
 * GEMM that packs slivers of W per call (gemm.c: no fp32 copy of W, faster than convert + sgemm
 * here). Otherwise: convert a panel of weight rows to fp32 and let BLAS sgemm do the heavy
 * lifting; panels bound the scratch memory (at most PANEL rows x in floats). */
static void linear_sgemm(float *y, const float *x, int n, const pm_tensor *W, float beta_scale, int accumulate) {
    int out = (int)W->shape[0], in = (int)W->shape[1];
    if (pm_kern_gemm_takes(W)) {
        pm_kern_gemm_bf16(y, x, n, W, beta_scale, accumulate);
        return;
    }
    enum { PANEL = 512 };
    float *panel = NULL;
    if (W->dtype != PM_DT_F32) {
        panel = malloc((size_t)PANEL * in * sizeof(float));
        PM_ASSERT(panel);
    }
    for (int j0 = 0; j0 < out; j0 += PANEL) {
        int rows = out - j0 < PANEL ? out - j0 : PANEL;
        const float *wp;
        if (panel) {
            pm_kern_convert_rows(panel, W, (size_t)j0, (size_t)rows);
            wp = panel;
        } else wp = (const float *)W->data + (size_t)j0 * in;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, in, accumulate ? beta_scale : 1.0f, x, in, wp, in,
                    accumulate ? 1.0f : 0.0f, y + j0, out);
    }
    free(panel);
}

static void add_bias(float *y, int n, const pm_tensor *b, int out) {
    if (!b) return;
    float *bf = malloc((size_t)out * sizeof(float));
    PM_ASSERT(bf);
    pm_tensor_read_f32(b, 0, (size_t)out, bf);
#pragma omp parallel for schedule(static) if ((size_t)n * out > 65536)
    for (int i = 0; i < n; i++) {
        float *yi = y + (size_t)i * out;
#pragma omp simd
        for (int j = 0; j < out; j++) yi[j] += bf[j];
    }
    free(bf);
}

void pm_linear(float *y, const float *x, int n, const pm_tensor *W, const pm_tensor *b) {
    int out = (int)W->shape[0];
    if (n <= 0) return;
    if (W->gemm_pack) linear_sgemm(y, x, n, W, 1.0f, 0); /* the GEMM reads the copy; W's own pages stay released */
    else if (n <= PM_SMALL_N) pm_kern_gemv(y, x, n, W, 0.0f, 0);
    else if (pm_kern_gemv_many_takes(W, n)) pm_kern_gemv_many(y, x, n, W, 0.0f, 0);
    else linear_sgemm(y, x, n, W, 1.0f, 0);
    add_bias(y, n, b, out);
}

/* The route pm_linear takes to our GEMM, or 0 when it takes another. */
static int goes_to_gemm(const pm_tensor *W, int n) {
    if (!pm_kern_gemm_takes(W)) return 0;
    return W->gemm_pack || (n > PM_SMALL_N && !pm_kern_gemv_many_takes(W, n));
}

void pm_linear_many(float *const *ys, const float *x, int n, const pm_tensor *const *Ws, const pm_tensor *const *bs, int count) {
    int together = count > 1 && count <= PM_GEMM_MANY_MAX && n > 0;
    for (int w = 0; w < count && together; w++) together = goes_to_gemm(Ws[w], n) && Ws[w]->shape[1] == Ws[0]->shape[1];
    if (!together) {
        for (int w = 0; w < count; w++) pm_linear(ys[w], x, n, Ws[w], bs ? bs[w] : NULL);
        return;
    }
    pm_kern_gemm_bf16_many(ys, x, n, Ws, count);
    for (int w = 0; w < count; w++) add_bias(ys[w], n, bs ? bs[w] : NULL, (int)Ws[w]->shape[0]);
}

void pm_linear_acc(float *y, const float *x, int n, const pm_tensor *W, float scale) {
    if (n <= 0) return;
    if (W->gemm_pack) linear_sgemm(y, x, n, W, scale, 1);
    else if (n <= PM_SMALL_N) pm_kern_gemv(y, x, n, W, scale, 1);
    else if (pm_kern_gemv_many_takes(W, n)) pm_kern_gemv_many(y, x, n, W, scale, 1);
    else linear_sgemm(y, x, n, W, scale, 1);
}

/* Rows in parallel once there are enough of them (a prompt chunk; a decode step's one row stays
 * serial). The sum of squares runs in 8 interleaved partial sums, folded in a fixed order: one
 * sequential chain of 3072 adds was latency-bound (1.35 ms for 512 rows of Phi-4-mini on one
 * thread). */
void pm_rmsnorm(float *y, const float *x, const float *w, int n, int dim, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)n * dim >= 65536)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int c = 0;
        for (; c + 8 <= dim; c += 8)
            for (int l = 0; l < 8; l++) a[l] += xi[c + l] * xi[c + l];
        float ss = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
        for (; c < dim; c++) ss += xi[c] * xi[c];
        float r = 1.0f / sqrtf(ss / (float)dim + eps);
        for (c = 0; c < dim; c++) yi[c] = w[c] * (xi[c] * r);
    }
}

#ifdef PM_X86
/* One row of pm_layernorm below with 4 doubles per AVX2 vector: the 4 interleaved partial sums
 * are its lanes, and every other operation is the C loop's, in its order (no FMA), so the bits are
 * the same. Against the C loop (which the compiler vectorises for SSE2, two doubles per vector),
 * in one process on 2 threads: 3.0 x on a 10 s clip's Conformer rows (125 x 1024), 4.7 x on a 30 s
 * clip's (375 x 1024), 2.1 x on two SigLIP crops (2048 x 1152). */
AVX2 static void layernorm_row_avx2(float *yi, const float *xi, const float *w, const float *b, int dim, float eps) {
    __m256d s = _mm256_setzero_pd(), v = _mm256_setzero_pd();
    int c = 0;
    for (; c + 4 <= dim; c += 4) s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_loadu_ps(xi + c)));
    double sl[4], vl[4];
    _mm256_storeu_pd(sl, s);
    for (; c < dim; c++) sl[0] += xi[c];
    double mean = ((sl[0] + sl[1]) + (sl[2] + sl[3])) / dim;
    __m256d mv = _mm256_set1_pd(mean);
    for (c = 0; c + 4 <= dim; c += 4) {
        __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xi + c)), mv);
        v = _mm256_add_pd(v, _mm256_mul_pd(d, d));
    }
    _mm256_storeu_pd(vl, v);
    for (; c < dim; c++) vl[0] += (xi[c] - mean) * (xi[c] - mean);
    double var = ((vl[0] + vl[1]) + (vl[2] + vl[3])) / dim;
    float r = (float)(1.0 / sqrt(var + eps));
    __m128 rv = _mm_set1_ps(r);
    for (c = 0; c + 4 <= dim; c += 4) {
        __m128 t = _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(xi + c)), mv));
        t = _mm_mul_ps(_mm_mul_ps(t, rv), _mm_loadu_ps(w + c));
        _mm_storeu_ps(yi + c, _mm_add_ps(t, b ? _mm_loadu_ps(b + c) : _mm_setzero_ps()));
    }
    for (; c < dim; c++) yi[c] = (float)(xi[c] - mean) * r * w[c] + (b ? b[c] : 0.0f);
}
#endif

/* Rows in parallel; mean and variance in double over 4 interleaved partial sums (a sequential
 * double sum ran at one add per 4 cycles and cost the encoders a few percent; the split moves the
 * result by ~1e-16 relative, far below float). */
void pm_layernorm(float *y, const float *x, const float *w, const float *b, int n, int dim, float eps) {
#ifdef PM_X86
    const int simd = pm_kern_have_avx2();
#endif
#pragma omp parallel for schedule(static) if (n >= 16)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
#ifdef PM_X86
        if (simd) {
            layernorm_row_avx2(yi, xi, w, b, dim, eps);
            continue;
        }
#endif
        double s[4] = {0, 0, 0, 0}, v[4] = {0, 0, 0, 0};
        int c = 0;
        for (; c + 4 <= dim; c += 4)
            for (int l = 0; l < 4; l++) s[l] += xi[c + l];
        for (; c < dim; c++) s[0] += xi[c];
        double mean = ((s[0] + s[1]) + (s[2] + s[3])) / dim;
        for (c = 0; c + 4 <= dim; c += 4)
            for (int l = 0; l < 4; l++) v[l] += (xi[c + l] - mean) * (xi[c + l] - mean);
        for (; c < dim; c++) v[0] += (xi[c] - mean) * (xi[c] - mean);
        double var = ((v[0] + v[1]) + (v[2] + v[3])) / dim;
        float r = (float)(1.0 / sqrt(var + eps));
        for (c = 0; c < dim; c++) yi[c] = (float)(xi[c] - mean) * r * w[c] + (b ? b[c] : 0.0f);
    }
}

void pm_softmax_inplace(float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    if (m == -INFINITY) { /* fully masked row: all zeros, as masked_fill after softmax gives */
        for (int i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

float pm_silu(float x) { return x / (1.0f + expf(-x)); }
float pm_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

void pm_add_inplace(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}
