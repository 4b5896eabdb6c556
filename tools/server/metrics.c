/* metrics.c — see metrics.h. Request counters are a small table keyed by (endpoint, mode,
 * status); the tokens/s gauge sums one-second buckets of a 16-slot ring. */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SERIES = 256, RING = 16, WINDOW = 10, N_BUCKETS = 12 };

static const double TTFT_BUCKETS[N_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

typedef struct series {
    char endpoint[24], mode[16];
    int status;
    unsigned long long count;
} series;

struct srv_metrics {
    pthread_mutex_t mu;
    series s[MAX_SERIES];
    int n_series;
    unsigned long long finish[4];
    int queue_depth, active, preparing;
    long long kv_reserved, kv_budget;
    pm_prefix_stats prefix;     /* the prompt cache's (srv_metrics_prefix) */
    long long drafted, accepted; /* --draft's tokens (srv_metrics_draft) */
    unsigned long long prompt_tokens, gen_tokens;
    long long ring_sec[RING];
    unsigned long long ring_tok[RING];
    double audio_seconds;
    unsigned long long recomputes, inline_admissions;
    unsigned long long fetch_ok, fetch_failed, fetch_bytes;
    double fetch_seconds;
    unsigned long long ttft_bucket[N_BUCKETS], ttft_count;
    double ttft_sum;
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    for (int i = 0; i < RING; i++) m->ring_sec[i] = -1;
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

const char *srv_mode_name(int mode) {
    switch (mode) {
    case PM_MODE_LANGUAGE: return "language";
    case PM_MODE_VISION: return "vision";
    case PM_MODE_SPEECH: return "speech";
    case PM_MODE_VISION_SPEECH: return "vision_speech";
    default: return "none";
    }
}

void srv_metrics_request(srv_metrics *m, const char *endpoint, const char *mode, int status) {
    pthread_mutex_lock(&m->mu);
    int i;
    for (i = 0; i < m->n_series; i++)
        if (m->s[i].status == status && !strcmp(m->s[i].endpoint, endpoint) && !strcmp(m->s[i].mode, mode)) break;
    if (i == m->n_series && m->n_series < MAX_SERIES) {
        snprintf(m->s[i].endpoint, sizeof m->s[i].endpoint, "%s", endpoint);
        snprintf(m->s[i].mode, sizeof m->s[i].mode, "%s", mode);
        m->s[i].status = status;
        m->n_series++;
    }
    if (i < m->n_series) m->s[i].count++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_finish(srv_metrics *m, pm_finish reason, int prompt_tokens, int completion_tokens) {
    pthread_mutex_lock(&m->mu);
    if ((int)reason >= 0 && (int)reason < 4) m->finish[reason]++;
    m->prompt_tokens += (unsigned long long)(prompt_tokens > 0 ? prompt_tokens : 0);
    pthread_mutex_unlock(&m->mu);
    (void)completion_tokens; /* generated tokens are counted per step */
}

void srv_metrics_queue_depth(srv_metrics *m, int depth) {
    pthread_mutex_lock(&m->mu);
    m->queue_depth = depth;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_active(srv_metrics *m, int live) {
    pthread_mutex_lock(&m->mu);
    m->active = live;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_kv(srv_metrics *m, int64_t reserved, int64_t budget) {
    pthread_mutex_lock(&m->mu);
    m->kv_reserved = (long long)reserved;
    m->kv_budget = (long long)budget;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_draft(srv_metrics *m, int64_t drafted, int64_t accepted) {
    pthread_mutex_lock(&m->mu);
    m->drafted = (long long)drafted;
    m->accepted = (long long)accepted;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_prefix(srv_metrics *m, const pm_prefix_stats *st) {
    pthread_mutex_lock(&m->mu);
    m->prefix = *st;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_preparing(srv_metrics *m, int n) {
    pthread_mutex_lock(&m->mu);
    m->preparing = n;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_fetch(srv_metrics *m, int ok, int failed, long long bytes, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->fetch_ok += (unsigned long long)ok;
    m->fetch_failed += (unsigned long long)failed;
    m->fetch_bytes += (unsigned long long)bytes;
    m->fetch_seconds += seconds;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_inline_admission(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->inline_admissions++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_recompute(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->recomputes++;
    pthread_mutex_unlock(&m->mu);
}

int srv_metrics_get_preparing(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    int n = m->preparing;
    pthread_mutex_unlock(&m->mu);
    return n;
}

int srv_metrics_get_active(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    int a = m->active;
    pthread_mutex_unlock(&m->mu);
    return a;
}

void srv_metrics_step(srv_metrics *m, int tokens, double now) {
    if (tokens <= 0) return;
    long long sec = (long long)floor(now);
    int k = (int)(sec % RING);
    pthread_mutex_lock(&m->mu);
    if (m->ring_sec[k] != sec) {
        m->ring_sec[k] = sec;
        m->ring_tok[k] = 0;
    }
    m->ring_tok[k] += (unsigned long long)tokens;
    m->gen_tokens += (unsigned long long)tokens;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_audio(srv_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->audio_seconds += seconds;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_ttft(srv_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < N_BUCKETS; i++)
        if (s <= TTFT_BUCKETS[i]) m->ttft_bucket[i]++;
    m->ttft_count++;
    m->ttft_sum += s;
    pthread_mutex_unlock(&m->mu);
}

typedef struct out {
    char *p;
    size_t n, cap;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    if (!o->p && o->cap) return; /* an earlier allocation failed */
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p ? o->p + o->n : NULL, o->p ? o->cap - o->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (o->p && o->n + (size_t)k < o->cap) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->n + (size_t)k + 1) cap *= 2;
        char *q = realloc(o->p, cap);
        if (!q) {
            free(o->p);
            o->p = NULL;
            o->cap = 1;
            return;
        }
        o->p = q;
        o->cap = cap;
    }
}

char *srv_metrics_render(srv_metrics *m, int ready, double now, size_t *len) {
    out o = {0};
    pthread_mutex_lock(&m->mu);
    put(&o, "# HELP phi4mm_build_info The version of phi4mm serving (always 1).\n# TYPE phi4mm_build_info gauge\n");
    put(&o, "phi4mm_build_info{version=\"%s\"} 1\n", pm_version());
    put(&o, "# HELP phi4mm_model_ready 1 once the model is loaded and requests are served.\n# TYPE phi4mm_model_ready gauge\n");
    put(&o, "phi4mm_model_ready %d\n", ready);
    put(&o, "# HELP phi4mm_requests_total Answered HTTP requests by endpoint, input mode and status code.\n"
            "# TYPE phi4mm_requests_total counter\n");
    for (int i = 0; i < m->n_series; i++)
        put(&o, "phi4mm_requests_total{endpoint=\"%s\",mode=\"%s\",status=\"%d\"} %llu\n", m->s[i].endpoint, m->s[i].mode,
            m->s[i].status, m->s[i].count);
    static const char *const reasons[4] = {"stop", "length", "cancelled", "error"};
    put(&o, "# HELP phi4mm_request_finish_total Finished engine sequences by finish reason.\n"
            "# TYPE phi4mm_request_finish_total counter\n");
    for (int i = 0; i < 4; i++) put(&o, "phi4mm_request_finish_total{reason=\"%s\"} %llu\n", reasons[i], m->finish[i]);
    put(&o, "# HELP phi4mm_queue_depth Accepted requests waiting for an engine slot.\n# TYPE phi4mm_queue_depth gauge\n"
            "phi4mm_queue_depth %d\n",
        m->queue_depth);
    put(&o, "# HELP phi4mm_active_sequences Sequences live in the engine.\n# TYPE phi4mm_active_sequences gauge\n"
            "phi4mm_active_sequences %d\n",
        m->active);
    put(&o,
        "# HELP phi4mm_preparing_requests Requests whose media are encoded and prompt prefilled beside the steps.\n"
        "# TYPE phi4mm_preparing_requests gauge\nphi4mm_preparing_requests %d\n",
        m->preparing);
    put(&o, "# HELP phi4mm_kv_reserved_bytes KV cache reserved by the live sequences (each its prompt plus max_tokens).\n"
            "# TYPE phi4mm_kv_reserved_bytes gauge\nphi4mm_kv_reserved_bytes %lld\n"
            "# HELP phi4mm_kv_budget_bytes The engine's KV cache budget (-1: none).\n# TYPE phi4mm_kv_budget_bytes gauge\n"
            "phi4mm_kv_budget_bytes %lld\n",
        m->kv_reserved, m->kv_budget);
    put(&o, "# HELP phi4mm_prompt_tokens_total Prompt tokens of finished sequences (media tokens included).\n"
            "# TYPE phi4mm_prompt_tokens_total counter\nphi4mm_prompt_tokens_total %llu\n",
        m->prompt_tokens);
    put(&o, "# HELP phi4mm_generated_tokens_total Generated tokens.\n# TYPE phi4mm_generated_tokens_total counter\n"
            "phi4mm_generated_tokens_total %llu\n",
        m->gen_tokens);
    long long sec = (long long)floor(now);
    unsigned long long win = 0;
    for (int i = 0; i < RING; i++)
        if (m->ring_sec[i] >= sec - WINDOW && m->ring_sec[i] < sec) win += m->ring_tok[i];
    put(&o, "# HELP phi4mm_tokens_per_second Generated tokens per second over the last %d seconds.\n"
            "# TYPE phi4mm_tokens_per_second gauge\nphi4mm_tokens_per_second %.3f\n",
        WINDOW, (double)win / WINDOW);
    put(&o, "# HELP phi4mm_audio_seconds_total Seconds of audio admitted for processing.\n"
            "# TYPE phi4mm_audio_seconds_total counter\nphi4mm_audio_seconds_total %.3f\n",
        m->audio_seconds);
    put(&o, "# HELP phi4mm_longrope_recomputes_total Caches recomputed with the long RoPE factors beside the steps.\n"
            "# TYPE phi4mm_longrope_recomputes_total counter\nphi4mm_longrope_recomputes_total %llu\n",
        m->recomputes);
    put(&o, "# HELP phi4mm_inline_admissions_total Short text requests admitted while the prompt thread was busy, prefilled by the steps.\n"
            "# TYPE phi4mm_inline_admissions_total counter\nphi4mm_inline_admissions_total %llu\n",
        m->inline_admissions);
    put(&o, "# HELP phi4mm_media_fetches_total Media URLs of requests fetched (--allow-media-hosts), by result.\n"
            "# TYPE phi4mm_media_fetches_total counter\nphi4mm_media_fetches_total{result=\"ok\"} %llu\n"
            "phi4mm_media_fetches_total{result=\"failed\"} %llu\n"
            "# HELP phi4mm_media_fetch_bytes_total Bytes of the media URLs fetched.\n"
            "# TYPE phi4mm_media_fetch_bytes_total counter\nphi4mm_media_fetch_bytes_total %llu\n"
            "# HELP phi4mm_media_fetch_seconds_total Seconds requests waited for their media URLs.\n"
            "# TYPE phi4mm_media_fetch_seconds_total counter\nphi4mm_media_fetch_seconds_total %.3f\n",
        m->fetch_ok, m->fetch_failed, m->fetch_bytes, m->fetch_seconds);
    put(&o, "# HELP phi4mm_prompt_cache_lookups_total Prompts looked up in the prompt cache.\n"
            "# TYPE phi4mm_prompt_cache_lookups_total counter\nphi4mm_prompt_cache_lookups_total %lld\n"
            "# HELP phi4mm_prompt_cache_hits_total Prompts that started their prefill past a kept prefix.\n"
            "# TYPE phi4mm_prompt_cache_hits_total counter\nphi4mm_prompt_cache_hits_total %lld\n"
            "# HELP phi4mm_prompt_cache_reused_tokens_total Prompt positions taken from the prompt cache instead of computed.\n"
            "# TYPE phi4mm_prompt_cache_reused_tokens_total counter\nphi4mm_prompt_cache_reused_tokens_total %lld\n"
            "# HELP phi4mm_prompt_cache_bytes KV bytes the prompt cache holds.\n# TYPE phi4mm_prompt_cache_bytes gauge\n"
            "phi4mm_prompt_cache_bytes %lld\n"
            "# HELP phi4mm_prompt_cache_cap_bytes The prompt cache's cap for K/V (0: off).\n# TYPE phi4mm_prompt_cache_cap_bytes gauge\n"
            "phi4mm_prompt_cache_cap_bytes %lld\n"
            "# HELP phi4mm_media_cache_lookups_total Requests' media looked up among the kept encoder outputs.\n"
            "# TYPE phi4mm_media_cache_lookups_total counter\nphi4mm_media_cache_lookups_total %lld\n"
            "# HELP phi4mm_media_cache_hits_total Media whose encoders were skipped: their outputs were kept.\n"
            "# TYPE phi4mm_media_cache_hits_total counter\nphi4mm_media_cache_hits_total %lld\n"
            "# HELP phi4mm_media_cache_bytes Bytes of kept encoder outputs and their inputs.\n# TYPE phi4mm_media_cache_bytes gauge\n"
            "phi4mm_media_cache_bytes %lld\n",
        (long long)m->prefix.lookups, (long long)m->prefix.hits, (long long)m->prefix.reused, (long long)m->prefix.bytes,
        (long long)m->prefix.cap, (long long)m->prefix.media_lookups, (long long)m->prefix.media_hits, (long long)m->prefix.media_bytes);
    put(&o, "# HELP phi4mm_draft_tokens_total Tokens drafted by prompt lookup (--draft) and checked.\n"
            "# TYPE phi4mm_draft_tokens_total counter\nphi4mm_draft_tokens_total %lld\n"
            "# HELP phi4mm_draft_accepted_total Drafted tokens the sampler took (each saved a decode step).\n"
            "# TYPE phi4mm_draft_accepted_total counter\nphi4mm_draft_accepted_total %lld\n",
        m->drafted, m->accepted);
    put(&o, "# HELP phi4mm_time_to_first_token_seconds Time from request arrival to the first generated token.\n"
            "# TYPE phi4mm_time_to_first_token_seconds histogram\n");
    for (int i = 0; i < N_BUCKETS; i++)
        put(&o, "phi4mm_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", TTFT_BUCKETS[i], m->ttft_bucket[i]);
    put(&o, "phi4mm_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", m->ttft_count);
    put(&o, "phi4mm_time_to_first_token_seconds_sum %.6f\nphi4mm_time_to_first_token_seconds_count %llu\n", m->ttft_sum,
        m->ttft_count);
    pthread_mutex_unlock(&m->mu);
    if (len) *len = o.p ? o.n : 0;
    return o.p;
}
