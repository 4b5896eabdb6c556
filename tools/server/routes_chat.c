/* routes_chat.c — POST /v1/chat/completions and POST /v1/completions (a raw prompt, text only:
 * the same job without template or media). The body is parsed and validated (chat_parse.c),
 * the media decoded here on the HTTP worker (so the inference thread only encodes), and the job
 * handed to the scheduler. Defaults follow the checkpoint's generation_config: greedy decoding
 * (temperature 0) unless the request asks otherwise; max_tokens defaults to --default-max-tokens.
 * Errors: 400 for any request mistake (placeholder/media count mismatch included, code
 * "placeholder_mismatch"), 413 for oversized bodies or media (or decoded media larger than the
 * server's memory for them), 503 when the queue is full or that memory is in use right now. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "chat_parse.h"
#include "http.h"
#include "json_util.h"
#include "media_fetch.h"
#include "logprobs.h"
#include "scheduler.h"
#include "tool_calls.h"

static uint64_t random_seed(void) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    return s;
}

/* Decodes the request's media into the job. Returns 0 or -1 with e set. */
static int decode_media(srv_ctx *ctx, const srv_chat_req *r, srv_job *j, srv_error *e) {
    char err[512];
    if (r->n_images) {
        j->images = calloc((size_t)r->n_images, sizeof *j->images);
        if (!j->images) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        for (int i = 0; i < r->n_images; i++) {
            int rc = pm_image_decode_gated(r->images[i].data, r->images[i].len, r->images[i].what, ctx->limits.max_image_pixels,
                                           srv_job_media_gate(j), &j->images[i], err, sizeof err);
            if (srv_job_media_refusal(j, rc, r->images[i].what, e)) return -1;
            if (rc == PM_ENOMEM) return srv_fail(e, 503, "server_error", NULL, "out_of_memory", "%s", err);
            if (rc) return srv_bad(e, r->images[i].what, rc == PM_ELIMIT ? "image_too_large" : "invalid_image", "%s", err);
            j->n_images++;
        }
    }
    if (r->n_audios) {
        j->audios = calloc((size_t)r->n_audios, sizeof *j->audios);
        if (!j->audios) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        /* Decoding stops once the request's audio runs over its limit: FLAC codes silence in a few
         * bytes per 4096 samples, so a body within --max-body could otherwise decode to hundreds of
         * GB before the limit is checked. */
        double limit = ctx->limits.max_audio_seconds;
        for (int i = 0; i < r->n_audios; i++) {
            double left = limit - j->audio_seconds;
            int rc = limit > 0 && left <= 0 ? PM_ELIMIT
                                             : pm_audio_decode_gated(r->audios[i].data, r->audios[i].len, r->audios[i].what,
                                                                     limit > 0 ? left : 0.0, srv_job_media_gate(j), &j->audios[i], err,
                                                                     sizeof err);
            if (srv_job_media_refusal(j, rc, r->audios[i].what, e)) return -1;
            if (rc == PM_ENOMEM) return srv_fail(e, 503, "server_error", NULL, "out_of_memory", "%s", err);
            if (rc == PM_ELIMIT)
                return srv_bad(e, r->audios[i].what, "limit_exceeded",
                               "%s: the request's audio runs over the limit of %.4f s per request (%.4f s in the clips before it; "
                               "decoding stopped)", r->audios[i].what, limit, j->audio_seconds);
            if (rc) return srv_bad(e, r->audios[i].what, "invalid_audio", "%s", err);
            j->n_audios++;
            if (j->audios[i].sample_rate > 0) j->audio_seconds += (double)j->audios[i].n_samples / j->audios[i].sample_rate;
        }
    }
    return 0;
}

/* A malloc'd copy of bytes at src; NULL with *oom set when memory runs out. */
static void *copy_of(const void *src, size_t bytes, int *oom) {
    void *p = malloc(bytes);
    if (p) memcpy(p, src, bytes);
    else *oom = 1;
    return p;
}

/* The job of choice `index` (sample `sample` of its prompt) of a parsed request: what it needs of
 * r is copied (a request's choices share r) and r's media decoded into it. NULL with e set. */
