/* cmd_tokcheck.c — `phi4mm tokcheck -m MODEL_DIR FILE.jsonl...`: runs tokenizer test vectors.
 *
 * Each line of each file is one record; its format is recognised from its fields:
 *   chat   (has "prompt"):  render "messages" (if present) and compare with prompt; rewrite placeholders for the
 *          "media" and compare with "processor_text"; encode -> "ids"; plain encode of the prompt ->
 *          "ids_as_plain_tokenizer"; expansion with media num_tokens -> "ids_expanded" / "ids_expanded_len".
 *   decode (has "token_bytes_hex" or "stream"): token bytes, text, text_skip_special, stream[] and stream_flush.
 *   encode (has "mode"):    input is "bytes_hex" when present (raw, maybe invalid UTF-8) else "text"; mode "special"
 *          matches added tokens, "ordinary" does not; both the fast and (special mode) the naive BPE must give "ids".
 * One line per failed record, then "N passed, M failed"; exit status 0 only when nothing failed.
 * `phi4mm tokcheck -m MODEL_DIR --bench FILE...` instead encodes the concatenated files (any text) with the fast
 * and the naive BPE, checks that both give the same ids and prints the throughput of each in MB/s. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "tok/chat.h"
#include "tok/tokenizer.h"

typedef struct rec_ctx {
    const pm_tokenizer *t;
    char why[2048];
} rec_ctx;

#define FAILF(c, ...) (snprintf((c)->why, sizeof (c)->why, __VA_ARGS__), 1)

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Hex string -> malloc'd bytes; NULL on bad hex. */
static unsigned char *unhex(const char *h, size_t *n) {
    size_t l = strlen(h);
    if (l % 2) return NULL;
    unsigned char *b = malloc(l / 2 + 1);
    if (!b) return NULL;
    for (size_t i = 0; i < l / 2; i++) {
        int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return NULL;
        }
        b[i] = (unsigned char)(hi * 16 + lo);
    }
    *n = l / 2;
    return b;
}

/* Compares ids with a JSON array; 0 when equal, else 1 with a reason. */
static int cmp_ids(rec_ctx *c, const char *what, const int32_t *ids, size_t n, json_t *want) {
    if (!json_is_array(want)) return FAILF(c, "%s: expected ids array missing", what);
    size_t wn = json_array_size(want);
    for (size_t i = 0; i < n && i < wn; i++) {
        json_int_t w = json_integer_value(json_array_get(want, i));
        if (ids[i] != w)
            return FAILF(c, "%s: id %zu is %d, expected %lld (got %zu ids, expected %zu)", what, i, ids[i], (long long)w, n, wn);
    }
    if (n != wn) return FAILF(c, "%s: got %zu ids, expected %zu", what, n, wn);
    return 0;
}

static int cmp_str(rec_ctx *c, const char *what, const char *got, size_t gl, const char *want, size_t wl) {
    if (gl == wl && !memcmp(got, want, gl)) return 0;
    size_t i = 0;
    while (i < gl && i < wl && got[i] == want[i]) i++;
    return FAILF(c, "%s: differs at byte %zu (got %zu bytes, expected %zu): got \"%.40s\" expected \"%.40s\"", what, i, gl, wl,
                 got + i, want + i);
}

