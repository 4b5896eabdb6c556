/* run_batch.c — `phi4mm run-batch -m DIR -i FILE`: an OpenAI Batch input file (JSONL, one request a
 * line: {"custom_id", "method": "POST", "url", "body"}) answered by a server of this process's own,
 * one output line a request in the input's order ({"id", "custom_id", "response": {"status_code",
 * "request_id", "body"}, "error"}), as OpenAI's Batch API and vLLM's run-batch write them.
 *
 * Why a server: a request of the file is then exactly what the same body sent to `phi4mm serve`
 * gets (its parsing, its refusals, its answer's JSON), with continuous batching, the prompt thread
 * and the caches as the server runs them, and nothing written twice. It listens on a loopback port
 * with a random API key, so no other client on the machine can use it, and is stopped at the end.
 * The requests go out through libcurl's multi interface from this thread, --parallel + 2 at a
 * time (the engine decodes --parallel together; two more keep the prompt thread busy), each line
 * read when a slot frees, so the file's bodies are never all in memory; a 503 (the server's
 * request memory or queue full for now) is sent again after its Retry-After. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "../cli/cli_util.h"
#include "../cli/commands.h"
#include "curl_lib.h"
#include "instance.h"

enum { RB_RETRIES = 1000 };

static const char *const rb_urls[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses"};

/* One line of the input: a request, or why it is none. */
typedef struct rb_item {
    long line;                  /* 1-based, for messages */
    char *custom_id;            /* NULL when the line gave none */
    char *url, *body;           /* the request (NULL for a refused line) */
    char *error_code, *error;   /* a refused line: why (malloc'd) */
    int done;                   /* its output is ready (out) */
    char *out;                  /* the output line (malloc'd, no newline) */
    int ok;                     /* answered 200 */
    int tries;
    double retry_at;            /* a 503's: when to send again (0: not waiting) */
    /* in flight */
    CURL *h;
    struct curl_slist *hdr;
    char *resp;
    size_t resp_len;
    double retry_after;         /* the last response's Retry-After */
} rb_item;

typedef struct rb_run {
    const srv_curl *cu;         /* libcurl (curl_lib.h) */
    FILE *in, *out;
    const char *in_name;
    long line;                  /* lines read so far */
    int eof;
    char *buf;
    size_t cap;
    rb_item **items;            /* by sequence: [written, n) held */
    long n, written, cap_items;
    char **seen;                /* custom_ids so far (sorted insertion) */
    long n_seen, cap_seen;
    char base[64], auth[128];   /* http://127.0.0.1:PORT, the bearer header */
    long succeeded, failed;
    long resent;                /* requests sent again after a 503 */
    int out_error;              /* writing the output failed */
} rb_run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void random_hex(char *out, int bytes) {
    unsigned char r[32];
    if (bytes > 32) bytes = 32;
    if (getrandom(r, (size_t)bytes, 0) != bytes) {
        uint64_t x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)out;
        for (int i = 0; i < bytes; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL) r[i] = (unsigned char)(x >> 56);
    }
    for (int i = 0; i < bytes; i++) sprintf(out + 2 * i, "%02x", r[i]);
}

static void item_free(rb_item *it) {
    if (!it) return;
    free(it->custom_id);
    free(it->url);
    free(it->body);
    free(it->error_code);
    free(it->error);
    free(it->out);
    free(it->resp);
    free(it);
}

/* Whether custom_id came before; else remembers it. -1 out of memory. */
static int seen_before(rb_run *r, const char *id) {
    long lo = 0, hi = r->n_seen;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        int c = strcmp(r->seen[mid], id);
        if (!c) return 1;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (r->n_seen == r->cap_seen) {
        long cap = r->cap_seen ? 2 * r->cap_seen : 256;
        char **p = realloc(r->seen, sizeof *p * (size_t)cap);
        if (!p) return -1;
        r->seen = p;
        r->cap_seen = cap;
    }
    char *copy = strdup(id);
    if (!copy) return -1;
    memmove(r->seen + lo + 1, r->seen + lo, sizeof *r->seen * (size_t)(r->n_seen - lo));
    r->seen[lo] = copy;
    r->n_seen++;
    return 0;
}

