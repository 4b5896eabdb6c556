/* routes_audio.c — POST /v1/audio/transcriptions and /v1/audio/translations, served by
 * Phi-4-multimodal itself (speech adapter, official ASR / AST prompts; see audio_form.h).
 * Responses: json {"text"}, text (the transcript as text/plain), srt / vtt (a cue a segment),
 * verbose_json {"task",
 * "language", "duration", "text", "segments" (one a request: the clip whole, or each piece of
 * chunking_strategy auto with its start and end; the model gives no timestamps of its own),
 * "usage"}; stream=true gives transcript.text.delta / transcript.text.done events.
 * chunking_strategy auto: the clip's pieces (pm_audio_split) are a job each, decoded side by side
 * as a request's choices are; the transcript is their texts, each trimmed, joined by a space. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio_form.h"
#include "job.h"
#include "http.h"
#include "json_util.h"
#include "logprobs.h"
#include "multipart.h"
#include "subtitles.h"

enum { MAX_PARTS = 32 };

/* Cuts the job's clip into pieces of at most chunk seconds (0: one piece) and makes a job of each
 * after the first (which keeps j, its clip shrunk to the first piece). The samples are copied from
 * the clip's end, which is then given back, so the peak is the clip and one piece; each copy is
 * counted against the server's media memory under its own job. 0 with *out / *n, or -1 with e. */
static int piece_jobs(srv_ctx *ctx, srv_job *j, double chunk, srv_job ***out, int *n, srv_error *e) {
    pm_audio_in *a = &j->audios[0];
    double rate = a->sample_rate, whole = (double)a->n_samples / rate;
    pm_audio_span one = {0, a->n_samples}, *spans = &one;
    int k = chunk > 0 ? pm_audio_split(a, chunk, &spans) : 1;
    if (k < 1) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    int rc = 0;
    if (k > ctx->o.max_queue)
        rc = srv_bad(e, "chunking_strategy", "limit_exceeded",
                     "the clip (%.1f s) makes %d pieces of at most %.0f s, more than the server queues for one request (--max-queue %d)",
                     whole, k, chunk, ctx->o.max_queue);
    srv_job **jobs = rc ? NULL : calloc((size_t)k, sizeof *jobs);
    if (!rc && !jobs) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int i = k - 1; i >= 1 && !rc; i--) {
        srv_job *p = jobs[i] = srv_job_new(ctx, j->kind);
        if (!p || !(p->audios = calloc(1, sizeof *p->audios))) {
            rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            break;
        }
        size_t len = spans[i].end - spans[i].start;
        const pm_media_gate *g = srv_job_media_gate(p);
        int grc = g->adjust(g->user, (int64_t)(len * sizeof(double)));
        if (grc) {
            srv_job_media_refusal(p, grc == 1 ? PM_EBUSY : PM_ELIMIT, "file", e);
            rc = -1;
            break;
        }
        double *copy = malloc(len * sizeof *copy);
        if (!copy) {
            g->adjust(g->user, -(int64_t)(len * sizeof(double)));
            rc = srv_fail(e, 503, "server_error", NULL, "out_of_memory", "out of memory for the clip's pieces");
            break;
        }
        memcpy(copy, a->samples + spans[i].start, len * sizeof *copy);
        p->audios[0] = (pm_audio_in){copy, len, a->sample_rate};
        p->n_audios = 1;
        p->seg_start = (double)spans[i].start / rate;
        p->seg_end = (double)spans[i].end / rate;
        double *shrunk = realloc((void *)a->samples, spans[i].start * sizeof *shrunk); /* the clip gives its tail back */
        if (shrunk) {
            const pm_media_gate *jg = srv_job_media_gate(j);
            jg->adjust(jg->user, -(int64_t)((a->n_samples - spans[i].start) * sizeof(double)));
            a->samples = shrunk;
        }
        a->n_samples = spans[i].start;
    }
    j->seg_start = 0;
    j->seg_end = (double)spans[0].end / rate;
    if (spans != &one) free(spans);
    if (rc) {
        for (int i = 1; jobs && i < k; i++)
            if (jobs[i]) srv_job_unref(jobs[i]);
        free(jobs);
        return -1;
    }
    jobs[0] = j;
    *out = jobs;
    *n = k;
    return 0;
}

