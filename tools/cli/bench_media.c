/* bench_media.c — the media encoders and the tokenizer.
 *
 * Audio: a synthetic 16 kHz clip (a chirp over noise) of each --audio length, timed stage by stage:
 * log-mel features, Conformer, speech projection; real-time factor = total / clip length; GFLOP/s
 * against the compute peak (bracketing, and paired per pass: bench.h), with FLOPs = 2 x (every
 * weight of the Conformer blocks) x frames + the NeMo subsampling convs + attention scores/values +
 * the projection. Then the time to first token
 * of a 30 s transcription through the public engine API (submit = features + encoders + prompt,
 * then steps until the first token).
 * Image: synthetic RGB images of 448x448 and 1344x896, timed as dynamic-HD preprocessing, then
 * SigLIP + HD merge + projection, one pass each after an untimed first one; FLOPs = 2 x (layer
 * weights of the computed layers) x patches x crops + attention + patch embedding + projection.
 * Tokenizer: pm_tok_encode vs pm_tok_encode_naive on ~1 MB of mixed text (English prose, code,
 * numbers, accented and CJK text), MB/s of input, ids checked equal. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/features.h"
#include "bench.h"
#include "engine/json_mode.h"
#include "engine/regex.h"
#include "model/audio_proj.h"
#include "model/conformer.h"
#include "tok/tokenizer.h"
#include "vision/hd.h"
#include "vision/image_embed.h"
#include "vision/siglip.h"

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s;
}

/* Sum of numel over tensors whose name starts with prefix, contains `has` (NULL: any) and has at
 * least min_ndim dims; names ending in one of the `skip` suffixes are left out. */
static double numel_where(const pm_weights *w, const char *prefix, const char *has, int min_ndim) {
    double s = 0;
    size_t pl = strlen(prefix);
    for (int i = 0; i < pm_weights_count(w); i++) {
        const pm_tensor *t = pm_weights_at(w, i);
        if (strncmp(t->name, prefix, pl) || t->ndim < min_ndim) continue;
        if (has && !strstr(t->name, has)) continue;
        size_t nl = strlen(t->name);
        if (nl > 3 && (!strcmp(t->name + nl - 3, ".b1") || !strcmp(t->name + nl - 3, ".b2"))) continue;
        s += (double)t->numel;
    }
    return s;
}

double *bench_synth_audio(int secs, size_t *n) {
    *n = (size_t)secs * 16000;
    double *x = malloc(sizeof(double) * *n);
    if (!x) return NULL;
    uint32_t s = 9;
    double ph = 0;
    for (size_t i = 0; i < *n; i++) {
        double t = (double)i / 16000.0, f = 200.0 + 1800.0 * fmod(t, 3.0) / 3.0;
        ph += 2 * M_PI * f / 16000.0;
        x[i] = 0.3 * sin(ph) + 0.02 * ((double)(lcg(&s) >> 8) / 16777216.0 - 0.5);
        x[i] = round(x[i] * 32767.0) / 32768.0; /* int16-valued like a decoded WAV */
    }
    return x;
}

/* FLOPs of the Conformer on T log-mel frames of one clip (T' = ceil(T/8) encoder frames). */
static double conformer_flops(const pm_model *m, int T, int Tp) {
    const pm_conformer_config *c = &m->conf_cfg;
    double blocks = 2.0 * numel_where(m->w, "model.embed_tokens_extend.audio_embed.encoder.encoders.", NULL, 2) * Tp;
    /* attention: chunks of at most 500 frames, QK^T and PV per block */
    double att = 0;
    for (int t0 = 0; t0 < Tp; t0 += PM_CONFORMER_MAX_SEQ) {
        double L = Tp > PM_CONFORMER_MAX_SEQ ? PM_CONFORMER_MAX_SEQ : Tp;
        att += 4.0 * L * L * c->attention_dim;
    }
    att *= c->num_blocks;
    /* NeMo dw-striding subsampling: conv 3x3 (1 -> C) then per further stage dw 3x3 + pw 1x1 (C -> C), each halving
     * time and frequency; then Linear(C * F_last, D). */
    double C = c->conv_channels, F = c->input_size, t = T, sub = 0;
    int stages = 0;
    for (int r = c->time_reduction; r > 1; r /= 2) stages++;
    for (int s = 0; s < stages; s++) {
        t = ceil(t / 2);
        F = ceil(F / 2);
        sub += s == 0 ? 2.0 * 9 * C * t * F : 2.0 * 9 * C * t * F + 2.0 * C * C * t * F;
    }
    sub += 2.0 * C * F * c->attention_dim * Tp;
    return blocks + att + sub;
}

