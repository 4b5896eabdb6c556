/* gemv.c — the decode-time matmul: y[n, out] (=|+=) x[n, in] @ W[out, in]^T for a small n (one
 * row per live sequence), with W bf16 in the mmap.
 *
 * Decode is memory-bound: every weight byte must come from DRAM exactly once per step whatever n
 * is, and the arithmetic must keep up when n grows (at n = 8 on 2 cores it no longer hides behind
 * the memory stream). So a work item is four runs of rows walked side by side, four long
 * sequential streams per thread (gemv_runs); each row is streamed from memory once, converted
 * bf16 -> fp32 in registers, and multiplied by register tiles of RT rows x NT inputs (12
 * accumulators at 4 x 3); past one group of inputs the rows go in L1-sized k-blocks and the other
 * groups re-read a block from L1. (AVX2 at n = 3 walks blocks of adjacent rows instead.)
 *
 * bf16 -> fp32 without shuffles: a 32-byte load holds 16 bf16 as 8 dwords; `<< 16` yields the 8
 * even elements as fp32 and `& 0xffff0000` the 8 odd ones. The inputs are permuted once per call
 * to match (each 16-block as evens, then odds), so one load + two ALU ops feed 2 x NT FMAs.
 *
 * AVX-512 does the same at twice the width: a 64-byte load holds a 32-block, one 16-lane
 * accumulator per output, inputs permuted per 32-block; tiles of 4 rows x 4 inputs for n > 1 (the
 * batched decode is compute-bound on 2 cores, and 16 lanes double the FMA throughput); rows that
 * start inside a cache line (a checkpoint's tensors usually do) are read a whole line at a time and
 * put together with one permute (span512_tiles), so no load spans two lines. Both ISAs
 * walk the rows in L1-sized k-blocks once n exceeds one group of inputs, the first group(s)
 * prefetching GEMV_PF bytes ahead in each row (blocks512, blocks256).
 *
 * Determinism (ops.h): output (i, j) is always hsum(acc) of one L-lane FMA accumulator (L = 8 on
 * AVX2, 16 on AVX-512) walked over the 2L-blocks in order (evens, then odds), then the scalar tail
 * in order, whatever tile shape, n or thread count produced it. So a sequence decoded alone and
 * inside a batch gets the same bits; the portable twin computes the very same operations for the
 * lane count of the level in use. (AVX2 and AVX-512 machines differ in the last bits.) */
#include "kernels.h"
#include "ops.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "simd.h"

/* ---- portable twin ---- */

/* Accumulator lanes of the SIMD path in use: the twin reproduces its order. */
static int gemv_lanes(void) { return pm_kern_have_avx512() ? 16 : 8; }

/* One output at a time with the SIMD path's exact arithmetic: per 2L-block, lane l takes the
 * even element 2l then the odd one 2l+1 (fmaf); 16 lanes fold to 8 as (l, l + 8), then hsum256's
 * order; then the tail in order. */
static float dot_row_c(const pm_tensor *W, size_t j, const float *x, int in, float *tmp, int L) {
    pm_tensor_read_f32(W, j * (size_t)in, (size_t)in, tmp);
    float acc[16] = {0};
    int c = 0;
    for (; c + 2 * L <= in; c += 2 * L) {
        for (int l = 0; l < L; l++) acc[l] = fmaf(tmp[c + 2 * l], x[c + 2 * l], acc[l]);
        for (int l = 0; l < L; l++) acc[l] = fmaf(tmp[c + 2 * l + 1], x[c + 2 * l + 1], acc[l]);
    }
    if (L == 16)
        for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (; c < in; c++) s += tmp[c] * x[c];
    return s;
}

void pm_kern_gemv_c(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
    if (W->dtype == PM_DT_Q8) {
        pm_kern_gemv_q8_c(y, x, n, W, scale, accumulate);
        return;
    }
    int out = (int)W->shape[0], in = (int)W->shape[1], L = W->dtype == PM_DT_BF16 ? gemv_lanes() : 8;
#pragma omp parallel
    {
        float *tmp = malloc((size_t)in * sizeof(float));
        PM_ASSERT(tmp);
#pragma omp for schedule(static)
        for (int j = 0; j < out; j++)
            for (int i = 0; i < n; i++) {
                float d = dot_row_c(W, (size_t)j, x + (size_t)i * in, in, tmp, L);
                float *yy = &y[(size_t)i * out + j];
                *yy = accumulate ? *yy + scale * d : d;
            }
        free(tmp);
    }
}

/* ---- AVX2 ---- */

/* Row stride of the permuted inputs: one cache line more than a multiple of 64 bytes, so that the
 * n rows' slices of a k-block do not all fall into the same L1 sets (in = 3072 or 8192 floats is
 * a multiple of 4 KB, and a 12-way L1 then holds at most 12 of them). */
static inline int gemv_ldx(int in) { return ((in + 15) & ~15) + 16; }


#ifdef PM_X86

/* Stores s (the dot of row j with input i) into y. */
AVX2_INLINE void put(float *y, int out, int i, int j, float s, float scale, int accumulate) {
    float *yy = &y[(size_t)i * out + j];
    *yy = accumulate ? *yy + scale * s : s;
}

/* acc[r][i] += rows wr[0..RT) . permuted inputs xi[0..NT) over the 16-blocks of [c0, c1). RT and
 * NT are compile-time constants at every call site (the loops unroll into plain registers). PF > 0
 * prefetches the rows PF bytes ahead (the pass that streams them from memory); the first NPF rows
 * of pf are prefetched at the same offset from c0 (the next k-block, rows512 / rows_4). */
AVX2_INLINE void span256(__m256 acc[8][3], const uint16_t *const *wr, const float *const *xi, int c0, int c1, int RT, int NT, int PF,
                         const uint16_t *const *pf, int NPF) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int c = c0; c < c1; c += 16) {
        __m256 xv[3];
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) xv[i] = _mm256_loadu_ps(xi[i] + c);
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            if (PF && (c & 31) == 0) _mm_prefetch((const char *)(wr[r] + c) + PF, _MM_HINT_T0);
            if (r < NPF && ((c - c0) & 31) == 0) _mm_prefetch((const char *)(pf[r] + (c - c0)), _MM_HINT_T0);
            __m256 w = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(wr[r] + c)), 16));
