/* http.c — libmicrohttpd glue: daemon setup, routing, bounded request bodies, API-key check,
 * CORS, error and JSON responses, and the generic "serve an accepted job" state machine.
 *
 * Access-handler calls for one request: (1) headers only — route, method, auth and the declared
 * Content-Length are checked here, before any body byte is read (so a refused upload is never
 * received and `Expect: 100-continue` clients get the error instead of 100); (2) body pieces,
 * appended up to --max-body (beyond that the rest is discarded and 413 answered; a client that
 * keeps sending more than twice the cap is disconnected); (3) the final call with no data, which
 * dispatches the route. A route that must wait parks the connection and is called again. */
#include "http.h"
#include "req_memory.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "json_util.h"
#include "media_fetch.h"
#include "metrics.h"
#include "scheduler.h"

struct srv_http {
    srv_ctx *ctx;
    struct MHD_Daemon *d;
    int port;
    char *tls_cert, *tls_key; /* PEM text of --tls-cert / --tls-key (NULL: plain HTTP) */
};

/* The PEM file `path` of --`what` as text (malloc'd), or NULL with a message. */
static char *read_pem(const char *path, const char *what, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    if (f) {
        buf = malloc((size_t)1 << 20);
        n = buf ? fread(buf, 1, ((size_t)1 << 20) - 1, f) : 0;
        int big = buf && n == ((size_t)1 << 20) - 1 && fgetc(f) != EOF, bad = ferror(f);
        fclose(f);
        if (!buf || big || bad || !n) {
            snprintf(err, errlen, "--%s %s: %s", what, path, !buf ? "out of memory" : big ? "larger than 1 MiB" : bad ? "read error" : "empty file");
            free(buf);
            return NULL;
        }
        buf[n] = 0;
        if (!strstr(buf, "-----BEGIN ")) {
            snprintf(err, errlen, "--%s %s: not a PEM file (no -----BEGIN line)", what, path);
            free(buf);
            return NULL;
        }
        return buf;
    }
    snprintf(err, errlen, "--%s %s: %s", what, path, strerror(errno));
    return NULL;
}

static const struct {
    const char *path;
    srv_route route;
    const char *method;
    const char *endpoint;
} ROUTES[] = {
    {"/v1/chat/completions", SRV_R_CHAT, "POST", "chat"},
    {"/v1/completions", SRV_R_COMPLETIONS, "POST", "completions"},
    {"/v1/responses", SRV_R_RESPONSES, "POST", "responses"},
    {"/v1/audio/transcriptions", SRV_R_TRANSCRIBE, "POST", "transcriptions"},
    {"/v1/audio/translations", SRV_R_TRANSLATE, "POST", "translations"},
    {"/v1/models", SRV_R_MODELS, "GET", "models"},
    {"/health", SRV_R_HEALTH, "GET", "health"},
    {"/metrics", SRV_R_METRICS, "GET", "metrics"},
    {"/version", SRV_R_VERSION, "GET", "version"},
    {"/tokenize", SRV_R_TOKENIZE, "POST", "tokenize"},
    {"/detokenize", SRV_R_DETOKENIZE, "POST", "detokenize"},
};

static void add_common_headers(srv_ctx *ctx, const srv_conn *sc, struct MHD_Response *r) {
    if (ctx->o.cors_origin) {
        ctx->mhd->add_response_header(r, "Access-Control-Allow-Origin", ctx->o.cors_origin);
        ctx->mhd->add_response_header(r, "Vary", "Origin");
    }
    if (sc && sc->ignored[0]) ctx->mhd->add_response_header(r, "X-Ignored-Fields", sc->ignored);
}

enum MHD_Result srv_respond_json(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, int status, json_t *o) {
    size_t len = 0;
    char *s = o ? srv_json_dump(o, &len) : NULL;
    json_decref(o);
    return srv_respond(ctx, c, sc, status, "application/json", s, len);
}