/* One pass of features + Conformer + projection; times in t[3]. */
int bench_audio_pass(const pm_model *m, const double *x, size_t n, double t[3], int *frames, int *t_enc, pm_err *e) {
    pm_logmel mel = {0};
    float *feats = NULL, *enc = NULL, *proj = NULL;
    uint8_t *mask = NULL;
    int t_max = 0;
    int64_t es = 0;
    double t0 = bench_now();
    if (pm_audio_logmel(x, n, 16000, &mel, e) || pm_audio_batch(&mel, 1, &feats, &mask, &t_max, &es, e)) goto done;
    double t1 = bench_now();
    if (pm_conformer_forward(m->conformer, feats, 1, t_max, &mel.frames, 0, &enc, t_enc, NULL, e)) goto done;
    double t2 = bench_now();
    proj = malloc(sizeof(float) * (size_t)*t_enc * m->llm.c.hidden);
    if (!proj) {
        pm_errf(e, PM_ENOMEM, "out of memory");
        goto done;
    }
    if (pm_audio_proj_forward(m->audio_proj, PM_AUDIO_PROJ_SPEECH, enc, *t_enc, proj, e)) goto done;
    t[0] = t1 - t0, t[1] = t2 - t1, t[2] = bench_now() - t2;
    *frames = mel.frames;
done:
    pm_logmel_free(&mel);
    free(feats); free(mask); free(enc); free(proj);
    return e->code;
}

/* Two untimed warm-up passes (the first one's time is reported: the first audio of a process also
 * faults in the encoder's weights; the second packs them, conformer_pack.c), then the median of
 * three passes (one pass of a 10 s clip is ~0.4 s: a single one mostly measures the VM's mood),
 * against the compute peak bracketing all three, and paired per pass. */
static int audio_one(bench_ctx *b, int secs, pm_err *e) {
    const pm_model *m = b->m;
    size_t n;
    double *x = bench_synth_audio(secs, &n);
    if (!x) return pm_errf(e, PM_ENOMEM, "out of memory");
    double t[3][3], tot[3], peak_i[3], first = bench_now();
    int frames = 0, t_enc = 0;
    bench_audio_pass(m, x, n, t[0], &frames, &t_enc, e);
    first = bench_now() - first;
    if (!e->code) bench_audio_pass(m, x, n, t[0], &frames, &t_enc, e);
    double peak = bench_peak_now(b);
    for (int r = 0; r < 3 && !e->code; r++) {
        peak_i[r] = r ? bench_peak_now(b) : peak; /* this pass's moment */
        if (!bench_audio_pass(m, x, n, t[r], &frames, &t_enc, e)) tot[r] = t[r][0] + t[r][1] + t[r][2];
    }
    free(x);
    if (e->code) return e->code;
    peak = bench_peak_bracket(b, peak);
    int md = (tot[0] <= tot[1]) == (tot[1] <= tot[2]) ? 1 : (tot[1] <= tot[0]) == (tot[0] <= tot[2]) ? 0 : 2;
    double fc = conformer_flops(m, frames, t_enc);
    double fp = 2.0 * numel_where(m->w, "model.embed_tokens_extend.audio_embed.audio_projection.speech.", NULL, 2) * t_enc;
    double total = tot[md], gf = (fc + fp) / (t[md][1] + t[md][2]) / 1e9, paired[3];
    for (int r = 0; r < 3; r++) paired[r] = (fc + fp) / (t[r][1] + t[r][2]) / 1e9 / peak_i[r];
    double paired_med = bench_median(paired, 3);
    char label[64];
    snprintf(label, sizeof label, "audio %d s clip", secs);
    json_t *xj = json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:[f, f, f]}", "seconds_audio", secs, "frames", frames,
                           "encoder_frames", t_enc, "features_s", t[md][0], "conformer_s", t[md][1], "projection_s", t[md][2], "rtf",
                           total / secs, "conformer_tflop", fc / 1e12, "encoder_gflops", gf, "peak_gflops_now", peak, "passes_s", tot[0],
                           tot[1], tot[2]);
    json_object_set_new(xj, "paired_ratio_median", json_real(paired_med));
    json_object_set_new(xj, "first_pass_s", json_real(first));
    bench_row(b, "audio", label, total / secs, "RTF", -1, gf / peak, xj,
              "median of 3 (%.2f/%.2f/%.2f s) after a first pass of %.2f s: features %.2f s + Conformer %.2f s + projection %.3f s; %.0f GFLOP -> %.1f GFLOP/s (ratio vs the compute peak bracketing the row; paired %.2f)",
              tot[0], tot[1], tot[2], first, t[md][0], t[md][1], t[md][2], (fc + fp) / 1e9, gf, paired_med);
    return PM_OK;
}

