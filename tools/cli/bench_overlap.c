/* bench_overlap.c — what a live stream sees while another request's image is encoded and its
 * prompt prefilled, and while another sequence's LongRoPE recompute runs.
 *
 * Inline: pm_engine_submit on the stepping thread (what `phi4mm serve --prompt-threads inline`
 * does): the stream pauses for the whole encode, then for every prefill chunk of the new prompt.
 * Beside: pm_engine_encode + pm_engine_prefill on a second thread while this one keeps stepping,
 * the OpenMP threads split between the two as the server splits them. Reported: the stream's
 * longest gap between tokens in each case, the tokens it got meanwhile, and the image request's
 * time to first token in each case (sharing the cores, it is longer beside).
 * LongRoPE: a sequence crossing original_max_position recomputes its whole cache; inline the steps
 * run it a prefill chunk at a time (the stream waits for each), beside the second thread does
 * (pm_engine_opts.recompute_beside, as `serve` runs it). */
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

typedef struct stream_clock {
    double last, longest, since; /* gaps are counted from `since` on */
    int tokens;
} stream_clock;

static int on_tok(void *u, int32_t tok, const char *text, size_t len) {
    (void)tok; (void)text; (void)len;
    stream_clock *c = u;
    double t = bench_now();
    if (t >= c->since) {
        double from = c->last > c->since ? c->last : c->since;
        if (t - from > c->longest) c->longest = t - from;
        c->tokens++;
    }
    c->last = t;
    return 0;
}

typedef struct encoder {
    const pm_engine *eng;
    const pm_request *req;
    int threads, rc;
    pm_encoded *enc;
    double encode_s, seconds; /* the encode, and encode + prefill */
    atomic_int done;
    char err[512];
} encoder;

/* Encode (unless enc is given: a LongRoPE recompute), then prefill one engine chunk per call, as
 * the server's prompt thread does. */
static void *encode_main(void *u) {
    encoder *x = u;
    omp_set_num_threads(x->threads);
    double t0 = bench_now();
    if (x->req) x->rc = pm_engine_encode(x->eng, x->req, &x->enc, x->err, sizeof x->err);
    x->encode_s = bench_now() - t0;
    for (int r = 0; !x->rc && r == 0;)
        if ((r = pm_engine_prefill(x->eng, x->enc, 1, x->err, sizeof x->err)) < 0) x->rc = r;
    x->seconds = bench_now() - t0;
    atomic_store(&x->done, 1);
    return NULL;
}

/* The image encode asked to stop 1 s in (a client gone, a server stopping: pm_request.should_stop,
 * asked between SIGLIP layers): how long after the request it gives up. */
typedef struct stopper {
    atomic_int go;
    double at;
} stopper;

static int stop_hook(void *u) { return atomic_load(&((stopper *)u)->go); }

static void *stop_later(void *u) {
    stopper *st = u;
    struct timespec d = {1, 0};
    nanosleep(&d, NULL);
    st->at = bench_now();
    atomic_store(&st->go, 1);
    return NULL;
}

static int encode_stopped(bench_ctx *b, pm_engine *eng, const pm_request *img, double whole_s) {
    pm_request r = *img;
    stopper st = {0};
    r.should_stop = stop_hook;
    r.stop_user = &st;
    pthread_t th;
    pm_encoded *enc = NULL;
    char err[512] = "";
    if (pthread_create(&th, NULL, stop_later, &st)) return PM_ESTATE;
    int rc = pm_engine_encode(eng, &r, &enc, err, sizeof err);
    double t = bench_now();
    pthread_join(th, NULL);
    pm_encoded_free(enc);
    if (rc != PM_ECANCELED) { /* finished within the second (a small model): nothing to time */
        if (rc) fprintf(stderr, "phi4mm bench: image encode stopped: %s\n", err[0] ? err : pm_status_name(rc));
        return rc;
    }
    bench_row(b, "serve", "image encode stopped", t - st.at, "s", -1, -1, json_pack("{s:f}", "whole_encode_s", whole_s),
              "the 1344x896 image's encode asked to stop 1 s in (pm_request.should_stop, asked between SigLIP layers: a client gone, "
              "a server stopping): it gave up %.3f s later (the whole encode: %.1f s)",
              t - st.at, whole_s);
    return PM_OK;
}