enum MHD_Result srv_route_audio(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, int translate) {
    srv_error e;
    char err[512], boundary[SRV_MP_MAX_BOUNDARY + 1];
    if (srv_multipart_boundary(sc->content_type, boundary, sizeof boundary, err, sizeof err)) {
        srv_bad(&e, NULL, "invalid_content_type", "%s", err);
        return srv_respond_error(ctx, c, sc, &e);
    }
    srv_part *parts = calloc(MAX_PARTS, sizeof *parts);
    if (!parts) return MHD_NO;
    int n = 0;
    if (srv_multipart_parse((const uint8_t *)sc->body, sc->len, boundary, parts, MAX_PARTS, &n, err, sizeof err)) {
        free(parts);
        srv_bad(&e, NULL, "invalid_multipart", "%s", err);
        return srv_respond_error(ctx, c, sc, &e);
    }
    srv_audio_req r;
    int rc = srv_audio_parse(parts, n, translate, &r, &e);
    if (!rc) rc = srv_refuse_ignored(ctx, sc, srv_audio_ignored(parts, n, sc->ignored, sizeof sc->ignored), &e);
    if (!rc && ctx->max_context > 0 && r.max_tokens > ctx->max_context)
        rc = srv_bad(&e, "max_tokens", "context_length_exceeded", "max_tokens %d is larger than the model's context of %d tokens",
                     r.max_tokens, ctx->max_context);
    srv_job *j = rc ? NULL : srv_job_new(ctx, translate ? SRV_JOB_TRANSLATE : SRV_JOB_TRANSCRIBE);
    if (!rc && !j) rc = srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
    if (!rc) {
        j->audios = calloc(1, sizeof *j->audios);
        if (!j->audios) rc = srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        else {
            /* stops decoding past the limit (a compressed upload can decode to hundreds of GB) */
            j->body_bytes = sc->body_taken; /* the form is freed once the file is decoded */
            int drc = pm_audio_decode_gated(r.file, r.file_len, r.filename, ctx->limits.max_audio_seconds, srv_job_media_gate(j),
                                            &j->audios[0], err, sizeof err);
            if (srv_job_media_refusal(j, drc, r.filename, &e)) rc = -1;
            else if (drc == PM_ENOMEM) rc = srv_fail(&e, 503, "server_error", NULL, "out_of_memory", "%s", err);
            else if (drc == PM_ELIMIT) rc = srv_bad(&e, "file", "limit_exceeded", "%s", err);
            else if (drc) rc = srv_bad(&e, "file", "invalid_audio", "%s", err);
            else j->n_audios = 1;
        }
    }
    free(parts);
    srv_conn_free_body(ctx, sc); /* the file is decoded; the form is no longer needed */
    srv_job **jobs = NULL;
    int k = 0;
    if (j) j->body_bytes = 0;
    if (!rc) rc = piece_jobs(ctx, j, r.chunk_seconds, &jobs, &k, &e);
    if (rc) {
        srv_audio_req_free(&r);
        if (j) srv_job_unref(j);
        return srv_respond_error(ctx, c, sc, &e);
    }
    char id[sizeof j->id];
    srv_new_id(ctx, translate ? "trans" : "asr", id, sizeof id);
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 0; i < k; i++) {
        srv_job *p = jobs[i];
        p->prompt = strdup(r.prompt);
        if (!p->prompt) {
            for (int q = 0; q < k; q++) srv_job_unref(jobs[q]);
            free(jobs);
            srv_audio_req_free(&r);
            srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
            return srv_respond_error(ctx, c, sc, &e);
        }
        p->stream = r.stream;
        p->format = r.format;
        snprintf(p->language, sizeof p->language, "%s", r.language);
        p->max_tokens = r.max_tokens > 0 ? r.max_tokens : ctx->o.default_max_tokens;
        p->sampling.temperature = r.temperature;
        p->sampling.top_p = 1.0f;
        p->sampling.seed = seed + (uint64_t)i;
        p->mode = PM_MODE_SPEECH;
        p->logprobs = r.logprobs;
        p->index = i;
        p->first_of_prompt = 1; /* each piece is its own prompt: the usage counts them all */
        p->audio_seconds = p->seg_end - p->seg_start;
        snprintf(p->id, sizeof p->id, "%s", id);
        p->created = (long long)time(NULL);
        p->t_arrival = sc->t0;
    }
    srv_audio_req_free(&r);
    return srv_submit_jobs(ctx, c, sc, jobs, k);
}

