/* cmd_serve.c — `phi4mm serve -m DIR`: options, start-up order and orderly shutdown.
 *
 * Start-up: the HTTP listener comes first (so /health can answer "loading" while the weights are
 * mapped), then the model, then the inference thread; only then do model endpoints serve.
 * Shutdown (SIGINT/SIGTERM, taken with sigwait in the main thread — no signal handlers, no
 * global flag): stop accepting connections, stop the scheduler (queued requests get 503, live
 * sequences are cancelled and their streams get a final event), let the last responses go out,
 * stop the HTTP daemon, free the model. */
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "../cli/cli_util.h"
#include "../cli/commands.h"
#include "http.h"
#include "instance.h"
#include "media_fetch.h"
#include "media_urls.h"
#include "metrics.h"
#include "response_store.h"
#include "scheduler.h"
#include "server.h"

void srv_opts_default(srv_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 16;
    o->max_queue = 64;
    o->http_threads = 4;
    o->default_max_tokens = 1024;
    o->prefill_chunk = 512;
    o->prompt_threads = -1;
    o->inline_prompt_max = 64;
    o->max_body = (size_t)64 << 20;
    o->retry_after = 1;
    o->prompt_cache = -1;
    o->response_store = (size_t)64 << 20;
    o->media_fetch_timeout = 30;
}

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

void srv_new_id(srv_ctx *c, const char *prefix, char *out, size_t cap) {
    uint64_t n = atomic_fetch_add(&c->next_id, 1);
    uint64_t a = mix64(c->id_salt ^ n), b = mix64(a ^ n);
    snprintf(out, cap, "%s-%016llx%08llx", prefix, (unsigned long long)a, (unsigned long long)(b & 0xffffffffULL));
}

static void usage(void) {
    fprintf(stderr,
            "usage: phi4mm serve -m MODEL_DIR [options]\n"
            "OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/responses, /v1/completions,\n"
            "/v1/audio/transcriptions, /v1/audio/translations, /tokenize, /detokenize;\n"
            "GET /v1/models, /health, /metrics, /version.\n"
            "  --host ADDR             listen address (default 127.0.0.1)\n"
            "  --port N                TCP port (default 8080; 0 = any free port, see --port-file)\n"
            "  --port-file FILE        write the bound port to FILE once listening\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' (or set PHI4MM_API_KEY)\n"
            "  --cors ORIGIN           send CORS headers for ORIGIN (default: none)\n"
            "  --tls-cert FILE, --tls-key FILE  serve HTTPS with this certificate (chain) and private key\n"
            "                          (PEM, the key unencrypted; default: plain HTTP)\n"
            "  --allow-media-dir DIR   accept image_url / audio_url file paths inside DIR (default: refused)\n"
            "  --allow-media-hosts LIST  fetch image_url / audio_url http(s) URLs from these hosts (comma-separated:\n"
            "                          host, *.domain for its subdomains, * for any; a wildcard admits public\n"
            "                          addresses only; default: none, remote URLs refused)\n"
            "  --media-fetch-timeout S seconds for fetching all of a request's media URLs (default 30)\n"
            "  --max-crops N           at most N HD crops per image unless a request's mm_processor_kwargs\n"
            "                          dynamic_hd says (default: the checkpoint's dynamic_hd, 36)\n"
            "  --parallel N            sequences decoded together (default 16)\n"
            "  --max-queue N           requests waiting for a slot before 503 (default 64)\n"
            "  --max-body BYTES        request body limit, K/M/G suffixes (default 64M)\n"
            "  --weights bf16|q8       decoder weights: the checkpoint's bf16 (default) or int8 made at load\n"
            "  --mlock                 lock the checkpoint in memory, so that the page cache cannot drop the\n"
            "                          weights between steps (needs ulimit -l above its size, or CAP_IPC_LOCK)\n"
            "  --recache               before loading, re-read the checkpoint into 2 MB pages of the page cache\n"
            "                          (one read from disk; decode streams them faster: README, \"Huge pages\")\n"
            "  --default-max-tokens N  completion cap when a request gives none (default 1024; at most what the\n"
            "                          context leaves beside its prompt)\n"
            "  --max-model-len N       prompt + completion tokens a request may hold (default: the checkpoint's\n"
            "                          max_position_embeddings, 131072 for Phi-4-multimodal)\n"
            "  --prefill-chunk N       prompt rows per sequence per step (default 512; a chunk of N/8 rows or\n"
            "                          more ends early after a message's <|end|>)\n"
            "  --draft N               while one request decodes alone, check up to N tokens (0-15) drafted\n"
            "                          from its prompt and answer in each step: the same tokens, fewer passes\n"
            "                          over the weights where the text repeats (default 0: off)\n"
            "  --prompt-threads N|auto|inline  a new request's media encoders and prompt prefill run on a\n"
            "                          thread of their own while the live streams keep decoding, with N OpenMP\n"
            "                          threads (the steps take the rest; default auto: half of them; all while\n"
            "                          nothing decodes); inline: between the steps with all threads, every\n"
            "                          stream pausing meanwhile\n"
            "  --inline-prompt-max N   while the prompt thread is busy (an image, a clip, a long prompt), a text\n"
            "                          request of at most N prompt tokens does not wait behind it: the steps\n"
            "                          prefill it (default 64; 0: it waits its turn)\n"
            );
    fprintf(stderr,
            "  --kv-budget SIZE|auto|none  KV cache all live requests may reserve, each its prompt + max_tokens\n"
            "                          (default auto: memory less the weights and a headroom); a request that\n"
            "                          does not fit waits in the queue, one larger than the budget gets 400\n"
            "  --prompt-cache SIZE|auto|off  ended prompts' KV kept so that a prompt that begins the same way (a\n"
            "                          conversation's next turn) skips their prefill, in whole prefill chunks\n"
            "                          (they end at messages); exact (the same tokens as without it); default\n"
            "                          auto: a quarter of the automatic KV budget (off with --kv-budget SIZE);\n"
            "                          SIZE: on top of it\n"
            "  --response-store SIZE|off  /v1/responses kept in memory (previous_response_id, GET /v1/responses/{id})\n"
            "                          (default 64M; the least recently used go first; off: not kept)\n"
            "  --kv-cache f32|bf16     KV cache elements (default f32; bf16: half the memory per position, K/V\n"
            "                          rounded to bf16 as they are stored)\n"
            "  --compute f32|bf16      products of many rows (prompts, encoders): fp32 (default) or inputs\n"
            "                          rounded to bf16 and bf16 pairs multiplied (AVX512-BF16: up to 2 x faster;\n"
            "                          decode steps stay fp32)\n"
            "  --max-request-memory SIZE|auto  request bodies and decoded media (samples, pixels) all requests\n"
            "                          may hold at once (default auto: 1/16 of memory, at least 256M and two\n"
            "                          bodies); over it: 503 (413 for a request that alone needs more)\n"
            "  --http-threads N        HTTP worker threads (default 4)\n"
            "  --retry-after S         Retry-After seconds sent with 503 (default 1)\n"
            "  --model-name NAME       model id reported by /v1/models (default: the directory name)\n"
            "  --quiet                 no per-request log lines\n"
            "  --strict-params         refuse (400) request fields nothing reads, as OpenAI does; by\n"
            "                          default they are named in an X-Ignored-Fields header and the log line\n");
}