srv_job *srv_chat_job(srv_ctx *ctx, const srv_chat_req *r, srv_job_kind kind, int index, int sample, srv_error *e) {
    srv_job *j = srv_job_new(ctx, kind);
    if (!j) {
        srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    if (decode_media(ctx, r, j, e)) {
        srv_job_unref(j);
        return NULL;
    }
    int oom = 0;
    if (r->prompt && !(j->prompt = strdup(r->prompt))) oom = 1;
    if (r->n_prompt_ids && (j->prompt_ids = copy_of(r->prompt_ids, sizeof(int32_t) * (size_t)r->n_prompt_ids, &oom)))
        j->n_prompt_ids = r->n_prompt_ids;
    for (int i = 0; i < r->n_stop; i++)
        if ((j->stop[j->n_stop] = strdup(r->stop[i]))) j->n_stop++;
        else oom = 1;
    if (r->n_stop_ids && (j->stop_ids = copy_of(r->stop_ids, sizeof(int32_t) * (size_t)r->n_stop_ids, &oom))) j->n_stop_ids = r->n_stop_ids;
    j->stop_in_output = r->stop_in_output;
    if (r->n_allowed_ids && (j->allowed_ids = copy_of(r->allowed_ids, sizeof(int32_t) * (size_t)r->n_allowed_ids, &oom)))
        j->n_allowed_ids = r->n_allowed_ids;
    if (r->n_bad_words && (j->bad_words = calloc((size_t)r->n_bad_words, sizeof *j->bad_words)))
        for (int i = 0; i < r->n_bad_words; i++)
            if ((j->bad_words[j->n_bad_words] = strdup(r->bad_words[i]))) j->n_bad_words++;
            else oom = 1;
    else if (r->n_bad_words) oom = 1;
    j->keep_special = r->keep_special;
    if (r->echo_text && !(j->echo_text = strdup(r->echo_text))) oom = 1;
    if (r->n_logit_bias && (j->logit_bias = copy_of(r->logit_bias, sizeof *j->logit_bias * (size_t)r->n_logit_bias, &oom)))
        j->n_logit_bias = r->n_logit_bias;
    if (r->json_schema && !(j->json_schema = strdup(r->json_schema))) oom = 1;
    if (r->guide && !(j->guide = strdup(r->guide))) oom = 1;
    if (r->cache_salt && !(j->cache_salt = strdup(r->cache_salt))) oom = 1;
    j->max_crops = r->max_crops;
    if (r->prediction && !(j->prediction = strdup(r->prediction))) oom = 1;
    if (oom) {
        srv_job_unref(j);
        srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    j->stream = r->stream;
    j->include_usage = r->stream && r->include_usage;
    j->continuous_usage = j->include_usage && r->continuous_usage;
    j->max_tokens = r->max_tokens > 0 || r->score_only ? r->max_tokens : ctx->o.default_max_tokens;
    j->max_tokens_default = !(r->max_tokens > 0 || r->score_only);
    j->echo = r->echo;
    j->sampling = r->sampling;
    j->output_format = r->format;
    j->min_tokens = r->min_tokens;
    j->ignore_eos = r->ignore_eos;
    j->tool_mode = r->tool_mode;
    j->logprobs = r->logprobs;
    j->top_logprobs = r->top_logprobs;
    j->prompt_logprobs = r->prompt_logprobs && sample == 0; /* scored once a prompt: its choices share it */
    j->prompt_top = r->prompt_top;
    j->tokens_as_ids = r->tokens_as_ids;
    j->truncate_prompt = r->truncate_prompt;
    /* a prompt's samples draw apart: seed + sample when the seed is given, a seed each when not */
    if (!r->seed_given && j->sampling.temperature > 0) j->sampling.seed = random_seed();
    else j->sampling.seed += (uint64_t)sample;
    j->index = index;
    j->first_of_prompt = sample == 0;
    pm_request probe = {0};
    probe.n_images = j->n_images;
    probe.n_audios = j->n_audios;
    j->mode = pm_request_mode(&probe);
    return j;
}

/* The jobs of k parsed chat or completions requests (rc: the parsers' result, e their error),
 * n choices each, handed to the scheduler; reqs are freed. */
static enum MHD_Result submit(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, srv_chat_req *reqs, int k, int rc, srv_error *e,
                              srv_job_kind kind) {
    srv_conn_free_body(ctx, sc); /* everything needed now lives in reqs */
    int n = rc ? 1 : reqs[0].n, total = k * n;
    srv_job **jobs = rc ? NULL : calloc((size_t)total, sizeof *jobs);
    if (!rc && !jobs) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (!rc && total > ctx->o.max_queue) /* never fits: not a 503 to retry */
        rc = srv_bad(e, "n", "invalid_value", "%d choices, more than the %d requests this server queues (--max-queue)", total,
                     ctx->o.max_queue);
    if (!rc && ctx->max_context > 0 && reqs[0].max_tokens > ctx->max_context)
        rc = srv_bad(e, "max_tokens", "context_length_exceeded", "max_tokens %d is larger than the model's context of %d tokens",
                     reqs[0].max_tokens, ctx->max_context);
    char id[48];
    srv_new_id(ctx, kind == SRV_JOB_CHAT ? "chatcmpl" : "cmpl", id, sizeof id);
    long long created = (long long)time(NULL);
    for (int i = 0; !rc && i < total; i++) {
        srv_job *j = jobs[i] = srv_chat_job(ctx, &reqs[i / n], kind, i, i % n, e);
        if (!j) {
            rc = -1;
            break;
        }
        snprintf(j->id, sizeof j->id, "%s", id);
        j->created = created;
        j->t_arrival = sc->t0;
        /* several prompts: each planned now, so that a bad one is answered before the others run
         * (queued, the connection waits on one choice at a time) */
        if (k > 1 && i % n == 0 && srv_sched_plan(ctx->sched, j, e)) {
            snprintf(e->param, sizeof e->param, "prompt[%d]", i / n);
            rc = -1;
        }
    }
    for (int i = 0; i < k; i++) srv_chat_req_free(&reqs[i]);
    if (rc) {
        for (int i = 0; jobs && i < total; i++)
            if (jobs[i]) srv_job_unref(jobs[i]);
        free(jobs);
        return srv_respond_error(ctx, c, sc, e);
    }
    return srv_submit_jobs(ctx, c, sc, jobs, total);
}

srv_parse_limits srv_request_limits(const srv_ctx *ctx) {
    return (srv_parse_limits){.max_images = ctx->limits.max_images, .max_audios = ctx->limits.max_audio_clips,
                              .max_media_bytes = ctx->o.max_body, .media_dir = ctx->o.media_dir};
}

int srv_refuse_ignored(const srv_ctx *ctx, const srv_conn *sc, int n, srv_error *e) {
    if (!n || !ctx->o.strict_params) return 0;
    char first[sizeof sc->ignored];
    memcpy(first, sc->ignored, sizeof first);
    first[strcspn(first, ",.")] = 0;
    return srv_bad(e, first, "unknown_parameter", "Unrecognized request argument supplied: %s (serve --strict-params)", sc->ignored);
}

enum MHD_Result srv_route_chat(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    srv_error e;
    json_t *root = srv_json_parse(sc->body ? sc->body : "", sc->len, SRV_JSON_MAX_DEPTH, &e);
    if (!root) return srv_respond_error(ctx, c, sc, &e);
    srv_parse_limits lim = srv_request_limits(ctx);
    int f = srv_fetch_media(ctx, c, sc, root, &lim, &e);
    if (f) {
        json_decref(root);
        return f > 0 ? MHD_YES : srv_respond_error(ctx, c, sc, &e);
    }
    srv_chat_req r;
    int rc = srv_chat_parse(root, &lim, &r, &e);
    if (!rc) rc = srv_refuse_ignored(ctx, sc, srv_ignored_fields(root, 0, sc->ignored, sizeof sc->ignored), &e);
    json_decref(root);
    srv_fetch_release(ctx, sc);
    return submit(ctx, c, sc, &r, 1, rc, &e, SRV_JOB_CHAT);
}

enum MHD_Result srv_route_completions(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    srv_error e;
    json_t *root = srv_json_parse(sc->body ? sc->body : "", sc->len, SRV_JSON_MAX_DEPTH, &e);
    if (!root) return srv_respond_error(ctx, c, sc, &e);
    int k = srv_completion_prompts(root), rc = 0;
    srv_chat_req *reqs = calloc((size_t)k, sizeof *reqs);
    if (!reqs) {
        json_decref(root);
        srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        return srv_respond_error(ctx, c, sc, &e);
    }
    for (int i = 0; i < k && !rc; i++) rc = srv_completion_parse(root, i, &reqs[i], &e);
    if (!rc) rc = srv_refuse_ignored(ctx, sc, srv_ignored_fields(root, 1, sc->ignored, sizeof sc->ignored), &e);
    json_decref(root);
    if (!rc && k * reqs[0].n > SRV_MAX_CHOICES)
        rc = srv_bad(&e, "n", "invalid_value", "%d prompts x n %d make %d choices, more than the %d a request may have", k, reqs[0].n,
                     k * reqs[0].n, SRV_MAX_CHOICES);
    enum MHD_Result res = submit(ctx, c, sc, reqs, k, rc, &e, SRV_JOB_COMPLETION);
    free(reqs);
    return res;
}

json_t *srv_usage_json(srv_job *const *jobs, int n) {
    long long prompt = 0, completion = 0, cached = 0, drafted = 0, accepted = 0;
    int predicted = 0;
    for (int i = 0; i < n; i++) {
        if (jobs[i]->first_of_prompt) prompt += jobs[i]->prompt_tokens, cached += jobs[i]->cached_tokens;
        completion += jobs[i]->completion_tokens;
        predicted |= jobs[i]->prediction != NULL;
        drafted += jobs[i]->pred_drafted, accepted += jobs[i]->pred_accepted;
    }
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(prompt));
    json_object_set_new(u, "completion_tokens", json_integer(completion));
    json_object_set_new(u, "total_tokens", json_integer(prompt + completion));
    if (n && jobs[0]->kind == SRV_JOB_CHAT) /* OpenAI's: the prompt's tokens the prompt cache held */
        json_object_set_new(u, "prompt_tokens_details", json_pack("{s:I}", "cached_tokens", (json_int_t)cached));
    if (predicted) /* OpenAI's: the prediction's tokens the answer took, and those it turned down */
        json_object_set_new(u, "completion_tokens_details", json_pack("{s:I, s:I}", "accepted_prediction_tokens", (json_int_t)accepted,
                                                                      "rejected_prediction_tokens", (json_int_t)(drafted - accepted)));
    return u;
}

json_t *srv_choice_object(const srv_job *j, const char *object, const char *model, json_t *choice) {
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(j->created));
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "system_fingerprint", json_null());
    json_object_set_new(o, "choices", choices);
    return o;
}

