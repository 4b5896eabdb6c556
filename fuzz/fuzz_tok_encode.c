/* fuzz_tok_encode.c — libFuzzer harness for the tokenizer's text paths with the real Phi-4
 * tokenizer (the fixture's tokenizer.json, loaded once): pm_tok_encode, pm_tok_encode_naive,
 * pm_tok_decode, the streaming decoder, the placeholder rewrite/expansion and the chat template.
 *
 * The first input byte picks the mode (byte & 7) and options, the rest is the payload:
 *   0, 1  encode the payload (allow_special = mode & 1). Properties: decode(encode(x)) == x when x is
 *         valid UTF-8 (the Phi tokenizer's added tokens have no strip flags, so the round trip is exact),
 *         else == the U+FFFD-repaired x; the naive BPE gives the same ids (payloads < 512 bytes); the
 *         streaming decoder gives the same text as pm_tok_decode;
 *   2     pm_prompt_rewrite_placeholders with 0..3 images/audios (from the option bits), then encode
 *         and pm_expand_placeholders with small token counts; the expanded length must add up;
 *   3     the payload as int32 ids (any value): decode and stream-decode; both must be valid UTF-8;
 *   4     pm_chat_render of messages split at NUL bytes (role, content, role, content, ...), ending in the eos
 *         text, the generation prompt or the final message left open (opt % 3). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tok/chat.h"
#include "tok/tokenizer.h"
#include "tok/utf8.h"

static pm_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tiny_model", fuzz_fixture_dir());
    pm_err e = {0};
    if (pm_tok_load(&tok, dir, &e)) {
        fprintf(stderr, "fuzz_tok_encode: %s (set PHI4MM_FIXTURES)\n", e.msg);
        abort();
    }
    return 0;
}

/* Lossy-repaired copy of s (what the encoder sees). */
static char *repaired(const uint8_t *s, size_t n, size_t *out_len) {
    pm_buf b = {0};
    pm_err e = {0};
    char *out = NULL;
    FUZZ_CHECK(pm_utf8_lossy(s, n, 1, &b, NULL, &e) == PM_OK);
    FUZZ_CHECK(pm_buf_take(&b, &out, out_len, &e) == PM_OK);
    return out;
}

/* Streams ids through pm_tok_stream and returns the concatenated text. */
static char *stream_decode(const int32_t *ids, size_t n, int skip_special, size_t *len) {
    pm_tok_stream *s = pm_tok_stream_new(tok, skip_special);
    FUZZ_CHECK(s != NULL);
    pm_buf all = {0};
    pm_err e = {0};
    for (size_t i = 0; i <= n; i++) {
        char *t = NULL;
        size_t tl = 0;
        int rc = i < n ? pm_tok_stream_push(s, ids[i], &t, &tl, &e) : pm_tok_stream_flush(s, &t, &tl, &e);
        FUZZ_CHECK(rc == PM_OK && t != NULL && strlen(t) <= tl);
        FUZZ_CHECK(pm_buf_put(&all, t, tl, &e) == PM_OK);
        free(t);
    }
    pm_tok_stream_free(s);
    char *out = NULL;
    FUZZ_CHECK(pm_buf_take(&all, &out, len, &e) == PM_OK);
    return out;
}

static void mode_encode(const uint8_t *p, size_t n, int allow_special) {
    pm_err e = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    FUZZ_CHECK(pm_tok_encode(tok, (const char *)p, n, allow_special, &ids, &n_ids, &e) == PM_OK);
    int32_t vs = pm_tok_vocab_size(tok);
    for (size_t i = 0; i < n_ids; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vs);
    if (!allow_special)
        for (size_t i = 0; i < n_ids; i++) FUZZ_CHECK(!pm_tok_is_special(tok, ids[i]));
    char *text = NULL;
    size_t tl = 0;
    FUZZ_CHECK(pm_tok_decode(tok, ids, n_ids, 0, &text, &tl, &e) == PM_OK);
    size_t rl;
    char *want = repaired(p, n, &rl);
    FUZZ_CHECK(tl == rl && memcmp(text, want, rl) == 0);
    size_t sl;
    char *st = stream_decode(ids, n_ids, 0, &sl);
    FUZZ_CHECK(sl == tl && memcmp(st, text, tl) == 0);
    if (allow_special && n < 512) {
        int32_t *ids2 = NULL;
        size_t n2 = 0;
        FUZZ_CHECK(pm_tok_encode_naive(tok, (const char *)p, n, &ids2, &n2, &e) == PM_OK);
        FUZZ_CHECK(n2 == n_ids && (n2 == 0 || memcmp(ids, ids2, n2 * sizeof *ids) == 0));
        free(ids2);
    }
    free(st);
    free(want);
    free(text);
    free(ids);
}