static int step_n(pm_engine *eng, int n) {
    for (int i = 0; i < n && pm_engine_live(eng) > 0; i++) {
        int k = pm_engine_step(eng);
        if (k < 0) return k;
    }
    return pm_engine_live(eng) > 0 ? PM_OK : PM_ESTATE;
}

int bench_overlap(bench_ctx *b) {
    if (!b->m->image) return PM_OK;
    enum { W = 1344, H = 896 };
    bench_progress("a stream beside a %dx%d image request", W, H);
    uint8_t *rgb = bench_synth_rgb(W, H);
    if (!rgb) return PM_ENOMEM;
    pm_image_in im = {rgb, W, H};
    pm_request img, txt;
    memset(&img, 0, sizeof img);
    memset(&txt, 0, sizeof txt);
    img.prompt = "<|user|><|image_1|>Describe the image.<|end|><|assistant|>";
    img.images = &im;
    img.n_images = 1;
    img.max_tokens = 1;
    txt.prompt = "<|user|>Tell me a long story about the sea.<|end|><|assistant|>";
    txt.max_tokens = 4096;
    stream_clock clk = {0}, first = {0}; /* the stream's tokens; the image request's one token */
    pm_callbacks cb = {.on_token = on_tok, .user = &clk}, cb_img = {.on_token = on_tok, .user = &first};
    int threads = omp_get_max_threads(), rc;
    int enc_threads = b->o.prompt_threads > 0 ? b->o.prompt_threads : threads > 1 ? threads / 2 : 1; /* as serve's auto */
    pm_engine *eng;
    char err[1024] = "";
    int64_t img_id = 0;
    encoder x = {0};
    pthread_t th;
    if ((rc = pm_engine_new(&eng, b->m, NULL, err, sizeof err))) goto out_free;
    if ((rc = pm_engine_submit(eng, &txt, &cb, NULL, err, sizeof err)) || (rc = step_n(eng, 3))) goto out;
    double t0 = bench_now();
    if ((rc = step_n(eng, 4))) goto out;
    double step_alone = (bench_now() - t0) / 4;

    /* inline: the encode and the prefill chunks run where the steps do */
    clk.since = bench_now();
    clk.longest = 0;
    clk.tokens = 0;
    t0 = bench_now();
    if ((rc = pm_engine_submit(eng, &img, &cb_img, &img_id, err, sizeof err))) goto out;
    double enc_inline = bench_now() - t0;
    while (!first.tokens && !(rc = step_n(eng, 1))) {}
    if (rc) goto out;
    double ttft_inline = first.last - t0, gap_inline = clk.longest;
    int inline_tokens = clk.tokens;

    /* beside: the encode and the prefill on their own thread, the steps on the threads it leaves */
    if ((rc = step_n(eng, 2))) goto out;
    x = (encoder){eng, &img, enc_threads, 0, NULL, 0, 0, 0, ""};
    first = (stream_clock){0};
    omp_set_num_threads(threads > enc_threads ? threads - enc_threads : 1);
    clk.since = t0 = bench_now();
    clk.longest = 0;
    clk.tokens = 0;
    if (pthread_create(&th, NULL, encode_main, &x)) {
        rc = PM_ESTATE;
        snprintf(err, sizeof err, "cannot start a thread");
        goto out;
    }
    while (!atomic_load(&x.done) && !(rc = step_n(eng, 1))) {}
    pthread_join(th, NULL);
    double t_end = bench_now();
    int beside_tokens = clk.tokens;
    double gap_beside = clk.longest > t_end - clk.last ? clk.longest : t_end - clk.last;
    omp_set_num_threads(threads);
    if (!rc && x.rc) {
        rc = x.rc;
        snprintf(err, sizeof err, "%s", x.err);
    }
    if (rc) goto out;
    /* admitted prefilled: its first token comes at the next step */
    if ((rc = pm_engine_submit_encoded(eng, x.enc, &img, &cb_img, &img_id, err, sizeof err))) goto out;
    x.enc = NULL;
    while (!first.tokens && !(rc = step_n(eng, 1))) {}
    if (rc) goto out;
    double ttft_beside = first.last - t0;
    bench_row(b, "serve", "stream beside an image request", gap_beside, "s", -1, -1,
              json_pack("{s:i, s:i, s:f, s:f, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:i}", "width", W, "height", H, "gap_beside_s", gap_beside,
                        "gap_inline_s", gap_inline, "tokens_beside", beside_tokens, "tokens_inline", inline_tokens, "ttft_beside_s",
                        ttft_beside, "ttft_inline_s", ttft_inline, "encode_beside_s", x.encode_s, "encode_inline_s", enc_inline,
                        "step_alone_s", step_alone, "prompt_threads", enc_threads),
              "a live stream's longest pause while a %dx%d image request is encoded and prefilled: %.2f s with both on the prompt "
              "thread (%d tokens meanwhile; %d + %d threads) against %.2f s inline (%d tokens); the image request's first token after "
              "%.1f s beside (encode %.1f s) against %.1f s inline (encode %.1f s); a step alone %.3f s",
              W, H, gap_beside, beside_tokens, threads > enc_threads ? threads - enc_threads : 1, enc_threads, gap_inline, inline_tokens,
              ttft_beside, x.encode_s, ttft_inline, enc_inline, step_alone);
    rc = encode_stopped(b, eng, &img, enc_inline);
out:
    pm_encoded_free(x.enc);
    pm_engine_free(eng);
out_free:
    free(rgb);
    if (rc) fprintf(stderr, "phi4mm bench: stream beside an image request: %s\n", err[0] ? err : pm_status_name(rc));
    return rc;
}