/* With tools, calls found in the answer come back as tool_calls (the text before them as
 * content, null when there is none) and finish_reason "tool_calls"; an answer cut short by
 * max_tokens stays text. */
static json_t *chat_choice(const srv_job *j) {
    const char *text = j->text ? j->text : "";
    size_t content_len = j->text_len;
    json_t *calls = NULL, *msg = json_object(), *ch = json_object();
    if (j->tool_mode != SRV_TOOLS_OFF && j->finish == PM_FINISH_STOP)
        calls = srv_tool_calls_find(text, j->text_len, j->tool_mode, j->tool_at, j->tool_end, j->id, j->index, &content_len);
    json_object_set_new(msg, "role", json_string("assistant"));
    json_object_set_new(msg, "content", calls && !content_len ? json_null() : srv_json_text(text, content_len));
    json_object_set_new(msg, "refusal", json_null());
    if (calls) {
        json_object_set_new(msg, "tool_calls", calls);
        json_object_set_new(ch, "finish_reason", json_string("tool_calls"));
    }
    json_object_set_new(ch, "message", msg);
    return ch;
}

static json_t *completion_choice(const srv_job *j) {
    json_t *ch = json_object();
    json_object_set_new(ch, "text", srv_json_text(j->text ? j->text : "", j->text_len));
    return ch;
}