static int check_encode(rec_ctx *c, json_t *r) {
    const char *mode = json_string_value(json_object_get(r, "mode"));
    const char *hex = json_string_value(json_object_get(r, "bytes_hex"));
    json_t *jt = json_object_get(r, "text");
    if (!mode || (!hex && !json_is_string(jt))) return FAILF(c, "encode record lacks mode/text");
    int special = !strcmp(mode, "special");
    if (!special && strcmp(mode, "ordinary")) return FAILF(c, "unknown mode '%s'", mode);
    unsigned char *raw = NULL;
    const char *text;
    size_t len;
    if (hex) {
        raw = unhex(hex, &len);
        if (!raw) return FAILF(c, "bad bytes_hex");
        text = (const char *)raw;
    } else {
        text = json_string_value(jt);
        len = json_string_length(jt);
    }
    pm_err e = {0};
    int32_t *ids = NULL, *nids = NULL;
    size_t n = 0, nn = 0;
    int fail = 0;
    if (pm_tok_encode(c->t, text, len, special, &ids, &n, &e)) fail = FAILF(c, "encode error: %s", e.msg);
    if (!fail) fail = cmp_ids(c, "ids", ids, n, json_object_get(r, "ids"));
    if (!fail && special) {
        if (pm_tok_encode_naive(c->t, text, len, &nids, &nn, &e)) fail = FAILF(c, "naive encode error: %s", e.msg);
        if (!fail) fail = cmp_ids(c, "naive ids", nids, nn, json_object_get(r, "ids"));
    }
    free(ids);
    free(nids);
    free(raw);
    return fail;
}

static int check_decode(rec_ctx *c, json_t *r) {
    json_t *jids = json_object_get(r, "ids");
    if (!json_is_array(jids)) return FAILF(c, "decode record lacks ids");
    size_t n = json_array_size(jids);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return FAILF(c, "out of memory");
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jids, i));
    int fail = 0;
    pm_err e = {0};
    json_t *tbh = json_object_get(r, "token_bytes_hex");
    for (size_t i = 0; !fail && json_is_array(tbh) && i < json_array_size(tbh); i++) {
        size_t wl, gl;
        unsigned char *want = unhex(json_string_value(json_array_get(tbh, i)) ? json_string_value(json_array_get(tbh, i)) : "x", &wl);
        const char *got = pm_tok_token_bytes(c->t, ids[i], &gl);
        if (!want) fail = FAILF(c, "bad token_bytes_hex[%zu]", i);
        else if (gl != wl || (gl && memcmp(got, want, gl))) fail = FAILF(c, "token %zu (id %d): bytes differ", i, ids[i]);
        free(want);
    }
    const char *keys[2] = {"text", "text_skip_special"};
    for (int k = 0; k < 2 && !fail; k++) {
        json_t *w = json_object_get(r, keys[k]);
        if (!json_is_string(w)) continue;
        char *out = NULL;
        size_t ol = 0;
        if (pm_tok_decode(c->t, ids, n, k, &out, &ol, &e)) fail = FAILF(c, "decode error: %s", e.msg);
        else fail = cmp_str(c, keys[k], out, ol, json_string_value(w), json_string_length(w));
        free(out);
    }
    json_t *st = json_object_get(r, "stream");
    if (!fail && json_is_array(st)) {
        pm_tok_stream *s = pm_tok_stream_new(c->t, 0);
        if (!s) fail = FAILF(c, "out of memory");
        for (size_t i = 0; !fail && i < n; i++) {
            char *out = NULL, what[48];
            size_t ol = 0;
            json_t *w = json_array_get(st, i);
            snprintf(what, sizeof what, "stream[%zu]", i);
            if (pm_tok_stream_push(s, ids[i], &out, &ol, &e)) fail = FAILF(c, "stream error: %s", e.msg);
            else if (!json_is_string(w)) fail = FAILF(c, "%s missing", what);
            else fail = cmp_str(c, what, out, ol, json_string_value(w), json_string_length(w));
            free(out);
        }
        json_t *w = json_object_get(r, "stream_flush");
        if (!fail && json_is_string(w)) {
            char *out = NULL;
            size_t ol = 0;
            if (pm_tok_stream_flush(s, &out, &ol, &e)) fail = FAILF(c, "stream flush error: %s", e.msg);
            else fail = cmp_str(c, "stream_flush", out, ol, json_string_value(w), json_string_length(w));
            free(out);
        }
        pm_tok_stream_free(s);
    }
    free(ids);
    return fail;
}