static int parse_opts(int argc, char **argv, srv_opts *o, int *help) {
    const char *cmd = "serve";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            *help = 1;
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
            continue;
        }
        if (!strcmp(a, "--strict-params")) {
            o->strict_params = 1;
            continue;
        }
        if (!strcmp(a, "--mlock")) {
            o->load.mlock = 1;
            continue;
        }
        if (!strcmp(a, "--recache")) {
            o->load.recache = 1;
            continue;
        }
        if (i + 1 >= argc) return cli_fail(cmd, "option %s needs a value (see --help)", a);
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_dir = v;
        else if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--port")) {
            if (cli_int(v, 0, 65535, &n)) return cli_fail(cmd, "--port must be 0..65535, got '%s'", v);
            o->port = (int)n;
        } else if (!strcmp(a, "--port-file")) o->port_file = v;
        else if (!strcmp(a, "--api-key")) o->api_key = v;
        else if (!strcmp(a, "--cors")) o->cors_origin = v;
        else if (!strcmp(a, "--tls-cert")) o->tls_cert = v;
        else if (!strcmp(a, "--tls-key")) o->tls_key = v;
        else if (!strcmp(a, "--allow-media-dir")) o->media_dir = v;
        else if (!strcmp(a, "--allow-media-hosts")) o->media_hosts = v;
        else if (!strcmp(a, "--max-crops")) {
            if (cli_int(v, 1, 4096, &n)) return cli_fail(cmd, "--max-crops must be 1..4096, got '%s'", v);
            o->max_crops = (int)n;
        } else if (!strcmp(a, "--media-fetch-timeout")) {
            if (cli_int(v, 1, 3600, &n)) return cli_fail(cmd, "--media-fetch-timeout must be 1..3600 seconds, got '%s'", v);
            o->media_fetch_timeout = (int)n;
        }
        else if (!strcmp(a, "--model-name")) o->model_name = v;
        else if (!strcmp(a, "--parallel")) {
            if (cli_int(v, 1, 4096, &n)) return cli_fail(cmd, "--parallel must be 1..4096, got '%s'", v);
            o->parallel = (int)n;
        } else if (!strcmp(a, "--max-queue")) {
            if (cli_int(v, 1, 1 << 20, &n)) return cli_fail(cmd, "--max-queue must be a positive integer, got '%s'", v);
            o->max_queue = (int)n;
        } else if (!strcmp(a, "--http-threads")) {
            if (cli_int(v, 1, 256, &n)) return cli_fail(cmd, "--http-threads must be 1..256, got '%s'", v);
            o->http_threads = (int)n;
        } else if (!strcmp(a, "--default-max-tokens")) {
            if (cli_int(v, 1, 1 << 24, &n)) return cli_fail(cmd, "--default-max-tokens must be a positive integer, got '%s'", v);
            o->default_max_tokens = (int)n;
        } else if (!strcmp(a, "--max-model-len")) {
            if (cli_int(v, 16, 1 << 24, &n)) return cli_fail(cmd, "--max-model-len must be 16..16777216 tokens, got '%s'", v);
            o->max_model_len = (int)n;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if (cli_int(v, 1, 1 << 20, &n)) return cli_fail(cmd, "--prefill-chunk must be a positive integer, got '%s'", v);
            o->prefill_chunk = (int)n;
        } else if (!strcmp(a, "--draft")) {
            if (cli_draft(cmd, v, &o->draft_tokens)) return 1;
        } else if (!strcmp(a, "--prompt-threads")) {
            if (!strcmp(v, "auto")) o->prompt_threads = -1;
            else if (!strcmp(v, "inline")) o->prompt_threads = 0;
            else if (cli_int(v, 1, 1024, &n)) return cli_fail(cmd, "--prompt-threads must be auto, inline or 1..1024, got '%s'", v);
            else o->prompt_threads = (int)n;
        } else if (!strcmp(a, "--inline-prompt-max")) {
            if (cli_int(v, 0, 1 << 20, &n)) return cli_fail(cmd, "--inline-prompt-max must be 0 or a positive integer, got '%s'", v);
            o->inline_prompt_max = (int)n;
        } else if (!strcmp(a, "--retry-after")) {
            if (cli_int(v, 0, 86400, &n)) return cli_fail(cmd, "--retry-after must be 0..86400, got '%s'", v);
            o->retry_after = (int)n;
        } else if (!strcmp(a, "--max-body")) {
            if (cli_size(v, &o->max_body)) return cli_fail(cmd, "--max-body must be a size like 65536, 512K or 64M, got '%s'", v);
        } else if (!strcmp(a, "--weights")) {
            if (cli_weights(cmd, v, &o->load)) return 1;
        } else if (!strcmp(a, "--kv-budget")) {
            if (cli_kv_budget(cmd, v, &o->kv_budget)) return 1;
        } else if (!strcmp(a, "--prompt-cache")) {
            size_t b = 0;
            if (strcmp(v, "auto") && strcmp(v, "off") && (cli_size(v, &b) || b == 0))
                return cli_fail(cmd, "--prompt-cache must be auto, off or a size like 2G, got '%s'", v);
            o->prompt_cache = !strcmp(v, "auto") ? -1 : !strcmp(v, "off") ? 0 : (int64_t)b;
        } else if (!strcmp(a, "--response-store")) {
            size_t b = 0;
            if (strcmp(v, "off") && (cli_size(v, &b) || b == 0))
                return cli_fail(cmd, "--response-store must be off or a size like 64M, got '%s'", v);
            o->response_store = b;
        } else if (!strcmp(a, "--compute")) {
            if (cli_compute(cmd, v, &o->load.compute_bf16)) return 1;
        } else if (!strcmp(a, "--kv-cache")) {
            if (cli_kv_cache(cmd, v, &o->kv_bf16)) return 1;
        } else if (!strcmp(a, "--max-request-memory")) {
            size_t b;
            if (strcmp(v, "auto") && cli_size(v, &b))
                return cli_fail(cmd, "--max-request-memory must be auto or a size like 2G, got '%s'", v);
            o->max_request_memory = strcmp(v, "auto") ? (int64_t)b : 0;
        } else return cli_fail(cmd, "unknown option '%s' (see --help)", a);
    }
    if (!o->model_dir) return cli_fail(cmd, "missing -m MODEL_DIR (see --help)");
    if (!o->tls_cert != !o->tls_key) return cli_fail(cmd, "--tls-cert and --tls-key go together (the certificate chain and its private key, PEM)");
    if (!o->api_key) {
        const char *k = getenv("PHI4MM_API_KEY");
        if (k && *k) o->api_key = k;
    }
    return 0;
}

