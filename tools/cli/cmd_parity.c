/* cmd_parity.c — `phi4mm parity --fixtures DIR [--case NAME]... [--stage-filter GLOB]`.
 *
 * Runs each case of a fixture set from its prompt text and input files (never from stored ids or
 * features) through the same code the engine uses, and compares every reference tensor that exists
 * for the case. A reference file nobody compared is a FAIL, so a fixture set with more stages than
 * we know is reported, not silently passed. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "audio/features.h"
#include "cli_util.h"
#include "commands.h"
#include "engine/engine_internal.h"
#include "engine/model.h"
#include "engine/prepare.h"
#include "io/npy.h"
#include "nn/ops.h"
#include "parity.h"

#define TOL_FEAT 1e-3   /* log-mel, encoder stages, projections, merged embeddings (fixture README) */
#define TOL_HIDDEN 1e-4 /* x max|ref| for decoder hidden states */
#define TOL_LOGITS 2e-3
#define TOL_VIT 1e-3
#define TOL_PIX 1e-5
#define TOL_ROPE 1e-5

typedef struct ctx {
    pm_parity p;
    int fault;
    int q8, kv_bf16, compute_bf16; /* --weights q8, --kv-cache bf16, --compute bf16: greedy agreement only */
    int ag_cases, ag_identical, ag_prefix, ag_same, ag_total;
    json_t *manifest, *inputs;
    pm_model *m;
    char model_dir[4096], inputs_dir[4096];
} ctx;

static json_t *load_json_file(const char *path, char *err, size_t n) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) snprintf(err, n, "%.1024s: %s (line %d)", path, je.text, je.line);
    return j;
}

/* File name of a named clip: inputs.json "clips".<name>.file, else <name>.wav; -1 when it does not
 * fit in out (a truncated path would open another file, or fail with a misleading name). */
static int clip_path(ctx *c, const char *name, char *out, size_t n) {
    json_t *f = json_object_get(json_object_get(json_object_get(c->inputs, "clips"), name), "file");
    int len = snprintf(out, n, "%s/%s%s", c->inputs_dir, json_is_string(f) ? json_string_value(f) : name, json_is_string(f) ? "" : ".wav");
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

static int read_audio(const char *path, pm_audio_in *a, char *err, size_t n) {
    size_t len;
    void *buf = cli_read_file(path, &len, err, n);
    if (!buf) return -1;
    int rc = pm_audio_decode(buf, len, path, a, err, n);
    free(buf);
    return rc;
}

static int read_image(const char *path, pm_image_in *im, char *err, size_t n) {
    size_t len;
    void *buf = cli_read_file(path, &len, err, n);
    if (!buf) return -1;
    int rc = pm_image_decode(buf, len, path, 1LL << 40, im, err, n);
    free(buf);
    return rc;
}

/* Every file below ref/<sub> that no check read is a failure. */
static void report_unchecked(ctx *c, const char *case_name, const char *sub) {
    char path[2400];
    snprintf(path, sizeof path, "%s/ref/%s", c->p.dir, sub);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char rel[1200], full[4400];
        snprintf(rel, sizeof rel, "%s/%s", sub, de->d_name);
        snprintf(full, sizeof full, "%s/ref/%s", c->p.dir, rel);
        struct stat st;
        if (stat(full, &st)) continue;
        if (S_ISDIR(st.st_mode)) {
            report_unchecked(c, case_name, rel);
            continue;
        }
        int seen = 0;
        for (int i = 0; i < c->p.n_seen && !seen; i++) seen = !strcmp(c->p.seen[i], rel);
        if (!seen && !c->p.stage_glob) pm_parity_report(&c->p, case_name, rel, 0, "reference file not compared by any check");
    }
    closedir(d);
}

static void top5(const pm_model *m, const float *fn, int n, int64_t *ids, float *vals) {
    int H = m->llm.c.hidden, V = m->llm.c.vocab, B = 32;
    float *lg = malloc(sizeof(float) * (size_t)B * V);
    for (int r0 = 0; r0 < n; r0 += B) {
        int b = n - r0 < B ? n - r0 : B;
        pm_linear(lg, fn + (size_t)r0 * H, b, m->llm.embed, NULL);
        for (int r = 0; r < b; r++) {
            const float *x = lg + (size_t)r * V;
            int64_t *id = ids + (size_t)(r0 + r) * 5;
            float *v = vals + (size_t)(r0 + r) * 5;
            for (int k = 0; k < 5; k++) { v[k] = -INFINITY; id[k] = -1; }
            for (int t = 0; t < V; t++) {
                if (x[t] <= v[4]) continue;
                int k = 4;
                while (k > 0 && x[t] > v[k - 1]) { v[k] = v[k - 1]; id[k] = id[k - 1]; k--; }
                v[k] = x[t];
                id[k] = t;
            }
        }
    }
    free(lg);
}

/* Top-5 ids must match, except where the reference's own neighbouring logits are closer than
 * the logit tolerance (a legitimate tie-order difference); such rows are counted and shown. */