typedef struct ttft_state {
    double t_first;
    int prompt_tokens, done;
} ttft_state;

static int on_tok(void *u, int32_t tok, const char *text, size_t len) {
    (void)tok; (void)text; (void)len;
    ttft_state *s = u;
    if (s->t_first == 0) s->t_first = bench_now();
    return 0;
}

static void on_done(void *u, pm_finish why, int pt, int ct, const char *err) {
    (void)why; (void)ct; (void)err;
    ttft_state *s = u;
    s->prompt_tokens = pt;
    s->done = 1;
}

double bench_ttft_seconds(pm_model *m, const double *x, size_t n, double *t_submit, int *prompt_tokens, char *err, size_t errlen) {
    pm_audio_in a = {x, n, 16000};
    pm_request r;
    memset(&r, 0, sizeof r);
    r.prompt = "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>";
    r.audios = &a;
    r.n_audios = 1;
    r.max_tokens = 1;
    ttft_state st = {0};
    pm_callbacks cb = {.on_token = on_tok, .on_done = on_done, .user = &st};
    pm_engine *eng;
    if (pm_engine_new(&eng, m, NULL, err, errlen)) return -1;
    double t0 = bench_now();
    int rc = pm_engine_submit(eng, &r, &cb, NULL, err, errlen);
    *t_submit = bench_now() - t0;
    while (!rc && pm_engine_live(eng) > 0)
        if (pm_engine_step(eng) < 0) rc = snprintf(err, errlen, "engine step failed") > 0 ? -1 : -1;
    double t_end = bench_now();
    pm_engine_free(eng);
    *prompt_tokens = st.prompt_tokens;
    return rc ? -1 : (st.t_first ? st.t_first : t_end) - t0;
}

static int ttft(bench_ctx *b, int secs) {
    size_t n;
    double *x = bench_synth_audio(secs, &n);
    if (!x) return PM_ENOMEM;
    char err[1024];
    double t_sub = 0;
    int ptok = 0;
    double first = bench_ttft_seconds(b->m, x, n, &t_sub, &ptok, err, sizeof err);
    free(x);
    if (first < 0) {
        fprintf(stderr, "phi4mm bench: ttft: %s\n", err);
        return PM_EINVAL;
    }
    char label[64];
    snprintf(label, sizeof label, "TTFT %d s transcription", secs);
    bench_row(b, "audio", label, first, "s", -1, -1,
              json_pack("{s:i, s:f, s:f, s:i}", "seconds_audio", secs, "submit_s", t_sub, "prefill_s", first - t_sub, "prompt_tokens", ptok),
              "submit (features + Conformer + projection + prompt) %.2f s, prefill of %d tokens with the speech LoRA %.2f s", t_sub, ptok,
              first - t_sub);
    return PM_OK;
}

int bench_audio(bench_ctx *b) {
    pm_err e = {0};
    if (!b->m->conformer || !b->m->audio_proj) return PM_OK;
    for (int i = 0; i < b->o.n_audio && !e.code; i++) {
        bench_progress("audio %d s", b->o.audio_secs[i]);
        audio_one(b, b->o.audio_secs[i], &e);
    }
    if (e.code) {
        fprintf(stderr, "phi4mm bench: audio: %s\n", e.msg);
        return e.code;
    }
    if (!b->o.skip_ttft) {
        bench_progress("TTFT of a 30 s transcription");
        return ttft(b, 30);
    }
    return PM_OK;
}