static int refuse(rb_item *it, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(rb_item *it, const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    it->error_code = strdup(code);
    it->error = strdup(msg);
    return -1;
}

static int url_known(const char *url) {
    for (size_t k = 0; k < sizeof rb_urls / sizeof rb_urls[0]; k++)
        if (!strcmp(url, rb_urls[k])) return 1;
    return 0;
}

/* A line to an item: a request with its custom_id, method, url and body, or a refusal naming why. */
static void parse_line(rb_run *r, const char *text, size_t len, rb_item *it) {
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        refuse(it, "invalid_json", "line %ld: not JSON: %s (column %d)", it->line, je.text, je.column);
        return;
    }
    const json_t *id = json_object_get(root, "custom_id"), *method = json_object_get(root, "method"),
                 *url = json_object_get(root, "url"), *body = json_object_get(root, "body");
    if (!json_is_object(root)) refuse(it, "invalid_request", "line %ld: a request is a JSON object", it->line);
    else if (!json_is_string(id) || !json_string_length(id) || strlen(json_string_value(id)) != json_string_length(id))
        refuse(it, "invalid_request", "line %ld: custom_id must be a non-empty string", it->line);
    else if (!(it->custom_id = strdup(json_string_value(id)))) refuse(it, "server_error", "out of memory");
    else if (!json_is_string(method) || strcmp(json_string_value(method), "POST"))
        refuse(it, "invalid_request", "line %ld: method must be \"POST\"", it->line);
    else if (!json_is_string(url) || !url_known(json_string_value(url)))
        refuse(it, "invalid_request", "line %ld: url must be one of /v1/chat/completions, /v1/completions, /v1/responses", it->line);
    else if (!json_is_object(body)) refuse(it, "invalid_request", "line %ld: body must be a JSON object", it->line);
    else if (json_is_true(json_object_get(body, "stream")))
        refuse(it, "invalid_request", "line %ld: body.stream: a batch's answers are not streamed", it->line);
    else {
        int dup = seen_before(r, it->custom_id);
        if (dup < 0) refuse(it, "server_error", "out of memory");
        else if (dup) refuse(it, "duplicate_custom_id", "line %ld: custom_id '%.200s' came before: each request needs its own", it->line, it->custom_id);
        else if (!(it->url = strdup(json_string_value(url))) || !(it->body = json_dumps(body, JSON_COMPACT)))
            refuse(it, "server_error", "out of memory");
    }
    json_decref(root);
}

/* The output line of an item: its answer, or its refusal. */
static void finish(rb_run *r, rb_item *it, long status, const char *curl_err) {
    char rid[64] = "batch_req_";
    random_hex(rid + 10, 12);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(rid));
    json_object_set_new(o, "custom_id", it->custom_id ? json_string(it->custom_id) : json_null());
    if (it->error || curl_err) {
        json_object_set_new(o, "response", json_null());
        json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", it->error ? (it->error_code ? it->error_code : "server_error") : "transport_error",
                                                  "message", it->error ? it->error : curl_err));
    } else {
        json_t *body = it->resp ? json_loadb(it->resp, it->resp_len, 0, NULL) : NULL;
        if (!body && it->resp) body = json_stringn(it->resp, it->resp_len); /* not JSON: the text, where it is UTF-8 */
        if (!body) body = json_null();
        const json_t *bid = json_object_get(body, "id");
        json_object_set_new(o, "response", json_pack("{s:I, s:o, s:o}", "status_code", (json_int_t)status, "request_id",
                                                      json_is_string(bid) ? json_copy((json_t *)bid) : json_null(), "body", body));
        json_object_set_new(o, "error", json_null());
        it->ok = status == 200;
    }
    it->out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    it->done = 1;
    if (it->ok) r->succeeded++;
    else r->failed++;
}

/* Writes the finished items at the head of the order. */
static void write_ready(rb_run *r) {
    while (r->written < r->n && r->items[r->written] && r->items[r->written]->done) {
        rb_item *it = r->items[r->written];
        if (!it->out || fprintf(r->out, "%s\n", it->out) < 0) r->out_error = 1;
        item_free(it);
        r->items[r->written++] = NULL;
    }
    if (fflush(r->out)) r->out_error = 1;
}

