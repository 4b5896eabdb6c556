/* media_fetch.c — see media_fetch.h. */
#include "media_fetch.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "curl_lib.h"
#include "media_urls.h"
#include "metrics.h"
#include "mhd_lib.h"
#include "req_memory.h"

/* Requests fetching at once; past it a request is answered 503 (each holds a thread). */
enum { FETCH_MAX_ACTIVE = 32, FETCH_MAX_HOPS = 5 };

/* A connection's fetch: its table, and what the thread needs to fill it. */
typedef struct srv_fetch {
    srv_fetch_table t;
    srv_ctx *ctx;
    struct MHD_Connection *conn;
    size_t max_bytes;       /* per URL */
    int64_t taken;          /* bytes of ctx->req_budget the table's buffers hold */
    int done;
    struct srv_fetch *next; /* in the pool's queue */
} srv_fetch;

/* The threads that fetch: created as the number of requests fetching at once grows (at most
 * FETCH_MAX_ACTIVE, so no request waits behind a slow host's), then kept and reused, so a busy
 * server does not create and tear down a thread (and bind a glibc malloc arena to it) for every
 * request with a URL. */
struct srv_fetch_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_fetch *head, *tail;
    pthread_t tid[FETCH_MAX_ACTIVE];
    int threads, idle, stopping;
    const srv_curl *cu; /* libcurl, opened by srv_fetch_start */
};

/* One transfer's state, seen by the callbacks. */
typedef struct xfer {
    srv_fetch *f;
    srv_fetched *it;
    size_t cap;
    int public_only;        /* the host came in by a wildcard */
    int too_big, no_room;
    char refused[INET6_ADDRSTRLEN]; /* an internal address the socket was not opened to */
} xfer;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    srv_fetched *it = x->it;
    if (it->len + n > x->f->max_bytes) {
        x->too_big = 1;
        return 0;
    }
    if (it->len + n > x->cap) {
        size_t cap = x->cap ? x->cap : 65536;
        while (cap < it->len + n) cap *= 2;
        if (cap > x->f->max_bytes) cap = x->f->max_bytes;
        if (srv_req_take(x->f->ctx, x->f->taken, (int64_t)(cap - x->cap))) {
            x->no_room = 1;
            return 0;
        }
        x->f->taken += (int64_t)(cap - x->cap);
        uint8_t *d = realloc(it->data, cap);
        if (!d) {
            x->no_room = 1;
            return 0;
        }
        it->data = d;
        x->cap = cap;
    }
    memcpy(it->data + it->len, p, n);
    it->len += n;
    return n;
}

/* The socket of a connection: refused to an internal address when the host came in by a
 * wildcard (every address curl tries passes here, the redirects' too). */
static curl_socket_t on_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
    xfer *x = ud;
    if (purpose == CURLSOCKTYPE_IPCXN && x->public_only && srv_addr_internal(&a->addr)) {
        const void *ip = a->family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&a->addr)->sin6_addr
                                               : (const void *)&((struct sockaddr_in *)&a->addr)->sin_addr;
        if (!inet_ntop(a->family, ip, x->refused, sizeof x->refused)) snprintf(x->refused, sizeof x->refused, "?");
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

/* Ends a transfer when the server shuts down. */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    xfer *x = ud;
    (void)dt, (void)dn, (void)ut, (void)un;
    return atomic_load(&x->f->ctx->stopping) ? 1 : 0;
}

/* Fetches it->url (following up to FETCH_MAX_HOPS redirects) until the monotonic deadline; on
 * failure it->err says why and it->data is freed. */