/* A prompt of n ids (random, reproducible) past the text specials. */
static int32_t *long_ids(int n) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    uint32_t s = 7;
    for (int i = 0; ids && i < n; i++) {
        s = s * 1103515245u + 12345u;
        ids[i] = (int32_t)(1000 + (s >> 8) % 30000u);
    }
    return ids;
}

/* One run: a stream decoding, then a sequence of SWITCH - 4 prompt tokens (prefilled beforehand)
 * that crosses the switch at its 5th token and ends at its 8th. *gap: the stream's longest pause
 * from that sequence's admission to its end; *tokens: the stream's tokens meanwhile; *seconds:
 * that window; *rc_s: the recompute's own time beside (0 inline). */
static int longrope_run(bench_ctx *b, int beside, int switch_at, int enc_threads, double *gap, int *tokens, double *seconds, double *rc_s,
                        char *err, size_t errlen) {
    enum { LONG_TOKENS = 8 };
    int threads = omp_get_max_threads(), rc, n = switch_at - 4;
    int32_t *ids = long_ids(n);
    if (!ids) return PM_ENOMEM;
    pm_request lr, txt;
    memset(&lr, 0, sizeof lr);
    memset(&txt, 0, sizeof txt);
    lr.ids = ids;
    lr.n_ids = (size_t)n;
    lr.max_tokens = LONG_TOKENS;
    txt.prompt = "<|user|>Tell me a long story about the sea.<|end|><|assistant|>";
    txt.max_tokens = 100000;
    stream_clock clk = {0}, lclk = {0};
    pm_callbacks cb = {.on_token = on_tok, .user = &clk}, lcb = {.on_token = on_tok, .user = &lclk};
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.max_seqs = 2;
    o.kv_budget = -1;
    o.recompute_beside = beside;
    pm_engine *eng = NULL;
    pm_encoded *enc = NULL;
    encoder x = {0};
    pthread_t th;
    int away = 0;
    if ((rc = pm_engine_new(&eng, b->m, &o, err, errlen)) || (rc = pm_engine_encode(eng, &lr, &enc, err, errlen))) goto out;
    while ((rc = pm_engine_prefill(eng, enc, 1 << 20, err, errlen)) == 0) {}
    if (rc < 0) goto out;
    if ((rc = pm_engine_submit(eng, &txt, &cb, NULL, err, errlen)) || (rc = step_n(eng, 3))) goto out;
    clk.since = bench_now();
    clk.longest = 0;
    clk.tokens = 0;
    if ((rc = pm_engine_submit_encoded(eng, enc, &lr, &lcb, NULL, err, errlen))) goto out;
    enc = NULL;
    while (lclk.tokens < LONG_TOKENS && !rc) {
        if (beside && !away && pm_engine_take_recompute(eng, &x.enc, NULL) == 1) {
            x = (encoder){eng, NULL, enc_threads, 0, x.enc, 0, 0, 0, ""};
            omp_set_num_threads(threads > enc_threads ? threads - enc_threads : 1);
            if (pthread_create(&th, NULL, encode_main, &x)) {
                pm_engine_resume(eng, x.enc, "cannot start a thread");
                x.enc = NULL;
                rc = PM_ESTATE;
                snprintf(err, errlen, "cannot start a thread");
                break;
            }
            away = 1;
        }
        if (away == 1 && atomic_load(&x.done)) {
            pthread_join(th, NULL);
            omp_set_num_threads(threads);
            if (x.rc) {
                rc = x.rc;
                snprintf(err, errlen, "%s", x.err);
            }
            pm_engine_resume(eng, x.enc, x.rc ? x.err : NULL);
            x.enc = NULL;
            away = 2;
            if (rc) break;
        }
        rc = step_n(eng, 1);
    }
    *seconds = lclk.last - clk.since;
    *gap = clk.longest;
    *tokens = clk.tokens;
    *rc_s = x.seconds;
out:
    if (away == 1) { /* a failed step while the recompute ran: wait for it */
        pthread_join(th, NULL);
        pm_encoded_free(x.enc);
    }
    omp_set_num_threads(threads);
    pm_encoded_free(enc);
    pm_engine_free(eng);
    free(ids);
    return rc;
}