/* The next request line of the input (blank lines skipped) as a new item at the end of the order;
 * NULL at the end of the input. */
static rb_item *next_item(rb_run *r) {
    while (!r->eof) {
        errno = 0;
        ssize_t got = getline(&r->buf, &r->cap, r->in);
        if (got < 0) {
            if (ferror(r->in)) fprintf(stderr, "phi4mm run-batch: %s: read error after line %ld: %s\n", r->in_name, r->line, strerror(errno));
            r->eof = 1;
            break;
        }
        r->line++;
        while (got > 0 && (r->buf[got - 1] == '\n' || r->buf[got - 1] == '\r')) got--;
        size_t sp = 0;
        while (sp < (size_t)got && (r->buf[sp] == ' ' || r->buf[sp] == '\t')) sp++;
        if (sp == (size_t)got) continue;
        rb_item *it = calloc(1, sizeof *it);
        if (!it) return NULL;
        it->line = r->line;
        if (r->n == r->cap_items) {
            long cap = r->cap_items ? 2 * r->cap_items : 1024;
            rb_item **p = realloc(r->items, sizeof *p * (size_t)cap);
            if (!p) {
                free(it);
                return NULL;
            }
            memset(p + r->cap_items, 0, sizeof *p * (size_t)(cap - r->cap_items));
            r->items = p;
            r->cap_items = cap;
        }
        r->items[r->n++] = it;
        parse_line(r, r->buf, (size_t)got, it);
        if (it->error) {
            finish(r, it, 0, NULL);
            continue; /* refused: written in its turn, the next line read */
        }
        return it;
    }
    return NULL;
}

static size_t on_body(char *p, size_t size, size_t n, void *user) {
    rb_item *it = user;
    size_t len = size * n;
    char *q = realloc(it->resp, it->resp_len + len + 1);
    if (!q) return 0;
    memcpy(q + it->resp_len, p, len);
    it->resp = q;
    it->resp_len += len;
    q[it->resp_len] = 0;
    return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *user) {
    rb_item *it = user;
    size_t len = size * n;
    if (len > 12 && !strncasecmp(p, "Retry-After:", 12)) it->retry_after = atof(p + 12);
    return len;
}

static int send_item(rb_run *r, CURLM *multi, rb_item *it) {
    const srv_curl *cu = r->cu;
    char url[256];
    snprintf(url, sizeof url, "%s%s", r->base, it->url);
    free(it->resp);
    it->resp = NULL;
    it->resp_len = 0;
    it->retry_after = 1;
    it->retry_at = 0;
    it->tries++;
    if (!(it->h = cu->easy_init())) return -1;
    it->hdr = cu->slist_append(NULL, "Content-Type: application/json");
    it->hdr = it->hdr ? cu->slist_append(it->hdr, r->auth) : NULL;
    if (!it->hdr) return -1;
    srv_setopt_str(cu, it->h, CURLOPT_URL, url);
    srv_setopt_ptr(cu, it->h, CURLOPT_HTTPHEADER, it->hdr);
    srv_setopt_str(cu, it->h, CURLOPT_POSTFIELDS, it->body);
    srv_setopt_off(cu, it->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(it->body));
    srv_setopt_fn(cu, it->h, CURLOPT_WRITEFUNCTION, write, on_body);
    srv_setopt_ptr(cu, it->h, CURLOPT_WRITEDATA, it);
    srv_setopt_fn(cu, it->h, CURLOPT_HEADERFUNCTION, write, on_header);
    srv_setopt_ptr(cu, it->h, CURLOPT_HEADERDATA, it);
    srv_setopt_ptr(cu, it->h, CURLOPT_PRIVATE, it);
    srv_setopt_long(cu, it->h, CURLOPT_NOSIGNAL, 1L);
    srv_setopt_str(cu, it->h, CURLOPT_PROXY, ""); /* our own loopback server, whatever the environment's proxy */
    return cu->multi_add_handle(multi, it->h) == CURLM_OK ? 0 : -1;
}

static void release(const srv_curl *cu, CURLM *multi, rb_item *it) {
    cu->multi_remove_handle(multi, it->h);
    cu->easy_cleanup(it->h);
    cu->slist_free_all(it->hdr);
    it->h = NULL;
    it->hdr = NULL;
}