/* The transcript of a request's jobs: one job's text as it is; pieces' texts each without the
 * whitespace around it, joined by one space (empty ones left out). Malloc'd. */
char *srv_transcript_text(srv_job *const *jobs, int n, size_t *len) {
    size_t cap = 1;
    for (int i = 0; i < n; i++) cap += jobs[i]->text_len + 1;
    char *out = malloc(cap);
    if (!out) return NULL;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *t = jobs[i]->text ? jobs[i]->text : "";
        size_t a = 0, b = jobs[i]->text_len;
        if (n > 1) srv_trim_space(t, &a, &b);
        if (b == a) continue;
        if (at) out[at++] = ' ';
        memcpy(out + at, t + a, b - a);
        at += b - a;
    }
    out[at] = 0;
    *len = at;
    return out;
}

/* [*a, *b) of t without the ASCII whitespace at either end. */
void srv_trim_space(const char *t, size_t *a, size_t *b) {
    while (*a < *b && (t[*a] == ' ' || t[*a] == '\n' || t[*a] == '\t' || t[*a] == '\r')) (*a)++;
    while (*b > *a && (t[*b - 1] == ' ' || t[*b - 1] == '\n' || t[*b - 1] == '\t' || t[*b - 1] == '\r')) (*b)--;
}

json_t *srv_transcript_logprobs(const srv_job *j, int from, int to) {
    json_t *o = srv_logprobs_json(j, from, to), *a = json_incref(json_object_get(o, "content")), *it;
    json_decref(o);
    size_t i;
    json_array_foreach(a, i, it) json_object_del(it, "top_logprobs");
    return a ? a : json_array();
}

json_t *srv_transcript_logprobs_all(srv_job *const *jobs, int n) {
    json_t *all = json_array();
    for (int i = 0; i < n; i++) {
        json_t *some = srv_transcript_logprobs(jobs[i], 0, jobs[i]->n_lps);
        json_array_extend(all, some);
        json_decref(some);
    }
    return all;
}

json_t *srv_transcript_usage(srv_job *const *jobs, int n) {
    int in = 0, outt = 0;
    for (int i = 0; i < n; i++) {
        in += jobs[i]->prompt_tokens;
        outt += jobs[i]->completion_tokens;
    }
    json_t *u = json_object();
    json_object_set_new(u, "type", json_string("tokens"));
    json_object_set_new(u, "input_tokens", json_integer(in));
    json_object_set_new(u, "output_tokens", json_integer(outt));
    json_object_set_new(u, "total_tokens", json_integer(in + outt));
    return u;
}

/* srt / vtt: a cue a segment with text (the clip whole, or each piece), each text trimmed and
 * sanitised to UTF-8 (subtitles.h). */