#pragma GCC unroll 3
            for (int i = 0; i < NT; i++) acc[r][i] = _mm256_fmadd_ps(w, xv[i], acc[r][i]);
        }
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) xv[i] = _mm256_loadu_ps(xi[i] + c + 8);
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            __m256 w = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)(wr[r] + c)), hi));
#pragma GCC unroll 3
            for (int i = 0; i < NT; i++) acc[r][i] = _mm256_fmadd_ps(w, xv[i], acc[r][i]);
        }
    }
}

/* Output (i0 + i, j0 + r) = hsum(acc) + the scalar tail from c on. */
AVX2_INLINE void finish256(float *y, int out, int j0, int i0, const uint16_t *const *wr, const float *x, int in, int c, __m256 acc[8][3],
                           int RT, int NT, float scale, int accumulate) {
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) {
            float s = hsum256(acc[r][i]);
            const float *xr = x + (size_t)(i0 + i) * in;
            for (int k = c; k < in; k++) s += pm_bf16_to_f32(wr[r][k]) * xr[k];
            put(y, out, i0 + i, j0 + r, s, scale, accumulate);
        }
}

/* The register tile: rows wr[0..RT) against inputs [i0, i0 + NT) in one pass over the rows. */
AVX2_INLINE void tile(float *y, int out, int j0, int i0, const uint16_t *const *wr, const float *xp, const float *x, int in, int RT,
                      int NT, int PF, float scale, int accumulate) {
    __m256 acc[8][3];
    const float *xi[3];
#pragma GCC unroll 3
    for (int i = 0; i < NT; i++) xi[i] = xp + (size_t)(i0 + i) * gemv_ldx(in);
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) acc[r][i] = _mm256_setzero_ps();
    int c1 = in & ~15;
    span256(acc, wr, xi, 0, c1, RT, NT, PF, NULL, 0);
    finish256(y, out, j0, i0, wr, x, in, c1, acc, RT, NT, scale, accumulate);
}

/* A group's pass over [c0, c1) of a k-block, its accumulators kept in buf between blocks (8 floats
 * per output, (r * PM_SMALL_N + i) * 8; stored exactly, so the chain is the one in registers). */
AVX2_INLINE void group256(float *buf, const uint16_t *const *wr, const uint16_t *const *pf, int NPF, const float *xp, int in, int i0,
                          int c0, int c1, int RT, int NT) {
    __m256 acc[8][3];
    const float *xi[3];
#pragma GCC unroll 3
    for (int i = 0; i < NT; i++) xi[i] = xp + (size_t)(i0 + i) * gemv_ldx(in);
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) acc[r][i] = c0 ? _mm256_load_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 8) : _mm256_setzero_ps();
    span256(acc, wr, xi, c0, c1, RT, NT, 0, pf, NPF);
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 3
        for (int i = 0; i < NT; i++) _mm256_store_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 8, acc[r][i]);
}

/* Bytes ahead per row of the software prefetch of the streaming passes (n <= 4). 4 rows x 2 KB keep
 * 128 lines in flight per core; 512 B did not when the memory ran fast. Measured in one process on
 * Zen 5, every bf16 projection of Phi-4-mini and its lm_head at n = 1, against a plain 4-stream sum
 * over the same mapped weights: 2048 B 0.87-0.95 of it against 0.80-0.92 for 512 B (AVX-512, three
 * runs) and 0.95 against 0.82 at the AVX2 level; 1024 B 0.83-0.90, 1536 B 0.89-0.91, 2560 B 0.84,
 * 3072 B 0.81. The same at n = 2 and 4, which are bound by their arithmetic. */
#ifndef GEMV_PF
#define GEMV_PF 2048
#endif

#define GROUP256(RT, NT, P0, NPF, NAME)                                                                                               \
    AVX2 __attribute__((noinline)) static void NAME(float *buf, const uint16_t *const *wr, const uint16_t *const *pf, const float *xp,   \
                                                    int in, int i0, int c0, int c1) {                                                \
        group256(buf, wr, pf + P0, NPF, xp, in, i0, c0, c1, RT, NT);                                                                 \
    }
GROUP256(4, 3, 0, 4, group256_all)
GROUP256(4, 3, 0, 2, group256_lo)
GROUP256(4, 3, 2, 2, group256_hi)
GROUP256(4, 3, 0, 0, group256_3)
GROUP256(4, 2, 0, 0, group256_2)
GROUP256(4, 1, 0, 0, group256_1)

/* Rows wr[0..4) (anywhere) against n > 3 inputs, as blocks512 with groups of 3: k-blocks of kb, the
 * first group(s) prefetching GEMV_PF bytes ahead inside each row. Measured in one process at the
 * AVX2 level against the unblocked tiles (with the next block prefetched): +11 % at n = 4, +3-4 %
 * at 6 and 8, +9 % at 16; on the runs (gemv_runs) against adjacent rows: 1.06-1.07 x at n = 4-7,
 * 1.03-1.04 at 8-10, 1.00-1.01 at 12-16. */
AVX2 static void blocks256(float *y, int out, int j0, const float *xp, const float *x, int n, const uint16_t *const *wr, int in, int kb,
                           float scale, int accumulate) {
    _Alignas(32) float buf[4 * PM_SMALL_N * 8];
    __m256 acc[8][3];
    const uint16_t *pf[4];
    int c1 = in & ~15;
    for (int c0 = 0; c0 < c1; c0 += kb) {
        int ce = c1 - c0 < kb ? c1 : c0 + kb, i = 3;
        for (int r = 0; r < 4; r++) pf[r] = (const uint16_t *)((const char *)(wr[r] + c0) + GEMV_PF);
        if (n >= 6) {
            group256_lo(buf, wr, pf, xp, in, 0, c0, ce);
            group256_hi(buf, wr, pf, xp, in, 3, c0, ce);
            i = 6;
        } else
            group256_all(buf, wr, pf, xp, in, 0, c0, ce);
        for (; i + 3 <= n; i += 3) group256_3(buf, wr, pf, xp, in, i, c0, ce);
        if (n - i == 2) group256_2(buf, wr, pf, xp, in, i, c0, ce);
        else if (n - i == 1) group256_1(buf, wr, pf, xp, in, i, c0, ce);
    }
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < 4; r++) acc[r][0] = c1 ? _mm256_load_ps(buf + ((size_t)r * PM_SMALL_N + i) * 8) : _mm256_setzero_ps();
        finish256(y, out, j0, i, wr, x, in, c1, acc, 4, 1, scale, accumulate);
    }
}

