/* job.c — see job.h. */
#include "job.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "mhd_lib.h"
#include "req_memory.h"

srv_job *srv_job_new(srv_ctx *ctx, srv_job_kind kind) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->ctx = ctx;
    j->kind = kind;
    j->mode = (pm_mode)-1;
    j->kv_need = -1;
    j->tool_at = j->tool_end = SIZE_MAX;
    j->first_of_prompt = 1; /* choice 0 of one prompt, until the route says otherwise */
    atomic_init(&j->cancel, 0);
    j->t_arrival = srv_now();
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_free_media(srv_job *j) {
    for (int i = 0; i < j->n_audios; i++) pm_audio_in_free(&j->audios[i]);
    for (int i = 0; i < j->n_images; i++) pm_image_in_free(&j->images[i]);
    free(j->audios);
    free(j->images);
    j->audios = NULL;
    j->images = NULL;
    j->n_audios = j->n_images = 0;
    srv_req_give(j->ctx, j->media_bytes);
    j->media_bytes = 0;
}

/* Only the job's decoding thread calls it, and srv_job_free_media runs after decoding ends. */
static int media_adjust(void *user, int64_t delta) {
    srv_job *j = user;
    if (delta <= 0) {
        srv_req_give(j->ctx, -delta);
        j->media_bytes += delta;
        return 0;
    }
    int r = srv_req_take(j->ctx, j->media_bytes + j->body_bytes, delta);
    if (r) j->media_refused = r;
    else j->media_bytes += delta;
    return r;
}

int srv_job_media_refusal(srv_job *j, int rc, const char *what, srv_error *e) {
    double mib = (double)j->ctx->req_budget / (1 << 20);
    if (rc == PM_EBUSY && j->media_refused == 1) {
        srv_fail(e, 503, "server_error", NULL, "overloaded",
                 "%s: the bodies and decoded media of the requests in flight fill the server's memory for them "
                 "(%.0f MiB, --max-request-memory); retry", what, mib);
        return 1;
    }
    if (rc == PM_ELIMIT && j->media_refused == 2) {
        srv_fail(e, 413, "invalid_request_error", what, "media_too_large",
                 "%s: the request's decoded media need more than the server's memory for request data (%.0f MiB, --max-request-memory)",
                 what, mib);
        return 1;
    }
    return 0;
}

const pm_media_gate *srv_job_media_gate(srv_job *j) {
    j->gate.adjust = media_adjust;
    j->gate.user = j;
    return &j->gate;
}

void srv_job_unref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    srv_job_free_media(j);
    free(j->prompt);
    free(j->prompt_ids);
    pm_encoded_free(j->enc);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->stop_ids);
    free(j->allowed_ids);
    for (int i = 0; i < j->n_bad_words; i++) free(j->bad_words[i]);
    free(j->bad_words);
    free(j->echo_text);
    free(j->plps);
    free(j->logit_bias);
    free(j->json_schema);
    free(j->guide);
    free(j->cache_salt);
    free(j->prediction);
    free(j->text);
    free(j->tokens);
    free(j->lps);
    free(j->wire);
    free(j->resp_base);
    free(j->resp_convo);
    srv_call_reader_free(&j->calls_read);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static int satisfied(const srv_job *j, int mask) {
    if (j->state == SRV_JS_DONE) return 1;
    if ((mask & SRV_WAIT_ADMIT) && j->admitted) return 1;
    if ((mask & SRV_WAIT_DATA) && j->text_len > j->sent) return 1;
    return 0;
}

int srv_job_park_locked(srv_job *j, struct MHD_Connection *conn, int mask) {
    if (satisfied(j, mask)) return 0;
    j->conn = conn;
    j->parked = 1;
    j->wait_mask = mask;
    atomic_fetch_add(&j->ctx->suspended, 1);
    j->ctx->mhd->suspend_connection(conn);
    return 1;
}

void srv_job_notify_locked(srv_job *j, int event) {
    if (!j->parked || !j->conn) return;
    if (event != SRV_WAIT_DONE && !(j->wait_mask & event)) return;
    j->parked = 0;
    struct MHD_Connection *c = j->conn;
    j->conn = NULL;
    atomic_fetch_sub(&j->ctx->suspended, 1);
    j->ctx->mhd->resume_connection(c);
}