static char *subtitles(srv_job *const *jobs, int n, int vtt, size_t *len) {
    char *out = NULL;
    FILE *f = open_memstream(&out, len);
    if (!f) return NULL;
    srv_subtitles_header(f, vtt);
    for (int i = 0, cue = 0; i < n; i++) {
        const srv_job *p = jobs[i];
        size_t a = 0, b = p->text_len;
        const char *t = p->text ? p->text : "";
        srv_trim_space(t, &a, &b);
        if (a == b) continue;
        json_t *s = srv_json_text(t + a, b - a);
        const char *txt = s ? json_string_value(s) : "";
        srv_subtitles_cue(f, vtt, ++cue, p->seg_start, p->seg_end, txt, s ? json_string_length(s) : 0);
        json_decref(s);
    }
    if (fclose(f)) {
        free(out);
        return NULL;
    }
    return out;
}

char *srv_audio_result(srv_job *const *jobs, int n, size_t *len, const char **content_type) {
    const srv_job *j = jobs[0];
    if (j->format == SRV_RF_SRT || j->format == SRV_RF_VTT) {
        *content_type = j->format == SRV_RF_VTT ? "text/vtt; charset=utf-8" : "text/plain; charset=utf-8";
        return subtitles(jobs, n, j->format == SRV_RF_VTT, len);
    }
    size_t text_len = 0;
    char *text = srv_transcript_text(jobs, n, &text_len);
    if (!text) return NULL;
    if (j->format == SRV_RF_TEXT) {
        *content_type = "text/plain; charset=utf-8";
        json_t *s = srv_json_text(text, text_len); /* sanitised UTF-8 */
        char *out = s ? strdup(json_string_value(s)) : NULL;
        json_decref(s);
        free(text);
        if (out) *len = strlen(out);
        return out;
    }
    json_t *o = json_object();
    json_t *t = srv_json_text(text, text_len);
    free(text);
    if (j->format == SRV_RF_VERBOSE_JSON) {
        char lang[48];
        snprintf(lang, sizeof lang, "%s", j->language[0] ? j->language : "unknown");
        for (char *p = lang; *p; p++) *p = (char)tolower((unsigned char)*p);
        json_object_set_new(o, "task", json_string(j->kind == SRV_JOB_TRANSLATE ? "translate" : "transcribe"));
        json_object_set_new(o, "language", json_string(lang));
        json_object_set_new(o, "duration", json_real(jobs[n - 1]->seg_end));
        json_object_set_new(o, "text", json_copy(t));
        json_t *segs = json_array();
        for (int i = 0; i < n; i++) {
            const srv_job *p = jobs[i];
            size_t a = 0, b = p->text_len;
            if (n > 1) srv_trim_space(p->text ? p->text : "", &a, &b);
            json_t *seg = json_object();
            json_object_set_new(seg, "id", json_integer(i));
            json_object_set_new(seg, "seek", json_integer((json_int_t)(p->seg_start * 100 + 0.5))); /* 10 ms frames, as Whisper's */
            json_object_set_new(seg, "start", json_real(p->seg_start));
            json_object_set_new(seg, "end", json_real(p->seg_end));
            json_object_set_new(seg, "text", srv_json_text(p->text ? p->text + a : "", b - a));
            json_t *toks = json_array();
            for (int q = 0; q < p->n_tokens; q++) json_array_append_new(toks, json_integer(p->tokens[q]));
            json_object_set_new(seg, "tokens", toks);
            json_object_set_new(seg, "temperature", json_real(p->sampling.temperature));
            json_array_append_new(segs, seg);
        }
        json_object_set_new(o, "segments", segs);
    } else {
        json_object_set_new(o, "text", json_copy(t));
    }
    json_decref(t);
    if (j->logprobs) json_object_set_new(o, "logprobs", srv_transcript_logprobs_all(jobs, n));
    json_object_set_new(o, "usage", srv_transcript_usage(jobs, n));
    *content_type = "application/json";
    char *s = srv_json_dump(o, len);
    json_decref(o);
    return s;
}
