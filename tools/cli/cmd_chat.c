/* cmd_chat.c — `phi4mm chat`: a conversation on the command line. Each line read from stdin is a
 * user message, or the lines between a line that begins with three double quotes and one that ends
 * with them ("/image FILE" and "/audio FILE" attach media to the next one; "/reset" starts over,
 * "/quit" or the end of input ends); the answer streams to stdout.
 *
 * Every turn sends the whole conversation again, rendered with the chat template, as a chat client
 * does, to one engine that keeps its prompt cache (src/engine/prefix_cache.h) and media cache: the
 * history's K/V up to its last <|end|> and the media's encoder outputs are kept, so a turn computes
 * only the previous answer and the new message, and its tokens are those a fresh run of the same
 * prompt gives. Ctrl-C stops the answer being written (the turn keeps what came); at the prompt it
 * ends the session. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_media.h"
#include "cli_util.h"
#include "commands.h"
#include "tok/chat.h"
#include "tok/utf8.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct turn_out {
    char *text; /* the answer so far (malloc'd) */
    size_t len, cap;
    pm_finish why;
    int prompt, completion, oom;
    double t_first;
    char error[512];
} turn_out;

static int on_token(void *user, int32_t token, const char *text, size_t len) {
    (void)token;
    turn_out *t = user;
    if (t->t_first == 0) t->t_first = cli_now();
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (t->len + len + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (t->len + len + 1 > cap) cap *= 2;
        char *grown = realloc(t->text, cap);
        if (!grown) {
            t->oom = 1;
            return 1;
        }
        t->text = grown;
        t->cap = cap;
    }
    memcpy(t->text + t->len, text, len);
    t->len += len;
    t->text[t->len] = 0;
    return interrupted != 0; /* Ctrl-C: this answer stops here */
}

static void on_done(void *user, pm_finish why, int prompt, int completion, const char *error) {
    turn_out *t = user;
    t->why = why;
    t->prompt = prompt;
    t->completion = completion;
    if (error) snprintf(t->error, sizeof t->error, "%s", error);
}

/* The conversation: its messages (the system one first, when given) and every medium its user
 * messages attached, in order (the placeholders number them across the whole conversation). */
typedef struct convo {
    pm_chat_msg *msgs; /* the contents past the system message are malloc'd */
    int n, cap, n_system;
    cli_media media;
} convo;

static int convo_add(convo *c, const char *role, const char *content) {
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        pm_chat_msg *m = realloc(c->msgs, sizeof *m * (size_t)cap);
        if (!m) return -1;
        c->msgs = m;
        c->cap = cap;
    }
    pm_chat_msg msg = {role, content, NULL};
    c->msgs[c->n++] = msg;
    return 0;
}

/* Back to the system message alone (n_image / n_audio: media to keep, the rest freed). */
static void convo_trim(convo *c, int n_msgs, int n_image, int n_audio) {
    while (c->n > n_msgs) {
        c->n--;
        if (c->n >= c->n_system) free((char *)c->msgs[c->n].content);
    }
    while (c->media.n_image > n_image) pm_image_in_free(&c->media.image[--c->media.n_image]);
    while (c->media.n_audio > n_audio) pm_audio_in_free(&c->media.audio[--c->media.n_audio]);
}

static void usage_chat(void) {
    fprintf(stderr,
            "usage: phi4mm chat -m MODEL_DIR [options]   (messages on stdin, a line each; a message of\n"
            "                        several lines between lines that begin and end with \"\"\")\n"
            "  --system TEXT         system message\n"
            "  -n, --max-tokens N    tokens per answer at most (default 512)\n"
            "  --temp T              temperature (default 0 = greedy); --top-k K; --top-p P; --min-p P;\n"
            "                        --seed S\n"
            "  --weights bf16|q8, --kv-cache f32|bf16, --compute f32|bf16, --kv-budget SIZE, --draft N,\n"
            "  --max-crops N         as for generate\n"
            "  --no-prompt-cache     compute the whole conversation every turn (for comparison)\n"
            "  --stats               after each answer, its prompt tokens, those the cache held, time to\n"
            "                        the first token and tokens per second, on stderr\n"
            "in the conversation:\n"
            "  /image FILE, /audio FILE   attach an image (PNG/JPEG/WebP/GIF) / a clip (WAV/FLAC/OGG/MP3/M4A/WebM) to the next\n"
            "                        message\n"
            "  /reset                forget the conversation (the system message stays)\n"
            "  /quit                 end (so does the end of input, or Ctrl-C at the prompt)\n");
}