/* Rows wr[0..4) (anywhere) against all n inputs, output (i, r) to y[i * out + j0 + r]: one pass
 * for n <= 3, which streams the rows with a prefetch GEMV_PF bytes ahead, else blocks256. */
AVX2 static void tiles_4(float *y, int out, int j0, const float *xp, const float *x, int n, const uint16_t *const *wr, int in, int kb,
                         float scale, int accumulate) {
    switch (n) {
    case 1: tile(y, out, j0, 0, wr, xp, x, in, 4, 1, GEMV_PF, scale, accumulate); return;
    case 2: tile(y, out, j0, 0, wr, xp, x, in, 4, 2, GEMV_PF, scale, accumulate); return;
    case 3: tile(y, out, j0, 0, wr, xp, x, in, 4, 3, GEMV_PF, scale, accumulate); return;
    }
    blocks256(y, out, j0, xp, x, n, wr, in, kb, scale, accumulate);
}

/* Rows [j0, j0 + 4) (n = 3 stays on adjacent rows: its 4 x 3 tile ran 0.96 x on the runs). */
AVX2 static void rows_4(float *y, const float *xp, const float *x, int n, const uint16_t *w, int out, int in, int j0, int kb, float scale,
                        int accumulate) {
    const uint16_t *wr[4];
    for (int r = 0; r < 4; r++) wr[r] = w + (size_t)(j0 + r) * in;
    tiles_4(y, out, j0, xp, x, n, wr, in, kb, scale, accumulate);
}

AVX2 static void rows_1(float *y, const float *xp, const float *x, int n, const uint16_t *w, int out, int in, int j0, int kb, float scale,
                        int accumulate) {
    (void)kb; /* one row: its tiles are few and cheap, no k-blocking */
    const uint16_t *wr[1] = {w + (size_t)j0 * in};
    int i = 0;
    for (; i + 3 <= n; i += 3) tile(y, out, j0, i, wr, xp, x, in, 1, 3, 0, scale, accumulate);
    for (; i < n; i++) tile(y, out, j0, i, wr, xp, x, in, 1, 1, 0, scale, accumulate);
}

/* Four rows anywhere (one of each run, gemv_runs) against all n inputs into t[i * 4 + r]. */
AVX2 static void quad(float *t, const float *xp, const float *x, int n, const uint16_t *const *wr, int in, int kb) {
    tiles_4(t, 4, 0, xp, x, n, wr, in, kb, 1.0f, 0);
}

#endif

/* ---- AVX-512 ---- */

#ifdef PM_X86


/* Where rows start inside a cache line: a checkpoint's tensors start wherever its header ends
 * (safetensors pads it to 8 bytes, so 40 or 56 bytes past a line in the shards we read), and then
 * every 64-byte load of a row spans two lines. The byte offset shared by rows wr[0..RT) when it is
 * a nonzero multiple of 4 (whole dwords, span512_tiles), else 0. */
static inline unsigned line_offset(const uint16_t *const *wr, int RT) {
    unsigned sh = (unsigned)((uintptr_t)wr[0] & 63);
    for (int r = 1; r < RT; r++)
        if ((unsigned)((uintptr_t)wr[r] & 63) != sh) return 0;
    return sh & 3 ? 0 : sh;
}

/* The 32-block loop of span512 for two or more inputs, or rows not streamed. LINES (a literal at each
 * call): the rows start sh bytes past a cache line, and each line is loaded once, aligned, a row's
 * 64 bytes put together from two neighbouring lines in a register (one two-source dword permute), so
 * the tile gets the very same values, hence the same bits; the first line and the last are loaded
 * masked to the dwords that belong to [c0, c1): nothing outside the span is read. Measured in one
 * process on Zen 5 (2 threads, every projection of Phi-4-mini and its lm_head from the full-size
 * synthetic checkpoint, whose tensors start 40 or 56 bytes past a line, 6-8 alternating passes):
 * 1.18 x at n = 8 (20.7 -> 24.4 GB/s), 1.10 x at 12, 1.00-1.03 x at 2-5 and 16; an aligned copy of
 * the same weights had read 1.16 x faster than the mapping at n = 8, 1.00 x at n = 1 (there the
 * stream is memory-bound). Without LINES each half loads the row again, as before. */
AVX512_INLINE void span512_tiles(__m512 acc[8][4], const uint16_t *const *wr, const float *const *xi, int c0, int c1, int RT, int NT,
                                 int PF, const uint16_t *const *pf, int NPF, int LINES, unsigned sh) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i idx = _mm512_setzero_si512(), lo[8], raw[8];
    __mmask16 head = 0, tail = 0; /* a line's dwords from the row's offset on / before it */
    const uint16_t *ln[8];        /* the line holding wr[r]'s first byte: lines start at ln[r] + c */
    if (LINES) {
        idx = _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32((int)(sh >> 2)));
        head = (__mmask16)(0xffffu << (sh >> 2)), tail = (__mmask16)~head;
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            ln[r] = wr[r] - (sh >> 1);
            lo[r] = _mm512_maskz_load_epi32(head, ln[r] + c0);
        }
    }
    for (int c = c0; c < c1; c += 32) {
        __mmask16 m = c + 32 < c1 ? (__mmask16)0xffff : tail; /* the last line: only its dwords inside the span */
        __m512 xv[4];
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++) xv[i] = _mm512_loadu_ps(xi[i] + c);
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            if (PF) _mm_prefetch((const char *)(wr[r] + c) + PF, _MM_HINT_T0);
            if (r < NPF) _mm_prefetch((const char *)(pf[r] + (c - c0)), _MM_HINT_T0);
            if (LINES) {
                __m512i nx = _mm512_maskz_load_epi32(m, ln[r] + c + 32);
                raw[r] = _mm512_permutex2var_epi32(lo[r], idx, nx);
                lo[r] = nx;
            } else
                raw[r] = _mm512_loadu_si512((const void *)(wr[r] + c));
            __m512 w = _mm512_castsi512_ps(_mm512_slli_epi32(raw[r], 16));
#pragma GCC unroll 8
            for (int i = 0; i < NT; i++) acc[r][i] = _mm512_fmadd_ps(w, xv[i], acc[r][i]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++) xv[i] = _mm512_loadu_ps(xi[i] + c + 16);
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            __m512i rw = LINES ? raw[r] : _mm512_loadu_si512((const void *)(wr[r] + c));
            __m512 w = _mm512_castsi512_ps(_mm512_and_si512(rw, hi));