static void fetch_one(srv_fetch *f, srv_fetched *it, double deadline) {
    const srv_curl *cu = f->ctx->fetch_pool->cu;
    CURL *h = cu->easy_init();
    CURLU *u = cu->url();
    char *url = strdup(it->url), *host = NULL, *scheme = NULL;
    xfer x = {.f = f, .it = it};
    if (!h || !u || !url) {
        snprintf(it->err, sizeof it->err, "out of memory");
        goto out;
    }
    for (int hop = 0;; hop++) {
        cu->free(host), cu->free(scheme);
        host = scheme = NULL;
        if (cu->url_set(u, CURLUPART_URL, url, 0) || cu->url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
            cu->url_get(u, CURLUPART_HOST, &host, 0)) {
            snprintf(it->err, sizeof it->err, "%s'%.160s' is not a valid URL", hop ? "it redirects to " : "", url);
            goto out;
        }
        if (strcasecmp(scheme, "http") && strcasecmp(scheme, "https")) {
            snprintf(it->err, sizeof it->err, "it redirects to a %.16s URL; only http and https are fetched", scheme);
            goto out;
        }
        int admitted = srv_media_host_allowed(f->ctx->media_hosts, host);
        if (admitted == SRV_HOST_REFUSED) {
            snprintf(it->err, sizeof it->err, "%sthe host '%.100s' is not one this server fetches media from (--allow-media-hosts)",
                     hop ? "it redirects to another host: " : "", host);
            goto out;
        }
        cu->url_set(u, CURLUPART_USER, NULL, 0); /* no credentials from a URL go out */
        cu->url_set(u, CURLUPART_PASSWORD, NULL, 0);
        double left = deadline - srv_now();
        if (left <= 0) {
            snprintf(it->err, sizeof it->err, "no time left to fetch it (--media-fetch-timeout %d s for a request's URLs)",
                     f->ctx->o.media_fetch_timeout);
            goto out;
        }
        cu->easy_reset(h);
        free(it->data);
        it->data = NULL;
        it->len = 0;
        srv_req_give(f->ctx, (int64_t)x.cap);
        f->taken -= (int64_t)x.cap;
        x.cap = 0;
        x.public_only = admitted == SRV_HOST_PUBLIC;
        x.refused[0] = 0;
        long ms = (long)(left * 1000) + 1;
        srv_setopt_ptr(cu, h, CURLOPT_CURLU, u);
        srv_setopt_str(cu, h, CURLOPT_PROTOCOLS_STR, "http,https");
        srv_setopt_long(cu, h, CURLOPT_FOLLOWLOCATION, 0L); /* each hop judged above */
        srv_setopt_str(cu, h, CURLOPT_PROXY, ""); /* not the environment's proxy */
        srv_setopt_long(cu, h, CURLOPT_NOSIGNAL, 1L);
        srv_setopt_long(cu, h, CURLOPT_TIMEOUT_MS, ms);
        srv_setopt_long(cu, h, CURLOPT_CONNECTTIMEOUT_MS, ms < 10000 ? ms : 10000L);
        srv_setopt_off(cu, h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->max_bytes);
        srv_setopt_fn(cu, h, CURLOPT_WRITEFUNCTION, write, on_body);
        srv_setopt_ptr(cu, h, CURLOPT_WRITEDATA, &x);
        srv_setopt_fn(cu, h, CURLOPT_OPENSOCKETFUNCTION, opensocket, on_socket);
        srv_setopt_ptr(cu, h, CURLOPT_OPENSOCKETDATA, &x);
        srv_setopt_fn(cu, h, CURLOPT_XFERINFOFUNCTION, xferinfo, on_progress);
        srv_setopt_ptr(cu, h, CURLOPT_XFERINFODATA, &x);
        srv_setopt_long(cu, h, CURLOPT_NOPROGRESS, 0L);
        srv_setopt_str(cu, h, CURLOPT_USERAGENT, "phi4mm-serve");
        CURLcode rc = cu->easy_perform(h);
        long status = 0;
        srv_getinfo_long(cu, h, CURLINFO_RESPONSE_CODE, &status);
        if (rc != CURLE_OK) {
            if (x.refused[0])
                snprintf(it->err, sizeof it->err, "the host '%.100s' resolves to %s, an internal address a wildcard of --allow-media-hosts does not admit",
                         host, x.refused);
            else if (x.too_big || rc == CURLE_FILESIZE_EXCEEDED)
                snprintf(it->err, sizeof it->err, "the file is larger than %zu bytes", f->max_bytes);
            else if (x.no_room)
                snprintf(it->err, sizeof it->err, "it does not fit in the server's memory for request data now (--max-request-memory); retry");
            else if (rc == CURLE_OPERATION_TIMEDOUT)
                snprintf(it->err, sizeof it->err, "fetching it timed out (--media-fetch-timeout %d s for a request's URLs)",
                         f->ctx->o.media_fetch_timeout);
            else if (rc == CURLE_ABORTED_BY_CALLBACK)
                snprintf(it->err, sizeof it->err, "the server is shutting down");
            else
                snprintf(it->err, sizeof it->err, "fetching it failed: %s", cu->easy_strerror(rc));
            goto out;
        }
        if (status == 301 || status == 302 || status == 303 || status == 307 || status == 308) {
            char *next = NULL;
            srv_getinfo_str(cu, h, CURLINFO_REDIRECT_URL, &next);
            if (!next || hop + 1 > FETCH_MAX_HOPS) {
                snprintf(it->err, sizeof it->err, next ? "more than %d redirects" : "a redirect without a location", FETCH_MAX_HOPS);
                goto out;
            }
            char *copy = strdup(next);
            if (!copy) {
                snprintf(it->err, sizeof it->err, "out of memory");
                goto out;
            }
            free(url);
            url = copy;
            continue;
        }
        if (status != 200) {
            snprintf(it->err, sizeof it->err, "the host '%.100s' answered HTTP %ld", host, status);
            goto out;
        }
        if (!it->len) snprintf(it->err, sizeof it->err, "the host '%.100s' answered an empty body", host);
        break;
    }
out:
    if (it->err[0]) {
        free(it->data);
        it->data = NULL;
        it->len = 0;
        srv_req_give(f->ctx, (int64_t)x.cap);
        f->taken -= (int64_t)x.cap;
    }
    cu->free(host);
    cu->free(scheme);
    free(url);
    cu->url_cleanup(u);
    if (h) cu->easy_cleanup(h);
}