static void check_top5(ctx *c, const char *cs, const int64_t *ids, int n) {
    char rel[512], stage[] = "logits_top5_ids";
    snprintf(rel, sizeof rel, "cases/%s/logits_top5_ids.npy", cs);
    if (!pm_parity_has(&c->p, rel) || !pm_parity_want(&c->p, cs, stage)) { pm_parity_mark_seen(&c->p, rel); return; }
    pm_npy ri, rv;
    pm_err e = {0};
    char p1[4400], p2[4400];
    snprintf(p1, sizeof p1, "%s/ref/%s", c->p.dir, rel);
    snprintf(p2, sizeof p2, "%s/ref/cases/%s/logits_top5_values.npy", c->p.dir, cs);
    pm_parity_mark_seen(&c->p, rel);
    if (pm_npy_load(&ri, p1, &e) || pm_npy_load(&rv, p2, &e)) {
        pm_parity_report(&c->p, cs, stage, 0, "%s", e.msg);
        return;
    }
    int bad = 0, ties = 0;
    if ((int)ri.numel != n * 5) bad = n;
    for (int r = 0; r < n && !bad; r++)
        for (int k = 0; k < 5; k++) {
            if ((double)ids[r * 5 + k] == pm_npy_get(&ri, (size_t)r * 5 + k)) continue;
            double v = pm_npy_get(&rv, (size_t)r * 5 + k);
            double prev = k > 0 ? pm_npy_get(&rv, (size_t)r * 5 + k - 1) : INFINITY, next = k < 4 ? pm_npy_get(&rv, (size_t)r * 5 + k + 1) : -INFINITY;
            if (fabs(prev - v) <= 2 * TOL_LOGITS || fabs(v - next) <= 2 * TOL_LOGITS || k == 4) ties++;
            else bad++;
        }
    pm_parity_report(&c->p, cs, stage, !bad, "%d rows: %d mismatches, %d tie-order differences within tolerance", n, bad, ties);
    pm_npy_free(&ri);
    pm_npy_free(&rv);
}

/* Greedy run capture: the tokens, and each step's decode logits at the reference's top-10 ids. */
typedef struct greedy_rec {
    pm_engine *eng;
    int64_t id;
    int n;
    int64_t tokens[4096];
    json_t *steps;          /* manifest greedy_steps (may be NULL) */
    double max_step_diff;   /* max |our logit - ref logit| over the top-10 ids of every step */
    int steps_compared;
} greedy_rec;

static int record_token(void *user, int32_t token, const char *text, size_t len) {
    (void)text;
    (void)len;
    greedy_rec *g = user;
    json_t *st = json_array_get(g->steps, (size_t)g->n);
    const float *lg = pm_engine_last_logits(g->eng, g->id, NULL, NULL);
    json_t *ids = json_object_get(st, "top10_ids"), *vals = json_object_get(st, "top10_logits");
    if (lg && json_is_array(ids) && json_is_array(vals)) {
        for (size_t k = 0; k < json_array_size(ids) && k < json_array_size(vals); k++) {
            json_int_t t = json_integer_value(json_array_get(ids, k));
            double d = fabs((double)lg[t] - json_number_value(json_array_get(vals, k)));
            if (d > g->max_step_diff || d != d) g->max_step_diff = d == d ? d : INFINITY;
        }
        g->steps_compared++;
    }
    if (g->n < 4096) g->tokens[g->n++] = token;
    return 0;
}

/* A case's request, built from its prompt text and input files. */
typedef struct case_in {
    pm_audio_in *aud;
    int na, has_image;
    pm_image_in img;
    pm_request req;
} case_in;

static void case_in_free(case_in *ci) {
    for (int i = 0; i < ci->na; i++) pm_audio_in_free(&ci->aud[i]);
    free(ci->aud);
    pm_image_in_free(&ci->img);
}

/* Reads the case's clips and image; a failure is reported and returns -1 (free ci either way). */
static int case_inputs(ctx *c, const char *cs, json_t *cj, case_in *ci) {
    char err[2048];
    memset(ci, 0, sizeof *ci);
    json_t *clips = json_object_get(cj, "clips");
    ci->has_image = json_is_true(json_object_get(cj, "image"));
    ci->na = json_is_array(clips) ? (int)json_array_size(clips) : 0;
    ci->aud = calloc((size_t)ci->na + 1, sizeof *ci->aud);
    for (int i = 0; i < ci->na; i++) {
        char path[4096];
        if (clip_path(c, json_string_value(json_array_get(clips, (size_t)i)), path, sizeof path)) {
            pm_parity_fail(&c->p, cs, "inputs", "clip path longer than %zu bytes", sizeof path - 1);
            return -1;
        }
        if (read_audio(path, &ci->aud[i], err, sizeof err)) {
            pm_parity_fail(&c->p, cs, "inputs", "%s", err);
            return -1;
        }
    }
    if (ci->has_image) {
        json_t *f = json_object_get(json_object_get(c->inputs, "image"), "file");
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/%s", c->inputs_dir, json_is_string(f) ? json_string_value(f) : "image.png");
        if (len < 0 || (size_t)len >= sizeof path) {
            pm_parity_fail(&c->p, cs, "inputs", "image path longer than %zu bytes", sizeof path - 1);
            return -1;
        }
        if (read_image(path, &ci->img, err, sizeof err)) {
            pm_parity_fail(&c->p, cs, "inputs", "%s", err);
            return -1;
        }
    }
    pm_request *req = &ci->req;
    req->prompt = json_string_value(json_object_get(cj, "prompt"));
    req->audios = ci->aud;
    req->n_audios = ci->na;
    req->images = ci->has_image ? &ci->img : NULL;
    req->n_images = ci->has_image;
    json_t *gen = json_object_get(cj, "generated_ids");
    req->max_tokens = json_is_array(gen) && json_array_size(gen) ? (int)json_array_size(gen) : 12;
    return 0;
}

