/* routes_audio.c — POST /v1/audio/transcriptions and /v1/audio/translations, served by
 * Phi-4-multimodal itself (speech adapter, official ASR / AST prompts; see audio_form.h).
 * Responses: json {"text"}, text (the transcript as text/plain), verbose_json {"task",
 * "language", "duration", "text", "segments" (one segment: the model gives no timestamps),
 * "usage"}; stream=true gives transcript.text.delta / transcript.text.done events. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audio_form.h"
#include "http.h"
#include "json_util.h"
#include "multipart.h"

enum { MAX_PARTS = 32 };

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
            else {
                j->n_audios = 1;
                if (j->audios[0].sample_rate > 0) j->audio_seconds = (double)j->audios[0].n_samples / j->audios[0].sample_rate;
            }
        }
    }
    free(parts);
    srv_conn_free_body(ctx, sc); /* the file is decoded; the form is no longer needed */
    if (rc) {
        srv_audio_req_free(&r);
        if (j) srv_job_unref(j);
        return srv_respond_error(ctx, c, sc, &e);
    }
    j->stream = r.stream;
    j->format = r.format;
    snprintf(j->language, sizeof j->language, "%s", r.language);
    j->prompt = r.prompt;
    r.prompt = NULL;
    j->max_tokens = r.max_tokens > 0 ? r.max_tokens : ctx->o.default_max_tokens;
    j->sampling.temperature = r.temperature;
    j->sampling.top_p = 1.0f;
    j->sampling.seed = (uint64_t)time(NULL);
    j->mode = PM_MODE_SPEECH;
    srv_new_id(ctx, translate ? "trans" : "asr", j->id, sizeof j->id);
    j->created = (long long)time(NULL);
    j->t_arrival = sc->t0;
    srv_audio_req_free(&r);
    return srv_submit_job(ctx, c, sc, j);
}

char *srv_audio_result(const srv_job *j, size_t *len, const char **content_type) {
    const char *text = j->text ? j->text : "";
    if (j->format == SRV_RF_TEXT) {
        *content_type = "text/plain; charset=utf-8";
        json_t *s = srv_json_text(text, j->text_len); /* sanitised UTF-8 */
        char *out = s ? strdup(json_string_value(s)) : NULL;
        json_decref(s);
        if (out) *len = strlen(out);
        return out;
    }
    json_t *o = json_object();
    json_t *t = srv_json_text(text, j->text_len);
    if (j->format == SRV_RF_VERBOSE_JSON) {
        double dur = j->audio_seconds;
        char lang[48];
        snprintf(lang, sizeof lang, "%s", j->language[0] ? j->language : "unknown");
        for (char *p = lang; *p; p++) *p = (char)tolower((unsigned char)*p);
        json_object_set_new(o, "task", json_string(j->kind == SRV_JOB_TRANSLATE ? "translate" : "transcribe"));
        json_object_set_new(o, "language", json_string(lang));
        json_object_set_new(o, "duration", json_real(dur));
        json_object_set_new(o, "text", json_copy(t));
        json_t *seg = json_object();
        json_object_set_new(seg, "id", json_integer(0));
        json_object_set_new(seg, "seek", json_integer(0));
        json_object_set_new(seg, "start", json_real(0.0));
        json_object_set_new(seg, "end", json_real(dur));
        json_object_set_new(seg, "text", json_copy(t));
        json_t *toks = json_array();
        for (int i = 0; i < j->n_tokens; i++) json_array_append_new(toks, json_integer(j->tokens[i]));
        json_object_set_new(seg, "tokens", toks);
        json_object_set_new(seg, "temperature", json_real(j->sampling.temperature));
        json_t *segs = json_array();
        json_array_append_new(segs, seg);
        json_object_set_new(o, "segments", segs);
    } else {
        json_object_set_new(o, "text", json_copy(t));
    }
    json_decref(t);
    json_t *u = json_object();
    json_object_set_new(u, "type", json_string("tokens"));
    json_object_set_new(u, "input_tokens", json_integer(j->prompt_tokens));
    json_object_set_new(u, "output_tokens", json_integer(j->completion_tokens));
    json_object_set_new(u, "total_tokens", json_integer(j->prompt_tokens + j->completion_tokens));
    json_object_set_new(o, "usage", u);
    *content_type = "application/json";
    char *s = srv_json_dump(o, len);
    json_decref(o);
    return s;
}