enum MHD_Result srv_respond(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, int status, const char *content_type, char *body,
                            size_t len) {
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        body = strdup(oom);
        len = body ? strlen(body) : 0;
        status = 500;
        content_type = "application/json";
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = ctx->mhd->create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    ctx->mhd->add_response_header(r, "Content-Type", content_type);
    add_common_headers(ctx, sc, r);
    if (status == 503) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", ctx->o.retry_after > 0 ? ctx->o.retry_after : 1);
        ctx->mhd->add_response_header(r, "Retry-After", ra);
    }
    if (status == 401) ctx->mhd->add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405) {
        for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
            if (ROUTES[i].route == sc->route || (sc->route == SRV_R_MODEL && ROUTES[i].route == SRV_R_MODELS))
                ctx->mhd->add_response_header(r, "Allow", ROUTES[i].method);
        if (sc->route == SRV_R_RESPONSE) ctx->mhd->add_response_header(r, "Allow", "GET, DELETE");
        if (sc->route == SRV_R_RESPONSE_ITEMS) ctx->mhd->add_response_header(r, "Allow", "GET");
    }
    enum MHD_Result ok = ctx->mhd->queue_response(c, (unsigned)status, r);
    ctx->mhd->destroy_response(r);
    sc->responded = 1;
    sc->status = status;
    srv_metrics_request(ctx->metrics, sc->endpoint, srv_mode_name(sc->mode), status);
    return ok;
}

enum MHD_Result srv_respond_error(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const srv_error *e) {
    size_t len = 0;
    char *body = srv_error_body(e, &len);
    return srv_respond(ctx, c, sc, e->http, "application/json", body, len);
}

static enum MHD_Result respond_fail(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, int http, const char *type, const char *code,
                                    const char *msg) {
    srv_error e;
    srv_fail(&e, http, type, NULL, code, "%s", msg);
    return srv_respond_error(ctx, c, sc, &e);
}

/* ------------------------------------------------------------------ jobs */

enum MHD_Result srv_submit_jobs(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, srv_job **jobs, int n) {
    sc->mode = (int)jobs[0]->mode;
    int rc = srv_sched_enqueue(ctx->sched, jobs, n);
    if (rc) {
        for (int i = 0; i < n; i++) srv_job_unref(jobs[i]);
        free(jobs);
        if (rc != PM_EBUSY) return respond_fail(ctx, c, sc, 503, "server_error", "shutting_down", "the server is shutting down");
        char msg[200];
        snprintf(msg, sizeof msg, "the server is at capacity (%d requests waiting at most%s); retry later", ctx->o.max_queue,
                 n > 1 ? ", and this request needs a place for each choice" : "");
        return respond_fail(ctx, c, sc, 503, "server_error", "overloaded", msg);
    }
    sc->jobs = jobs;
    sc->n_jobs = n;
    return srv_serve_job(ctx, c, sc);
}

enum MHD_Result srv_submit_job(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, srv_job *j) {
    srv_job **jobs = malloc(sizeof *jobs);
    if (!jobs) {
        srv_job_unref(j);
        return respond_fail(ctx, c, sc, 500, "server_error", "internal_error", "out of memory");
    }
    jobs[0] = j;
    return srv_submit_jobs(ctx, c, sc, jobs, 1);
}