static const char QUOTES[] = "\"\"\"";

/* A message of several lines: *line began with three double quotes; the lines read up to the one
 * that ends with them make the message (the quotes left out, the lines joined by newlines), in
 * *line. Returns 0, -1 when the input ended first, 1 out of memory. */
static int read_block(char **line, size_t *cap, int tty) {
    size_t len = strlen(*line) - 3, blen = len, bcap = len + 64;
    char *b = malloc(bcap), *next = NULL;
    size_t ncap = 0;
    if (!b) return 1;
    memcpy(b, *line + 3, len + 1);
    int closed = len >= 3 && !strcmp(b + len - 3, QUOTES), rc = 0;
    if (closed) b[blen -= 3] = 0;
    while (!closed) {
        if (tty) fputs("... ", stderr);
        ssize_t got = getline(&next, &ncap, stdin);
        if (got < 0) {
            rc = -1;
            break;
        }
        while (got > 0 && (next[got - 1] == '\n' || next[got - 1] == '\r')) next[--got] = 0;
        if ((closed = got >= 3 && !strcmp(next + got - 3, QUOTES))) next[got -= 3] = 0;
        if (closed && !got) break; /* the quotes alone: no line more */
        if (blen + (size_t)got + 2 > bcap) {
            while (blen + (size_t)got + 2 > bcap) bcap *= 2;
            char *nb = realloc(b, bcap);
            if (!nb) {
                rc = 1;
                break;
            }
            b = nb;
        }
        if (blen) b[blen++] = '\n';
        memcpy(b + blen, next, (size_t)got + 1);
        blen += (size_t)got;
    }
    free(next);
    if (rc) {
        free(b);
        return rc;
    }
    free(*line);
    *line = b;
    *cap = bcap;
    return 0;
}

/* One turn: the user's line (with the attached media's placeholders) and the model's answer.
 * Returns 0, or 1 after an error that left the conversation as it was. */
static int turn(pm_engine *eng, convo *c, const char *line, int pend_image, int pend_audio, const pm_request *base, int stats) {
    size_t len = strlen(line), good = pm_utf8_valid_prefix((const uint8_t *)line, len);
    char *user = good == len ? malloc(len + 24 * (size_t)(pend_image + pend_audio) + 1) : NULL;
    if (!user) { /* the turn leaves no trace: its media go too */
        convo_trim(c, c->n, c->media.n_image - pend_image, c->media.n_audio - pend_audio);
        if (good != len)
            return cli_fail("chat", "the message is not UTF-8 text (byte %zu; is the terminal's encoding UTF-8?); it was not sent", good);
        return cli_fail("chat", "out of memory");
    }
    user[0] = 0;
    for (int k = c->media.n_image - pend_image; k < c->media.n_image; k++) sprintf(user + strlen(user), "<|image_%d|>", k + 1);
    for (int k = c->media.n_audio - pend_audio; k < c->media.n_audio; k++) sprintf(user + strlen(user), "<|audio_%d|>", k + 1);
    strcat(user, line);
    int n_before = c->n;
    if (convo_add(c, "user", user)) {
        free(user);
        convo_trim(c, n_before, c->media.n_image - pend_image, c->media.n_audio - pend_audio);
        return cli_fail("chat", "out of memory");
    }
    char *prompt = NULL;
    pm_err e = {0};
    if (pm_chat_render(c->msgs, c->n, PM_CHAT_GENERATE, &prompt, &e)) {
        convo_trim(c, n_before, c->media.n_image - pend_image, c->media.n_audio - pend_audio);
        return cli_fail("chat", "%s", e.msg);
    }
    pm_request req = *base;
    req.prompt = prompt;
    cli_media_attach(&c->media, &req);
    turn_out t = {0};
    t.why = PM_FINISH_ERROR;
    pm_callbacks cb = {.on_token = on_token, .on_done = on_done, .user = &t};
    pm_prefix_stats before, after;
    pm_engine_prefix_stats(eng, &before);
    char err[1024];
    double t0 = cli_now();
    int64_t id;
    int rc = pm_engine_submit(eng, &req, &cb, &id, err, sizeof err);
    while (!rc && pm_engine_live(eng) > 0)
        if (pm_engine_step(eng) < 0) break;
    fputc('\n', stdout);
    fflush(stdout);
    free(prompt);
    if (!rc && t.why == PM_FINISH_ERROR) snprintf(err, sizeof err, "%s", t.error[0] ? t.error : "the answer failed");
    if (rc || t.why == PM_FINISH_ERROR || t.oom) { /* the turn leaves no trace: its message and media go */
        free(t.text);
        convo_trim(c, n_before, c->media.n_image - pend_image, c->media.n_audio - pend_audio);
        return cli_fail("chat", "%s", t.oom ? "out of memory for the answer" : err);
    }
    if (stats) {
        pm_engine_prefix_stats(eng, &after);
        double t1 = cli_now();
        fprintf(stderr, "[%d prompt tokens, %lld from the prompt cache; first token after %.2f s; %d tokens at %.1f tok/s%s]\n", t.prompt,
                (long long)(after.reused - before.reused), t.t_first ? t.t_first - t0 : t1 - t0, t.completion,
                t.t_first && t1 > t.t_first && t.completion > 1 ? (t.completion - 1) / (t1 - t.t_first) : 0.0,
                t.why == PM_FINISH_LENGTH ? "; cut at --max-tokens" : t.why == PM_FINISH_CANCELLED ? "; stopped" : "");
    }
    if (!t.text) t.text = strdup(""); /* an answer of nothing (an end token first) */
    if (!t.text || convo_add(c, "assistant", t.text)) {
        free(t.text);
        convo_trim(c, n_before, c->media.n_image - pend_image, c->media.n_audio - pend_audio);
        return cli_fail("chat", "out of memory");
    }
    return 0;
}