/* Sends every request of the input, slots at a time; returns 0, or -1 when this process failed (out
 * of memory, libcurl). */
static int run_all(rb_run *r, int slots) {
    const srv_curl *cu = r->cu;
    CURLM *multi = cu->multi_init();
    rb_item **waiting = calloc((size_t)slots, sizeof *waiting); /* 503s waiting for their Retry-After */
    if (!multi || !waiting) {
        if (multi) cu->multi_cleanup(multi);
        free(waiting);
        return -1;
    }
    int n_wait = 0, in_flight = 0, rc = 0;
    double t_report = now_s() + 30, t0 = now_s();
    while (!rc) {
        double t = now_s();
        for (int k = 0; k < n_wait; k++) /* the 503s whose time has come go again */
            if (waiting[k]->retry_at <= t) {
                if (send_item(r, multi, waiting[k])) rc = -1;
                waiting[k--] = waiting[--n_wait];
                in_flight++;
            }
        while (!rc && in_flight + n_wait < slots) {
            rb_item *it = next_item(r);
            if (!it) break;
            if (send_item(r, multi, it)) rc = -1;
            in_flight++;
        }
        write_ready(r);
        if (rc || r->out_error || (in_flight == 0 && n_wait == 0 && r->eof)) break; /* a reader gone: nothing more to do */
        int running = 0;
        if (cu->multi_perform(multi, &running) != CURLM_OK || cu->multi_poll(multi, NULL, 0, 200, NULL) != CURLM_OK) {
            rc = -1;
            break;
        }
        CURLMsg *m;
        int left;
        while ((m = cu->multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            rb_item *it = NULL;
            srv_getinfo_str(cu, m->easy_handle, CURLINFO_PRIVATE, (char **)&it);
            long status = 0;
            srv_getinfo_long(cu, m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            CURLcode res = m->data.result;
            release(cu, multi, it);
            in_flight--;
            if (res == CURLE_OK && status == 503 && it->tries < RB_RETRIES) { /* busy for now: again after Retry-After */
                it->retry_at = now_s() + (it->retry_after > 0 ? it->retry_after : 1);
                waiting[n_wait++] = it;
                r->resent++;
                continue;
            }
            finish(r, it, status, res == CURLE_OK ? NULL : cu->easy_strerror(res));
            free(it->body); /* the answer is kept until its turn; the request is no longer needed */
            it->body = NULL;
        }
        if (now_s() >= t_report) {
            t_report = now_s() + 30;
            fprintf(stderr, "phi4mm run-batch: %ld of %ld read answered (%ld failed), %d in flight, %.0f s\n", r->succeeded + r->failed,
                    r->n, r->failed, in_flight, now_s() - t0);
        }
    }
    for (long i = r->written; i < r->n; i++) /* only after a failure of this process: nothing in flight stays */
        if (r->items[i] && r->items[i]->h) release(cu, multi, r->items[i]);
    free(waiting);
    cu->multi_cleanup(multi);
    return rc;
}

static void usage(void) {
    fprintf(stderr,
            "usage: phi4mm run-batch -m MODEL_DIR -i FILE [-o FILE] [serve's options]\n"
            "Answers an OpenAI Batch input file: JSONL, one request a line,\n"
            "  {\"custom_id\": \"...\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": {...}}\n"
            "(url: /v1/chat/completions, /v1/completions or /v1/responses; the body as `phi4mm serve` takes it,\n"
            "not streamed), with a server of its own on a loopback port, and writes a line a request in the\n"
            "input's order: {\"id\", \"custom_id\", \"response\": {\"status_code\", \"request_id\", \"body\"}, \"error\"}.\n"
            "A line that is no such request gets \"response\": null and \"error\": {\"code\", \"message\"}; the others\n"
            "go on. Exit status 0 when every request was answered with 200, 1 otherwise.\n"
            "  -i, --input FILE        the requests (- : standard input)\n"
            "  -o, --output FILE       the results (default: standard output)\n"
            "  serve's options set the engine: --parallel N (requests decoded together, default 16),\n"
            "  --weights, --kv-cache, --compute, --draft, --max-crops, --default-max-tokens, --prompt-cache,\n"
            "  --allow-media-dir, --allow-media-hosts, ... (`phi4mm serve --help`); not --host, --port,\n"
            "  --port-file, --api-key, --tls-cert, --tls-key, --cors: the server is this command's own\n");
}

int pm_cmd_run_batch(int argc, char **argv) {
    const char *cmd = "run-batch", *in_path = NULL, *out_path = "-";
    static const char *const own_server[] = {"--host", "--port", "--port-file", "--api-key", "--tls-cert", "--tls-key", "--cors"};
    char **sargv = calloc((size_t)argc + 12, sizeof *sargv);
    if (!sargv) return cli_fail(cmd, "out of memory");
    int sargc = 0;
    sargv[sargc++] = "serve";
    sargv[sargc++] = "--response-store"; /* nobody could ask for a kept response (an option given below wins) */
    sargv[sargc++] = "off";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            free(sargv);
            return 0;
        }
        if (!strcmp(a, "-i") || !strcmp(a, "--input") || !strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) {
                free(sargv);
                return cli_fail(cmd, "option %s needs a value", a);
            }
            *(a[1] == 'i' || a[2] == 'i' ? &in_path : &out_path) = argv[++i];
            continue;
        }
        for (size_t k = 0; k < sizeof own_server / sizeof own_server[0]; k++)
            if (!strcmp(a, own_server[k])) {
                free(sargv);
                return cli_fail(cmd, "%s: the server is this command's own (a loopback port and a key of its own)", a);
            }
        sargv[sargc++] = argv[i];
    }
    if (!in_path) {
        free(sargv);
        return cli_fail(cmd, "missing -i FILE (the batch's requests, JSONL; - : standard input)");
    }
    rb_run r = {0};
    r.in_name = in_path;
    r.in = strcmp(in_path, "-") ? fopen(in_path, "r") : stdin;
    r.out = strcmp(out_path, "-") ? fopen(out_path, "w") : stdout;
    char key[80], why[256];
    random_hex(key, 24);
    snprintf(r.auth, sizeof r.auth, "Authorization: Bearer %s", key);
    int rc = 0;
    if (!r.in) rc = cli_fail(cmd, "%s: cannot open: %s", in_path, strerror(errno));
    else if (!r.out) rc = cli_fail(cmd, "%s: cannot create: %s", out_path, strerror(errno));
    else if (!(r.cu = srv_curl_open(why, sizeof why))) rc = cli_fail(cmd, "%s", why);
    if (rc) {
        if (r.in && r.in != stdin) fclose(r.in);
        if (r.out && r.out != stdout) fclose(r.out);
        free(sargv);
        return rc;
    }
    const char *fixed[] = {"--host", "127.0.0.1", "--port", "0", "--api-key", key, "--quiet"};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) sargv[sargc++] = (char *)fixed[k];
    srv_instance in;
    int help = 0;
    double t0 = now_s();
    rc = srv_instance_start(sargc, sargv, &in, &help);
    if (!rc) {
        /* the server's threads keep SIGINT / SIGTERM blocked; here they end the command at once */
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
        snprintf(r.base, sizeof r.base, "http://127.0.0.1:%d", in.port);
        int failed = run_all(&r, in.ctx->o.parallel + 2);
        if (r.out_error) rc = cli_fail(cmd, "%s: write error: the results are incomplete", out_path);
        else if (failed) rc = cli_fail(cmd, "out of memory or a libcurl failure: the batch is incomplete");
        else {
            fprintf(stderr, "phi4mm run-batch: %ld requests, %ld answered with 200, %ld failed, in %.1f s (%ld sent again after a 503)\n",
                    r.n, r.succeeded, r.failed, now_s() - t0, r.resent);
            rc = r.failed ? 1 : 0;
        }
    }
    srv_instance_stop(&in);
    r.cu->global_cleanup();
    for (long i = r.written; i < r.n; i++) item_free(r.items[i]);
    for (long i = 0; i < r.n_seen; i++) free(r.seen[i]);
    free(r.seen);
    free(r.items);
    free(r.buf);
    if (r.in != stdin) fclose(r.in);
    if (r.out != stdout && fclose(r.out) && !rc) rc = cli_fail(cmd, "%s: write error", out_path);
    free(sargv);
    return rc;
}