/* Fetches a request's URLs within one deadline, then gives its connection back. */
static void run_fetch(srv_fetch *f) {
    srv_ctx *ctx = f->ctx;
    double t0 = srv_now(), deadline = t0 + ctx->o.media_fetch_timeout;
    int ok = 0;
    long long bytes = 0;
    for (int i = 0; i < f->t.n; i++) {
        fetch_one(f, &f->t.items[i], deadline);
        ok += !f->t.items[i].err[0];
        bytes += (long long)f->t.items[i].len;
    }
    srv_metrics_fetch(ctx->metrics, ok, f->t.n - ok, bytes, srv_now() - t0);
    f->done = 1;
    struct MHD_Connection *c = f->conn;
    /* after the resume the connection (and f) belong to the HTTP thread again */
    atomic_fetch_sub(&ctx->suspended, 1);
    ctx->mhd->resume_connection(c);
    atomic_fetch_sub(&ctx->fetching, 1);
}

static void *pool_thread(void *arg) {
    srv_fetch_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping) {
            p->idle++;
            pthread_cond_wait(&p->cv, &p->mu);
            p->idle--;
        }
        srv_fetch *f = p->head;
        if (!f) break; /* stopping, nothing queued */
        if (!(p->head = f->next)) p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        run_fetch(f);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int srv_fetch_start(srv_ctx *ctx, char *why, size_t why_len) {
    srv_fetch_pool *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    if (!(p->cu = srv_curl_open(why, why_len))) {
        free(p);
        return -1;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    ctx->fetch_pool = p;
    return 0;
}

void srv_fetch_stop(srv_ctx *ctx) {
    srv_fetch_pool *p = ctx->fetch_pool;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->threads; i++) pthread_join(p->tid[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    const srv_curl *cu = p->cu;
    free(p);
    ctx->fetch_pool = NULL;
    cu->global_cleanup();
}

int srv_fetch_media(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const json_t *chat, srv_parse_limits *lim, srv_error *e) {
    srv_fetch *f = sc->fetch;
    if (f && f->done) {
        if (atomic_load(&ctx->stopping)) /* the transfers gave up: not the request's fault */
            return srv_fail(e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        lim->fetched = &f->t;
        return 0;
    }
    srv_fetch_pool *p = ctx->fetch_pool;
    if (!ctx->media_hosts || !p) return 0; /* the parse refuses remote URLs */
    f = calloc(1, sizeof *f);
    if (!f) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    int n = srv_fetch_collect(&f->t, chat, lim->max_images + lim->max_audios + 1);
    if (n <= 0) {
        srv_fetch_table_free(&f->t);
        free(f);
        return n < 0 ? srv_fail(e, 500, "server_error", NULL, NULL, "out of memory") : 0;
    }
    if (atomic_fetch_add(&ctx->fetching, 1) >= FETCH_MAX_ACTIVE) {
        atomic_fetch_sub(&ctx->fetching, 1);
        srv_fetch_table_free(&f->t);
        free(f);
        return srv_fail(e, 503, "server_error", NULL, "overloaded", "%d requests are fetching media URLs already; retry shortly",
                        FETCH_MAX_ACTIVE);
    }
    f->ctx = ctx;
    f->conn = c;
    f->max_bytes = lim->max_media_bytes;
    sc->fetch = f;
    pthread_mutex_lock(&p->mu);
    if (!p->idle && p->threads < FETCH_MAX_ACTIVE && !pthread_create(&p->tid[p->threads], NULL, pool_thread, p)) p->threads++;
    if (!p->threads) { /* no thread to fetch it (and none could start) */
        pthread_mutex_unlock(&p->mu);
        atomic_fetch_sub(&ctx->fetching, 1);
        srv_fetch_release(ctx, sc);
        return srv_fail(e, 503, "server_error", NULL, "overloaded", "cannot start a thread to fetch media URLs; retry shortly");
    }
    /* parked before it is queued: its resume cannot come first */
    atomic_fetch_add(&ctx->suspended, 1);
    ctx->mhd->suspend_connection(c);
    if (p->tail) p->tail->next = f;
    else p->head = f;
    p->tail = f;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 1;
}

void srv_fetch_release(srv_ctx *ctx, srv_conn *sc) {
    srv_fetch *f = sc->fetch;
    if (!f) return;
    srv_fetch_table_free(&f->t);
    srv_req_give(ctx, f->taken);
    free(f);
    sc->fetch = NULL;
}