static void mode_placeholders(const uint8_t *p, size_t n, int opt) {
    char *prompt = malloc(n + 1);
    memcpy(prompt, p, n);
    prompt[n] = 0;
    int ni = opt & 3, na = (opt >> 2) & 3;
    pm_err e = {0};
    char *rw = NULL;
    if (pm_prompt_rewrite_placeholders(prompt, ni, na, &rw, &e) == PM_OK) {
        int32_t *ids = NULL, *ex = NULL;
        size_t n_ids = 0, n_ex = 0;
        FUZZ_CHECK(pm_tok_encode(tok, rw, strlen(rw), 1, &ids, &n_ids, &e) == PM_OK);
        int it[3] = {1, 5, 2}, at[3] = {3, 1, 7};
        int ci = 0, ca = 0;
        for (size_t i = 0; i < n_ids; i++) ci += ids[i] == PM_TOK_IMAGE_ID, ca += ids[i] == PM_TOK_AUDIO_ID;
        if (pm_expand_placeholders(ids, n_ids, it, ni, at, na, &ex, &n_ex, &e) == PM_OK) {
            size_t want = n_ids - (size_t)ci - (size_t)ca;
            for (int k = 0; k < ni; k++) want += (size_t)it[k];
            for (int k = 0; k < na; k++) want += (size_t)at[k];
            FUZZ_CHECK(ci == ni && ca == na && n_ex == want);
        }
        free(ex);
        free(ids);
        free(rw);
    } else {
        FUZZ_CHECK(e.code < 0 && e.msg[0]);
    }
    free(prompt);
}

static void mode_decode_ids(const uint8_t *p, size_t n, int skip) {
    size_t k = n / 4;
    int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
    for (size_t i = 0; i < k; i++) {
        uint32_t v = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
        /* Mostly ids near the real range, sometimes anything. */
        ids[i] = (v >> 31) ? (int32_t)v : (int32_t)(v % 200100u);
    }
    pm_err e = {0};
    char *text = NULL;
    size_t tl = 0;
    FUZZ_CHECK(pm_tok_decode(tok, ids, k, skip, &text, &tl, &e) == PM_OK);
    FUZZ_CHECK(pm_utf8_valid_prefix((const uint8_t *)text, tl) == tl);
    size_t sl;
    char *st = stream_decode(ids, k, skip, &sl);
    FUZZ_CHECK(pm_utf8_valid_prefix((const uint8_t *)st, sl) == sl);
    FUZZ_CHECK(sl == tl && memcmp(st, text, tl) == 0);
    for (size_t i = 0; i < k; i++) {
        size_t bl = 0;
        const char *b = pm_tok_token_bytes(tok, ids[i], &bl);
        FUZZ_CHECK(b != NULL || bl == 0);
    }
    free(st);
    free(text);
    free(ids);
}

static void mode_chat(const uint8_t *p, size_t n, int gen) {
    char *copy = malloc(n + 1);
    memcpy(copy, p, n);
    copy[n] = 0;
    pm_chat_msg msgs[16];
    int nm = 0;
    const char *fields[32];
    int nf = 0;
    for (char *s = copy; nf < 32 && s <= copy + n; s += strlen(s) + 1) fields[nf++] = s;
    for (int i = 0; i + 1 < nf && nm < 16; i += 2)
        msgs[nm++] = (pm_chat_msg){.role = fields[i], .content = fields[i + 1], .tools = (i / 2) % 3 == 2 ? fields[i] : NULL};
    pm_err e = {0};
    char *out = NULL;
    if (gen == PM_CHAT_CONTINUE && nm == 0) { /* nothing to leave open */
        FUZZ_CHECK(pm_chat_render(msgs, nm, gen, &out, &e) == PM_EINVAL && out == NULL);
    } else {
        FUZZ_CHECK(pm_chat_render(msgs, nm, gen, &out, &e) == PM_OK && out != NULL);
        /* an open final message ends right after its content */
        if (gen == PM_CHAT_CONTINUE) {
            size_t ol = strlen(out), cl = strlen(msgs[nm - 1].content);
            FUZZ_CHECK(ol >= cl && !memcmp(out + ol - cl, msgs[nm - 1].content, cl));
        }
    }
    free(out);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    int mode = data[0] & 7, opt = data[0] >> 3;
    switch (mode) {
    case 0:
    case 1: mode_encode(p, n, mode & 1); break;
    case 2: mode_placeholders(p, n, opt); break;
    case 3: mode_decode_ids(p, n, opt & 1); break;
    case 4: mode_chat(p, n, opt % 3); break;
    default: mode_encode(p, n, 1); break;
    }
    return 0;
}
