/* scheduler.c — see scheduler.h.
 *
 * Loop: wait while idle; drop queued jobs whose client left; admit the job the prompt thread has
 * finished; take queued jobs into free slots (all of them when the engine is idle, at most
 * ADMIT_PER_STEP while sequences are decoding), in order and only while the engine's KV budget
 * has room for each one's worst case (the head waits for a sequence to end, and the rest wait
 * behind it: first come, first served); forward cancellations; step. A job leaves `live` in its
 * on_done callback, which the engine fires exactly once.
 *
 * A new request's expensive part — its media encoders (a Conformer over a 30 s clip, SigLIP over
 * an HD image) and its prompt's prefill (seconds per 512-row chunk on a CPU) — runs on a second
 * thread, the prompt thread, one job at a time, so that the live streams keep decoding meanwhile
 * instead of pausing for it: pm_engine_encode and pm_engine_prefill read nothing of the engine
 * that changes and fill the request's own cache; the inference thread then admits the result
 * with pm_engine_submit_encoded, and the sequence samples its first token at its first step.
 * While both run they split the OpenMP threads (the prompt thread takes --prompt-threads, by
 * default half, while sequences are live, all of them while none is, re-decided at every prefill
 * chunk; the steps take the rest). The job in its hands already counts against the slots and the
 * KV budget. With --prompt-threads inline every job is submitted on this thread, as before.
 *
 * The same thread runs the LongRoPE recompute of a live sequence whose length first passes
 * original_max_position (Phi-4-mini: 4,096): the engine parks it (pm_engine_opts.recompute_beside),
 * the inference thread hands it over as soon as the prompt thread is free (before any new job:
 * the sequence is already admitted), the prompt thread prefills all its tokens into a new cache
 * with the long factors, and the inference thread gives it back (pm_engine_resume). Run by the
 * steps, that recompute (~8 chunks of ~10 s at 4,097 tokens, 2 cores) stalled every live stream
 * for each chunk.
 *
 * Measured on the full-size synthetic checkpoint, 2 cores (`phi4mm bench`, row "stream beside an
 * image request"): see tools/server/README.md. */
#include "scheduler.h"

#include <omp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "metrics.h"
#include "mhd_lib.h"

enum { ADMIT_PER_STEP = 2 };

struct srv_sched {
    srv_ctx *ctx;
    pm_engine *eng;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **q;          /* FIFO ring of waiting jobs */
    int q_cap, q_head, q_len;
    int stopping;
    atomic_int halt;      /* stopping, for the encoders' stop hook (job_should_stop) */
    int wake;             /* a job was queued or cancelled: look again */
    /* the prompt thread (mu): one job at a time from hand-off until the inference thread admits it */
    pthread_t pt_th;
    int pt_started, pt_quit;
    pthread_cond_t pt_cv;
    srv_job *pt_in;       /* handed over, not yet started */
    srv_job *pt_out;      /* prepared (or failed), waiting for admission */
    int pt_busy;          /* a job or a recompute is in the prompt thread's hands (in, running or out) */
    /* a live sequence's LongRoPE recompute in its hands, instead of a job (mu) */
    pm_encoded *rc_in, *rc_out;
    srv_job *rc_job;      /* the sequence's job (a reference): its client may leave meanwhile */
    int rc_rc;
    char rc_err[512];
    int64_t pt_need;      /* its KV reservation-to-be */
    int pt_threads;       /* OpenMP threads of its work now; 0 when none */
    int n_live_shared;    /* n_live as last published by the inference thread */
    int threads;          /* OpenMP threads of the process */
    int pt_live_threads;  /* its share while sequences are live (--prompt-threads) */
    int head_waits;       /* the queue's head cannot go until something ends (inference thread) */
    /* inference thread only */
    srv_job **live;
    int n_live, max_live;
    int n_stepping;       /* live sequences a step advances (not parked for a recompute) */
    int step_tokens;
};

static void q_remove_at(srv_sched *s, int k) { /* k-th waiting job (0 = oldest); mu held */
    for (int i = k; i < s->q_len - 1; i++) s->q[(s->q_head + i) % s->q_cap] = s->q[(s->q_head + i + 1) % s->q_cap];
    s->q_len--;
}