/* Greedy generation through the engine (KV-cached decode, adapter kept every step). The request
 * runs batched with a companion text request submitted first, so a batch-wide adapter (instead of
 * a per-sequence one) would show up. Returns 0, or -1 with err set. */
static int greedy_run(ctx *c, const pm_request *req, greedy_rec *g, char *err, size_t errlen) {
    pm_callbacks cb = {.on_token = record_token, .user = g};
    pm_engine *eng = NULL;
    pm_request comp = {0};
    comp.prompt = "<|user|>Say something.<|end|><|assistant|>";
    comp.max_tokens = req->max_tokens;
    pm_engine_opts o;
    pm_engine_opts_default(&o);
    o.kv_bf16 = c->kv_bf16;
    int rc = pm_engine_new(&eng, c->m, &o, err, errlen);
    if (!rc) {
        pm_engine_set_fault(eng, c->fault);
        rc = pm_engine_submit(eng, &comp, NULL, NULL, err, errlen);
    }
    g->eng = eng;
    if (!rc) rc = pm_engine_submit(eng, req, &cb, &g->id, err, errlen);
    while (!rc && pm_engine_live(eng) > 0)
        if (pm_engine_step(eng) < 0) rc = snprintf(err, errlen, "engine step failed") > 0 ? -1 : -1;
    pm_engine_free(eng);
    return rc ? -1 : 0;
}

static int agreement_run(const ctx *c) { return c->q8 || c->kv_bf16 || c->compute_bf16; }

/* What an agreement run changes: "q8" (int8 weights), "bf16 KV", "bf16 products", joined by " + ". */
static const char *agree_label(const ctx *c, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s%s%s", c->q8 ? "q8" : "", c->q8 && c->kv_bf16 ? " + " : "", c->kv_bf16 ? "bf16 KV" : "",
             (c->q8 || c->kv_bf16) && c->compute_bf16 ? " + " : "", c->compute_bf16 ? "bf16 products" : "");
    return buf;
}

/* --weights q8, --kv-cache bf16, --compute bf16: the official greedy tokens against ours on int8
 * weights, a bf16 cache or bf16 products. Not a parity check (none is bit-compatible); reports the
 * agreement: common prefix and positions equal. */
static void run_case_agree(ctx *c, const char *cs, json_t *cj) {
    char rel[512], err[2048], path[4400];
    snprintf(rel, sizeof rel, "cases/%s/generated_ids.npy", cs);
    if (!pm_parity_has(&c->p, rel)) return;
    case_in ci;
    pm_npy ref;
    pm_err e = {0};
    snprintf(path, sizeof path, "%s/ref/%s", c->p.dir, rel);
    if (case_inputs(c, cs, cj, &ci)) {
        case_in_free(&ci);
        return;
    }
    greedy_rec *g = calloc(1, sizeof *g);
    if (pm_npy_load(&ref, path, &e)) pm_parity_fail(&c->p, cs, "agreement/generated_ids", "%s", e.msg);
    else {
        if (greedy_run(c, &ci.req, g, err, sizeof err)) pm_parity_fail(&c->p, cs, "agreement/generated_ids", "%s", err);
        else {
            int n = (int)ref.numel, prefix = 0, same = 0;
            for (int i = 0; i < n && i < g->n; i++) same += (int64_t)pm_npy_get(&ref, (size_t)i) == g->tokens[i];
            while (prefix < n && prefix < g->n && (int64_t)pm_npy_get(&ref, (size_t)prefix) == g->tokens[prefix]) prefix++;
            printf("%-4s %s/generated_ids: common prefix %d/%d, equal positions %d/%d\n", c->q8 ? "Q8" : c->kv_bf16 ? "KV16" : "BF16", cs,
                   prefix, n, same, n);
            c->ag_cases++;
            c->ag_identical += prefix == n && g->n == n;
            c->ag_prefix += prefix;
            c->ag_same += same;
            c->ag_total += n;
        }
        pm_npy_free(&ref);
    }
    free(g);
    case_in_free(&ci);
}