#pragma GCC unroll 8
            for (int i = 0; i < NT; i++) acc[r][i] = _mm512_fmadd_ps(w, xv[i], acc[r][i]);
        }
    }
}

/* acc[r][i] += rows wr[0..RT) . inputs xi[0..NT) over the 32-blocks of [c0, c1): the AVX2 tile at
 * 16 lanes. PF > 0 prefetches the rows PF bytes ahead (the pass that streams them from memory). */
AVX512_INLINE void span512(__m512 acc[8][4], const uint16_t *const *wr, const float *const *xi, int c0, int c1, int RT, int NT,
                           int PF, const uint16_t *const *pf, int NPF) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    if (NT == 1 && PF && !NPF) {
        /* One input streaming the rows (n = 1), each accumulator's lanes 0-7 and 8-15 as two ymm
         * (the same per-lane chains, recombined at the end: the same bits). Measured in one
         * process on Zen 5 (2 threads, weights in 2 MB pages, every projection of Phi-4-mini and
         * its lm_head, 8 alternating passes): 1.07-1.11 x the zmm loop below it (66 -> 70 GB/s),
         * which the AVX2 kernel (74 GB/s) had beaten. Each half-row is loaded twice, for the shift
         * and for the and (GCC folds both loads, as in the AVX2 tile): against one load kept in a
         * register, the rest the same, each run 16-24 passes alternating with the AVX2 kernel in one
         * process, AVX-512 / AVX2 read 0.93-1.15, median 1.00 (10 runs), against 0.91-1.01, median
         * 0.95 (10 runs); the decode step's interleaved row 0.99-1.02 against 0.94-0.99. */
        __m256 a[8], b[8];
        const __m256i hi8 = _mm256_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++) {
            a[r] = _mm512_castps512_ps256(acc[r][0]);
            b[r] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][0]), 1));
        }
        for (int c = c0; c < c1; c += 32) {
            __m256 x0 = _mm256_loadu_ps(xi[0] + c), x1 = _mm256_loadu_ps(xi[0] + c + 8), x2 = _mm256_loadu_ps(xi[0] + c + 16),
                   x3 = _mm256_loadu_ps(xi[0] + c + 24);
#pragma GCC unroll 8
            for (int r = 0; r < RT; r++) {
                _mm_prefetch((const char *)(wr[r] + c) + PF, _MM_HINT_T0);
                __m256i w0 = _mm256_loadu_si256((const __m256i *)(wr[r] + c)), w1 = _mm256_loadu_si256((const __m256i *)(wr[r] + c + 16));
                a[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)), x0, a[r]);
                b[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w1, 16)), x1, b[r]);
                a[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w0, hi8)), x2, a[r]);
                b[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w1, hi8)), x3, b[r]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < RT; r++)
            acc[r][0] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a[r])), _mm256_castps_pd(b[r]), 1));
        return;
    }
    unsigned sh = c1 > c0 ? line_offset(wr, RT) : 0;
    if (PF && !NPF && !sh) {
        /* Two to four inputs streaming rows that start on a cache line (n <= 4): each row's 64 bytes
         * loaded once for both halves (the same order per accumulator as the loop below). Measured as
         * above against that loop: 1.37-1.43 x at n = 2 (42 -> 57 GB/s), 1.12 at 3, 1.09-1.13 at 4.
         * Rows that start inside a line (a checkpoint's usually do) go to the line-wise tiles below
         * instead, where every 64-byte load of this loop spans two lines: against this loop, each run
         * 16 passes alternating with the AVX2 kernel in one process, AVX-512 / AVX2 read 0.99-1.02
         * against 0.84-0.97 at n = 2, 1.49-1.50 against 1.46 at 3, 2.00-2.04 against 1.72-1.84 at 4.
         * (At n = 1 the line-wise tiles lost: 0.82-0.89 against the ymm loop's 0.95-1.03.) */
        for (int c = c0; c < c1; c += 32) {
            __m512 xl[4], xh[4];
#pragma GCC unroll 8
            for (int i = 0; i < NT; i++) xl[i] = _mm512_loadu_ps(xi[i] + c), xh[i] = _mm512_loadu_ps(xi[i] + c + 16);
#pragma GCC unroll 8
            for (int r = 0; r < RT; r++) {
                _mm_prefetch((const char *)(wr[r] + c) + PF, _MM_HINT_T0);
                __m512i raw = _mm512_loadu_si512((const void *)(wr[r] + c));
                __asm__("" : "+v"(raw));
                __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16)), hw = _mm512_castsi512_ps(_mm512_and_si512(raw, hi));
#pragma GCC unroll 8
                for (int i = 0; i < NT; i++) acc[r][i] = _mm512_fmadd_ps(lo, xl[i], acc[r][i]);
#pragma GCC unroll 8
                for (int i = 0; i < NT; i++) acc[r][i] = _mm512_fmadd_ps(hw, xh[i], acc[r][i]);
            }
        }
        return;
    }
    if (NT == 1 && !NPF) {
        /* One input streaming the rows (n = 1): each row's 64 bytes are loaded once and feed its two
         * FMAs at once (the same order per accumulator as below). The empty asm keeps the load in a
         * register: GCC otherwise folds it into both the shift and the and, two loads of the line.
         * Measured in one process on Zen 5 against the loop below, every projection of Phi-4-mini
         * and its lm_head: 0.89 of a plain 4-stream read of the same weights against 0.77 while the
         * memory ran at 61 GB/s, 0.96 against 0.95 at 48 GB/s. Two or more inputs measured 1-5 %
         * slower this way, and the AVX2 twin of it no faster than its loop. */
        for (int c = c0; c < c1; c += 32) {
            __m512 xl = _mm512_loadu_ps(xi[0] + c), xh = _mm512_loadu_ps(xi[0] + c + 16);
#pragma GCC unroll 8
            for (int r = 0; r < RT; r++) {
                if (PF) _mm_prefetch((const char *)(wr[r] + c) + PF, _MM_HINT_T0);
                __m512i raw = _mm512_loadu_si512((const void *)(wr[r] + c));
                __asm__("" : "+v"(raw));
                acc[r][0] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(raw, 16)), xl, acc[r][0]);
                acc[r][0] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(raw, hi)), xh, acc[r][0]);
            }
        }
        return;
    }
    if (sh) span512_tiles(acc, wr, xi, c0, c1, RT, NT, PF, pf, NPF, 1, sh);
    else span512_tiles(acc, wr, xi, c0, c1, RT, NT, PF, pf, NPF, 0, 0);
}