enum MHD_Result srv_serve_job(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    for (int i = 0; i < sc->n_jobs; i++) { /* a choice refused before admission answers for the request */
        srv_job *f = sc->jobs[i];
        pthread_mutex_lock(&f->mu);
        int failed = f->failed;
        srv_error e = f->err;
        pthread_mutex_unlock(&f->mu);
        if (!failed) continue;
        if (e.http == 499) { /* the client hung up before admission */
            sc->responded = 1;
            sc->status = 499;
            srv_metrics_request(ctx->metrics, sc->endpoint, srv_mode_name(sc->mode), 499);
            return MHD_NO;
        }
        return srv_respond_error(ctx, c, sc, &e);
    }
    srv_job *j = sc->jobs[0];
    pthread_mutex_lock(&j->mu);
    if (j->stream) {
        if (srv_job_park_locked(j, c, SRV_WAIT_ADMIT)) {
            pthread_mutex_unlock(&j->mu);
            return MHD_YES;
        }
        pthread_mutex_unlock(&j->mu);
        struct MHD_Response *r = srv_sse_response(ctx->mhd, sc->jobs, sc->n_jobs, c);
        if (!r) return MHD_NO;
        ctx->mhd->add_response_header(r, "Content-Type", "text/event-stream");
        ctx->mhd->add_response_header(r, "Cache-Control", "no-cache");
        ctx->mhd->add_response_header(r, "X-Accel-Buffering", "no");
        add_common_headers(ctx, sc, r);
        enum MHD_Result ok = ctx->mhd->queue_response(c, 200, r);
        ctx->mhd->destroy_response(r);
        sc->responded = 1;
        sc->status = 200;
        srv_metrics_request(ctx->metrics, sc->endpoint, srv_mode_name(sc->mode), 200);
        return ok;
    }
    pthread_mutex_unlock(&j->mu);
    /* every choice done, the first that is not ends the wait (one parked job at a time) */
    pm_finish fin = PM_FINISH_STOP;
    srv_error ferr = {0};
    int hung_up = 0;
    for (int i = 0; i < sc->n_jobs; i++) {
        j = sc->jobs[i];
        pthread_mutex_lock(&j->mu);
        if (j->state != SRV_JS_DONE && srv_job_park_locked(j, c, SRV_WAIT_DONE)) {
            pthread_mutex_unlock(&j->mu);
            return MHD_YES;
        }
        if (j->failed) { /* refused while another choice was waited for: the next call answers it */
            pthread_mutex_unlock(&j->mu);
            return srv_serve_job(ctx, c, sc);
        }
        if (j->finish == PM_FINISH_ERROR || (j->finish == PM_FINISH_CANCELLED && fin != PM_FINISH_ERROR)) {
            fin = j->finish;
            srv_job_failure(j, &ferr);
            hung_up = atomic_load(&j->cancel);
        }
        pthread_mutex_unlock(&j->mu);
    }
    if (fin == PM_FINISH_CANCELLED && hung_up) { /* the client hung up: nobody to answer */
        sc->responded = 1;
        sc->status = 499;
        srv_metrics_request(ctx->metrics, sc->endpoint, srv_mode_name(sc->mode), 499);
        return MHD_NO;
    }
    if (fin != PM_FINISH_STOP) return srv_respond_error(ctx, c, sc, &ferr);
    size_t len = 0;
    const char *ct = "application/json";
    char *body = j->kind == SRV_JOB_CHAT         ? srv_chat_result(sc->jobs, sc->n_jobs, ctx->model_id, &len)
                 : j->kind == SRV_JOB_COMPLETION ? srv_completion_result(sc->jobs, sc->n_jobs, ctx->model_id, &len)
                 : j->kind == SRV_JOB_RESPONSE   ? srv_response_result(j, ctx->model_id, &len)
                                                 : srv_audio_result(sc->jobs, sc->n_jobs, &len, &ct);
    return srv_respond(ctx, c, sc, 200, ct, body, len);
}

/* ------------------------------------------------------------------ access handler */

static int auth_ok(srv_ctx *ctx, struct MHD_Connection *c) {
    if (!ctx->o.api_key) return 1;
    const char *h = ctx->mhd->lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    size_t a = strlen(h), b = strlen(ctx->o.api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)ctx->o.api_key[i % (b ? b : 1)];
    return diff == 0;
}

static void route_lookup(srv_conn *sc, const char *url) {
    sc->route = SRV_R_NONE;
    sc->endpoint = "other";
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (!strcmp(url, ROUTES[i].path)) {
            sc->route = ROUTES[i].route;
            sc->endpoint = ROUTES[i].endpoint;
            return;
        }
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        sc->route = SRV_R_MODEL;
        sc->endpoint = "models";
    }
    if (!strncmp(url, "/v1/responses/", 14) && url[14]) {
        size_t n = strlen(url), ls = strlen(SRV_ITEMS_SUFFIX);
        sc->route = n > 14 + ls && !strcmp(url + n - ls, SRV_ITEMS_SUFFIX) ? SRV_R_RESPONSE_ITEMS : SRV_R_RESPONSE;
        sc->endpoint = "responses";
    }
}