static void run_case(ctx *c, const char *cs) {
    json_t *cj = json_object_get(json_object_get(c->manifest, "cases"), cs);
    char err[2048], rel[512], stage[256];
    if (!cj) {
        pm_parity_fail(&c->p, cs, "case", "no case '%s' in ref/manifest.json", cs);
        return;
    }
    if (agreement_run(c)) {
        run_case_agree(c, cs, cj);
        return;
    }
    case_in ci;
    if (case_inputs(c, cs, cj, &ci)) goto out;
    pm_audio_in *aud = ci.aud;
    int na = ci.na, has_image = ci.has_image;
    pm_request req = ci.req;

    const pm_model *m = c->m;
    int H = m->llm.c.hidden, NB = m->conf_cfg.num_blocks;
    pm_conformer_trace ct = {0};
    float **blocks = calloc((size_t)NB, sizeof(float *));
    pm_prep_trace tr = {0};
    pm_vit_trace vt = {0};
    tr.fault = (pm_fault)c->fault;
    tr.want_audio = na > 0;
    tr.conf = na > 0 ? &ct : NULL;
    tr.want_image = has_image;
    tr.vit = has_image ? &vt : NULL;
    if (na) pm_conformer_trace_want_all(&ct, blocks); /* the callee allocates each capture (conformer.h) */
    pm_prepared prep = {0};
    pm_err e = {0};
    if (pm_prepare(m, &req, NULL, &prep, &tr, &e)) {
        pm_parity_fail(&c->p, cs, "prepare", "%s", e.msg);
        free(blocks);
        goto out;
    }
    /* ids */
    int64_t *ids64 = malloc(sizeof(int64_t) * (size_t)prep.n);
    for (int i = 0; i < prep.n; i++) ids64[i] = prep.ids[i];
    snprintf(rel, sizeof rel, "cases/%s/input_ids.npy", cs);
    if (pm_parity_has(&c->p, rel)) pm_parity_check_i64(&c->p, cs, "input_ids", rel, ids64, (size_t)prep.n);
    free(ids64);
    /* audio front-end and encoder */
    if (na) {
        int T = tr.t_max, Te = tr.t_enc, NM = m->conf_cfg.input_size, D = pm_conformer_dim(m->conformer);
        snprintf(rel, sizeof rel, "cases/%s/input_audio_embeds.npy", cs);
        pm_parity_check_f32(&c->p, cs, "input_audio_embeds", rel, tr.logmel, (size_t)na * T * NM, (int64_t[]){na, T, NM}, 3, TOL_FEAT, 0);
        int64_t *sz = malloc(sizeof(int64_t) * (size_t)na);
        for (int i = 0; i < na; i++) sz[i] = tr.audio_sizes[i];
        snprintf(rel, sizeof rel, "cases/%s/audio_embed_sizes.npy", cs);
        if (pm_parity_has(&c->p, rel)) pm_parity_check_i64(&c->p, cs, "audio_embed_sizes", rel, sz, (size_t)na);
        free(sz);
        snprintf(rel, sizeof rel, "cases/%s/audio_attention_mask.npy", cs);
        if (pm_parity_has(&c->p, rel)) {
            int64_t *mk = malloc(sizeof(int64_t) * (size_t)na * T);
            /* frame counts: recompute from each clip's own features */
            for (int b = 0; b < na; b++) {
                pm_logmel lm = {0};
                pm_err e2 = {0};
                int fr = pm_audio_logmel(aud[b].samples, aud[b].n_samples, aud[b].sample_rate, &lm, &e2) ? 0 : lm.frames;
                pm_logmel_free(&lm);
                for (int t = 0; t < T; t++) mk[(size_t)b * T + t] = t < fr;
            }
            pm_parity_check_i64(&c->p, cs, "audio_attention_mask", rel, mk, (size_t)na * T);
            free(mk);
        }
        int L = Te > PM_CONFORMER_MAX_SEQ ? PM_CONFORMER_MAX_SEQ : Te, nseq = na * ((Te + L - 1) / L), NH = m->conf_cfg.attention_heads;
        snprintf(rel, sizeof rel, "cases/%s/enc/normalized_features.npy", cs);
        pm_parity_check_f32(&c->p, cs, "enc/normalized_features", rel, ct.normalized, (size_t)na * T * NM, NULL, 0, TOL_FEAT, 0);
        snprintf(rel, sizeof rel, "cases/%s/enc/subsample_out.npy", cs);
        pm_parity_check_f32(&c->p, cs, "enc/subsample_out", rel, ct.subsample_out, (size_t)na * Te * D, (int64_t[]){na, Te, D}, 3, TOL_FEAT, 0);
        snprintf(rel, sizeof rel, "cases/%s/enc/subsample_pad_mask.npy", cs);
        if (pm_parity_has(&c->p, rel)) {
            int64_t *mk = malloc(sizeof(int64_t) * (size_t)na * Te);
            for (size_t i = 0; i < (size_t)na * Te; i++) mk[i] = ct.pad_mask ? ct.pad_mask[i] : -1;
            pm_parity_check_i64(&c->p, cs, "enc/subsample_pad_mask", rel, mk, (size_t)na * Te);
            free(mk);
        }
        snprintf(rel, sizeof rel, "cases/%s/enc/t5_rel_bias.npy", cs);
        pm_parity_check_f32(&c->p, cs, "enc/t5_rel_bias", rel, ct.t5_bias, (size_t)NH * L * L, NULL, 0, TOL_FEAT, 0);
        snprintf(rel, sizeof rel, "cases/%s/enc/hs_mask.npy", cs);
        if (pm_parity_has(&c->p, rel)) {
            int64_t *mk = malloc(sizeof(int64_t) * (size_t)nseq * L * L);
            for (size_t i = 0; i < (size_t)nseq * L * L; i++) mk[i] = ct.hs_mask ? ct.hs_mask[i] : -1;
            pm_parity_check_i64(&c->p, cs, "enc/hs_mask", rel, mk, (size_t)nseq * L * L);
            free(mk);
        }
        for (int b = 0; b < NB; b++) {
            snprintf(rel, sizeof rel, "cases/%s/enc/block%d_out.npy", cs, b);
            snprintf(stage, sizeof stage, "enc/block%d_out", b);
            if (pm_parity_has(&c->p, rel)) pm_parity_check_f32(&c->p, cs, stage, rel, blocks[b], (size_t)na * Te * D, NULL, 0, TOL_FEAT, 0);
        }
        snprintf(rel, sizeof rel, "cases/%s/enc/encoder_out.npy", cs);
        pm_parity_check_f32(&c->p, cs, "enc/encoder_out", rel, ct.encoder_out, (size_t)na * Te * D, (int64_t[]){na, Te, D}, 3, TOL_FEAT, 0);
        snprintf(rel, sizeof rel, "cases/%s/audio_proj_speech.npy", cs);
        pm_parity_check_f32(&c->p, cs, "audio_proj_speech", rel, tr.proj_speech, (size_t)na * Te * H, NULL, 0, TOL_FEAT, 0);
        snprintf(rel, sizeof rel, "cases/%s/audio_proj_vision.npy", cs);
        pm_parity_check_f32(&c->p, cs, "audio_proj_vision", rel, tr.proj_vision, (size_t)na * Te * H, NULL, 0, TOL_FEAT, 0);
    }
    /* image front-end (under this case when it has an image) and vision tower */
    if (has_image) {
        pm_hd_image *hd = &tr.hd;
        int n_img = 1, C = m->crop_size, G = C / 14;
        if (pm_parity_has(&c->p, "image/hd_resized_padded_u8.npy")) {
            size_t nb = (size_t)hd->canvas_h * hd->canvas_w * 3;
            int64_t *u = malloc(sizeof(int64_t) * nb);
            for (size_t i = 0; i < nb; i++) u[i] = hd->canvas_u8 ? hd->canvas_u8[i] : -1;
            pm_parity_check_i64(&c->p, cs, "image/hd_resized_padded_u8", "image/hd_resized_padded_u8.npy", u, nb);
            free(u);
        }
        if (pm_parity_has(&c->p, "image/hd_attention_mask.npy"))
            pm_parity_check_f32(&c->p, cs, "image/hd_attention_mask", "image/hd_attention_mask.npy", hd->canvas_mask,
                                (size_t)(hd->canvas_h / 14) * (hd->canvas_w / 14), NULL, 0, 0, 0);
        if (pm_parity_has(&c->p, "image/input_image_embeds.npy"))
            pm_parity_check_f32(&c->p, cs, "image/input_image_embeds", "image/input_image_embeds.npy", hd->pixels,
                                (size_t)n_img * hd->n_crops * 3 * C * C, (int64_t[]){n_img, hd->n_crops, 3, C, C}, 5, TOL_PIX, 0);
        if (pm_parity_has(&c->p, "image/image_sizes.npy"))
            pm_parity_check_i64(&c->p, cs, "image/image_sizes", "image/image_sizes.npy", (int64_t[]){hd->canvas_h, hd->canvas_w}, 2);
        if (pm_parity_has(&c->p, "image/image_attention_mask.npy"))
            pm_parity_check_f32(&c->p, cs, "image/image_attention_mask", "image/image_attention_mask.npy", hd->crop_mask,
                                (size_t)hd->n_crops * G * G, NULL, 0, 0, 0);
        if (pm_parity_has(&c->p, "image/num_img_tokens.npy"))
            pm_parity_check_i64(&c->p, cs, "image/num_img_tokens", "image/num_img_tokens.npy", (int64_t[]){hd->num_tokens}, 1);
        int Dv = 0, nl = 0, np = G * G, P2 = G / 2;
        pm_image_embed_dims(m->image, &Dv, &nl);
        (void)nl;
        snprintf(rel, sizeof rel, "cases/%s/vit/embeddings_out.npy", cs);
        pm_parity_check_f32(&c->p, cs, "vit/embeddings_out", rel, vt.embeddings_out, (size_t)hd->n_crops * np * Dv, NULL, 0, TOL_VIT, 0);
        snprintf(rel, sizeof rel, "cases/%s/vit/layer_minus2_out.npy", cs);
        pm_parity_check_f32(&c->p, cs, "vit/layer_minus2_out", rel, vt.layer_minus2_out, (size_t)hd->n_crops * np * Dv, NULL, 0, TOL_VIT, 0);
        snprintf(rel, sizeof rel, "cases/%s/vit/avgpool_out.npy", cs);
        pm_parity_check_f32(&c->p, cs, "vit/avgpool_out", rel, vt.avgpool_out, (size_t)hd->n_crops * Dv * P2 * P2, NULL, 0, TOL_VIT, 0);
        snprintf(rel, sizeof rel, "cases/%s/vit/hd_merged_features.npy", cs);
        pm_parity_check_f32(&c->p, cs, "vit/hd_merged_features", rel, vt.hd_merged, (size_t)tr.n_img_tokens * Dv, NULL, 0, TOL_VIT, 0);
        snprintf(rel, sizeof rel, "cases/%s/vit/img_projection_out.npy", cs);
        pm_parity_check_f32(&c->p, cs, "vit/img_projection_out", rel, tr.img_tokens, (size_t)tr.n_img_tokens * H, NULL, 0, TOL_FEAT, 0);
        free(vt.embeddings_out);
        free(vt.layer_minus2_out);
        free(vt.avgpool_out);
        free(vt.hd_merged);
    }
    /* merged embeddings, decoder, logits */
    snprintf(rel, sizeof rel, "cases/%s/inputs_embeds.npy", cs);
    pm_parity_check_f32(&c->p, cs, "inputs_embeds", rel, prep.embeds, (size_t)prep.n * H, (int64_t[]){prep.n, H}, 2, TOL_FEAT, 0);
    int NL = m->llm.c.n_layers, n = prep.n, V = m->llm.c.vocab;
    float **lo = calloc((size_t)NL, sizeof *lo), *fn = malloc(sizeof(float) * (size_t)n * H), *logits = malloc(sizeof(float) * (size_t)V);
    for (int l = 0; l < NL; l++) lo[l] = malloc(sizeof(float) * (size_t)n * H);
    pm_llm_trace lt = {lo, fn};
    pm_kv_cache kv = {0};
    pm_llm_chunk ch = {&kv, prep.embeds, n, prep.adapter, n > m->llm.c.orig_max_pos, logits, &lt, 0};
    if (pm_llm_forward(&m->llm, &ch, 1, &e)) pm_parity_fail(&c->p, cs, "decoder", "%s", e.msg);
    else {
        for (int l = 0; l < NL; l++) {
            snprintf(rel, sizeof rel, "cases/%s/decoder_layer%d_out.npy", cs, l);
            snprintf(stage, sizeof stage, "decoder_layer%d_out", l);
            pm_parity_check_f32(&c->p, cs, stage, rel, lo[l], (size_t)n * H, (int64_t[]){n, H}, 2, 0, TOL_HIDDEN);
        }
        snprintf(rel, sizeof rel, "cases/%s/final_norm_out.npy", cs);
        pm_parity_check_f32(&c->p, cs, "final_norm_out", rel, fn, (size_t)n * H, (int64_t[]){n, H}, 2, 0, TOL_HIDDEN);
        snprintf(rel, sizeof rel, "cases/%s/logits_last.npy", cs);
        pm_parity_check_f32(&c->p, cs, "logits_last", rel, logits, (size_t)V, NULL, 0, TOL_LOGITS, 0);
        snprintf(rel, sizeof rel, "cases/%s/logits_top5_values.npy", cs);
        if (pm_parity_has(&c->p, rel)) {
            int64_t *tid = malloc(sizeof(int64_t) * (size_t)n * 5);
            float *tv = malloc(sizeof(float) * (size_t)n * 5);
            top5(m, fn, n, tid, tv);
            pm_parity_check_f32(&c->p, cs, "logits_top5_values", rel, tv, (size_t)n * 5, NULL, 0, TOL_LOGITS, 0);
            check_top5(c, cs, tid, n);
            free(tid);
            free(tv);
        }
    }
    pm_kv_free(&kv);
    for (int l = 0; l < NL; l++) free(lo[l]);
    free(lo); free(fn); free(logits);
    /* greedy generation through the engine (KV-cached decode, adapter kept every step) */
    snprintf(rel, sizeof rel, "cases/%s/generated_ids.npy", cs);
    if (pm_parity_has(&c->p, rel) && pm_parity_want(&c->p, cs, "generated_ids")) {
        greedy_rec *g = calloc(1, sizeof *g);
        g->steps = json_object_get(cj, "greedy_steps");
        if (greedy_run(c, &req, g, err, sizeof err)) pm_parity_fail(&c->p, cs, "generated_ids", "%s", err);
        else {
            pm_parity_check_i64(&c->p, cs, "generated_ids", rel, g->tokens, (size_t)g->n);
            if (json_is_array(g->steps) && json_array_size(g->steps))
                pm_parity_report(&c->p, cs, "greedy_steps_logits", g->steps_compared == (int)json_array_size(g->steps) && g->max_step_diff <= TOL_LOGITS,
                                 "max_abs=%.3e tol=%.3e over the top-10 logits of %d/%zu KV-cached decode steps", g->max_step_diff, TOL_LOGITS,
                                 g->steps_compared, json_array_size(g->steps));
        }
        free(g);
    } else pm_parity_mark_seen(&c->p, rel);
    if (!strcmp(cs, "text") || json_is_true(json_object_get(cj, "check_rope"))) {
        pm_npy pos;
        char pp[4400];
        snprintf(pp, sizeof pp, "%s/ref/rope/positions.npy", c->p.dir);
        pm_parity_mark_seen(&c->p, "rope/positions.npy");
        if (!pm_npy_load(&pos, pp, &e)) {
            int np = (int)pos.numel, rot = m->llm.c.rot_dims;
            int *pi = malloc(sizeof(int) * (size_t)np);
            float *cs_ = malloc(sizeof(float) * (size_t)np * rot), *sn = malloc(sizeof(float) * (size_t)np * rot);
            for (int i = 0; i < np; i++) pi[i] = (int)pm_npy_get(&pos, (size_t)i);
            for (int lg = 0; lg < 2; lg++) {
                pm_llm_rope_table(&m->llm, lg, pi, np, cs_, sn);
                pm_parity_check_f32(&c->p, cs, lg ? "rope/cos_long" : "rope/cos_short", lg ? "rope/cos_long.npy" : "rope/cos_short.npy", cs_,
                                    (size_t)np * rot, NULL, 0, TOL_ROPE, 0);
                pm_parity_check_f32(&c->p, cs, lg ? "rope/sin_long" : "rope/sin_short", lg ? "rope/sin_long.npy" : "rope/sin_short.npy", sn,
                                    (size_t)np * rot, NULL, 0, TOL_ROPE, 0);
            }
            free(pi); free(cs_); free(sn);
            pm_npy_free(&pos);
        }
        report_unchecked(c, cs, "rope");
    }
    pm_prepared_free(&prep);
    pm_prep_trace_free(&tr);
    pm_conformer_trace_free(&ct, NB);
    free(blocks);
    snprintf(rel, sizeof rel, "cases/%s", cs);
    report_unchecked(c, cs, rel);
    if (has_image) report_unchecked(c, cs, "image");
out:
    case_in_free(&ci);
}