/* Output (i0 + i, j0 + r) = hsum(acc) + the scalar tail from c on (RT x NT <= 16 sums folded
 * together: pm_hsum512_x16). */
AVX512_INLINE void finish512(float *y, int out, int j0, int i0, const uint16_t *const *wr, const float *x, int in, int c, __m512 acc[8][4],
                             int RT, int NT, float scale, int accumulate) {
    __m512 a[16];
    _Alignas(64) float sum[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) a[k] = k / 4 < RT && k % 4 < NT ? acc[k / 4][k % 4] : _mm512_setzero_ps();
    pm_hsum512_x16(a, sum);
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++) {
            float s = sum[r * 4 + i];
            const float *xr = x + (size_t)(i0 + i) * in;
            for (int k = c; k < in; k++) s += pm_bf16_to_f32(wr[r][k]) * xr[k];
            float *yy = &y[(size_t)(i0 + i) * out + j0 + r];
            *yy = accumulate ? *yy + scale * s : s;
        }
}

/* Rows wr[0..RT) x inputs [i0, i0 + NT) in one pass over the whole row (n <= 4, and n = 1). */
AVX512_INLINE void tile512(float *y, int out, int j0, int i0, const uint16_t *const *wr, const float *xp, const float *x, int in, int RT,
                           int NT, int PF, float scale, int accumulate) {
    __m512 acc[8][4];
    const float *xi[4];
#pragma GCC unroll 8
    for (int i = 0; i < NT; i++) xi[i] = xp + (size_t)(i0 + i) * gemv_ldx(in);
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++) acc[r][i] = _mm512_setzero_ps();
    int c1 = in & ~31;
    span512(acc, wr, xi, 0, c1, RT, NT, PF, NULL, 0);
    finish512(y, out, j0, i0, wr, x, in, c1, acc, RT, NT, scale, accumulate);
}

/* One group's pass over [c0, c1) of a k-block: its accumulators come from and go back to buf
 * (16 floats per output, (r * PM_SMALL_N + i) * 16; stored exactly, so the chain is the one in
 * registers). */
AVX512_INLINE void group512(float *buf, const uint16_t *const *wr, const uint16_t *const *pf, int NPF, const float *xp, int in, int i0,
                            int c0, int c1, int RT, int NT) {
    __m512 acc[8][4];
    const float *xi[4];
#pragma GCC unroll 8
    for (int i = 0; i < NT; i++) xi[i] = xp + (size_t)(i0 + i) * gemv_ldx(in);
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++) acc[r][i] = c0 ? _mm512_load_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 16) : _mm512_setzero_ps();
    span512(acc, wr, xi, c0, c1, RT, NT, 0, pf, NPF);
#pragma GCC unroll 8
    for (int r = 0; r < RT; r++)
#pragma GCC unroll 8
        for (int i = 0; i < NT; i++) _mm512_store_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 16, acc[r][i]);
}

/* Each group shape as its own function: inlined into the row routine, the 16-accumulator loop got
 * an accumulator spilled to the stack (a store-forward in its FMA chain); alone it keeps all in
 * registers. The call costs nothing next to a k-block. */
#define GROUP512(RT, NT, P0, NPF, NAME)                                                                                              \
    AVX512 __attribute__((noinline)) static void NAME(float *buf, const uint16_t *const *wr, const uint16_t *const *pf, const float *xp, \
                                                      int in, int i0, int c0, int c1) {                                              \
        group512(buf, wr, pf + P0, NPF, xp, in, i0, c0, c1, RT, NT);                                                                 \
    }
GROUP512(4, 4, 0, 4, group512_4_all)
GROUP512(4, 4, 0, 2, group512_4_lo)
GROUP512(4, 4, 2, 2, group512_4_hi)
GROUP512(4, 4, 0, 0, group512_4_4)
GROUP512(4, 3, 0, 0, group512_4_3)
GROUP512(4, 2, 0, 0, group512_4_2)
GROUP512(4, 1, 0, 0, group512_4_1)
GROUP512(1, 4, 0, 1, group512_1_all)
GROUP512(1, 4, 0, 0, group512_1_lo)
GROUP512(1, 4, 0, 1, group512_1_hi)
GROUP512(1, 4, 0, 0, group512_1_4)
GROUP512(1, 3, 0, 0, group512_1_3)
GROUP512(1, 2, 0, 0, group512_1_2)
GROUP512(1, 1, 0, 0, group512_1_1)

/* Rows wr[0..RT) (anywhere) against n > 4 inputs, the batched decode, in groups of 4 inputs: the
 * rows are walked in k-blocks small enough that the n inputs' slices stay in L1 (pm_gemv_kblock)
 * while every group passes over the block, the accumulators waiting in buf between blocks; output
 * (i, r) goes to y[i * out + j0 + r] (finish512). The first group streams the rows from memory with
 * the prefetch GEMV_PF bytes ahead inside each row (from n = 8 on the first two groups share it, rows
 * 0-1 and 2-3), which runs on into the next row of a run (gemv_runs); the other groups find the
 * block in L1. Measured in one process against the unblocked 4 x 4 tiles, whose groups each re-read
 * a row's inputs from L2 and streamed the rows without overlap: +6-12 % at n = 8, +3 % at 12, even at
 * 16. (2 rows x 8 inputs measured no faster than 4 x 4.) */