static const char *route_method(srv_route r) {
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (ROUTES[i].route == r) return ROUTES[i].method;
    return r == SRV_R_MODEL || r == SRV_R_RESPONSE || r == SRV_R_RESPONSE_ITEMS ? "GET" : NULL;
}

static enum MHD_Result preflight(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    struct MHD_Response *r = ctx->mhd->create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_common_headers(ctx, sc, r);
    ctx->mhd->add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    ctx->mhd->add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    ctx->mhd->add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ok = ctx->mhd->queue_response(c, 204, r);
    ctx->mhd->destroy_response(r);
    sc->responded = 1;
    sc->status = 204;
    return ok;
}

/* First call: everything decidable from the request line and headers. Returns 1 when answered. */
static int first_call(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const char *method, enum MHD_Result *res) {
    char msg[256];
    if (!strcmp(method, "OPTIONS") && ctx->o.cors_origin && sc->route != SRV_R_NONE) {
        *res = preflight(ctx, c, sc);
        return 1;
    }
    if (sc->route == SRV_R_NONE) {
        snprintf(msg, sizeof msg, "unknown endpoint: %s %s", method, sc->path);
        *res = respond_fail(ctx, c, sc, 404, "invalid_request_error", "not_found", msg);
        return 1;
    }
    const char *want = route_method(sc->route);
    if (sc->route == SRV_R_RESPONSE && !strcmp(method, "DELETE")) want = method;
    if (strcmp(method, want) && !(!strcmp(want, "GET") && !strcmp(method, "HEAD"))) {
        snprintf(msg, sizeof msg, "method %s is not allowed on %s (use %s)", method, sc->path, want);
        *res = respond_fail(ctx, c, sc, 405, "invalid_request_error", "method_not_allowed", msg);
        return 1;
    }
    if (sc->route != SRV_R_HEALTH && !auth_ok(ctx, c)) {
        *res = respond_fail(ctx, c, sc, 401, "authentication_error", "invalid_api_key",
                            "missing or incorrect API key: send 'Authorization: Bearer <key>'");
        return 1;
    }
    if (!strcmp(method, "POST")) {
        const char *cl = ctx->mhd->lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long n = strtoull(cl, &end, 10);
            if (*end == 0 && n > ctx->o.max_body) {
                snprintf(msg, sizeof msg, "the request body (%llu bytes) is larger than the limit of %zu bytes", n, ctx->o.max_body);
                *res = respond_fail(ctx, c, sc, 413, "invalid_request_error", "request_too_large", msg);
                return 1;
            }
        }
        const char *ct = ctx->mhd->lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        snprintf(sc->content_type, sizeof sc->content_type, "%s", ct ? ct : "");
    }
    return 0;
}

void srv_conn_free_body(srv_ctx *ctx, srv_conn *sc) {
    free(sc->body);
    sc->body = NULL;
    sc->len = sc->cap = 0;
    srv_req_give(ctx, sc->body_taken);
    sc->body_taken = 0;
}

/* Buffers upload data. Past --max-body, or when the request-memory budget has no room for a
 * larger buffer, the rest is counted and dropped (the request is answered 413 / 503 once the
 * upload ends), up to twice the cap before the connection is closed. */
static int append_body(srv_ctx *ctx, srv_conn *sc, const char *data, size_t n) {
    if (!sc->too_big && !sc->no_room && sc->len + n > ctx->o.max_body) sc->too_big = 1;
    if (!sc->too_big && !sc->no_room && sc->len + n + 1 > sc->cap) {
        size_t cap = sc->cap ? sc->cap : 16384;
        while (cap < sc->len + n + 1) cap *= 2;
        if (cap > ctx->o.max_body + 1) cap = ctx->o.max_body + 1;
        int r = srv_req_take(ctx, sc->body_taken, (int64_t)(cap - sc->cap));
        if (r) {
            sc->no_room = r;
            srv_conn_free_body(ctx, sc); /* nothing of it will be read */
        } else {
            sc->body_taken += (int64_t)(cap - sc->cap);
            char *b = realloc(sc->body, cap);
            if (!b) return -1;
            sc->body = b;
            sc->cap = cap;
        }
    }
    if (sc->too_big || sc->no_room) {
        sc->discarded += n;
        return sc->len + sc->discarded <= 2 * ctx->o.max_body ? 0 : -1;
    }
    memcpy(sc->body + sc->len, data, n);
    sc->len += n;
    sc->body[sc->len] = 0;
    return 0;
}