/* --allow-media-hosts: the list parsed and libcurl's global state made, before any thread starts
 * (its global init is not thread-safe). Returns 0, or 1 with a message on stderr. */
static int media_hosts_start(srv_ctx *ctx) {
    char err[256];
    srv_media_hosts *mh = calloc(1, sizeof *mh);
    if (!mh) return cli_fail("serve", "out of memory");
    if (srv_media_hosts_parse(ctx->o.media_hosts, mh, err, sizeof err)) {
        free(mh);
        return cli_fail("serve", "%s", err);
    }
    if (srv_fetch_start(ctx, err, sizeof err)) {
        srv_media_hosts_free(mh);
        free(mh);
        return cli_fail("serve", "--allow-media-hosts: %s", err);
    }
    ctx->media_hosts = mh;
    return 0;
}

static void media_hosts_stop(srv_ctx *ctx) {
    if (!ctx->media_hosts) return;
    srv_media_hosts_free(ctx->media_hosts);
    free(ctx->media_hosts);
    ctx->media_hosts = NULL;
    srv_fetch_stop(ctx);
}

/* Whether clients reach host only from this machine. */
static int loopback_host(const char *host) {
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "[::1]");
}

static int write_port_file(const char *path, int port) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "%d\n", port);
    if (fclose(f)) return -1;
    return rename(tmp, path);
}