/* The whole answer around its choices, in index order: chat.completion or text_completion. */
static char *result_body(srv_job *const *jobs, int n, const char *object, const char *model, json_t *(*choice_of)(const srv_job *),
                         size_t *len) {
    json_t *o = srv_choice_object(jobs[0], object, model, json_object()), *choices = json_object_get(o, "choices");
    json_array_clear(choices);
    const srv_job *scored = NULL; /* the first choice of the current prompt, which scored it (prompt_logprobs) */
    for (int i = 0; i < n; i++) {
        const srv_job *j = jobs[i];
        if (j->first_of_prompt) scored = j;
        json_t *ch = choice_of(j);
        json_object_set_new(ch, "index", json_integer(j->index));
        json_object_set_new(ch, "logprobs", j->logprobs ? srv_logprobs_json(j, 0, j->n_lps) : json_null());
        if (scored && scored->prompt_logprobs && j->kind == SRV_JOB_COMPLETION)
            json_object_set_new(ch, "prompt_logprobs", srv_prompt_logprobs_json(scored));
        if (!json_object_get(ch, "finish_reason")) json_object_set_new(ch, "finish_reason", json_string(srv_finish_name(j->finish)));
        json_array_append_new(choices, ch);
    }
    /* chat: the prompt is the same for every choice, scored once at the top (vLLM's place) */
    if (jobs[0]->prompt_logprobs && jobs[0]->kind != SRV_JOB_COMPLETION) json_object_set_new(o, "prompt_logprobs", srv_prompt_logprobs_json(jobs[0]));
    json_object_set_new(o, "usage", srv_usage_json(jobs, n));
    char *s = srv_json_dump(o, len);
    json_decref(o);
    return s;
}

char *srv_chat_result(srv_job *const *jobs, int n, const char *model, size_t *len) {
    return result_body(jobs, n, "chat.completion", model, chat_choice, len);
}

char *srv_completion_result(srv_job *const *jobs, int n, const char *model, size_t *len) {
    return result_body(jobs, n, "text_completion", model, completion_choice, len);
}