/* ---------------------------------------------------------------- image */

uint8_t *bench_synth_rgb(int W, int H) {
    uint8_t *rgb = malloc((size_t)W * H * 3);
    if (!rgb) return NULL;
    uint32_t s = 3;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++)
                rgb[((size_t)y * W + x) * 3 + c] = (uint8_t)((x * (c + 1) + y * (3 - c)) / 7 + (lcg(&s) >> 28));
    return rgb;
}

/* One timed pass (HD preprocessing, then SigLIP + merge + projection) of a W x H image. warm: one
 * untimed pass first, its time reported: the first image of a process also faults in the vision
 * tower's ~0.9 GB of mapped weights, as the audio rows' first pass does for the encoder. */
static int image_one(bench_ctx *b, int W, int H, int warm, pm_err *e) {
    const pm_model *m = b->m;
    uint8_t *rgb = bench_synth_rgb(W, H);
    if (!rgb) return pm_errf(e, PM_ENOMEM, "out of memory");
    pm_image img = {rgb, W, H};
    pm_hd_image hd = {0};
    float *out = NULL;
    int ntok = 0;
    double first = bench_now();
    if (warm) {
        if (pm_hd_preprocess(&img, m->dynamic_hd, m->crop_size, &hd, e) ||
            pm_image_embed_forward(m->image, hd.pixels, hd.crop_mask, hd.n_crops, hd.h_crops, hd.w_crops, &out, &ntok, NULL, e))
            goto done;
        pm_hd_free(&hd);
        free(out);
        out = NULL;
    }
    first = bench_now() - first;
    double peak = bench_peak_now(b);
    double t0 = bench_now();
    if (pm_hd_preprocess(&img, m->dynamic_hd, m->crop_size, &hd, e)) goto done;
    double t1 = bench_now();
    if (pm_image_embed_forward(m->image, hd.pixels, hd.crop_mask, hd.n_crops, hd.h_crops, hd.w_crops, &out, &ntok, NULL, e)) goto done;
    double t2 = bench_now();
    peak = bench_peak_bracket(b, peak);
    const pm_siglip_config *sc = pm_siglip_get_config(pm_image_embed_siglip(m->image));
    int grid = sc->image_size / sc->patch_size, P = grid * grid;
    int used = sc->layer_idx < 0 ? sc->layers + sc->layer_idx + 1 : sc->layer_idx;
    double per_layer = 0;
    char pfx[160];
    for (int l = 0; l < used; l++) {
        snprintf(pfx, sizeof pfx, "model.embed_tokens_extend.image_embed.img_processor.encoder.layers.%d.", l);
        per_layer += numel_where(m->w, pfx, NULL, 2);
    }
    double fv = hd.n_crops * (2.0 * per_layer * P + 4.0 * (double)P * P * sc->hidden * used +
                              2.0 * numel_where(m->w, "model.embed_tokens_extend.image_embed.img_processor.embeddings.patch_embedding", NULL, 2) * P);
    double fp = 2.0 * numel_where(m->w, "model.embed_tokens_extend.image_embed.img_projection", NULL, 2) * ntok;
    double gf = (fv + fp) / (t2 - t1) / 1e9;
    char label[64];
    snprintf(label, sizeof label, "image %dx%d", W, H);
    json_t *xj = json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f}", "width", W, "height", H, "crops", hd.n_crops, "tokens",
                           ntok, "hd_s", t1 - t0, "siglip_proj_s", t2 - t1, "tflop", (fv + fp) / 1e12, "gflops", gf, "peak_gflops_now", peak);
    char firstnote[64] = "";
    if (warm) {
        json_object_set_new(xj, "first_pass_s", json_real(first));
        snprintf(firstnote, sizeof firstnote, " (after a first pass of %.2f s)", first);
    }
    bench_row(b, "image", label, t2 - t0, "s", -1, gf / peak, xj,
              "%d crops -> %d tokens%s; HD %.2f s + SigLIP/merge/projection %.2f s; %.2f TFLOP -> %.1f GFLOP/s (%.1f s per crop)",
              hd.n_crops, ntok, firstnote, t1 - t0, t2 - t1, (fv + fp) / 1e12, gf, (t2 - t1) / hd.n_crops);