#define BLOCKS512(RT)                                                                                                              \
    AVX512 static void blocks512_##RT(float *y, int out, int j0, const float *xp, const float *x, int n, const uint16_t *const *wr,   \
                                      int in, int kb, float scale, int accumulate) {                                                 \
        _Alignas(64) float buf[RT * PM_SMALL_N * 16];                                                                                 \
        __m512 acc[8][4];                                                                                                             \
        const uint16_t *pf[RT];                                                                                                       \
        int c1 = in & ~31;                                                                                                            \
        for (int c0 = 0; c0 < c1; c0 += kb) {                                                                                         \
            int ce = c1 - c0 < kb ? c1 : c0 + kb, i = 4;                                                                              \
            /* the groups prefetch pf[r] + (c - c0): GEMV_PF bytes past what the block reads */                                        \
            for (int r = 0; r < RT; r++) pf[r] = (const uint16_t *)((const char *)(wr[r] + c0) + GEMV_PF);                           \
            if (n >= 8) {                                                                                                             \
                group512_##RT##_lo(buf, wr, pf, xp, in, 0, c0, ce);                                                                   \
                group512_##RT##_hi(buf, wr, pf, xp, in, 4, c0, ce);                                                                   \
                i = 8;                                                                                                                \
            } else                                                                                                                    \
                group512_##RT##_all(buf, wr, pf, xp, in, 0, c0, ce);                                                                  \
            for (; i + 4 <= n; i += 4) group512_##RT##_4(buf, wr, pf, xp, in, i, c0, ce);                                          \
            switch (n - i) {                                                                                                          \
            case 3: group512_##RT##_3(buf, wr, pf, xp, in, i, c0, ce); break;                                                       \
            case 2: group512_##RT##_2(buf, wr, pf, xp, in, i, c0, ce); break;                                                       \
            case 1: group512_##RT##_1(buf, wr, pf, xp, in, i, c0, ce); break;                                                       \
            }                                                                                                                         \
        }                                                                                                                             \
        for (int i0 = 0; i0 < n; i0 += 4) {                                                                                           \
            int nt = n - i0 < 4 ? n - i0 : 4;                                                                                         \
            for (int r = 0; r < RT; r++)                                                                                              \
                for (int i = 0; i < 4; i++)                                                                                           \
                    acc[r][i] = c1 && i < nt ? _mm512_load_ps(buf + ((size_t)r * PM_SMALL_N + i0 + i) * 16) : _mm512_setzero_ps();   \
            finish512(y, out, j0, i0, wr, x, in, c1, acc, RT, nt, scale, accumulate);                                                  \
        }                                                                                                                             \
    }
BLOCKS512(4)
BLOCKS512(1)

/* Rows wr[0..RT) (anywhere) against all n inputs, output (i, r) to y[i * out + j0 + r]. n <= 4: one
 * tile, one pass over the rows, which it streams from memory with a prefetch GEMV_PF bytes ahead (a
 * literal at every call: a runtime distance left a branch in the k loop); more: blocks512. */
#define TILES512(RT)                                                                                                               \
    AVX512 static void tiles512_##RT(float *y, int out, int j0, const float *xp, const float *x, int n, const uint16_t *const *wr,    \
                                     int in, int kb, float scale, int accumulate) {                                                  \
        switch (n) {                                                                                                                  \
        case 1: tile512(y, out, j0, 0, wr, xp, x, in, RT, 1, GEMV_PF, scale, accumulate); return;                                     \
        case 2: tile512(y, out, j0, 0, wr, xp, x, in, RT, 2, GEMV_PF, scale, accumulate); return;                                     \
        case 3: tile512(y, out, j0, 0, wr, xp, x, in, RT, 3, GEMV_PF, scale, accumulate); return;                                     \
        case 4: tile512(y, out, j0, 0, wr, xp, x, in, RT, 4, GEMV_PF, scale, accumulate); return;                                     \
        }                                                                                                                             \
        blocks512_##RT(y, out, j0, xp, x, n, wr, in, kb, scale, accumulate);                                                          \
    }
TILES512(4)
TILES512(1)

/* Row j0 against all n inputs (a short run's rows in gemv_runs). */
AVX512 static void rows512_1(float *y, const float *xp, const float *x, int n, const uint16_t *w, int out, int in, int j0, int kb,
                             float scale, int accumulate) {
    const uint16_t *wr[1] = {w + (size_t)j0 * in};
    tiles512_1(y, out, j0, xp, x, n, wr, in, kb, scale, accumulate);
}

/* Four rows anywhere (one of each run) against all n inputs into t[i * 4 + r]. */
AVX512 static void quad512(float *t, const float *xp, const float *x, int n, const uint16_t *const *wr, int in, int kb) {
    tiles512_4(t, 4, 0, xp, x, n, wr, in, kb, 1.0f, 0);
}

/* Many inputs (pm_kern_gemv_many): full-length tiles of 4 rows x NT inputs, each a tile512 over
 * the whole row (the n <= 4 arithmetic, so the bits are the GEMV's). One noinline function per
 * shape keeps the 16 accumulators in registers; PF: the first input group streams the rows from
 * memory with the prefetch, the others find them in L1 / L2. */
#define MANY512(RT, NT, PF)                                                                                                        \
    AVX512 __attribute__((noinline)) static void many512_##RT##_##NT##_##PF(float *y, int out, int j0, int i0, const uint16_t *const *wr, \
                                                                       const float *xp, const float *x, int in, float scale,    \
                                                                       int accumulate) {                                        \
        tile512(y, out, j0, i0, wr, xp, x, in, RT, NT, PF ? GEMV_PF : 0, scale, accumulate);                                       \
    }
MANY512(4, 4, 1)
MANY512(4, 4, 0)
MANY512(4, 3, 0)
MANY512(4, 2, 0)
MANY512(4, 1, 0)
MANY512(1, 4, 0)
MANY512(1, 3, 0)
MANY512(1, 2, 0)
MANY512(1, 1, 0)

typedef void (*many_fn)(float *, int, int, int, const uint16_t *const *, const float *, const float *, int, float, int);

/* Rows [j0, j1) against all n inputs: for each group of 4 inputs, every 4-row tile of the block. */
static void many512_block(float *y, const float *xp, const float *x, int n, const uint16_t *w, int out, int in, int j0, int j1,
                          float scale, int accumulate) {
    static const many_fn four[5] = {NULL, many512_4_1_0, many512_4_2_0, many512_4_3_0, many512_4_4_0},
                         one[5] = {NULL, many512_1_1_0, many512_1_2_0, many512_1_3_0, many512_1_4_0};
    for (int i0 = 0; i0 < n; i0 += 4) {
        int nt = n - i0 < 4 ? n - i0 : 4, j = j0;
        for (; j + 4 <= j1; j += 4) {
            const uint16_t *wr[4] = {w + (size_t)j * in, w + (size_t)(j + 1) * in, w + (size_t)(j + 2) * in, w + (size_t)(j + 3) * in};
            (i0 == 0 && nt == 4 ? many512_4_4_1 : four[nt])(y, out, j, i0, wr, xp, x, in, scale, accumulate);
        }
        for (; j < j1; j++) {
            const uint16_t *wr[1] = {w + (size_t)j * in};
            one[nt](y, out, j, i0, wr, xp, x, in, scale, accumulate);
        }
    }
}