int srv_sched_enqueue(srv_sched *s, srv_job *const *jobs, int n) {
    pthread_mutex_lock(&s->mu);
    int rc = PM_OK;
    if (s->stopping) rc = PM_ESTATE;
    else if (s->q_len + n > s->q_cap) rc = PM_EBUSY;
    else {
        for (int i = 0; i < n; i++) {
            srv_job_ref(jobs[i]);
            s->q[(s->q_head + s->q_len) % s->q_cap] = jobs[i];
            s->q_len++;
        }
        s->wake = 1;
        srv_metrics_queue_depth(s->ctx->metrics, s->q_len);
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void srv_sched_poke(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    s->wake = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int srv_sched_queue_depth(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->q_len;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int64_t srv_sched_prompt_cache(const srv_sched *s) {
    pm_prefix_stats ps;
    pm_engine_prefix_stats(s->eng, &ps);
    return ps.cap;
}

int64_t srv_sched_kv_budget(const srv_sched *s) {
    int64_t budget;
    pm_engine_kv_usage(s->eng, NULL, &budget); /* set at pm_engine_new, never changed */
    return budget;
}

/* ------------------------------------------------------------------ engine callbacks */

static int cb_token(void *user, int32_t token, const char *text, size_t len) {
    srv_job *j = user;
    srv_sched *s = j->ctx->sched;
    s->step_tokens++;
    return srv_job_on_token(j, token, text, len);
}

static void cb_logprobs(void *user, pm_logprob chosen, const pm_logprob *top, int n_top) { srv_job_on_logprobs(user, chosen, top, n_top); }
static void cb_prompt_cached(void *user, int positions) { srv_job_on_prompt_cached(user, positions); }
static void cb_prediction(void *user, int drafted, int accepted) { srv_job_on_prediction(user, drafted, accepted); }
static void cb_error(void *user, int code) { srv_job_on_error(user, code); }
static void cb_prompt_logprobs(void *user, int pos, pm_logprob chosen, const pm_logprob *top, int n_top) {
    srv_job_on_prompt_logprobs(user, pos, chosen, top, n_top);
}

static void cb_done(void *user, pm_finish reason, int prompt_tokens, int completion_tokens, const char *error) {
    srv_job *j = user;
    srv_sched *s = j->ctx->sched;
    for (int i = 0; i < s->n_live; i++)
        if (s->live[i] == j) {
            s->live[i] = s->live[--s->n_live];
            break;
        }
    /* the finish counted before the gauge drops (a reader that sees no active sequence sees its
     * finish), both before the client can see the answer */
    srv_metrics_finish(s->ctx->metrics, reason, prompt_tokens, completion_tokens);
    srv_metrics_active(s->ctx->metrics, s->n_live);
    srv_job_on_done(j, reason, prompt_tokens, completion_tokens, error);
    srv_job_unref(j);
}

/* ------------------------------------------------------------------ disconnects */

/* A parked connection is not watched by libmicrohttpd, so a client that hangs up while its
 * request waits (non-streamed, or a stream with nothing to send) would go unnoticed until the
 * answer is written. Before each step the inference thread polls the sockets of parked jobs
 * (one poll() with a zero timeout) and marks the ones whose peer closed as cancelled. The socket
 * stays open while its connection is parked, and `conn` is read under the job's mutex. */
static void watch_disconnects(srv_job **jobs, int n) {
    enum { MAXW = 256 };
    struct pollfd pf[MAXW];
    srv_job *who[MAXW];
    int k = 0;
    for (int i = 0; i < n && k < MAXW; i++) {
        srv_job *j = jobs[i];
        if (atomic_load(&j->cancel)) continue;
        pthread_mutex_lock(&j->mu);
        if (j->parked && j->conn) {
            const union MHD_ConnectionInfo *ci = j->ctx->mhd->get_connection_info(j->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
            if (ci) {
                pf[k].fd = ci->connect_fd;
                pf[k].events = POLLRDHUP;
                pf[k].revents = 0;
                who[k++] = j;
            }
        }
        pthread_mutex_unlock(&j->mu);
    }
    if (k == 0 || poll(pf, (nfds_t)k, 0) <= 0) return;
    for (int i = 0; i < k; i++)
        if (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) atomic_store(&who[i]->cancel, 1);
}

/* ------------------------------------------------------------------ admission */

static void kv_metrics(srv_sched *s) {
    int64_t reserved, budget;
    pm_engine_kv_usage(s->eng, &reserved, &budget);
    srv_metrics_kv(s->ctx->metrics, reserved, budget);
    pm_prefix_stats ps;
    pm_engine_prefix_stats(s->eng, &ps);
    srv_metrics_prefix(s->ctx->metrics, &ps);
    int64_t drafted, accepted;
    pm_engine_draft_stats(s->eng, &drafted, &accepted);
    srv_metrics_draft(s->ctx->metrics, drafted, accepted);
}

/* The encoders' stop hook (pm_request.should_stop), asked between their blocks: the server stops,
 * or the client has left (its socket is polled here too: a parked connection is watched by no one
 * else while its request is encoded). */
static int job_should_stop(void *user) {
    srv_job *j = user;
    if (atomic_load(&j->ctx->sched->halt)) return 1;
    watch_disconnects(&j, 1);
    return atomic_load(&j->cancel);
}

static void job_request(srv_job *j, pm_request *rq) {
    memset(rq, 0, sizeof *rq);
    rq->prompt = j->prompt;
    rq->ids = j->prompt_ids;
    rq->n_ids = (size_t)j->n_prompt_ids;
    rq->audios = j->audios;
    rq->n_audios = j->n_audios;
    rq->images = j->images;
    rq->n_images = j->n_images;
    rq->max_tokens = j->max_tokens;
    rq->sampling = j->sampling;
    rq->logprobs = j->logprobs;
    rq->logprobs_eos = j->kind == SRV_JOB_COMPLETION; /* as vLLM: the stop token's entry, which scoring clients slice off */
    /* one count of alternatives for both kinds of entries: the job keeps what each asked */
    rq->top_logprobs = j->prompt_logprobs && j->prompt_top > j->top_logprobs ? j->prompt_top : j->top_logprobs;
    /* echo with logprobs: the prompt's entries first; max_tokens 0 is a scoring request */
    rq->prompt_logprobs = (j->echo && (j->logprobs || j->max_tokens == 0)) || j->prompt_logprobs;
    rq->stop = (const char *const *)j->stop;
    rq->n_stop = j->n_stop;
    rq->stop_ids = j->stop_ids;
    rq->n_stop_ids = j->n_stop_ids;
    rq->stop_in_output = j->stop_in_output;
    rq->keep_special = j->keep_special;
    rq->allowed_ids = j->allowed_ids;
    rq->n_allowed_ids = j->n_allowed_ids;
    rq->bad_words = (const char *const *)j->bad_words;
    rq->n_bad_words = j->n_bad_words;
    rq->truncate_prompt = j->truncate_prompt;
    rq->logit_bias = j->logit_bias;
    rq->n_logit_bias = j->n_logit_bias;
    rq->format = j->output_format;
    rq->json_schema = j->json_schema;
    rq->regex = j->output_format == PM_FORMAT_GRAMMAR ? NULL : j->guide;
    rq->grammar = j->output_format == PM_FORMAT_GRAMMAR ? j->guide : NULL;
    rq->min_tokens = j->min_tokens;
    rq->ignore_eos = j->ignore_eos;
    rq->cache_salt = j->cache_salt;
    rq->max_crops = j->max_crops ? j->max_crops : j->ctx->o.max_crops;
    rq->prediction = j->prediction;
    if (j->tool_mode == SRV_TOOLS_AUTO) { /* the calls' schema holds what follows the model's <|tool_call|> */
        rq->json_lazy = srv_job_lazy_calls(j);
        if (!rq->json_lazy) rq->format = PM_FORMAT_TEXT;
        rq->json_open = j->ctx->tool_call_open;
        rq->json_close = j->ctx->tool_call_close;
    }
    rq->should_stop = job_should_stop;
    rq->stop_user = j;
}

/* Plans j once (its prompt's tokens and KV need; no encoder). A request that named no max_tokens
 * whose prompt leaves less than --default-max-tokens of the context gets what it leaves (vLLM's
 * default is the whole rest), where it would otherwise be refused for a limit it never asked for. */
static int plan_job(srv_sched *s, srv_job *j, char *err, size_t errlen) {
    pm_request rq;
    job_request(j, &rq);
    int64_t need = 0;
    int rc = pm_engine_plan_need(s->eng, &rq, &need, &j->plan_tokens, err, errlen);
    if (rc == PM_ECONTEXT && j->max_tokens_default && j->max_tokens > 1) {
        char e1[256];
        int prompt = 0;
        rq.max_tokens = 1;
        int room = pm_engine_plan_need(s->eng, &rq, &need, &prompt, e1, sizeof e1) ? 0 : j->ctx->max_context - prompt;
        if (room >= 1 && room < j->max_tokens) {
            rq.max_tokens = room;
            if (!(rc = pm_engine_plan_need(s->eng, &rq, &need, &j->plan_tokens, err, errlen))) j->max_tokens = room;
        }
    }
    if (!rc) j->kv_need = need; /* head_fits plans it no more */
    return rc;
}

int srv_sched_plan(srv_sched *s, srv_job *j, srv_error *e) {
    char err[1024] = "";
    int rc = plan_job(s, j, err, sizeof err);
    if (rc) {
        srv_status_error(rc, err, e);
        return -1;
    }
    return 0;
}

int srv_sched_prompt_ids(srv_sched *s, srv_job *j, int32_t **ids, size_t *n, srv_error *e) {
    pm_request rq;
    job_request(j, &rq);
    char err[1024] = "";
    int rc = pm_engine_prompt_ids(s->eng, &rq, ids, n, err, sizeof err);
    if (rc) srv_status_error(rc, err, e);
    return rc ? -1 : 0;
}

static void reject(srv_job *j, int rc, const char *msg) {
    srv_error e;
    srv_status_error(rc, msg, &e);
    srv_job_free_media(j);
    srv_job_reject(j, &e);
    srv_job_unref(j);
}

/* Whether the queue's head may be admitted now beside `pending` bytes already taken this round or
 * held by the prompt thread: 1 yes, 0 not yet (the engine's KV budget is in use: it waits, and so does
 * everything behind it, until a sequence ends), -1 never (*rc, err: the plan's error). The need is
 * planned once per job (tokenizer and media sizes, no encoder). */
static int head_fits(srv_sched *s, srv_job *j, int64_t pending, int *rc, char *err, size_t errlen) {
    if (j->kv_need < 0 && (*rc = plan_job(s, j, err, errlen))) return -1;
    int64_t reserved, budget;
    pm_engine_kv_usage(s->eng, &reserved, &budget);
    return budget < 0 || reserved + pending + j->kv_need <= budget || (pm_engine_live(s->eng) == 0 && pending == 0);
}

/* Whether the job's encoders and prefill run on the prompt thread (else on this one: inline). */
static int via_prompt_thread(const srv_sched *s) { return s->pt_started; }

static void reject_cancelled(srv_job *j, const char *when) {
    srv_error e;
    srv_fail(&e, 499, "invalid_request_error", NULL, "cancelled", "the client closed the connection %s", when);
    srv_job_free_media(j);
    srv_job_reject(j, &e);
    srv_job_unref(j);
}

static void admitted(srv_sched *s, srv_job *j, int64_t seq) {
    srv_job_free_media(j);
    srv_metrics_audio(s->ctx->metrics, j->audio_seconds);
    srv_metrics_active(s->ctx->metrics, s->n_live);
    kv_metrics(s); /* before the client can see its first chunk */
    srv_job_admitted(j, seq);
}

static void reject_shutdown(srv_job *j) {
    srv_error e;
    srv_fail(&e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    srv_job_free_media(j);
    srv_job_reject(j, &e);
    srv_job_unref(j);
}

/* Submits the job to the engine: whole (enc NULL) or as the prompt thread prepared it (enc, taken
 * in every case). */
static void submit(srv_sched *s, srv_job *j, pm_encoded *enc) {
    pm_request rq;
    job_request(j, &rq);
    pm_callbacks cb = {.on_token = cb_token, .on_done = cb_done, .user = j, .on_logprobs = cb_logprobs,
                       .on_prompt_logprobs = cb_prompt_logprobs,
                       .on_prompt_cached = cb_prompt_cached, .on_prediction = cb_prediction, .on_error = cb_error};
    char err[1024] = "";
    int64_t seq = 0;
    s->live[s->n_live++] = j; /* before submit: nothing fires during submit, but keep the invariant simple */
    int rc = enc ? pm_engine_submit_encoded(s->eng, enc, &rq, &cb, &seq, err, sizeof err)
                 : pm_engine_submit(s->eng, &rq, &cb, &seq, err, sizeof err);
    if (rc) {
        s->n_live--;
        pm_encoded_free(enc);
        if (rc == PM_ECANCELED && atomic_load(&s->halt)) reject_shutdown(j); /* inline: the encoders gave up */
        else reject(j, rc, err[0] ? err : pm_status_name(rc));
        return;
    }
    admitted(s, j, seq);
}

static void admit(srv_sched *s, srv_job *j) {
    if (atomic_load(&j->cancel)) reject_cancelled(j, "before admission");
    else submit(s, j, NULL);
}

/* Hands a job to the prompt thread (mu held; it is idle). */
static void hand_to_prompt_thread(srv_sched *s, srv_job *j) {
    s->pt_in = j;
    s->pt_busy = 1;
    s->pt_need = j->kv_need;
    srv_metrics_preparing(s->ctx->metrics, 1);
    pthread_cond_signal(&s->pt_cv);
}

/* Admits (or answers) the job the prompt thread has finished. The slot and the reservation it held
 * in the scheduler's counts pass to the engine in the same thread, so nothing else can take them. */
static void admit_prepared(srv_sched *s, srv_job *j, int stopping) {
    watch_disconnects(&j, 1);
    pm_encoded *enc = j->enc;
    j->enc = NULL;
    if (stopping || atomic_load(&j->cancel) || j->enc_rc) {
        pm_encoded_free(enc);
        if (stopping) reject_shutdown(j);
        else if (j->enc_rc) reject(j, j->enc_rc, j->enc_err[0] ? j->enc_err : pm_status_name(j->enc_rc));
        else reject_cancelled(j, "while its prompt was prepared");
        return;
    }
    submit(s, j, enc);
}

/* The prompt thread's share of the OpenMP threads for its next piece of work, published for the
 * steps (mu held): its own share while sequences are live, all of them while none is. */
static int prompt_threads_now(srv_sched *s) {
    s->pt_threads = s->n_live_shared > 0 ? s->pt_live_threads : s->threads;
    return s->pt_threads;
}

/* Prefills enc (a new request's prompt, or a live sequence's LongRoPE recompute) one engine chunk
 * at a time; between chunks it stops for a client that left or a server that stops, and takes a
 * new share of the threads (a stream may have started or ended meanwhile). Returns 1 when done,
 * 0 when stopped early, < 0 on error (err). */
static int prefill_chunks(srv_sched *s, srv_job *j, pm_encoded *enc, char *err, size_t errlen) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stopping, t = prompt_threads_now(s);
        pthread_mutex_unlock(&s->mu);
        if (stop || job_should_stop(j)) return 0; /* polls the client's socket too */
        omp_set_num_threads(t);
        int r = pm_engine_prefill(s->eng, enc, 1, err, errlen);
        if (r != 0) return r;
    }
}

/* Encodes, then prefills (prefill_chunks). */
static void prepare_job(srv_sched *s, srv_job *j) {
    pm_request rq;
    job_request(j, &rq);
    j->enc_rc = pm_engine_encode(s->eng, &rq, &j->enc, j->enc_err, sizeof j->enc_err);
    if (!j->enc_rc) {
        int r = prefill_chunks(s, j, j->enc, j->enc_err, sizeof j->enc_err);
        if (r < 0) j->enc_rc = r;
    }
}

static void *prompt_main(void *arg) {
    srv_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->pt_in && !s->rc_in && !s->pt_quit) pthread_cond_wait(&s->pt_cv, &s->mu);
        if (s->rc_in) {
            pm_encoded *enc = s->rc_in;
            srv_job *j = s->rc_job;
            s->rc_in = NULL;
            s->rc_rc = 0;
            s->rc_err[0] = 0;
            pthread_mutex_unlock(&s->mu);
            int r = prefill_chunks(s, j, enc, s->rc_err, sizeof s->rc_err);
            if (r < 0) s->rc_rc = r;
            pthread_mutex_lock(&s->mu);
            s->pt_threads = 0;
            s->rc_out = enc;
            pthread_cond_signal(&s->cv);
            continue;
        }
        if (!s->pt_in) break;
        srv_job *j = s->pt_in;
        s->pt_in = NULL;
        int t = prompt_threads_now(s);
        pthread_mutex_unlock(&s->mu);
        omp_set_num_threads(t); /* this thread's parallel regions only */
        j->enc_rc = 0;
        j->enc_err[0] = 0;
        if (!atomic_load(&j->cancel)) prepare_job(s, j);
        pthread_mutex_lock(&s->mu);
        s->pt_threads = 0;
        s->pt_out = j;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A text-only request whose prompt the steps may prefill without a long pause of the streams
 * (--inline-prompt-max tokens: 64 rows of Phi-4-mini are ~0.2 TFLOP, ~1 s on 2 cores). */
static int short_text(const srv_sched *s, const srv_job *j) {
    int max = s->ctx->o.inline_prompt_max;
    return max > 0 && j->n_audios == 0 && j->n_images == 0 && j->plan_tokens > 0 && j->plan_tokens <= max;
}

/* Takes up to `room` jobs off the head of the queue, in order, while the engine's KV budget has
 * room for them; a job whose plan fails is answered at once, the others go to the prompt thread
 * (the head waits while it is busy) or, inline, to the caller. Only this thread dequeues, so the
 * head it planned outside the lock is still the head. */
static int take_jobs(srv_sched *s, srv_job **take, int room) {
    int n_take = 0;
    int64_t pending = 0;
    s->head_waits = 0;
    while (room > 0) {
        pthread_mutex_lock(&s->mu);
        srv_job *j = s->q_len > 0 && !s->stopping ? s->q[s->q_head] : NULL;
        int pt_busy = s->pt_busy;
        int64_t pt_need = s->pt_need;
        pthread_mutex_unlock(&s->mu);
        if (!j) break;
        int rc = 0;
        char err[1024] = "";
        int fits = head_fits(s, j, pending + pt_need, &rc, err, sizeof err);
        /* the prompt thread is busy: a short text request goes in now, prefilled by the steps;
         * anything else waits for it */
        int now = via_prompt_thread(s) && pt_busy && fits > 0 && short_text(s, j);
        if (via_prompt_thread(s) && pt_busy && fits >= 0 && !now) {
            s->head_waits = 1;
            break;
        }
        if (fits == 0) {
            s->head_waits = 1;
            break;
        }
        pthread_mutex_lock(&s->mu);
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        srv_metrics_queue_depth(s->ctx->metrics, s->q_len);
        pthread_mutex_unlock(&s->mu);
        if (fits < 0) {
            reject(j, rc, err[0] ? err : pm_status_name(rc));
            continue;
        }
        if (now) srv_metrics_inline_admission(s->ctx->metrics);
        if (via_prompt_thread(s) && !now) {
            watch_disconnects(&j, 1);
            pthread_mutex_lock(&s->mu);
            hand_to_prompt_thread(s, j);
            pthread_mutex_unlock(&s->mu);
            room--;
            continue;
        }
        take[n_take++] = j;
        pending += j->kv_need;
        room--;
    }
    return n_take;
}

/* ------------------------------------------------------------------ the thread */

/* Hands a parked sequence's LongRoPE recompute to the prompt thread when it is free. */
static void take_recompute(srv_sched *s) {
    if (!via_prompt_thread(s)) return;
    pthread_mutex_lock(&s->mu);
    int busy = s->pt_busy;
    pthread_mutex_unlock(&s->mu);
    if (busy) return;
    pm_encoded *enc = NULL;
    int64_t seq = 0;
    int r = pm_engine_take_recompute(s->eng, &enc, &seq);
    if (r != 1) {
        if (r < 0) fprintf(stderr, "phi4mm serve: cannot hand out a LongRoPE recompute (%s); it is tried again\n", pm_status_name(r));
        return;
    }
    srv_job *j = NULL;
    for (int i = 0; i < s->n_live && !j; i++)
        if (s->live[i]->seq_id == seq) j = s->live[i];
    if (!j) { /* cannot happen: every live sequence has its job; give it back to be ended */
        pm_engine_resume(s->eng, enc, "internal error: no job for the sequence");
        return;
    }
    if (atomic_load(&j->cancel)) { /* its client left: back unstarted, the cancel ends it at the step */
        pm_engine_resume(s->eng, enc, NULL);
        return;
    }
    srv_job_ref(j);
    if (!s->ctx->o.quiet)
        fprintf(stderr, "phi4mm serve: sequence %lld passed the LongRoPE switch: its cache is recomputed with the long factors beside the "
                        "other streams\n", (long long)seq);
    pthread_mutex_lock(&s->mu);
    s->rc_in = enc;
    s->rc_job = j;
    s->pt_busy = 1;
    s->pt_need = 0;
    srv_metrics_recompute(s->ctx->metrics);
    pthread_cond_signal(&s->pt_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Gives the prompt thread's recompute back to the engine: the sequence resumes, ends with the
 * recompute's error, or (stopped early) waits to be taken again. */
static void resume_recomputed(srv_sched *s, pm_encoded *enc) {
    srv_job *j = s->rc_job;
    pm_engine_resume(s->eng, enc, s->rc_rc ? (s->rc_err[0] ? s->rc_err : pm_status_name(s->rc_rc)) : NULL);
    pthread_mutex_lock(&s->mu);
    s->rc_job = NULL;
    s->pt_busy = 0;
    pthread_mutex_unlock(&s->mu);
    srv_job_unref(j);
}

/* Whether the inference thread has nothing to do until signalled (mu held). */
static int idle(const srv_sched *s) {
    if (s->wake || s->pt_out || s->rc_out || s->n_stepping > 0) return 0;
    if (s->stopping) return s->q_len == 0 && s->pt_busy; /* its job must come back before the thread ends */
    return s->q_len == 0 || s->head_waits;
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    srv_job **take = calloc((size_t)s->q_cap + 1, sizeof *take), **drop = calloc((size_t)s->q_cap + 1, sizeof *drop);
    for (;;) {
        int n_take = 0, n_drop = 0, stopping;
        pthread_mutex_lock(&s->mu);
        while (idle(s)) pthread_cond_wait(&s->cv, &s->mu);
        s->wake = 0;
        stopping = s->stopping;
        srv_job *encoded = s->pt_out;
        s->pt_out = NULL;
        pm_encoded *recomputed = s->rc_out;
        s->rc_out = NULL;
        for (int k = 0; k < s->q_len;) { /* queued jobs whose client already left */
            srv_job *j = s->q[(s->q_head + k) % s->q_cap];
            if (atomic_load(&j->cancel) || stopping) {
                drop[n_drop++] = j;
                q_remove_at(s, k);
            } else k++;
        }
        srv_metrics_queue_depth(s->ctx->metrics, s->q_len);
        pthread_mutex_unlock(&s->mu);
        if (encoded) {
            admit_prepared(s, encoded, stopping);
            pthread_mutex_lock(&s->mu);
            s->pt_busy = 0;
            s->pt_need = 0;
            pthread_mutex_unlock(&s->mu);
            srv_metrics_preparing(s->ctx->metrics, 0);
        }
        if (recomputed) resume_recomputed(s, recomputed);
        if (!stopping) take_recompute(s); /* before new jobs: its sequence is already admitted */
        /* the prompt thread's job holds a slot until it is admitted (a recompute's sequence has one) */
        int room = s->max_live - s->n_live - (s->pt_busy && !s->rc_job);
        if (s->n_live > 0 && room > ADMIT_PER_STEP) room = ADMIT_PER_STEP;

        for (int i = 0; i < n_drop; i++) {
            if (stopping) reject_shutdown(drop[i]);
            else reject_cancelled(drop[i], "while it waited in the queue");
        }
        if (!stopping) n_take = take_jobs(s, take, room);
        watch_disconnects(take, n_take);
        for (int i = 0; i < n_take; i++) admit(s, take[i]);
        watch_disconnects(s->live, s->n_live);
        for (int i = 0; i < s->n_live; i++) {
            srv_job *j = s->live[i];
            if (!j->cancel_sent && (stopping || atomic_load(&j->cancel))) {
                pm_engine_cancel(s->eng, j->seq_id);
                j->cancel_sent = 1;
            }
        }
        s->n_stepping = pm_engine_stepping(s->eng);
        pthread_mutex_lock(&s->mu);
        s->n_live_shared = s->n_stepping;
        int pt_threads = s->pt_threads;
        pthread_mutex_unlock(&s->mu);
        if (pm_engine_live(s->eng) > 0) {
            /* beside the prompt thread, the steps take the threads it leaves */
            omp_set_num_threads(pt_threads <= 0 ? s->threads : s->threads > pt_threads ? s->threads - pt_threads : 1);
            s->step_tokens = 0;
            int r = pm_engine_step(s->eng);
            if (r < 0) fprintf(stderr, "phi4mm serve: engine step failed (%s); its sequences were ended with an error\n",
                               pm_status_name(r));
            if (s->n_stepping > 0) srv_metrics_step(s->ctx->metrics, s->step_tokens, srv_now());
            if (!stopping) take_recompute(s); /* a sequence this step parked */
            s->n_stepping = pm_engine_stepping(s->eng);
            pthread_mutex_lock(&s->mu);
            s->n_live_shared = s->n_stepping; /* the prompt thread takes every thread once none steps */
            pthread_mutex_unlock(&s->mu);
        }
        srv_metrics_active(s->ctx->metrics, pm_engine_live(s->eng));
        kv_metrics(s);
        if (stopping && s->n_live == 0) {
            pthread_mutex_lock(&s->mu);
            int empty = s->q_len == 0 && !s->pt_busy;
            pthread_mutex_unlock(&s->mu);
            if (empty) break;
        }
    }
    free(take);
    free(drop);
    return NULL;
}

static void stop_prompt_thread(srv_sched *s) {
    if (!s->pt_started) return;
    pthread_mutex_lock(&s->mu);
    s->pt_quit = 1;
    pthread_cond_signal(&s->pt_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->pt_th, NULL);
    s->pt_started = 0;
}

int srv_sched_start(srv_sched **out, srv_ctx *ctx, char *err, size_t errlen) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return PM_ENOMEM;
    }
    s->ctx = ctx;
    s->q_cap = ctx->o.max_queue > 0 ? ctx->o.max_queue : 1;
    s->max_live = ctx->o.parallel > 0 ? ctx->o.parallel : 1;
    s->q = calloc((size_t)s->q_cap, sizeof *s->q);
    s->live = calloc((size_t)s->max_live + 1, sizeof *s->live);
    if (!s->q || !s->live) {
        free(s->q);
        free(s->live);
        free(s);
        snprintf(err, errlen, "out of memory");
        return PM_ENOMEM;
    }
    pm_engine_opts eo;
    pm_engine_opts_default(&eo);
    eo.max_seqs = s->max_live;
    if (ctx->o.prefill_chunk > 0) eo.prefill_chunk = ctx->o.prefill_chunk;
    eo.limits = ctx->limits;
    eo.kv_budget = ctx->o.kv_budget;
    eo.kv_bf16 = ctx->o.kv_bf16;
    eo.prefix_cache = ctx->o.prompt_cache;
    eo.draft_tokens = ctx->o.draft_tokens;
    eo.recompute_beside = ctx->o.prompt_threads != 0; /* the prompt thread runs it (else the steps do) */
    int rc = pm_engine_new(&s->eng, ctx->model, &eo, err, errlen);
    if (rc) {
        free(s->q);
        free(s->live);
        free(s);
        return rc;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->pt_cv, NULL);
    s->threads = omp_get_max_threads();
    int et = ctx->o.prompt_threads;
    s->pt_live_threads = et < 0 ? (s->threads > 1 ? s->threads / 2 : 1) : et < s->threads ? et : s->threads;
    srv_metrics_kv(ctx->metrics, 0, srv_sched_kv_budget(s));
    ctx->sched = s; /* callbacks find the scheduler through the context */
    int pt_failed = et != 0 && !(s->pt_started = pthread_create(&s->pt_th, NULL, prompt_main, s) == 0);
    if (pt_failed || pthread_create(&s->th, NULL, sched_main, s)) {
        stop_prompt_thread(s);
        ctx->sched = NULL;
        pm_engine_free(s->eng);
        free(s->q);
        free(s->live);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        pthread_cond_destroy(&s->pt_cv);
        free(s);
        snprintf(err, errlen, "cannot start the inference threads");
        return PM_ESTATE;
    }
    s->started = 1;
    *out = s;
    return PM_OK;
}

void srv_sched_stop(srv_sched *s) {
    if (!s || !s->eng) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    atomic_store(&s->halt, 1); /* a job being encoded gives up at its next block */
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started) pthread_join(s->th, NULL);
    s->started = 0;
    stop_prompt_thread(s); /* idle: the inference thread ended only once no job was in its hands */
    pm_engine_free(s->eng); /* nothing is live any more */
    s->eng = NULL;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->pt_cv);
    free(s->q);
    free(s->live);
    free(s);
}
