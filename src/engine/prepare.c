/* prepare.c — see prepare.h. The order follows the official processor + embedding module:
 * placeholders are validated and rewritten to <|endoftext10|>/<|endoftext11|> before tokenizing;
 * each becomes as many ids as its media item has tokens (media in order of appearance); the token
 * embeddings of those positions are then replaced, row-major, by the projected media frames. */
#include "prepare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "audio/features.h"
#include "nn/ops.h"
#include "tok/chat.h"

int pm_fault_parse(const char *name) {
    static const char *names[] = {"none", "no-adapter", "wrong-proj", "add-embeds", "leak-adapter"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

pm_mode pm_request_mode(const pm_request *r) {
    if (r->n_images > 0 && r->n_audios > 0) return PM_MODE_VISION_SPEECH;
    if (r->n_images > 0) return PM_MODE_VISION;
    if (r->n_audios > 0) return PM_MODE_SPEECH;
    return PM_MODE_LANGUAGE;
}

void pm_limits_default(pm_limits *l) {
    l->max_audio_seconds = 1800.0;
    l->max_audio_clips = 16;
    l->max_images = 16;
    l->max_image_pixels = 40000000;
    l->max_context = 0; /* 0: the model's max_position_embeddings */
}

void pm_prepared_free(pm_prepared *p) {
    free(p->ids);
    free(p->embeds);
    memset(p, 0, sizeof *p);
}

void pm_prep_trace_free(pm_prep_trace *t) {
    free(t->logmel);
    free(t->audio_sizes);
    free(t->proj_speech);
    free(t->proj_vision);
    free(t->img_tokens);
    pm_hd_free(&t->hd);
}

/* Audio: features per clip, one batched encoder pass, projection; rows[k] = clip k's first
 * sizes[k] projected frames, concatenated. */
/* A media cache key of `body` bytes after the request's cache salt (its length, then its bytes:
 * a salted request neither finds nor leaves entries an unsalted one could use); *body_at is where
 * the body goes. */
static unsigned char *key_new(const pm_request *req, size_t body, size_t *len, unsigned char **body_at) {
    uint32_t sl = req->cache_salt ? (uint32_t)strlen(req->cache_salt) : 0;
    size_t n = sizeof sl + sl + body;
    unsigned char *key = malloc(n);
    if (!key) return NULL;
    memcpy(key, &sl, sizeof sl);
    if (sl) memcpy(key + sizeof sl, req->cache_salt, sl);
    *body_at = key + sizeof sl + sl;
    *len = n;
    return key;
}

/* The media cache's key of a request's clips (all of them: one padded batch) under a projection
 * branch: the branch, the count, each clip's rate and length, then the samples. */
static void *audio_key(const pm_request *req, int branch, size_t *len) {
    size_t n = 2 * sizeof(int32_t);
    for (int k = 0; k < req->n_audios; k++) n += sizeof(int32_t) + sizeof(uint64_t) + sizeof(double) * req->audios[k].n_samples;
    unsigned char *p, *key = key_new(req, n, len, &p);
    if (!key) return NULL;
    int32_t head[2] = {branch, req->n_audios};
    memcpy(p, head, sizeof head);
    p += sizeof head;
    for (int k = 0; k < req->n_audios; k++) {
        int32_t rate = req->audios[k].sample_rate;
        uint64_t ns = req->audios[k].n_samples;
        memcpy(p, &rate, sizeof rate);
        memcpy(p + sizeof rate, &ns, sizeof ns);
        p += sizeof rate + sizeof ns;
    }
    for (int k = 0; k < req->n_audios; k++) {
        memcpy(p, req->audios[k].samples, sizeof(double) * req->audios[k].n_samples);
        p += sizeof(double) * req->audios[k].n_samples;
    }
    return key;
}

/* The crops an image may have: the request's limit, else the checkpoint's. */
static int max_crops(const pm_model *m, const pm_request *req) { return req->max_crops > 0 ? req->max_crops : m->dynamic_hd; }

/* An image's: its crop limit and size, then its pixels. */
static void *image_key(const pm_request *req, const pm_image_in *im, int crops, size_t *len) {
    size_t px = (size_t)im->width * im->height * 3;
    int32_t head[3] = {crops, im->width, im->height};
    unsigned char *p, *key = key_new(req, sizeof head + px, len, &p);
    if (!key) return NULL;
    memcpy(p, head, sizeof head);
    memcpy(p + sizeof head, im->rgb, px);
    return key;
}

static int encode_audio_run(const pm_model *m, const pm_request *req, int branch, float **rows, int *sizes, pm_prep_trace *tr, pm_err *e);

/* The clips' rows: from the media cache when it holds these clips under this branch, else from
 * the encoders (and then kept). Never cached while tracing (the parity tool wants every stage). */
static int encode_audio(const pm_model *m, const pm_request *req, int branch, float **rows, int *sizes, pm_prep_trace *tr,
                        pm_media_cache *mc, pm_err *e) {
    size_t kl = 0;
    void *key = mc && !tr ? audio_key(req, branch, &kl) : NULL;
    int got = key ? pm_media_cache_get(mc, key, kl, m->llm.c.hidden, rows, sizes, req->n_audios, e) : 0;
    if (got == 0 && !encode_audio_run(m, req, branch, rows, sizes, tr, e) && key) {
        int total = 0;
        for (int k = 0; k < req->n_audios; k++) total += sizes[k];
        pm_media_cache_put(mc, key, kl, m->llm.c.hidden, *rows, total, sizes, req->n_audios);
    }
    free(key);
    return e->code;
}

static int encode_audio_run(const pm_model *m, const pm_request *req, int branch, float **rows, int *sizes, pm_prep_trace *tr, pm_err *e) {
    int na = req->n_audios, H = m->llm.c.hidden, NM = m->conf_cfg.input_size;
    pm_logmel *mels = pm_calloc((size_t)na, sizeof *mels, e);
    int *frames = pm_calloc((size_t)na, sizeof(int), e);
    float *feats = NULL, *enc = NULL, *proj = NULL;
    if (e->code) goto done;
    int t_max = 0;
    for (int k = 0; k < na; k++) {
        const pm_audio_in *a = &req->audios[k];
        if (pm_audio_logmel(a->samples, a->n_samples, a->sample_rate, &mels[k], e)) {
            pm_err_ctx(e, "audio %d: ", k + 1);
            goto done;
        }
        frames[k] = mels[k].frames;
        int s = (frames[k] + m->audio_compression - 1) / m->audio_compression;
        sizes[k] = (s + m->audio_downsample - 1) / m->audio_downsample;
        if (frames[k] > t_max) t_max = frames[k];
    }
    feats = pm_calloc((size_t)na * t_max * NM, sizeof(float), e);
    if (!feats) goto done;
    for (int k = 0; k < na; k++) memcpy(feats + (size_t)k * t_max * NM, mels[k].data, sizeof(float) * (size_t)frames[k] * NM);
    int t_enc = 0;
    if (pm_conformer_forward(m->conformer, feats, na, t_max, frames, na > 1, &enc, &t_enc, tr ? tr->conf : NULL, e)) goto done;
    int D = pm_conformer_dim(m->conformer);
    size_t nrows = (size_t)na * t_enc;
    proj = pm_malloc(sizeof(float) * nrows * H, e);
    if (!proj) goto done;
    if (tr && tr->want_audio) {
        tr->proj_speech = pm_malloc(sizeof(float) * nrows * H, e);
        tr->proj_vision = pm_malloc(sizeof(float) * nrows * H, e);
        if (e->code) goto done;
        pm_audio_proj_forward(m->audio_proj, 0, enc, (int)nrows, tr->proj_speech, e);
        pm_audio_proj_forward(m->audio_proj, 1, enc, (int)nrows, tr->proj_vision, e);
        tr->logmel = feats;
        feats = NULL;
        tr->t_max = t_max;
        tr->t_enc = t_enc;
        tr->audio_sizes = pm_malloc(sizeof(int) * (size_t)na, e);
        if (tr->audio_sizes) memcpy(tr->audio_sizes, sizes, sizeof(int) * (size_t)na);
    }
    (void)D;
    if (pm_audio_proj_forward(m->audio_proj, branch, enc, (int)nrows, proj, e)) goto done;
    int total = 0;
    for (int k = 0; k < na; k++) {
        if (sizes[k] > t_enc) {
            pm_errf(e, PM_ESTATE, "audio %d: %d tokens expected but the encoder produced %d frames", k + 1, sizes[k], t_enc);
            goto done;
        }
        total += sizes[k];
    }
    *rows = pm_malloc(sizeof(float) * (size_t)total * H, e);
    if (!*rows) goto done;
    for (int k = 0, r = 0; k < na; k++) {
        memcpy(*rows + (size_t)r * H, proj + (size_t)k * t_enc * H, sizeof(float) * (size_t)sizes[k] * H);
        r += sizes[k];
    }
done:
    for (int k = 0; mels && k < na; k++) pm_logmel_free(&mels[k]);
    free(mels);
    free(frames);
    free(feats);
    free(enc);
    free(proj);
    return e->code;
}

static int encode_images(const pm_model *m, const pm_request *req, float **rows, int *sizes, pm_prep_trace *tr, pm_media_cache *mc,
                         pm_err *e) {
    int ni = req->n_images, H = m->llm.c.hidden;
    float **per = pm_calloc((size_t)ni, sizeof(float *), e);
    if (!per) return e->code;
    int total = 0;
    for (int k = 0; k < ni && !e->code; k++) {
        const pm_image_in *im = &req->images[k];
        size_t kl = 0;
        void *key = mc && !tr ? image_key(req, im, max_crops(m, req), &kl) : NULL; /* each image alone: the media cache's first */
        int got = key ? pm_media_cache_get(mc, key, kl, H, &per[k], &sizes[k], 1, e) : 0;
        if (got != 0) {
            free(key);
            if (got > 0) total += sizes[k];
            continue;
        }
        pm_image img = {(uint8_t *)im->rgb, im->width, im->height};
        pm_hd_image hd = {0};
        if (pm_hd_preprocess(&img, max_crops(m, req), m->crop_size, &hd, e)) {
            pm_err_ctx(e, "image %d: ", k + 1);
            break;
        }
        int ntok = 0;
        if (!pm_image_embed_forward(m->image, hd.pixels, hd.crop_mask, hd.n_crops, hd.h_crops, hd.w_crops, &per[k], &ntok,
                                    (tr && k == 0) ? tr->vit : NULL, e) &&
            ntok != hd.num_tokens)
            pm_errf(e, PM_ESTATE, "image %d: the processor counts %d tokens but the vision tower produced %d", k + 1, hd.num_tokens, ntok);
        sizes[k] = ntok;
        total += ntok;
        if (key && !e->code) pm_media_cache_put(mc, key, kl, H, per[k], ntok, &sizes[k], 1);
        free(key);
        if (tr && tr->want_image && k == 0) {
            tr->hd = hd;
            if (!e->code && (tr->img_tokens = pm_malloc(sizeof(float) * (size_t)ntok * H, e)))
                memcpy(tr->img_tokens, per[k], sizeof(float) * (size_t)ntok * H);
            tr->n_img_tokens = ntok;
        } else pm_hd_free(&hd);
    }
    if (!e->code && (*rows = pm_malloc(sizeof(float) * (size_t)total * H, e)))
        for (int k = 0, r = 0; k < ni; k++) {
            memcpy(*rows + (size_t)r * H, per[k], sizeof(float) * (size_t)sizes[k] * H);
            r += sizes[k];
        }
    for (int k = 0; k < ni; k++) free(per[k]);
    free(per);
    return e->code;
}

void pm_plan_free(pm_plan *p) {
    free(p->ids);
    free(p->audio_tokens);
    free(p->image_tokens);
    memset(p, 0, sizeof *p);
}

int pm_prepare_plan(const pm_model *m, const pm_request *req, const pm_limits *lim, pm_plan *out, pm_err *e) {
    memset(out, 0, sizeof *out);
    pm_limits dl;
    if (!lim) {
        pm_limits_default(&dl);
        lim = &dl;
    }
    if (req->n_audios < 0 || req->n_images < 0) return pm_errf(e, PM_EINVAL, "negative media count");
    if (req->n_audios > lim->max_audio_clips)
        return pm_errf(e, PM_ELIMIT, "%d audio clips exceed the limit of %d per request", req->n_audios, lim->max_audio_clips);
    if (req->n_images > lim->max_images) return pm_errf(e, PM_ELIMIT, "%d images exceed the limit of %d per request", req->n_images, lim->max_images);
    double secs = 0.0;
    for (int k = 0; k < req->n_audios; k++) {
        const pm_audio_in *a = &req->audios[k];
        if (!a->samples && a->n_samples) return pm_errf(e, PM_EINVAL, "audio %d: no samples", k + 1);
        if (a->sample_rate <= 0) return pm_errf(e, PM_EINVAL, "audio %d: invalid sample rate %d", k + 1, a->sample_rate);
        secs += (double)a->n_samples / a->sample_rate;
    }
    if (secs > lim->max_audio_seconds)
        return pm_errf(e, PM_ELIMIT, "audio totals %.4f s, over the limit of %.4f s per request", secs, lim->max_audio_seconds);
    if (req->max_crops < 0 || req->max_crops > 4096) /* 4096: the HD plan's divisor scan bound */
        return pm_errf(e, PM_EINVAL, "max_crops %d is outside 1..4096 (0: the checkpoint's %d)", req->max_crops, m->dynamic_hd);
    for (int k = 0; k < req->n_images; k++) {
        const pm_image_in *im = &req->images[k];
        if (!im->rgb || im->width <= 0 || im->height <= 0) return pm_errf(e, PM_EINVAL, "image %d: empty (%dx%d)", k + 1, im->width, im->height);
        if ((int64_t)im->width * im->height > lim->max_image_pixels)
            return pm_errf(e, PM_ELIMIT, "image %d: %dx%d pixels exceed the limit of %lld", k + 1, im->width, im->height,
                           (long long)lim->max_image_pixels);
    }
    out->audio_seconds = secs;
    out->audio_tokens = pm_calloc((size_t)req->n_audios + 1, sizeof(int), e);
    out->image_tokens = pm_calloc((size_t)req->n_images + 1, sizeof(int), e);
    if (e->code) goto fail;

    /* Each media item's token count from its size alone (the encoders are checked against it), so
     * that a request is refused or deferred before seconds of encoder work. A clip too short or at
     * too low a rate gets the feature extractor's own refusal; its scan of the samples for
     * non-finite values is left to the extractor (30 min at 48 kHz are 86 M samples). */
    for (int k = 0; k < req->n_audios; k++) {
        const pm_audio_in *a = &req->audios[k];
        int frames = pm_audio_num_frames(a->n_samples, a->sample_rate);
        if (frames < PM_AUDIO_MIN_FRAMES && pm_audio_check(a->samples, a->n_samples, a->sample_rate, e)) {
            pm_err_ctx(e, "audio %d: ", k + 1);
            goto fail;
        }
        int s = (frames + m->audio_compression - 1) / m->audio_compression;
        out->audio_tokens[k] = (s + m->audio_downsample - 1) / m->audio_downsample;
    }
    for (int k = 0; k < req->n_images; k++) {
        pm_hd_plan hp;
        if (pm_hd_plan_compute(req->images[k].width, req->images[k].height, max_crops(m, req), m->crop_size, &hp, e)) {
            pm_err_ctx(e, "image %d: ", k + 1);
            goto fail;
        }
        out->image_tokens[k] = hp.num_tokens;
    }

    /* prompt ids with one placeholder per media item, then each placeholder expanded to its
     * item's token count (validates the counts, normalises legacy ids) */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int max_ctx = lim->max_context > 0 ? lim->max_context : m->llm.c.max_pos, room = max_ctx - (req->max_tokens > 0 ? req->max_tokens : 0);
    if (req->truncate_prompt && (req->truncate_prompt < -1 || req->n_images || req->n_audios)) {
        pm_errf(e, PM_EINVAL, req->truncate_prompt < -1 ? "truncate_prompt must be -1, 0 or positive (got %d)"
                                                        : "truncate_prompt applies to prompts without images or audio (got %d)",
                req->truncate_prompt);
        goto fail;
    }
    if (req->prompt) {
        char *rewritten = NULL;
        if (pm_prompt_rewrite_placeholders(req->prompt, req->n_images, req->n_audios, &rewritten, e)) goto fail;
        /* placeholders only grow in the expansion: a prompt of more than `room` ids is over the limit
         * (one to be truncated is encoded whole: its end is what stays) */
        int rc = pm_tok_encode_max(m->tok, rewritten, strlen(rewritten), 1, req->truncate_prompt ? 0 : room > 0 ? (size_t)room : 1, &ids,
                                   &n_ids, e);
        free(rewritten);
        if (rc == PM_ELIMIT) {
            pm_err_clear(e);
            pm_errf(e, PM_ECONTEXT, "prompt of more than %d tokens plus max_tokens %d exceeds the context limit of %d (encoding stopped)",
                    room > 0 ? room : 1, req->max_tokens, max_ctx);
        }
        if (rc) goto fail;
    } else if (req->ids && req->n_ids) {
        for (size_t i = 0; i < req->n_ids; i++) /* negative ids are the legacy media placeholders */
            if (req->ids[i] >= m->llm.c.vocab) {
                pm_errf(e, PM_EINVAL, "token id %d at position %zu is outside the vocabulary [0, %d)", req->ids[i], i, m->llm.c.vocab);
                goto fail;
            }
        if (!(ids = pm_malloc(sizeof(int32_t) * req->n_ids, e))) goto fail;
        memcpy(ids, req->ids, sizeof(int32_t) * req->n_ids);
        n_ids = req->n_ids;
    } else {
        pm_errf(e, PM_EINVAL, "the request has neither a prompt nor token ids");
        goto fail;
    }
    size_t keep = req->truncate_prompt > 0 ? (size_t)req->truncate_prompt : req->truncate_prompt < 0 && room > 0 ? (size_t)room : n_ids;
    if (n_ids > keep) { /* left truncation: the prompt's last `keep` tokens */
        memmove(ids, ids + (n_ids - keep), sizeof(int32_t) * keep);
        n_ids = keep;
    }
    pm_expand_placeholders(ids, n_ids, out->image_tokens, req->n_images, out->audio_tokens, req->n_audios, &out->ids, &out->n, e);
    free(ids);
    if (e->code) goto fail;
    if ((int64_t)out->n + (req->max_tokens > 0 ? req->max_tokens : 0) > max_ctx) {
        pm_errf(e, PM_ECONTEXT, "prompt of %zu tokens plus max_tokens %d exceeds the context limit of %d", out->n, req->max_tokens, max_ctx);
        goto fail;
    }
    if (out->n == 0) {
        pm_errf(e, PM_EINVAL, "the prompt is empty");
        goto fail;
    }
    return PM_OK;
fail:
    pm_plan_free(out);
    return e->code;
}

int pm_prepare_finish(const pm_model *m, const pm_request *req, pm_plan *plan, pm_prepared *out, pm_prep_trace *tr, pm_media_cache *mc,
                      pm_err *e) {
    memset(out, 0, sizeof *out);
    int H = m->llm.c.hidden;
    out->audio_seconds = plan->audio_seconds;
    if (req->cache_salt && strlen(req->cache_salt) > PM_MAX_CACHE_SALT)
        return pm_errf(e, PM_EINVAL, "cache_salt holds at most %d bytes", PM_MAX_CACHE_SALT);
    if (req->cache_salt) strcpy(out->salt, req->cache_salt);
    out->mode = pm_request_mode(req);
    out->adapter = out->mode == PM_MODE_LANGUAGE ? PM_ADAPTER_NONE : out->mode == PM_MODE_SPEECH ? PM_ADAPTER_SPEECH : PM_ADAPTER_VISION;
    pm_fault fault = tr ? tr->fault : PM_FAULT_NONE;
    if (fault == PM_FAULT_NO_ADAPTER) out->adapter = PM_ADAPTER_NONE;

    /* media, each item's rows checked against the plan's count */
    int *asz = pm_calloc((size_t)req->n_audios + 1, sizeof(int), e), *isz = pm_calloc((size_t)req->n_images + 1, sizeof(int), e);
    float *arows = NULL, *irows = NULL;
    int branch = out->mode == PM_MODE_VISION_SPEECH ? 1 : 0; /* any image -> the vision branch */
    if (fault == PM_FAULT_WRONG_PROJ) branch = !branch;
    if (!e->code && req->n_audios) encode_audio(m, req, branch, &arows, asz, tr, mc, e);
    if (!e->code && req->n_images) encode_images(m, req, &irows, isz, tr, mc, e);
    for (int k = 0; !e->code && k < req->n_audios; k++)
        if (asz[k] != plan->audio_tokens[k])
            pm_errf(e, PM_ESTATE, "audio %d: %d tokens planned but the features give %d", k + 1, plan->audio_tokens[k], asz[k]);
    for (int k = 0; !e->code && k < req->n_images; k++)
        if (isz[k] != plan->image_tokens[k])
            pm_errf(e, PM_ESTATE, "image %d: %d tokens planned but the vision tower gives %d", k + 1, plan->image_tokens[k], isz[k]);

    /* merge: media rows REPLACE their placeholders' embeddings, row-major in order */
    size_t nx = plan->n;
    const int32_t *xids = plan->ids;
    if (!e->code && (out->embeds = pm_malloc(sizeof(float) * nx * H, e))) {
        size_t ai = 0, ii = 0;
        for (size_t i = 0; i < nx && !e->code; i++) {
            float *row = out->embeds + i * H;
            const float *media = NULL;
            if (xids[i] == PM_AUDIO_TOKEN_ID && arows) media = arows + (ai++) * H;
            else if (xids[i] == PM_IMAGE_TOKEN_ID && irows) media = irows + (ii++) * H;
            if (!media || fault == PM_FAULT_ADD_EMBEDS) pm_llm_embed(&m->llm, &xids[i], 1, row, e);
            if (media && fault == PM_FAULT_ADD_EMBEDS) pm_add_inplace(row, media, (size_t)H);
            else if (media) memcpy(row, media, sizeof(float) * H); /* replace, never add */
        }
    }
    free(asz);
    free(isz);
    free(arows);
    free(irows);
    if (e->code) {
        pm_prepared_free(out);
        return e->code;
    }
    out->ids = plan->ids; /* the expanded ids move over */
    out->n = (int)nx;
    plan->ids = NULL;
    plan->n = 0;
    return PM_OK;
}

int pm_prepare(const pm_model *m, const pm_request *req, const pm_limits *lim, pm_prepared *out, pm_prep_trace *tr, pm_err *e) {
    pm_plan plan;
    memset(out, 0, sizeof *out);
    if (pm_prepare_plan(m, req, lim, &plan, e)) return e->code;
    int rc = pm_prepare_finish(m, req, &plan, out, tr, NULL, e);
    pm_plan_free(&plan);
    return rc;
}