done:
    pm_hd_free(&hd);
    free(out);
    free(rgb);
    return e->code;
}

int bench_image(bench_ctx *b) {
    pm_err e = {0};
    if (!b->m->image) return PM_OK;
    int sizes[2][2] = {{448, 448}, {1344, 896}};
    for (int i = 0; i < 2 && !e.code; i++) {
        bench_progress("image %dx%d", sizes[i][0], sizes[i][1]);
        image_one(b, sizes[i][0], sizes[i][1], i == 0, &e);
    }
    if (e.code) fprintf(stderr, "phi4mm bench: image: %s\n", e.msg);
    return e.code;
}

/* ---------------------------------------------------------------- tokenizer */

static char *make_text(size_t target, size_t *len) {
    static const char *parts[] = {
        "The quick brown fox jumps over the lazy dog. ",
        "In 2024, researchers measured 3,141 samples at 59.94 Hz and reported a 12.5% gain. ",
        "She said: \"we're not sure it'll work, but they've tried\" — and then left.\n",
        "def forward(self, x):\n    return self.proj(torch.relu(x)) + 1e-5\n",
        "Les élèves ont étudié l'été dernier à Zürich; naïve café, coöperate. ",
        "東京の天気は晴れです。今日は良い日ですね。",
        "Привет, как дела? Всё хорошо. ",
        "   indented\ttext with\ttabs and  double  spaces\r\n",
        "https://example.com/path?q=phi-4&lang=en#section-2 ",
        "<|user|>Transcribe the audio clip into text.<|end|><|assistant|>",
    };
    size_t np = sizeof parts / sizeof parts[0];
    char *t = malloc(target + 256);
    if (!t) return NULL;
    size_t n = 0;
    uint32_t s = 1;
    while (n < target) {
        const char *p = parts[lcg(&s) % np];
        size_t l = strlen(p);
        memcpy(t + n, p, l);
        n += l;
        n += (size_t)snprintf(t + n, 16, "%u ", lcg(&s) % 100000u);
    }
    t[n] = 0;
    *len = n;
    return t;
}

/* JSON mode's mask over the whole vocabulary, the work it adds to every step of such a request,
 * at five places of an answer: before it, between members, in a number, inside a string, inside a
 * bounded one. */
static int bench_json_mask(bench_ctx *b, const pm_tokenizer *tok) {
    enum { REPS = 40, PLACES = 5 };
    static const char *const where[PLACES] = {"before the value", "between members", "in a number", "in a string", "in a bounded string"};
    static const char *const text[PLACES] = {"", "{\"name\": \"Ada\", ", "{\"name\": \"Ada\", \"age\": 36", "{\"name\": \"Ada Lovel",
                                             "{\"s\": \"Ada Lovel"};
    int V = pm_tok_vocab_size(tok);
    double t0 = bench_now();
    pm_json_vocab *jv = pm_json_vocab_new(tok, V);
    double t_index = bench_now() - t0;
    pm_json_schema *sch = NULL;
    pm_err e = {0};
    float *lg = malloc(sizeof(float) * (size_t)V);
    uint8_t *allow = malloc((size_t)V);
    if (!jv || !lg || !allow || pm_json_schema_compile("{\"properties\": {\"s\": {\"type\": \"string\", \"maxLength\": 64}}}", &sch, &e)) {
        pm_json_vocab_free(jv);
        free(lg);
        free(allow);
        return e.code ? e.code : PM_ENOMEM;
    }
    const int32_t eos[] = {pm_tok_id(tok, "<|end|>"), pm_tok_id(tok, "<|endoftext|>")};
    double ms[PLACES], worst = 0;
    for (int k = 0; k < PLACES; k++) {
        pm_json_state st;
        pm_json_init(&st, k == PLACES - 1 ? pm_json_schema_root(sch) : pm_json_any_object());
        pm_json_feed(&st, text[k], strlen(text[k]));
        double t[REPS];
        for (int r = 0; r < REPS; r++) {
            for (int v = 0; v < V; v++) lg[v] = 0.0f;
            double s0 = bench_now();
            pm_json_mask(&st, jv, eos, 2, lg, allow);
            t[r] = bench_now() - s0;
        }
        ms[k] = 1e3 * bench_median(t, REPS);
        if (ms[k] > worst) worst = ms[k];
    }
    bench_row(b, "sampling", "JSON mode mask a step", worst, "ms", -1, -1,
              json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "vocab", V, "index_s", t_index, "before_ms", ms[0], "between_ms", ms[1],
                        "number_ms", ms[2], "string_ms", ms[3], "bounded_string_ms", ms[4]),
              "the slowest of: %s %.2f, %s %.2f, %s %.2f, %s %.2f, %s %.2f ms (median of %d masks over %d tokens); index built once "
              "in %.0f ms",
              where[0], ms[0], where[1], ms[1], where[2], ms[2], where[3], ms[3], where[4], ms[4], REPS, V, 1e3 * t_index);
    pm_json_schema_free(sch);
    pm_json_vocab_free(jv);
    free(lg);
    free(allow);
    return PM_OK;
}