int pm_cmd_chat(int argc, char **argv) {
    const char *cmd = "chat", *dir = NULL, *system = NULL;
    long n = 512, top_k = 0, seed = 0, max_crops = 0;
    double temp = 0, top_p = 1.0, min_p = 0;
    int stats = 0, cache = 1, rc = 0;
    pm_engine_opts opts;
    pm_engine_opts_default(&opts);
    pm_load_options lo = {0};
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int flag = !strcmp(a, "--stats") || !strcmp(a, "--no-prompt-cache") || !strcmp(a, "-h") || !strcmp(a, "--help");
        if (!flag && !v) {
            rc = cli_fail(cmd, "option %s needs a value", a);
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_chat();
            return 0;
        } else if (!strcmp(a, "--stats")) { stats = 1; continue; }
        else if (!strcmp(a, "--no-prompt-cache")) { cache = 0; continue; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) dir = v;
        else if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) { if (cli_int(v, 1, 1 << 20, &n)) rc = cli_fail(cmd, "-n must be a positive integer, got '%s'", v); }
        else if (!strcmp(a, "--temp")) { if (cli_float(v, 0, 100, &temp)) rc = cli_fail(cmd, "--temp must be a number in [0, 100], got '%s'", v); }
        else if (!strcmp(a, "--top-p")) { if (cli_float(v, 0, 1, &top_p)) rc = cli_fail(cmd, "--top-p must be in [0, 1], got '%s'", v); }
        else if (!strcmp(a, "--min-p")) { if (cli_float(v, 0, 1, &min_p)) rc = cli_fail(cmd, "--min-p must be in [0, 1], got '%s'", v); }
        else if (!strcmp(a, "--top-k")) { if (cli_int(v, 0, 1 << 30, &top_k)) rc = cli_fail(cmd, "--top-k must be >= 0, got '%s'", v); }
        else if (!strcmp(a, "--seed")) { if (cli_int(v, 0, 0x7fffffffL, &seed)) rc = cli_fail(cmd, "--seed must be a non-negative integer, got '%s'", v); }
        else if (!strcmp(a, "--weights")) rc = cli_weights(cmd, v, &lo);
        else if (!strcmp(a, "--kv-budget")) rc = cli_kv_budget(cmd, v, &opts.kv_budget);
        else if (!strcmp(a, "--kv-cache")) rc = cli_kv_cache(cmd, v, &opts.kv_bf16);
        else if (!strcmp(a, "--compute")) rc = cli_compute(cmd, v, &lo.compute_bf16);
        else if (!strcmp(a, "--draft")) rc = cli_draft(cmd, v, &opts.draft_tokens);
        else if (!strcmp(a, "--max-crops")) { if (cli_int(v, 1, 4096, &max_crops)) rc = cli_fail(cmd, "--max-crops must be 1..4096, got '%s'", v); }
        else rc = cli_fail(cmd, "unknown option '%s' (see --help)", a);
        i++;
    }
    if (!rc && !dir) rc = cli_fail(cmd, "missing -m MODEL_DIR");
    if (!rc) rc = cli_utf8_text(cmd, "--system", system);
    if (rc) return rc;
    /* the prompt cache: a quarter of the automatic budget, or 1/4 of an explicit one on top of it */
    opts.prefix_cache = !cache ? 0 : opts.kv_budget == 0 ? -1 : opts.kv_budget > 0 ? opts.kv_budget / 4 : (int64_t)4 << 30;
    opts.max_seqs = 1;
    char err[1024];
    pm_model *m = NULL;
    if (pm_model_load_opts(&m, dir, &lo, err, sizeof err)) return cli_fail(cmd, "%s", err);
    cli_compute_note(cmd, &lo, m);
    pm_engine *eng = NULL;
    if (pm_engine_new(&eng, m, &opts, err, sizeof err)) {
        pm_model_free(m);
        return cli_fail(cmd, "%s", err);
    }
    pm_request base = {0};
    base.max_tokens = (int)n;
    base.sampling.temperature = (float)temp;
    base.sampling.top_k = (int)top_k;
    base.sampling.top_p = (float)top_p;
    base.sampling.min_p = (float)min_p;
    base.sampling.seed = (uint64_t)seed;
    base.max_crops = (int)max_crops;
    convo c = {0};
    if (system) {
        if (convo_add(&c, "system", system)) rc = cli_fail(cmd, "out of memory");
        c.n_system = c.n;
    }
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read waiting at the prompt returns */
    sigaction(SIGINT, &sa, &old);
    int tty = isatty(0), failed = 0, pend_image = 0, pend_audio = 0;
    char *line = NULL;
    size_t cap = 0;
    while (!rc) {
        if (tty) fputs("> ", stderr);
        interrupted = 0;
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            if (tty) fputc('\n', stderr);
            break; /* the end of input, or Ctrl-C at the prompt */
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!got) continue;
        if (!strncmp(line, QUOTES, 3)) { /* a message of several lines */
            int brc = read_block(&line, &cap, tty);
            if (brc < 0) {
                failed = cli_fail(cmd, "the input ended inside a %s block (a line ending with %s closes it); it was not sent", QUOTES,
                                  QUOTES);
                break;
            }
            if (brc > 0) rc = cli_fail(cmd, "out of memory");
            else if (turn(eng, &c, line, pend_image, pend_audio, &base, stats)) failed = 1;
            pend_image = pend_audio = 0;
            continue;
        }
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/help")) {
            usage_chat();
        } else if (!strcmp(line, "/reset")) {
            convo_trim(&c, c.n_system, 0, 0);
            pend_image = pend_audio = 0;
        } else if ((!strncmp(line, "/image ", 7) || !strncmp(line, "/audio ", 7)) && !strcmp(line + 7, "-")) {
            failed = cli_fail(cmd, "%.6s -: standard input holds the conversation; name a file", line);
        } else if (!strncmp(line, "/image ", 7)) {
            if (cli_load_image(cmd, &c.media, line + 7)) failed = 1;
            else pend_image++;
        } else if (!strncmp(line, "/audio ", 7)) {
            if (cli_load_audio(cmd, &c.media, line + 7, opts.limits.max_audio_seconds)) failed = 1;
            else pend_audio++;
        } else if (line[0] == '/') {
            failed = cli_fail(cmd, "unknown command '%s' (/image FILE, /audio FILE, /reset, /quit, /help)", line);
        } else {
            if (turn(eng, &c, line, pend_image, pend_audio, &base, stats)) failed = 1;
            pend_image = pend_audio = 0;
        }
    }
    sigaction(SIGINT, &old, NULL);
    free(line);
    convo_trim(&c, c.n_system, 0, 0);
    free(c.msgs);
    pm_engine_free(eng);
    pm_model_free(m);
    return rc ? rc : failed;
}