/* Clips whose reference has encoder outputs (the long clip): single clip, no frame mask. */
static void run_long_clips(ctx *c) {
    json_t *feats = json_object_get(c->manifest, "features");
    const char *name;
    json_t *v;
    json_object_foreach(feats, name, v) {
        char rel[512], rel2[512], path[4096], err[1024];
        snprintf(rel, sizeof rel, "audio/%s/encoder_out.npy", name);
        snprintf(rel2, sizeof rel2, "audio/%s/proj_speech.npy", name);
        if (!pm_parity_has(&c->p, rel) && !pm_parity_has(&c->p, rel2)) continue;
        char st1[300], st2[300];
        snprintf(st1, sizeof st1, "%s/encoder_out", name);
        snprintf(st2, sizeof st2, "%s/proj_speech", name);
        pm_parity_mark_seen(&c->p, rel); /* compared below, or failed as this clip's stage */
        pm_parity_mark_seen(&c->p, rel2);
        if (!pm_parity_want(&c->p, "features", st1) && !pm_parity_want(&c->p, "features", st2)) continue;
        if (clip_path(c, name, path, sizeof path)) {
            pm_parity_fail(&c->p, "features", st1, "clip path longer than %zu bytes", sizeof path - 1);
            continue;
        }
        pm_audio_in a = {0};
        pm_logmel lm = {0};
        pm_err e = {0};
        float *enc = NULL, *proj = NULL;
        int te = 0;
        if (read_audio(path, &a, err, sizeof err)) pm_parity_fail(&c->p, "features", st1, "%s", err);
        else if (pm_audio_logmel(a.samples, a.n_samples, a.sample_rate, &lm, &e) ||
                 pm_conformer_forward(c->m->conformer, lm.data, 1, lm.frames, &lm.frames, 0, &enc, &te, NULL, &e))
            pm_parity_fail(&c->p, "features", st1, "%s", e.msg);
        else {
            int D = pm_conformer_dim(c->m->conformer), H = c->m->llm.c.hidden;
            pm_parity_check_f32(&c->p, "features", st1, rel, enc, (size_t)te * D, (int64_t[]){te, D}, 2, TOL_FEAT, 0);
            proj = malloc(sizeof(float) * (size_t)te * H);
            if (!proj) pm_parity_fail(&c->p, "features", st2, "out of memory");
            else if (pm_audio_proj_forward(c->m->audio_proj, 0, enc, te, proj, &e)) pm_parity_fail(&c->p, "features", st2, "%s", e.msg);
            else pm_parity_check_f32(&c->p, "features", st2, rel2, proj, (size_t)te * H, (int64_t[]){te, H}, 2, TOL_FEAT, 0);
        }
        free(enc);
        free(proj);
        pm_logmel_free(&lm);
        pm_audio_in_free(&a);
    }
}