/* A guided pattern's mask (vLLM's guided_regex / guided_choice) over the whole vocabulary, the work
 * it adds to every step: patterns that keep few tokens and ones that keep nearly all (each kept
 * token walked to its end), at their start, made afresh and kept (a state the output came back
 * to); the compile times beside. */
static int bench_regex_mask(bench_ctx *b, const pm_tokenizer *tok) {
    enum { REPS = 40, PATS = 4 };
    static const char *const pat[PATS] = {"(yes|no|maybe)", "[A-Z]{2}-\\d{3}", "\\w+( \\w+)*", "[^\"]{0,1000}"};
    /* answers each pattern holds, fed 3 bytes a step (about a token's) with the sequence's masks kept */
    static const char *const answer[PATS] = {"maybe", "AB-123", "Once upon a time there was a cat who lived by the sea",
                                             "Once upon a time, in a land far away, there lived a cat who loved the sea."};
    int V = pm_tok_vocab_size(tok);
    double t0 = bench_now();
    pm_regex_vocab *rv = pm_regex_vocab_new(tok, V);
    double t_index = bench_now() - t0;
    float *lg = malloc(sizeof(float) * (size_t)V);
    uint8_t *allow = malloc((size_t)V);
    int rc = rv && lg && allow ? PM_OK : PM_ENOMEM;
    const int32_t eos[] = {pm_tok_id(tok, "<|end|>"), pm_tok_id(tok, "<|endoftext|>")};
    double ms[PATS] = {0}, cms[PATS] = {0}, worst = 0, kept_worst = 0, along[PATS] = {0}, along_worst = 0;
    int kept[PATS] = {0};
    for (int k = 0; k < PATS && !rc; k++) {
        pm_regex *rx = NULL;
        pm_err e = {0};
        t0 = bench_now();
        if ((rc = pm_regex_compile(pat[k], strlen(pat[k]), &rx, &e))) break;
        cms[k] = 1e3 * (bench_now() - t0);
        double t[REPS];
        for (int r = 0; r < REPS; r++) {
            for (int v = 0; v < V; v++) lg[v] = 0.0f;
            double s0 = bench_now();
            pm_regex_mask(rx, pm_regex_start(rx), rv, NULL, eos, 2, lg, allow);
            t[r] = bench_now() - s0;
        }
        for (int v = 0; v < V; v++) kept[k] += allow[v];
        ms[k] = 1e3 * bench_median(t, REPS);
        if (ms[k] > worst) worst = ms[k];
        pm_regex_masks *m = pm_regex_masks_new(rx, rv); /* a state the output comes back to: its mask kept */
        for (int r = 0; r <= REPS && m; r++) {
            double s0 = bench_now();
            pm_regex_mask(rx, pm_regex_start(rx), rv, m, eos, 2, lg, allow);
            if (r) t[r - 1] = bench_now() - s0;
        }
        if (m && 1e3 * bench_median(t, REPS) > kept_worst) kept_worst = 1e3 * bench_median(t, REPS);
        pm_regex_masks_free(m);
        m = pm_regex_masks_new(rx, rv); /* along an answer: a new state most steps */
        int32_t st = pm_regex_start(rx);
        int steps = 0;
        for (size_t at = 0, n = strlen(answer[k]); at < n && st && m && steps < REPS; at += 3, steps++) {
            double s0 = bench_now();
            pm_regex_mask(rx, st, rv, m, eos, 2, lg, allow);
            t[steps] = bench_now() - s0;
            st = pm_regex_feed(rx, st, answer[k] + at, n - at < 3 ? n - at : 3);
        }
        if (steps) along[k] = 1e3 * bench_median(t, steps);
        if (along[k] > along_worst) along_worst = along[k];
        pm_regex_masks_free(m);
        pm_regex_free(rx);
    }
    if (!rc)
        bench_row(b, "sampling", "guided pattern mask a step", worst, "ms", -1, -1,
                  json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "vocab", V, "index_s", t_index, "kept_ms",
                            kept_worst, "along_ms", along_worst, "along_not_quote_ms", along[3], "choice_ms", ms[0],
                            "code_ms", ms[1], "words_ms", ms[2], "not_quote_ms", ms[3], "choice_compile_ms", cms[0], "code_compile_ms",
                            cms[1], "words_compile_ms", cms[2], "not_quote_compile_ms", cms[3]),
                  "the slowest of: %s %.2f (%d tokens kept), %s %.2f (%d), %s %.2f (%d), %s %.2f ms (%d) (median of %d masks over %d "
                  "tokens; at a state whose mask the sequence kept: %.2f ms at worst; along an answer, 3 bytes a step, the masks kept: "
                  "%.2f / %.2f / %.2f / %.2f ms); compiled in %.2f / %.2f / %.2f / %.2f ms; index built once in %.0f ms",
                  pat[0], ms[0], kept[0], pat[1], ms[1], kept[1], pat[2], ms[2], kept[2], pat[3], ms[3], kept[3], REPS, V, kept_worst,
                  along[0], along[1], along[2], along[3], cms[0], cms[1], cms[2], cms[3], 1e3 * t_index);
    pm_regex_vocab_free(rv);
    free(lg);
    free(allow);
    return rc;
}