static int encode_cmp(rec_ctx *c, const char *what, const char *text, json_t *want, int32_t **keep, size_t *keep_n) {
    pm_err e = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    if (pm_tok_encode(c->t, text, strlen(text), 1, &ids, &n, &e)) return FAILF(c, "%s: encode error: %s", what, e.msg);
    int fail = cmp_ids(c, what, ids, n, want);
    if (keep && !fail) {
        *keep = ids;
        *keep_n = n;
    } else {
        free(ids);
    }
    return fail;
}

static int check_chat(rec_ctx *c, json_t *r) {
    const char *prompt = json_string_value(json_object_get(r, "prompt"));
    if (!prompt) return FAILF(c, "chat record lacks prompt");
    pm_err e = {0};
    int fail = 0;
    json_t *msgs = json_object_get(r, "messages");
    if (json_is_array(msgs)) {
        size_t n = json_array_size(msgs);
        pm_chat_msg *m = calloc(n ? n : 1, sizeof *m);
        if (!m) return FAILF(c, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *o = json_array_get(msgs, i);
            m[i].role = json_string_value(json_object_get(o, "role"));
            m[i].content = json_string_value(json_object_get(o, "content"));
            m[i].tools = json_string_value(json_object_get(o, "tools"));
        }
        char *out = NULL;
        if (pm_chat_render(m, (int)n, json_is_true(json_object_get(r, "add_generation_prompt")), &out, &e))
            fail = FAILF(c, "render error: %s", e.msg);
        else fail = cmp_str(c, "rendered prompt", out, strlen(out), prompt, strlen(prompt));
        free(out);
        free(m);
        if (fail) return fail;
    }
    json_t *media = json_object_get(r, "media");
    int counts[2][64], nm[2] = {0, 0};
    for (size_t i = 0; json_is_array(media) && i < json_array_size(media); i++) {
        json_t *o = json_array_get(media, i);
        const char *ty = json_string_value(json_object_get(o, "type"));
        int k = ty && !strcmp(ty, "audio") ? 1 : 0;
        if (nm[k] == 64) return FAILF(c, "too many media items");
        counts[k][nm[k]++] = (int)json_integer_value(json_object_get(o, "num_tokens"));
    }
    const char *ptext = json_string_value(json_object_get(r, "processor_text"));
    char *rewritten = NULL;
    if (ptext) {
        if (pm_prompt_rewrite_placeholders(prompt, nm[0], nm[1], &rewritten, &e)) return FAILF(c, "rewrite error: %s", e.msg);
        fail = cmp_str(c, "processor_text", rewritten, strlen(rewritten), ptext, strlen(ptext));
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (!fail) fail = encode_cmp(c, "ids", rewritten ? rewritten : prompt, json_object_get(r, "ids"), &ids, &n);
    if (!fail && json_object_get(r, "ids_as_plain_tokenizer"))
        fail = encode_cmp(c, "ids_as_plain_tokenizer", prompt, json_object_get(r, "ids_as_plain_tokenizer"), NULL, NULL);
    json_t *exp = json_object_get(r, "ids_expanded");
    if (!fail && exp) {
        int32_t *x = NULL;
        size_t xn = 0;
        if (pm_expand_placeholders(ids, n, counts[0], nm[0], counts[1], nm[1], &x, &xn, &e))
            fail = FAILF(c, "expand error: %s", e.msg);
        else fail = cmp_ids(c, "ids_expanded", x, xn, exp);
        json_t *el = json_object_get(r, "ids_expanded_len");
        if (!fail && el && (json_int_t)xn != json_integer_value(el))
            fail = FAILF(c, "ids_expanded_len: got %zu, expected %lld", xn, (long long)json_integer_value(el));
        free(x);
    }
    free(ids);
    free(rewritten);
    return fail;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Encodes the concatenation of the files with both BPEs; 0 when their ids agree. */
static int bench(const pm_tokenizer *t, char **files, int n_files) {
    char *text = NULL;
    size_t len = 0;
    for (int i = 0; i < n_files; i++) {
        FILE *f = fopen(files[i], "rb");
        if (!f) {
            fprintf(stderr, "tokcheck: %s: cannot open\n", files[i]);
            free(text);
            return 1;
        }
        char buf[65536];
        size_t r;
        while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
            char *p = realloc(text, len + r);
            if (!p) {
                fclose(f);
                free(text);
                fprintf(stderr, "tokcheck: out of memory\n");
                return 1;
            }
            text = p;
            memcpy(text + len, buf, r);
            len += r;
        }
        fclose(f);
    }
    pm_err e = {0};
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    double t0 = now_s();
    int rc = pm_tok_encode(t, text, len, 1, &a, &na, &e);
    double t1 = now_s();
    if (!rc) rc = pm_tok_encode_naive(t, text, len, &b, &nb, &e);
    double t2 = now_s();
    int same = !rc && na == nb && !memcmp(a, b, na * sizeof *a);
    if (rc) fprintf(stderr, "tokcheck: %s\n", e.msg);
    else
        printf("encode %.2f MB: %zu tokens; fast %.2f MB/s (%.3f s), naive %.2f MB/s (%.3f s); ids %s\n", len / 1e6, na,
               len / 1e6 / (t1 - t0), t1 - t0, len / 1e6 / (t2 - t1), t2 - t1, same ? "identical" : "DIFFER");
    free(a);
    free(b);
    free(text);
    return rc || !same;
}

static int usage(void) {
    fprintf(stderr, "usage: phi4mm tokcheck -m MODEL_DIR FILE.jsonl...\n"
                    "Runs tokenizer vectors (encode / decode / chat records, detected per line) against\n"
                    "MODEL_DIR/tokenizer.json; prints one line per failure and 'N passed, M failed'.\n"
                    "       phi4mm tokcheck -m MODEL_DIR --bench FILE...\n"
                    "Encode throughput of the fast and the naive BPE on the concatenated files.\n");
    return 2;
}

int pm_cmd_tokcheck(int argc, char **argv) {
    const char *model = NULL;
    int n_files = 0, do_bench = 0;
    char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            free(files);
            usage();
            return 0;
        }
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--bench")) do_bench = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "tokcheck: unknown option %s\n", argv[i]);
            free(files);
            return usage();
        } else files[n_files++] = argv[i];
    }
    if (!model || !n_files) {
        free(files);
        return usage();
    }
    pm_err e = {0};
    pm_tokenizer *t = NULL;
    if (pm_tok_load(&t, model, &e)) {
        fprintf(stderr, "tokcheck: %s\n", e.msg);
        free(files);
        return 1;
    }
    if (do_bench) {
        int brc = bench(t, files, n_files);
        pm_tok_free(t);
        free(files);
        return brc;
    }
    long passed = 0, failed = 0;
    rec_ctx c = {.t = t};
    for (int i = 0; i < n_files; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) {
            printf("FAIL %s: cannot open\n", files[i]);
            failed++;
            continue;
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        long lineno = 0;
        while ((len = getline(&line, &cap, f)) >= 0) {
            lineno++;
            if (len <= 1) continue;
            json_error_t je;
            json_t *r = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
            const char *id = r ? json_string_value(json_object_get(r, "id")) : NULL;
            int fail;
            c.why[0] = 0;
            if (!json_is_object(r)) fail = FAILF(&c, "not a JSON object: %s", r ? "" : je.text);
            else if (json_object_get(r, "prompt")) fail = check_chat(&c, r);
            else if (json_object_get(r, "token_bytes_hex") || json_object_get(r, "stream")) fail = check_decode(&c, r);
            else if (json_object_get(r, "mode")) fail = check_encode(&c, r);
            else fail = FAILF(&c, "unknown record format");
            if (fail) {
                failed++;
                printf("FAIL %s:%ld %s: %s\n", files[i], lineno, id ? id : "?", c.why);
            } else {
                passed++;
            }
            json_decref(r);
        }
        free(line);
        fclose(f);
    }
    pm_tok_free(t);
    free(files);
    printf("%ld passed, %ld failed\n", passed, failed);
    return failed ? 1 : 0;
}
