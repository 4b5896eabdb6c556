/* bench_compute.c — `--compute bf16` against the default fp32 products, in one process: a second
 * load of the checkpoint with pm_load_options.compute_bf16 (its tensors marked, the same mapped
 * pages), then the compute-bound passes alternating between the two models, each pair timed back
 * to back so that both halves meet the same machine: a prefill at each --prefill length, the 10 s
 * clip's features + Conformer + projection, the 448 x 448 image's HD + SigLIP + projection, the time
 * to first token of a 30 s transcription (features, encoders, prompt prefill with the speech LoRA). Rows:
 * the median over the pairs of t(fp32) / t(bf16), and the bf16 run's GFLOP/s for the prefill
 * against the fp32 compute peak (above 1 is possible: the peak is fp32 FMA's). Skipped where the
 * CPU has no AVX512-BF16. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "model/audio_proj.h"
#include "model/conformer.h"
#include "nn/kernels.h"
#include "vision/hd.h"
#include "vision/image_embed.h"

#define PAIRS 3

/* Seconds of HD + SigLIP + projection of a W x H synthetic image on m, or -1 with e set. */
static double image_seconds(const pm_model *m, int W, int H, pm_err *e) {
    uint8_t *rgb = bench_synth_rgb(W, H);
    if (!rgb) return pm_errf(e, PM_ENOMEM, "out of memory"), -1;
    pm_image img = {rgb, W, H};
    pm_hd_image hd = {0};
    float *out = NULL;
    int ntok = 0;
    double t = bench_now();
    if (!pm_hd_preprocess(&img, m->dynamic_hd, m->crop_size, &hd, e))
        pm_image_embed_forward(m->image, hd.pixels, hd.crop_mask, hd.n_crops, hd.h_crops, hd.w_crops, &out, &ntok, NULL, e);
    t = e->code ? -1 : bench_now() - t;
    pm_hd_free(&hd);
    free(out);
    free(rgb);
    return t;
}

typedef struct work {
    int kind; /* 0 prefill, 1 audio, 2 image, 3 TTFT of a transcription */
    int P;    /* prefill tokens */
    const double *x;
    size_t n; /* audio samples */
} work;

static double run(bench_ctx *b, pm_model *m, const work *w, pm_err *e) {
    if (w->kind == 0) return bench_prefill_seconds(m, w->P, b->o.prefill_chunk, e);
    if (w->kind == 2) return image_seconds(m, 448, 448, e);
    if (w->kind == 3) {
        double ts;
        int pt;
        char err[512];
        double t = bench_ttft_seconds(m, w->x, w->n, &ts, &pt, err, sizeof err);
        if (t < 0) pm_errf(e, PM_EINVAL, "%s", err);
        return t;
    }
    double t[3];
    int frames, t_enc;
    if (bench_audio_pass(m, w->x, w->n, t, &frames, &t_enc, e)) return -1;
    return t[1] + t[2]; /* Conformer + projection: the features do no products */
}

/* Two untimed runs of each model (the first audio of a model faults its encoder in, the second
 * packs its Conformer weights: conformer_pack.c), then PAIRS pairs (the order alternating); the row. */
static int compare(bench_ctx *b, pm_model *mb, const work *w, const char *label, pm_err *e) {
    pm_model *m32 = b->m;
    double r[PAIRS], s32 = 0, s16 = 0;
    for (int k = 0; k < 2 && !e->code; k++) {
        run(b, m32, w, e);
        if (!e->code) run(b, mb, w, e);
    }
    for (int p = 0; p < PAIRS && !e->code; p++) {
        double t32, t16;
        if (p & 1) t16 = run(b, mb, w, e), t32 = e->code ? -1 : run(b, m32, w, e);
        else t32 = run(b, m32, w, e), t16 = e->code ? -1 : run(b, mb, w, e);
        if (e->code) break;
        r[p] = t32 / t16, s32 += t32, s16 += t16;
    }
    if (e->code) return e->code;
    double med = bench_median(r, PAIRS);
    json_t *x = json_pack("{s:f, s:f}", "fp32_s", s32 / PAIRS, "bf16_s", s16 / PAIRS);
    if (w->kind == 0) {
        double peak = bench_peak_now(b), gf = bench_prefill_flops(b->m, w->P) / (s16 / PAIRS) / 1e9;
        json_object_set_new(x, "bf16_gflops", json_real(gf));
        json_object_set_new(x, "bf16_vs_fp32_peak", json_real(gf / peak));
        bench_row(b, "compute", label, med, "x", -1, -1, x,
                  "median of %d pairs of t(fp32) / t(bf16 products); mean %.2f s vs %.2f s; bf16 %.0f GFLOP/s = %.2f x the fp32 compute peak now (%.0f)",
                  PAIRS, s32 / PAIRS, s16 / PAIRS, gf, gf / peak, peak);
    } else
        bench_row(b, "compute", label, med, "x", -1, -1, x, "median of %d pairs of t(fp32) / t(bf16 products); mean %.3f s vs %.3f s", PAIRS,
                  s32 / PAIRS, s16 / PAIRS);
    return PM_OK;
}

/* compare() of work `kind` (1 or 3) on a synthetic clip of `secs` s. */
static int compare_clip(bench_ctx *b, pm_model *mb, int kind, int secs, const char *label, pm_err *e) {
    work w = {kind, 0, NULL, 0};
    double *x = bench_synth_audio(secs, &w.n);
    w.x = x;
    bench_progress("compute: %s", label);
    if (!x) pm_errf(e, PM_ENOMEM, "out of memory");
    else compare(b, mb, &w, label, e);
    free(x);
    return e->code;
}

int bench_compute(bench_ctx *b) {
    if (!pm_kern_have_avx512bf16()) {
        bench_progress("compute: no AVX512-BF16 on this CPU, nothing to compare");
        return 0;
    }
    pm_err e = {0};
    char err[1024], label[80];
    pm_model *mb = NULL;
    pm_load_options lo = {.mlock = b->o.mlock, .compute_bf16 = 1};
    bench_progress("compute: loading %s with --compute bf16", b->o.model_dir);
    if (pm_model_load_opts(&mb, b->o.model_dir, &lo, err, sizeof err)) {
        fprintf(stderr, "phi4mm bench: compute: %s\n", err);
        return PM_EINVAL;
    }
    for (int i = 0; i < b->o.n_prefill && !e.code; i++) {
        work w = {0, b->o.prefill[i], NULL, 0};
        snprintf(label, sizeof label, "prefill %d tokens, bf16 / fp32 products", w.P);
        bench_progress("%s", label);
        compare(b, mb, &w, label, &e);
    }
    int audio = !b->o.skip_audio && mb->conformer && mb->audio_proj;
    if (!e.code && audio) compare_clip(b, mb, 1, 10, "audio 10 s Conformer + projection, bf16 / fp32 products", &e);
    if (!e.code && audio && !b->o.skip_ttft) compare_clip(b, mb, 3, 30, "TTFT 30 s transcription, bf16 / fp32 products", &e);
    if (!e.code && !b->o.skip_image && mb->image) {
        work w = {2, 0, NULL, 0};
        bench_progress("compute: image 448x448");
        compare(b, mb, &w, "image 448x448 SigLIP + projection, bf16 / fp32 products", &e);
    }
    pm_model_free(mb);
    if (e.code) fprintf(stderr, "phi4mm bench: compute: %s\n", e.msg);
    return e.code;
}
