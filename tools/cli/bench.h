/* bench.h — internals of `phi4mm bench` (cmd_bench.c): result rows, machine limits (bench_machine.c),
 * decoder runs (bench_llm.c) and media encoders + tokenizer (bench_media.c). Every measurement
 * lands in one table row and one JSON object, so runs can be compared field by field. */
#ifndef PM_BENCH_H
#define PM_BENCH_H

#include <jansson.h>
#include <stddef.h>

#include "engine/model.h"

typedef struct bench_opts {
    const char *model_dir, *json_path, *tokenizer_path;
    int threads;
    int decode_steps, decode_ctx, long_ctx; /* long_ctx: the batch-1 row at a long context (0: none) */
    int batches[8], n_batches;
    int prefill[8], n_prefill;
    int prefill_chunk;
    int audio_secs[4], n_audio;
    int skip_audio, skip_image, skip_tok, skip_ttft, skip_q8, skip_kernels, skip_overlap, skip_compute, skip_prefix, skip_draft;
    int prompt_threads; /* the serve row's prompt thread (0: half the threads, as `serve` by default) */
    int mlock;          /* --mlock: both loads lock the checkpoint */
    int keep_cache;     /* --keep-cache: the warm-up reads the shards without evicting them first */
    int quick;          /* --quick: the limits measured at the start stand for every row (no re-measuring) */
} bench_opts;

typedef struct bench_ctx {
    bench_opts o;
    json_t *root;            /* {"machine": {...}, "rows": [...]} */
    double bw_gbs;           /* measured read bandwidth, GB/s */
    double peak_gflops;      /* measured compute peak (max of BLAS sgemm and the engine's GEMM), GFLOP/s */
    double bw_best, peak_best; /* best values seen over the whole run */
    pm_model *m;
    double decode_tps[8];    /* bf16 decode tok/s per o.batches entry (for the q8 speedups) */
    double prefill_tps[8];   /* bf16 prefill tok/s per o.prefill entry */
} bench_ctx;

/* Appends one result row: section ("machine", "load", "decode", ...), a name, a value with its
 * unit, and optionally the bound it is measured against and the ratio (value / bound for rates;
 * ratio < 0 = none). `extra` (may be NULL) is a JSON object merged into the row (stolen). */
void bench_row(bench_ctx *b, const char *section, const char *name, double value, const char *unit, double bound, double ratio,
               json_t *extra, const char *note_fmt, ...) __attribute__((format(printf, 9, 10)));
double bench_now(void);
/* VmRSS, RssAnon, RssFile, VmHWM of this process in bytes (0 when /proc is unavailable). */
void bench_rss(size_t *rss, size_t *anon, size_t *file, size_t *hwm);
void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Machine limits at the current OpenMP thread count; the compute limit is bench_compute_peak. The
 * _now variants re-measure quickly right before a measurement (other load on the machine changes
 * over a 10-minute run, so each row is compared with the limit of its own moment) and also update
 * the run's best values; under --quick they return the limits measured at the start (the
 * re-measurements were most of a --quick run's time on the tiny model). */
double bench_bw_now(bench_ctx *b);
double bench_peak_now(bench_ctx *b);
/* Re-measures after a row and returns max(before, after): each row is held to the stricter of the
 * limits that bracket it (on a VM whose speed drifts, a limit measured only before can be low). */
double bench_bw_bracket(bench_ctx *b, double before);
double bench_peak_bracket(bench_ctx *b, double before);
double bench_read_bandwidth(size_t bytes, int reps);   /* GB/s, best of reps */
/* The same in two steps, for a buffer measured again and again (bench_bw_buffer: NULL on OOM). */
float *bench_bw_buffer(size_t bytes, size_t *n);
double bench_read_pass(const float *buf, size_t n, int reps);
/* Seconds of one STREAM-style pass (as bench_read_pass; pf: software prefetch distance in bytes, or
 * 0) over n given memory spans, e.g. the mapped weights a decode step reads: every thread sums its
 * share of each span, all in one parallel region. A span's tail of under 128 floats per thread is
 * not read. */
double bench_read_spans(const void *const *spans, const size_t *bytes, int n, int pf);
/* Paired ratios: a row whose units (decode steps, encoder passes) each come right after their own
 * measurement of the limit also reports the median of the units' ratios, next to the aggregate
 * against the bracketing limit. On a VM whose bandwidth swings by 30-50 % within seconds, the
 * bracketing limit can come from another phase than the units; a paired ratio compares each unit
 * with the machine of its own moment. Sorts v in place. */
double bench_median(double *v, int n);
double bench_sgemm_peak(int n, int reps);              /* GFLOP/s of an n^3 NT sgemm, best of reps */
double bench_engine_gemm_peak(int n, int reps);        /* GFLOP/s of the engine's bf16 GEMM, n^3 (0 where it has none) */
double bench_compute_peak(int n, int reps);            /* the larger of the two: the bound for compute-bound rows */
/* GFLOP/s of fp32 FMAs on registers only (independent accumulators a thread, 16 zmm or 12 ymm at
 * the kernel level in use; 0 at the portable level), all threads, best of reps: the silicon's
 * ceiling, for scale (no row is held to it). */
double bench_fma_peak(int reps);

int bench_llm(bench_ctx *b);    /* decode and prefill */
int bench_audio(bench_ctx *b);  /* features + Conformer + projection, TTFT */
int bench_image(bench_ctx *b);  /* HD + SigLIP + projection */
int bench_tok(bench_ctx *b);    /* tokenizer encode MB/s */
struct pm_tokenizer;
int bench_grammar_mask(bench_ctx *b, const struct pm_tokenizer *tok); /* a grammar's mask a step (bench_grammar.c) */
int bench_overlap(bench_ctx *b); /* a live stream's pauses while an image encodes, inline and beside */
int bench_longrope(bench_ctx *b); /* ... and while another sequence's LongRoPE recompute runs */
int bench_prefix(bench_ctx *b);   /* a conversation's next turn with the prompt cache, against without */
int bench_draft(bench_ctx *b);    /* decode with prompt-lookup drafts, against without */
/* A W x H RGB test image (gradients and noise), malloc'd; NULL on OOM. */
uint8_t *bench_synth_rgb(int W, int H);
int bench_q8(bench_ctx *b);     /* the same decoder runs on --weights q8, as speedups over bf16 */
int bench_kernels(bench_ctx *b); /* decoder rows capped at AVX2, as AVX-512 speedups (AVX-512 CPUs) */
int bench_compute(bench_ctx *b); /* prefill, Conformer, SigLIP with --compute bf16 against fp32, interleaved */
/* Pieces the rows above share: a P-token prefill in chunks (seconds, or -1 with e set) and its
 * FLOPs; a synthetic clip of `secs` s at 16 kHz (malloc'd) and one features + Conformer + speech
 * projection pass over it (times in t[3]). */
double bench_prefill_seconds(const pm_model *m, int P, int chunk, pm_err *e);
double bench_prefill_flops(const pm_model *m, int P);
double *bench_synth_audio(int secs, size_t *n);
int bench_audio_pass(const pm_model *m, const double *x, size_t n, double t[3], int *frames, int *t_enc, pm_err *e);
/* Seconds from submitting a transcription of the clip x (n samples at 16 kHz) to m's engine to its
 * first token (*t_submit: the submit's share; *prompt_tokens), or -1 with err set. */
double bench_ttft_seconds(pm_model *m, const double *x, size_t n, double *t_submit, int *prompt_tokens, char *err, size_t errlen);

#endif