int bench_tok(bench_ctx *b) {
    pm_err e = {0};
    pm_tokenizer *tok = NULL;
    const char *path = b->o.tokenizer_path;
    char buf[4200];
    if (!path) {
        snprintf(buf, sizeof buf, "%s/tokenizer.json", b->o.model_dir);
        path = buf;
    }
    if (pm_tok_load_file(&tok, path, &e)) {
        fprintf(stderr, "phi4mm bench: tokenizer: %s\n", e.msg);
        return e.code;
    }
    size_t len = 0;
    char *text = make_text((size_t)1 << 20, &len);
    if (!text) {
        pm_tok_free(tok);
        return PM_ENOMEM;
    }
    int32_t *a = NULL, *c = NULL;
    size_t na = 0, nc = 0;
    double best = 1e30;
    for (int r = 0; r < 3 && !e.code; r++) {
        free(a);
        double t0 = bench_now();
        pm_tok_encode(tok, text, len, 1, &a, &na, &e);
        double t = bench_now() - t0;
        if (t < best) best = t;
    }
    double t0 = bench_now();
    if (!e.code) pm_tok_encode_naive(tok, text, len, &c, &nc, &e);
    double tn = bench_now() - t0;
    if (!e.code) {
        int same = na == nc && !memcmp(a, c, sizeof(int32_t) * na);
        double mbs = len / best / 1e6, mbn = len / tn / 1e6;
        bench_row(b, "tokenizer", "encode", mbs, "MB/s", mbn, mbs / mbn,
                  json_pack("{s:s, s:i, s:i, s:f, s:b}", "tokenizer", path, "bytes", (int)len, "tokens", (int)na, "naive_mbs", mbn,
                            "ids_equal", same),
                  "%zu tokens from %.2f MB; naive BPE %.2f MB/s (ratio = speedup over naive)%s", na, len / 1e6, mbn,
                  same ? "" : " — IDS DIFFER FROM THE NAIVE ENCODER");
    } else fprintf(stderr, "phi4mm bench: tokenizer: %s\n", e.msg);
    free(a); free(c); free(text);
    if (!e.code) e.code = bench_json_mask(b, tok);
    if (!e.code) e.code = bench_regex_mask(b, tok);
    if (!e.code) e.code = bench_grammar_mask(b, tok);
    pm_tok_free(tok);
    return e.code;
}