/* One ISA's row routines against all n inputs: 4 rows anywhere (the runs), 4 adjacent rows (the
 * blocks) and 1 row (both). */
typedef void (*rows_fn)(float *y, const float *xp, const float *x, int n, const uint16_t *w, int out, int in, int j0, int kb,
                        float scale, int accumulate);
typedef void (*quad_fn)(float *t, const float *xp, const float *x, int n, const uint16_t *const *wr, int in, int kb);
#define ALL_N ((2u << PM_SMALL_N) - 2u)
typedef struct gemv_rows {
    quad_fn quad;
    unsigned runs; /* bit n: n inputs take the runs (gemv_runs), where they win: every n at AVX-512, all but 3 at AVX2 */
    rows_fn all_4, all_1;
} gemv_rows;

/* The runs (decode): streaming, each row read from memory once (n <= 4: by one single-pass tile; more:
 * by the k-blocks of blocks512 / blocks256). A work item is 4 runs of q consecutive rows (~384 KB
 * each), walked together one row of each at a time: every run is one sequential stream (the prefetch
 * PF bytes ahead runs on into the run's next row), 4 per thread like the bench's STREAM pass. Measured
 * in one process against the former layout (8 adjacent rows at a time, 8 streams 1 row apart), over
 * every projection of Phi-4-mini and its lm_head at n = 1: 0.97-0.99 of a plain sum over the same
 * mapped weights against 0.87-0.93 (AVX2: 0.93 against 0.82); against gemv_schedule's blocks of
 * adjacent rows at AVX-512 (same process, 6 alternating passes, weights in 2 MB pages): 1.13-1.15 x at
 * n = 2, 1.06-1.20 at 3, 1.16-1.21 at 4; at AVX2 1.46-1.52 x at n = 2 but 0.96 at 3 (its 4 x 3 tile),
 * which stays on the blocks. n = 5-16 at AVX-512 against those blocks of adjacent rows, whose first
 * groups prefetched each row's next k-block (both kernels built alike, one process, 6-12 alternating
 * passes, the same bits): 1.13-1.15 x at 5, 1.04-1.11 at 6-7, 1.01-1.12 at 9-10, 0.98-1.01 at 8, 12
 * and 16 (neutral there, over 12 passes twice); a first try that kept the whole prefetch in the first
 * group lost 7 % at 8. AVX2 (blocks256): 1.06-1.07 x at 4-7, 1.03-1.04 at 8-10, 1.00 at 12-16. Items
 * are taken dynamically, at least 4 per thread. Each row's arithmetic is the tile's, so the bits do
 * not depend on where a row falls. */
static void gemv_runs(const gemv_rows *R, float *y, const float *xp, const float *x, int n, const uint16_t *w, int out, int in,
                      float scale, int accumulate) {
    int nt = omp_get_max_threads(), q = (int)((384u << 10) / ((size_t)2 * (in > 0 ? in : 1)));
    int most = (out + 16 * nt - 1) / (16 * nt); /* 4 runs per item, 4 items per thread */
    if (q > most) q = most;
    if (q < 1) q = 1;
    int items = (out + 4 * q - 1) / (4 * q), kb = pm_gemv_kblock(n);
#pragma omp parallel for schedule(dynamic, 1)
    for (int it = 0; it < items; it++) {
        int j0 = it * 4 * q, rows = out - j0 < 4 * q ? out - j0 : 4 * q, qq = (rows + 3) / 4; /* run s: [j0 + s qq, ...) */
        for (int t = 0; t < qq; t++) {
            int jr[4], k = 0;
            const uint16_t *wr[4];
            for (int s = 0; s < 4; s++)
                if (s * qq + t < rows) {
                    jr[k] = j0 + s * qq + t;
                    wr[k] = w + (size_t)jr[k] * in;
                    k++;
                }
            if (k < 4) { /* the short last run of the last item */
                for (int i = 0; i < k; i++) R->all_1(y, xp, x, n, w, out, in, jr[i], kb, scale, accumulate);
                continue;
            }
            float d[4 * PM_SMALL_N];
            R->quad(d, xp, x, n, wr, in, kb);
            for (int i = 0; i < n; i++)
                for (int r = 0; r < 4; r++) { /* as finish512 / finish256 store */
                    float *yy = &y[(size_t)i * out + jr[r]];
                    *yy = accumulate ? *yy + scale * d[i * 4 + r] : d[i * 4 + r];
                }
        }
    }
}

/* The blocks (n = 3 at AVX2): threads take chunks of ~512 KB of consecutive 8-row blocks
 * dynamically (pm_gemv_chunk). */
static void gemv_schedule(const gemv_rows *R, float *y, const float *xp, const float *x, int n, const uint16_t *w, int out, int in,
                          float scale, int accumulate) {
    if (R->runs >> n & 1u) {
        gemv_runs(R, y, xp, x, n, w, out, in, scale, accumulate);
        return;
    }
    int nb = out / 8, chunk = pm_gemv_chunk(nb, (size_t)16 * (in > 0 ? in : 1), omp_get_max_threads()), kb = pm_gemv_kblock(n);
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, chunk) nowait
        for (int b = 0; b < nb; b++) {
            R->all_4(y, xp, x, n, w, out, in, b * 8, kb, scale, accumulate);
            R->all_4(y, xp, x, n, w, out, in, b * 8 + 4, kb, scale, accumulate);
        }
#pragma omp single nowait
        for (int j = nb * 8; j < out; j++) R->all_1(y, xp, x, n, w, out, in, j, kb, scale, accumulate);
    }
}
#endif

#ifdef PM_X86
/* permute_x's blocks with two-source permutes (the scalar loop cost a batch-8 step ~3 ms, serial). */
AVX512 static int permute_blocks512(float *o, const float *xr, int in) {
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0),
                  od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    int c = 0;
    for (; c + 32 <= in; c += 32) {
        __m512 a = _mm512_loadu_ps(xr + c), b = _mm512_loadu_ps(xr + c + 16);
        _mm512_storeu_ps(o + c, _mm512_permutex2var_ps(a, ev, b));
        _mm512_storeu_ps(o + c + 16, _mm512_permutex2var_ps(a, od, b));
    }
    return c;
}
AVX2 static int permute_blocks256(float *o, const float *xr, int in) {
    int c = 0;
    for (; c + 16 <= in; c += 16) {
        __m256 a = _mm256_loadu_ps(xr + c), b = _mm256_loadu_ps(xr + c + 8); /* per lane: evens (0x88), odds (0xdd), then lanes 0 2 1 3 */
        _mm256_storeu_ps(o + c, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8)));
        _mm256_storeu_ps(o + c + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8)));
    }
    return c;
}
#endif