static enum MHD_Result dispatch(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc) {
    switch (sc->route) {
    case SRV_R_HEALTH: return srv_route_health(ctx, c, sc);
    case SRV_R_METRICS: return srv_route_metrics(ctx, c, sc);
    case SRV_R_VERSION: return srv_route_version(ctx, c, sc);
    case SRV_R_MODELS: return srv_route_models(ctx, c, sc, NULL);
    case SRV_R_MODEL: return srv_route_models(ctx, c, sc, sc->path + 11);
    case SRV_R_RESPONSE:
    case SRV_R_RESPONSE_ITEMS: return srv_route_response_stored(ctx, c, sc);
    default: break;
    }
    if (!atomic_load(&ctx->ready))
        return respond_fail(ctx, c, sc, 503, "server_error", "loading", "the model is still loading; retry shortly");
    switch (sc->route) {
    case SRV_R_CHAT: return srv_route_chat(ctx, c, sc);
    case SRV_R_COMPLETIONS: return srv_route_completions(ctx, c, sc);
    case SRV_R_RESPONSES: return srv_route_responses(ctx, c, sc);
    case SRV_R_TRANSCRIBE: return srv_route_audio(ctx, c, sc, 0);
    case SRV_R_TRANSLATE: return srv_route_audio(ctx, c, sc, 1);
    case SRV_R_TOKENIZE: return srv_route_tokenize(ctx, c, sc);
    case SRV_R_DETOKENIZE: return srv_route_detokenize(ctx, c, sc);
    default: return respond_fail(ctx, c, sc, 500, "server_error", "internal_error", "unrouted request");
    }
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                                 const char *upload, size_t *upload_size, void **con_cls) {
    srv_http *h = cls;
    srv_ctx *ctx = h->ctx;
    srv_conn *sc = *con_cls;
    (void)version;
    if (!sc) {
        sc = calloc(1, sizeof *sc);
        if (!sc) return MHD_NO;
        *con_cls = sc;
        sc->t0 = srv_now();
        sc->mode = -1;
        snprintf(sc->method, sizeof sc->method, "%s", method);
        snprintf(sc->path, sizeof sc->path, "%s", url);
        route_lookup(sc, url);
        enum MHD_Result res = MHD_YES;
        if (first_call(ctx, c, sc, method, &res)) return res;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (sc->responded) return MHD_YES; /* answered early: drop the body */
        return append_body(ctx, sc, upload, n) ? MHD_NO : MHD_YES;
    }
    if (sc->responded) return MHD_YES;
    if (sc->too_big) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %zu bytes", ctx->o.max_body);
        return respond_fail(ctx, c, sc, 413, "invalid_request_error", "request_too_large", msg);
    }
    if (sc->no_room) {
        char msg[256];
        snprintf(msg, sizeof msg, "the request body %s the server's memory for request data (%.0f MiB, --max-request-memory)%s",
                 sc->no_room == 2 ? "is larger than" : "does not fit beside other requests in", (double)ctx->req_budget / (1 << 20),
                 sc->no_room == 2 ? "" : "; retry");
        return respond_fail(ctx, c, sc, sc->no_room == 2 ? 413 : 503, sc->no_room == 2 ? "invalid_request_error" : "server_error",
                            sc->no_room == 2 ? "request_too_large" : "overloaded", msg);
    }
    if (sc->n_jobs) return srv_serve_job(ctx, c, sc);
    return dispatch(ctx, c, sc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_http *h = cls;
    srv_conn *sc = *con_cls;
    (void)c;
    if (!sc) return;
    int ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    for (int i = 0; i < sc->n_jobs; i++) {
        srv_job_detach(sc->jobs[i], ok);
        srv_job_unref(sc->jobs[i]);
    }
    if (sc->n_jobs && !ok) srv_sched_poke(h->ctx->sched);
    free(sc->jobs);
    if (!h->ctx->o.quiet)
        fprintf(stderr, "phi4mm serve: %s %s -> %d%s (%.3f s)%s%s\n", sc->method, sc->path, sc->status,
                ok ? "" : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? " [client disconnected]" : " [terminated]", srv_now() - sc->t0,
                sc->ignored[0] ? "; fields ignored: " : "", sc->ignored);
    srv_conn_free_body(h->ctx, sc);
    srv_fetch_release(h->ctx, sc);
    free(sc);
    *con_cls = NULL;
}