void srv_job_admitted(srv_job *j, int64_t seq_id) {
    pthread_mutex_lock(&j->mu);
    j->seq_id = seq_id;
    j->admitted = 1;
    j->state = SRV_JS_RUNNING;
    srv_job_notify_locked(j, SRV_WAIT_ADMIT);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_reject(srv_job *j, const srv_error *e) {
    pthread_mutex_lock(&j->mu);
    j->failed = 1;
    j->err = *e;
    j->state = SRV_JS_DONE;
    srv_job_notify_locked(j, SRV_WAIT_DONE);
    pthread_mutex_unlock(&j->mu);
}

/* 1 when the array *arr of *cap elements of elt bytes has room for element n (doubling it if
 * needed, from 64); 0 when memory ran out (the array stays as it was). */
static int room_for(void **arr, int *cap, int n, size_t elt) {
    if (n < *cap) return 1;
    int c = *cap ? *cap * 2 : 64;
    void *a = realloc(*arr, elt * (size_t)c);
    if (!a) return 0;
    *arr = a;
    *cap = c;
    return 1;
}

/* Appends len bytes to the text (mu held); when memory runs out the text stays as it was. */
static void text_append_locked(srv_job *j, const char *text, size_t len) {
    if (j->text_len + len + 1 > j->text_cap) {
        size_t cap = j->text_cap ? j->text_cap : 256;
        while (cap < j->text_len + len + 1) cap *= 2;
        char *t = realloc(j->text, cap);
        if (!t) return;
        j->text = t;
        j->text_cap = cap;
    }
    memcpy(j->text + j->text_len, text, len);
    j->text_len += len;
    j->text[j->text_len] = 0;
}

/* With echo: the prompt (chat: the final assistant message) opens the text, once, before anything
 * generated (mu held). */
static void echo_locked(srv_job *j) {
    if ((!j->echo && !j->echo_text) || j->echoed) return;
    j->echoed = 1;
    if (j->echo_text) text_append_locked(j, j->echo_text, strlen(j->echo_text));
    else if (j->prompt) text_append_locked(j, j->prompt, strlen(j->prompt));
    for (int i = 0; i < j->n_prompt_ids; i++) { /* token ids: their bytes */
        size_t len = 0;
        const char *b = pm_model_token_bytes(j->ctx->model, j->prompt_ids[i], &len);
        if (b) text_append_locked(j, b, len);
    }
    if (j->text_len) srv_job_notify_locked(j, SRV_WAIT_DATA);
}

/* One log-probability entry, at the text's next character (mu not held). */
static void record_lp(srv_job *j, pm_logprob chosen, const pm_logprob *top, int n_top, int unscored) {
    size_t len = 0, chars = 0;
    const unsigned char *b = (const unsigned char *)pm_model_token_bytes(j->ctx->model, chosen.token, &len);
    for (size_t i = 0; b && i < len; i++) chars += (b[i] & 0xC0) != 0x80; /* characters start at non-continuation bytes */
    pthread_mutex_lock(&j->mu);
    echo_locked(j);
    if (room_for((void **)&j->lps, &j->cap_lps, j->n_lps, sizeof *j->lps)) {
        srv_lp *l = &j->lps[j->n_lps++];
        l->chosen = chosen;
        l->n_top = n_top < PM_MAX_TOP_LOGPROBS ? n_top : PM_MAX_TOP_LOGPROBS;
        if (l->n_top) memcpy(l->top, top, sizeof(pm_logprob) * (size_t)l->n_top);
        l->unscored = unscored;
        l->offset = j->lp_chars;
    }
    j->lp_chars += chars;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_on_logprobs(srv_job *j, pm_logprob chosen, const pm_logprob *top, int n_top) {
    /* the engine's alternatives are prompt_logprobs' count where that is larger */
    if (j->logprobs) record_lp(j, chosen, top, n_top < j->top_logprobs ? n_top : j->top_logprobs, 0);
}

/* vLLM's prompt_logprobs: the position's token and prompt_top alternatives (mu not held). */
static void record_plp(srv_job *j, pm_logprob chosen, const pm_logprob *top, int n_top) {
    int k = 1 + j->prompt_top;
    pthread_mutex_lock(&j->mu);
    if (room_for((void **)&j->plps, &j->cap_plps, (j->n_plps + 1) * k - 1, sizeof *j->plps)) {
        pm_logprob *row = j->plps + (size_t)j->n_plps++ * (size_t)k;
        memset(row, 0, sizeof *row * (size_t)k);
        row[0] = chosen;
        for (int q = 0; q < n_top && q < j->prompt_top; q++) row[1 + q] = top[q];
    }
    pthread_mutex_unlock(&j->mu);
}

void srv_job_on_prompt_logprobs(srv_job *j, int pos, pm_logprob chosen, const pm_logprob *top, int n_top) {
    if (j->prompt_logprobs) record_plp(j, chosen, top, n_top);
    if (j->echo && j->logprobs) record_lp(j, chosen, top, n_top < j->top_logprobs ? n_top : j->top_logprobs, pos == 0);
}

int srv_job_lazy_calls(const srv_job *j) {
    return j->tool_mode == SRV_TOOLS_AUTO && j->output_format == PM_FORMAT_JSON_SCHEMA && j->ctx->tool_call_open >= 0 &&
           j->ctx->tool_call_close >= 0;
}

int srv_job_on_token(srv_job *j, int32_t token, const char *text, size_t len) {
    int first = 0;
    pthread_mutex_lock(&j->mu);
    echo_locked(j);
    if (room_for((void **)&j->tokens, &j->cap_tokens, j->n_tokens, sizeof *j->tokens)) j->tokens[j->n_tokens++] = token;
    if (j->t_first == 0) {
        j->t_first = srv_now();
        first = 1;
    }
    if (j->tool_mode == SRV_TOOLS_AUTO) { /* the markers are special tokens: they add no text */
        if (token == j->ctx->tool_call_open && j->tool_at == SIZE_MAX) j->tool_at = j->text_len;
        else if (token == j->ctx->tool_call_close && j->tool_at != SIZE_MAX && j->tool_end == SIZE_MAX) j->tool_end = j->text_len;
    }
    if (len) {
        text_append_locked(j, text, len);
        srv_job_notify_locked(j, SRV_WAIT_DATA);
    }
    pthread_mutex_unlock(&j->mu);
    if (first) srv_metrics_ttft(j->ctx->metrics, j->t_first - j->t_arrival);
    return atomic_load(&j->cancel) ? 1 : 0;
}

void srv_job_on_prompt_cached(srv_job *j, int positions) {
    pthread_mutex_lock(&j->mu);
    j->cached_tokens = positions;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_on_prediction(srv_job *j, int drafted, int accepted) {
    pthread_mutex_lock(&j->mu);
    j->pred_drafted = drafted;
    j->pred_accepted = accepted;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_on_error(srv_job *j, int code) {
    pthread_mutex_lock(&j->mu);
    j->finish_code = code;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_failure(const srv_job *j, srv_error *e) {
    if (j->finish == PM_FINISH_CANCELLED) {
        srv_fail(e, 503, "server_error", NULL, "cancelled", "the request was cancelled (the server is shutting down)");
        return;
    }
    char msg[sizeof j->finish_error + 32];
    snprintf(msg, sizeof msg, "generation failed: %s", j->finish_error[0] ? j->finish_error : "internal error");
    srv_status_error(j->finish_code ? j->finish_code : PM_ESTATE, msg, e);
}

void srv_job_on_done(srv_job *j, pm_finish reason, int prompt_tokens, int completion_tokens, const char *error) {
    pthread_mutex_lock(&j->mu);
    if (reason != PM_FINISH_ERROR) echo_locked(j); /* a score-only request, or one that ended at once */
    j->finish = reason;
    j->prompt_tokens = prompt_tokens;
    j->completion_tokens = completion_tokens;
    if (error) snprintf(j->finish_error, sizeof j->finish_error, "%s", error);
    j->state = SRV_JS_DONE;
    srv_job_notify_locked(j, SRV_WAIT_DONE);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_detach(srv_job *j, int ok) {
    pthread_mutex_lock(&j->mu);
    if (j->parked) { /* only at daemon shutdown: MHD is closing a parked connection */
        j->parked = 0;
        atomic_fetch_sub(&j->ctx->suspended, 1);
    }
    j->conn = NULL;
    int done = j->state == SRV_JS_DONE;
    pthread_mutex_unlock(&j->mu);
    if (!done || !ok) atomic_store(&j->cancel, 1);
}

const char *srv_finish_name(pm_finish f) {
    switch (f) {
    case PM_FINISH_STOP: return "stop";
    case PM_FINISH_LENGTH: return "length";
    case PM_FINISH_CANCELLED: return "cancelled";
    default: return "error";
    }
}