int srv_instance_start(int argc, char **argv, srv_instance *out, int *help) {
    memset(out, 0, sizeof *out);
    *help = 0;
    srv_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return cli_fail("serve", "out of memory");
    srv_opts_default(&ctx->o);
    if (parse_opts(argc, argv, &ctx->o, help) || *help) {
        free(ctx);
        return *help ? 0 : 2;
    }
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", ctx->o.model_dir);
    snprintf(ctx->model_id, sizeof ctx->model_id, "%s", ctx->o.model_name ? ctx->o.model_name : basename(dirbuf));
    if (getrandom(&ctx->id_salt, sizeof ctx->id_salt, 0) != (ssize_t)sizeof ctx->id_salt) ctx->id_salt = (uint64_t)time(NULL);
    ctx->started = (int64_t)time(NULL);
    atomic_init(&ctx->ready, 0);
    atomic_init(&ctx->suspended, 0);
    atomic_init(&ctx->next_id, 1);
    pm_limits_default(&ctx->limits);
    atomic_init(&ctx->fetching, 0);
    atomic_init(&ctx->stopping, 0);
    if (ctx->o.media_hosts && media_hosts_start(ctx)) {
        free(ctx);
        return 2;
    }
    /* Bodies and decoded media are charged from their first byte (a compressed upload decodes to
     * ~3000x its size), so many requests uploading, decoding or waiting at once cannot exhaust
     * memory. Auto: 1/16 of memory, at least 256 MiB and two bodies of --max-body. */
    int64_t mem = pm_memory_limit(), floor = (int64_t)256 << 20;
    if (floor < 2 * ((int64_t)ctx->o.max_body + 1)) floor = 2 * ((int64_t)ctx->o.max_body + 1);
    ctx->req_budget = ctx->o.max_request_memory > 0 ? ctx->o.max_request_memory : mem / 16 > floor ? mem / 16 : floor;
    atomic_init(&ctx->req_used, 0);
    ctx->metrics = srv_metrics_new();
    if (ctx->o.response_store) ctx->responses = srv_response_store_new(ctx->o.response_store);
    if (!ctx->metrics || (ctx->o.response_store && !ctx->responses)) {
        srv_metrics_free(ctx->metrics);
        media_hosts_stop(ctx);
        free(ctx);
        return cli_fail("serve", "out of memory");
    }

    /* Every thread created from here on inherits this mask: signals go to the caller's thread. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    char err[1024];
    srv_http *http = NULL;
    if (srv_http_start(&http, ctx, err, sizeof err)) {
        srv_metrics_free(ctx->metrics);
        srv_response_store_free(ctx->responses);
        media_hosts_stop(ctx);
        free(ctx);
        return cli_fail("serve", "%s", err);
    }
    out->ctx = ctx;
    out->http = http;
    int port = srv_http_port(http);
    out->port = port;
    int v6 = strchr(ctx->o.host, ':') != NULL;
    fprintf(stderr, "phi4mm serve: listening on %s://%s%s%s:%d (model loading)\n", ctx->o.tls_cert ? "https" : "http", v6 ? "[" : "",
            ctx->o.host, v6 ? "]" : "", port);
    if (ctx->o.api_key && !ctx->o.tls_cert && !loopback_host(ctx->o.host))
        fprintf(stderr, "phi4mm serve: warning: --host %s is not a loopback address and the API key travels in clear text; serve "
                "HTTPS (--tls-cert, --tls-key) or put a TLS proxy in front\n", ctx->o.host);
    if (ctx->media_hosts)
        fprintf(stderr, "phi4mm serve: media URLs fetched from %s (a wildcard's hosts at public addresses only), within %d s a request\n",
                ctx->o.media_hosts, ctx->o.media_fetch_timeout);
    if (ctx->o.port_file && write_port_file(ctx->o.port_file, port))
        fprintf(stderr, "phi4mm serve: warning: cannot write --port-file %s\n", ctx->o.port_file);

    double t0 = srv_now();
    pm_model_info info = {0};
    if (pm_model_load_opts(&ctx->model, ctx->o.model_dir, &ctx->o.load, err, sizeof err)) return cli_fail("serve", "%s", err);
    pm_model_get_info(ctx->model, &info);
    ctx->max_context = info.max_position;
    if (ctx->o.max_model_len > info.max_position)
        return cli_fail("serve", "--max-model-len %d is more than the checkpoint's max_position_embeddings (%d)", ctx->o.max_model_len,
                        info.max_position);
    if (ctx->o.max_model_len) ctx->max_context = ctx->limits.max_context = ctx->o.max_model_len; /* the engine's limit too */
    ctx->tool_call_open = pm_model_token_id(ctx->model, "<|tool_call|>");
    ctx->tool_call_close = pm_model_token_id(ctx->model, "<|/tool_call|>");
    cli_compute_note("serve", &ctx->o.load, ctx->model);
    if (ctx->o.load.recache)
        fprintf(stderr, "phi4mm serve: re-read %.2f GB of checkpoint, %.2f GB of it in 2 MB pages\n", info.recache_bytes / 1e9,
                info.recache_huge_bytes / 1e9);
    if (srv_sched_start(&ctx->sched, ctx, err, sizeof err)) return cli_fail("serve", "%s", err);
    atomic_store(&ctx->ready, 1);
    int64_t kvb = srv_sched_kv_budget(ctx->sched);
    char kv[80];
    if (kvb < 0) snprintf(kv, sizeof kv, "no KV budget (%s cache)", ctx->o.kv_bf16 ? "bf16" : "fp32");
    else
        snprintf(kv, sizeof kv, "KV budget %.2f GiB%s (%s cache)", (double)kvb / (1 << 30), ctx->o.kv_budget ? "" : " (auto)",
                 ctx->o.kv_bf16 ? "bf16" : "fp32");
    int64_t pc = srv_sched_prompt_cache(ctx->sched);
    char pcs[48] = ", no prompt cache";
    if (pc > 0) snprintf(pcs, sizeof pcs, ", prompt cache %.2f GiB", (double)pc / (1 << 30));
    fprintf(stderr, "phi4mm serve: model '%s' ready in %.2f s; %d parallel sequences, queue %d, %s%s, %s products, request memory %.0f MiB%s\n",
            ctx->model_id, srv_now() - t0, ctx->o.parallel, ctx->o.max_queue, kv, pcs, info.compute_bf16 ? "bf16" : "fp32",
            (double)ctx->req_budget / (1 << 20), ctx->o.api_key ? ", API key required" : "");
    return 0;
}

void srv_instance_stop(srv_instance *in) {
    srv_ctx *ctx = in->ctx;
    if (!ctx) return;
    srv_http_quiesce(in->http);
    srv_sched_stop(ctx->sched);
    srv_http_stop(in->http);
    srv_sched_free(ctx->sched);
    pm_model_free(ctx->model);
    srv_metrics_free(ctx->metrics);
    srv_response_store_free(ctx->responses);
    media_hosts_stop(ctx);
    free(ctx);
    memset(in, 0, sizeof *in);
}

int pm_cmd_serve(int argc, char **argv) {
    srv_instance in;
    int help = 0, rc = srv_instance_start(argc, argv, &in, &help);
    if (help) usage();
    if (!rc && !help) { /* serve until told to stop (the signals are blocked in every thread; this one takes them) */
        int sig = 0;
        sigset_t wait;
        sigemptyset(&wait);
        sigaddset(&wait, SIGINT);
        sigaddset(&wait, SIGTERM);
        sigwait(&wait, &sig);
        fprintf(stderr, "phi4mm serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    srv_instance_stop(&in);
    return rc;
}