/* x with every full B-block (B = 16 or 32) reordered as its even elements, then its odd ones; the
 * tail as is. */
static void permute_x(float *xp, const float *x, int n, int in, int B) {
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * in;
        float *o = xp + (size_t)i * gemv_ldx(in);
        int c = 0;
#ifdef PM_X86
        if (B == 32 && pm_kern_have_avx512()) c = permute_blocks512(o, xr, in);
        else if (B == 16 && pm_kern_have_avx2()) c = permute_blocks256(o, xr, in);
#endif
        for (; c + B <= in; c += B)
            for (int l = 0; l < B / 2; l++) {
                o[c + l] = xr[c + 2 * l];
                o[c + B / 2 + l] = xr[c + 2 * l + 1];
            }
        for (; c < in; c++) o[c] = xr[c];
    }
}

/* Rows per work item of pm_kern_gemv_many: a few items per thread for the dynamic schedule. */
#ifndef GEMV_MANY_RB
#define GEMV_MANY_RB 32
#endif

/* Where the GEMV tiles beat the GEMM: few rows, up to 40 when the inputs are short enough that a
 * 4-input group's rows (16 bytes x in) sit in half of L1 while the tiles of a row block pass over
 * them, up to 24 otherwise. Re-measured once the GEMM had its AVX-512 weight pack and wide K slices
 * (in-process, Zen 5, 2 threads, time of the GEMV tiles / the GEMM): Phi-4-mini's projections
 * (in 3072 / 8192) 0.84-0.90 at 20 rows, 0.94-0.99 at 22, 0.99-1.02 at 24, 1.03 at 28, 1.10 at 32,
 * 1.14 at 48, 1.25 at 64; the Conformer's shapes unpacked (in 1024 / 1536) 0.89 at 17-24, 0.93 at
 * 32, 0.99-1.05 at 36-44, 1.04-1.07 at 48, 1.1 at 80-96; LoRA B shapes (in 256 / 320) 1.0 at 32,
 * 1.08 at 48. (Before those two changes the tiles had won up to 96 and 48 rows.) A 48-token
 * prefill of Phi-4-mini ran 1.16 x faster with these limits than with 96 / 48. */
#define GEMV_MANY_MAX_N 40
#define GEMV_MANY_MAX_N_LONG 24
int pm_kern_gemv_many_takes(const pm_tensor *W, int n) {
#ifdef PM_X86
    /* the bf16-product GEMM beats it from 17 rows: 1.22 x at 17, 1.42 x at 24 (Phi-4-mini's qkv) */
    if (pm_kern_gemm_dot_takes(W)) return 0;
    int max_n = 16L * W->shape[1] <= pm_l1d_bytes() / 2 ? GEMV_MANY_MAX_N : GEMV_MANY_MAX_N_LONG;
    return W->dtype == PM_DT_BF16 && pm_kern_have_avx512() && n <= max_n;
#else
    (void)W, (void)n;
    return 0;
#endif
}

void pm_kern_gemv_many(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
#ifdef PM_X86
    if (W->dtype == PM_DT_BF16 && pm_kern_have_avx512()) {
        int out = (int)W->shape[0], in = (int)W->shape[1];
        float *xp = aligned_alloc(64, sizeof(float) * (size_t)n * gemv_ldx(in));
        PM_ASSERT(xp);
        permute_x(xp, x, n, in, 32);
        const uint16_t *w = (const uint16_t *)W->data;
        int nb = (out + GEMV_MANY_RB - 1) / GEMV_MANY_RB;
#pragma omp parallel for schedule(dynamic, 1)
        for (int b = 0; b < nb; b++) {
            int j0 = b * GEMV_MANY_RB, j1 = j0 + GEMV_MANY_RB < out ? j0 + GEMV_MANY_RB : out;
            many512_block(y, xp, x, n, w, out, in, j0, j1, scale, accumulate);
        }
        free(xp);
        return;
    }
#endif
    pm_kern_gemv(y, x, n, W, scale, accumulate);
}

void pm_kern_gemv(float *y, const float *x, int n, const pm_tensor *W, float scale, int accumulate) {
    if (W->dtype == PM_DT_Q8) {
        pm_kern_gemv_q8(y, x, n, W, scale, accumulate);
        return;
    }
#ifdef PM_X86
    if (pm_kern_have_avx2() && W->dtype == PM_DT_BF16) {
        int in = (int)W->shape[1];
        /* the row routines hold at most PM_SMALL_N inputs' accumulators */
        for (; n > PM_SMALL_N; n -= PM_SMALL_N, x += (size_t)PM_SMALL_N * in, y += (size_t)PM_SMALL_N * W->shape[0])
            pm_kern_gemv(y, x, PM_SMALL_N, W, scale, accumulate);
        /* 64-byte aligned so that no 32-byte load of the inputs splits a cache line */
        _Alignas(64) float stack[4096];
        size_t bytes = sizeof(float) * (size_t)n * gemv_ldx(in); /* a multiple of 64 */
        float *xp = (size_t)n * gemv_ldx(in) <= 4096 ? stack : aligned_alloc(64, bytes);
        PM_ASSERT(xp);
        int wide = pm_kern_have_avx512();
        permute_x(xp, x, n, in, wide ? 32 : 16);
        /* at AVX-512 every n takes the runs: no adjacent-row routine (ALL_N: bits 1..PM_SMALL_N) */
        static const gemv_rows avx512 = {quad512, ALL_N, NULL, rows512_1}, avx2 = {quad, ALL_N & ~(1u << 3), rows_4, rows_1};
        gemv_schedule(wide ? &avx512 : &avx2, y, xp, x, n, (const uint16_t *)W->data, (int)W->shape[0], in, scale, accumulate);
        if (xp != stack) free(xp);
        return;
    }
#endif
    pm_kern_gemv_c(y, x, n, W, scale, accumulate);
}