/* ------------------------------------------------------------------ daemon */

int srv_http_start(srv_http **out, srv_ctx *ctx, char *err, size_t errlen) {
    if (!ctx->mhd && !(ctx->mhd = srv_mhd_open(err, errlen))) return -1;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", ctx->o.port);
    int gai = getaddrinfo(ctx->o.host, port, &hints, &ai);
    if (gai || !ai) {
        snprintf(err, errlen, "cannot resolve --host '%s': %s", ctx->o.host, gai_strerror(gai));
        return -1;
    }
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->ctx = ctx;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}};
    if (ctx->o.tls_cert) { /* HTTPS (libmicrohttpd's GnuTLS): both files, checked in cmd_serve */
        if (!ctx->mhd->is_feature_supported(MHD_FEATURE_TLS)) snprintf(err, errlen, "this libmicrohttpd was built without TLS");
        else if ((h->tls_cert = read_pem(ctx->o.tls_cert, "tls-cert", err, errlen)))
            h->tls_key = read_pem(ctx->o.tls_key, "tls-key", err, errlen);
        if (!h->tls_key) {
            freeaddrinfo(ai);
            free(h->tls_cert);
            free(h);
            return -1;
        }
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key};
    }
    unsigned threads = ctx->o.http_threads > 0 ? (unsigned)ctx->o.http_threads : 1;
    h->d = ctx->mhd->start_daemon(flags, (uint16_t)ctx->o.port, NULL, NULL, on_access, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024), MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        if (ctx->o.tls_cert)
            snprintf(err, errlen, "cannot listen with TLS on %s:%d: the certificate or the key is not usable (see the line above: "
                     "not PEM, encrypted, or not a pair), or the address is in use", ctx->o.host, ctx->o.port);
        else snprintf(err, errlen, "cannot listen on %s:%d (address in use, or not a local address?)", ctx->o.host, ctx->o.port);
        free(h->tls_cert);
        free(h->tls_key);
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *di = ctx->mhd->get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : ctx->o.port;
    *out = h;
    return 0;
}

int srv_http_port(const srv_http *h) { return h->port; }

void srv_http_quiesce(srv_http *h) {
    atomic_store(&h->ctx->stopping, 1); /* transfers of image URLs give up (media_fetch.c) */
    MHD_socket s = h->ctx->mhd->quiesce_daemon(h->d);
    if (s != MHD_INVALID_SOCKET) close(s);
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    /* Resumed connections finish writing their last bytes; parked ones must all be resumed before
     * MHD_stop_daemon (it refuses to stop with suspended connections); a fetch's thread resumes its
     * connection before it lets go of ctx. */
    for (int i = 0; atomic_load(&h->ctx->fetching) > 0 && i < 100 * (h->ctx->o.media_fetch_timeout + 5); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000}; /* bounded by the transfers' own timeout */
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 300 && atomic_load(&h->ctx->suspended) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 100; i++) {
        const union MHD_DaemonInfo *di = h->ctx->mhd->get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!di || di->num_connections == 0) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&h->ctx->suspended) > 0)
        fprintf(stderr, "phi4mm serve: warning: %d connection(s) still parked at shutdown\n", atomic_load(&h->ctx->suspended));
    h->ctx->mhd->stop_daemon(h->d);
    free(h->tls_cert);
    free(h->tls_key);
    free(h);
}