int bench_longrope(bench_ctx *b) {
    /* The switch is lowered for this row (the model's own: 4,096 on Phi-4-mini): a 2-chunk
     * recompute instead of 8 + 1 rows, the same pause per chunk, a quarter of the time. */
    enum { SWITCH = 1024 };
    pm_llm_config *c = &b->m->llm.c;
    int orig = c->orig_max_pos, threads = omp_get_max_threads(), rc;
    int enc_threads = b->o.prompt_threads > 0 ? b->o.prompt_threads : threads > 1 ? threads / 2 : 1; /* as serve's auto */
    double gap[2] = {0}, secs[2] = {0}, rc_s[2] = {0};
    int tok[2] = {0};
    char err[1024] = "";
    bench_progress("a stream beside a LongRoPE recompute");
    c->orig_max_pos = SWITCH;
    rc = longrope_run(b, 0, SWITCH, enc_threads, &gap[0], &tok[0], &secs[0], &rc_s[0], err, sizeof err);
    if (!rc) rc = longrope_run(b, 1, SWITCH, enc_threads, &gap[1], &tok[1], &secs[1], &rc_s[1], err, sizeof err);
    c->orig_max_pos = orig;
    if (rc) {
        fprintf(stderr, "phi4mm bench: stream beside a LongRoPE recompute: %s\n", err[0] ? err : pm_status_name(rc));
        return rc;
    }
    bench_row(b, "serve", "stream beside a LongRoPE recompute", gap[1], "s", -1, -1,
              json_pack("{s:i, s:f, s:f, s:i, s:i, s:f, s:f, s:f, s:i}", "switch_at", SWITCH, "gap_beside_s", gap[1], "gap_inline_s", gap[0],
                        "tokens_beside", tok[1], "tokens_inline", tok[0], "long_beside_s", secs[1], "long_inline_s", secs[0],
                        "recompute_beside_s", rc_s[1], "prompt_threads", enc_threads),
              "a live stream's longest pause while another sequence passes the LongRoPE switch (lowered to %d positions for this row) "
              "and recomputes its cache: %.2f s on the prompt thread (%d tokens meanwhile; %d + %d threads) against %.2f s in the "
              "steps (%d tokens); the switching sequence's last 8 tokens took %.1f s beside (recompute %.1f s) against %.1f s",
              SWITCH, gap[1], tok[1], threads > enc_threads ? threads - enc_threads : 1, enc_threads, gap[0], tok[0], secs[1], rc_s[1],
              secs[0]);
    return PM_OK;
}