static void usage(void) {
    fprintf(stderr, "usage: phi4mm parity --fixtures DIR [--case NAME]... [--stage-filter GLOB] [-v]\n"
                    "  DIR holds tiny_model/, inputs/, ref/manifest.json and ref/**.npy.\n"
                    "  Cases: those in ref/manifest.json, plus the pseudo-case 'features' (ref/audio/).\n"
                    "  Prints one PASS/FAIL line per check and 'N passed, M failed'; exit 0 only when none failed.\n"
                    "  --weights q8: no parity checks; greedy tokens on int8 weights against the official ones\n"
                    "  (common prefix and equal positions per case, then totals). Fails only if a case cannot run.\n"
                    "  --kv-cache bf16: the same agreement report with bf16 KV caches (alone or with --weights q8).\n"
                    "  --compute bf16: the same with bf16 products (alone or with the others; AVX512-BF16 CPUs).\n");
}

int pm_cmd_parity(int argc, char **argv) {
    ctx c;
    memset(&c, 0, sizeof c);
    const char *cases[64];
    int n_cases = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--fixtures") && i + 1 < argc) c.p.dir = argv[++i];
        else if (!strcmp(a, "--case") && i + 1 < argc && n_cases < 64) cases[n_cases++] = argv[++i];
        else if (!strcmp(a, "--stage-filter") && i + 1 < argc) c.p.stage_glob = argv[++i];
        else if (!strcmp(a, "-v")) c.p.verbose = 1;
        else if (!strcmp(a, "--weights") && i + 1 < argc) {
            pm_weight_format f;
            if (pm_weight_format_parse(argv[++i], &f)) return cli_fail("parity", "--weights must be bf16 or q8, got '%s'", argv[i]);
            c.q8 = f == PM_WEIGHTS_Q8;
        } else if (!strcmp(a, "--kv-cache") && i + 1 < argc) {
            if (cli_kv_cache("parity", argv[++i], &c.kv_bf16)) return 1;
        } else if (!strcmp(a, "--compute") && i + 1 < argc) {
            if (cli_compute("parity", argv[++i], &c.compute_bf16)) return 1;
        }
        else if (!strcmp(a, "--inject-fault") && i + 1 < argc) {
            /* test-only: prove the checks catch a known mistake (the run must then fail) */
            if ((c.fault = pm_fault_parse(argv[++i])) < 0) return cli_fail("parity", "unknown fault '%s'", argv[i]);
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else return cli_fail("parity", "unknown or incomplete option '%s' (see --help)", a);
    }
    if (!c.p.dir) return cli_fail("parity", "missing --fixtures DIR");
    char path[4400], err[2048];
    snprintf(path, sizeof path, "%s/ref/manifest.json", c.p.dir);
    if (!(c.manifest = load_json_file(path, err, sizeof err))) return cli_fail("parity", "%s", err);
    snprintf(c.model_dir, sizeof c.model_dir, "%s/tiny_model", c.p.dir);
    snprintf(c.inputs_dir, sizeof c.inputs_dir, "%s/inputs", c.p.dir);
    snprintf(path, sizeof path, "%s/inputs.json", c.inputs_dir);
    c.inputs = json_load_file(path, 0, NULL);
    if (!c.inputs) c.inputs = json_object();
    pm_load_options lo = {.weights = c.q8 ? PM_WEIGHTS_Q8 : PM_WEIGHTS_BF16, .compute_bf16 = c.compute_bf16};
    if (pm_model_load_opts(&c.m, c.model_dir, &lo, err, sizeof err)) {
        json_decref(c.manifest);
        json_decref(c.inputs);
        return cli_fail("parity", "%s", err);
    }
    cli_compute_note("parity", &lo, c.m);
    if (!n_cases) {
        cases[n_cases++] = "features";
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(c.manifest, "cases"), k, v) if (n_cases < 64) cases[n_cases++] = k;
    }
    for (int i = 0; i < n_cases; i++) {
        if (!strcmp(cases[i], "features") && agreement_run(&c)) continue; /* no decoder there */
        if (!strcmp(cases[i], "features")) {
            pm_parity_run_features(&c.p);
            run_long_clips(&c);
            report_unchecked(&c, "features", "audio");
        } else run_case(&c, cases[i]);
    }
    int rc;
    if (agreement_run(&c)) {
        char label[64];
        printf("%s greedy agreement: %d cases, %d identical; common prefix %d/%d tokens (%.1f%%), equal positions %d/%d (%.1f%%)\n",
               agree_label(&c, label, sizeof label), c.ag_cases, c.ag_identical, c.ag_prefix, c.ag_total, c.ag_total ? 100.0 * c.ag_prefix / c.ag_total : 0.0,
               c.ag_same, c.ag_total, c.ag_total ? 100.0 * c.ag_same / c.ag_total : 0.0);
        rc = c.p.failed || !c.ag_cases ? 1 : 0;
    } else {
        printf("%d passed, %d failed\n", c.p.passed, c.p.failed);
        rc = c.p.failed || !c.p.passed ? 1 : 0;
    }
    pm_model_free(c.m);
    json_decref(c.manifest);
    json_decref(c.inputs);
    for (int i = 0; i < c.p.n_seen; i++) free(c.p.seen[i]);
    free(c.p.seen);
    return rc;
}
