/* test_tokenizer.c — the tokenizer against known ids of the fixture's tokenizer.json, the Unicode 16 widening of
 * the split regex, the streaming decoder on split UTF-8, the chat template, placeholder rewrite/expansion (and their
 * errors), fast vs naive BPE on long pieces, and the loader's rejections. The full vector files run in
 * tests/e2e/tokcheck.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tok/chat.h"
#include "tok/tok_internal.h"
#include "tok/tokenizer.h"
#include "test_util.h"

static char model_dir[4096];

static int setup(void **state) {
    snprintf(model_dir, sizeof model_dir, "%s/phi4mm-tiny/tiny_model", tu_fixtures());
    pm_err e = {0};
    pm_tokenizer *t = NULL;
    if (pm_tok_load(&t, model_dir, &e)) {
        fprintf(stderr, "cannot load the fixture tokenizer: %s\n", e.msg);
        return -1; /* the group fails, it is not skipped */
    }
    *state = t;
    return 0;
}

static int teardown(void **state) {
    pm_tok_free(*state);
    return 0;
}

static void expect_ids(const pm_tokenizer *t, const char *text, size_t len, int special, const int32_t *want, size_t nw) {
    pm_err e = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(pm_tok_encode(t, text, len, special, &ids, &n, &e), PM_OK);
    assert_int_equal(n, nw);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
    free(ids);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

static void test_encode_basic(void **state) {
    const pm_tokenizer *t = *state;
    expect_ids(t, "Hello world", 11, 1, IDS(13225, 2375));
    expect_ids(t, "a  b", 4, 1, IDS(64, 220, 287)); /* \s+(?!\S) gives back the last space */
    expect_ids(t, "\xc0\x80", 2, 1, IDS(10123));    /* invalid UTF-8 -> two U+FFFD */
    expect_ids(t, "<|user|>hi<|end|>", 17, 1, IDS(200021, 3686, 200020));
    expect_ids(t, "<|user|>hi<|end|>", 17, 0, IDS(27, 91, 1428, 91, 29, 3686, 27, 91, 419, 91, 29));
    expect_ids(t, "\xe1\xa0\x8e" "a", 4, 1, IDS(157, 254, 236, 64)); /* U+180E is not White_Space */
    pm_err e = {0};
    int32_t *ids = NULL;
    size_t n = 1;
    assert_int_equal(pm_tok_encode(t, "", 0, 1, &ids, &n, &e), PM_OK);
    assert_int_equal(n, 0);
    assert_non_null(ids);
    free(ids);
    /* a cap on the ids: at the count, the same ids; one below, PM_ELIMIT and nothing handed back */
    const char *txt = "<|user|>Hello world, a  b<|end|>";
    int32_t *all = NULL;
    size_t n_all = 0;
    assert_int_equal(pm_tok_encode(t, txt, strlen(txt), 1, &all, &n_all, &e), PM_OK);
    assert_true(n_all > 4);
    assert_int_equal(pm_tok_encode_max(t, txt, strlen(txt), 1, n_all, &ids, &n, &e), PM_OK);
    assert_int_equal(n, n_all);
    assert_memory_equal(ids, all, n * sizeof *ids);
    free(ids);
    for (size_t cap = 1; cap < n_all; cap++) {
        pm_err_clear(&e);
        assert_int_equal(pm_tok_encode_max(t, txt, strlen(txt), 1, cap, &ids, &n, &e), PM_ELIMIT);
        assert_null(ids);
        assert_non_null(strstr(e.msg, "more than"));
    }
    free(all);
    /* one word longer than the cap times the longest token: refused before its BPE runs */
    size_t big = 1 << 20;
    char *word = malloc(big);
    memset(word, 'a', big);
    pm_err_clear(&e);
    assert_int_equal(pm_tok_encode_max(t, word, big, 1, 1000, &ids, &n, &e), PM_ELIMIT);
    assert_non_null(strstr(e.msg, "1048576-byte word"));
    assert_int_equal(pm_tok_encode_max(t, word, big, 1, big, &ids, &n, &e), PM_OK); /* and encoded when it may fit */
    assert_true(n > 1000 && n <= big);
    free(ids);
    free(word);
}

static void test_lookup(void **state) {
    const pm_tokenizer *t = *state;
    assert_int_equal(pm_tok_id(t, "<|end|>"), 200020);
    assert_int_equal(pm_tok_id(t, "<|endoftext10|>"), 200010);
    assert_int_equal(pm_tok_id(t, "Hello"), 13225);
    assert_int_equal(pm_tok_id(t, "<|image_1|>"), -1);
    assert_int_equal(pm_tok_id(t, "\xff"), -1);
    assert_true(pm_tok_is_special(t, 199999));
    assert_false(pm_tok_is_special(t, 13225));
    assert_false(pm_tok_is_special(t, -5));
    assert_int_equal(pm_tok_vocab_size(t), 200029);
    size_t l;
    assert_null(pm_tok_token_bytes(t, 200005, &l)); /* reserved id without a string */
    assert_int_equal(l, 0);
}

static void test_decode(void **state) {
    const pm_tokenizer *t = *state;
    pm_err e = {0};
    char *out;
    size_t ol;
    const int32_t ids[] = {200021, 13225, 2375, 200020, 200005, -3, 999999};
    assert_int_equal(pm_tok_decode(t, ids, 7, 0, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "<|user|>Hello world<|end|>");
    free(out);
    assert_int_equal(pm_tok_decode(t, ids, 7, 1, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "Hello world");
    free(out);
    const int32_t half[] = {4103, 99}; /* the first two tokens of U+1F999 */
    assert_int_equal(pm_tok_decode(t, half, 2, 0, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "\xef\xbf\xbd"); /* an incomplete tail is one U+FFFD */
    free(out);
}

static void stream_expect(pm_tok_stream *s, int32_t id, const char *want) {
    pm_err e = {0};
    char *out;
    size_t ol;
    assert_int_equal(pm_tok_stream_push(s, id, &out, &ol, &e), PM_OK);
    assert_string_equal(out, want);
    assert_int_equal(ol, strlen(want));
    free(out);
}

static void test_stream_split_utf8(void **state) {
    const pm_tokenizer *t = *state;
    pm_err e = {0};
    char *out;
    size_t ol;
    pm_tok_stream *s = pm_tok_stream_new(t, 0);
    assert_non_null(s);
    stream_expect(s, 4103, ""); /* U+1F999 = F0 9F A6 99 in three tokens */
    stream_expect(s, 99, "");
    stream_expect(s, 247, "\xf0\x9f\xa6\x99");
    /* a lead byte followed by ASCII: U+FFFD as soon as the byte is known invalid, then the letter */
    int32_t f0 = t->byte_id[0xF0], a = t->byte_id['a'];
    stream_expect(s, f0, "");
    stream_expect(s, a, "\xef\xbf\xbd" "a");
    stream_expect(s, f0, "");
    assert_int_equal(pm_tok_stream_flush(s, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "\xef\xbf\xbd");
    free(out);
    assert_int_equal(pm_tok_stream_flush(s, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "");
    free(out);
    pm_tok_stream_free(s);
    s = pm_tok_stream_new(t, 1); /* skip_special drops added tokens but keeps the held tail */
    stream_expect(s, 4103, "");
    stream_expect(s, 200020, "");
    stream_expect(s, 99, "");
    stream_expect(s, 247, "\xf0\x9f\xa6\x99");
    pm_tok_stream_free(s);
}

/* Pieces of the pre-tokenizer for text (count and the first one's length). */
static int count_piece(void *ctx, const uint8_t *p, size_t n, pm_err *e) {
    (void)p, (void)n, (void)e;
    ++*(int *)ctx;
    return PM_OK;
}

static int n_pieces(const pm_tokenizer *t, const char *s) {
    int n = 0;
    pm_err e = {0};
    assert_int_equal(pm_pretok_split(&t->pre, (const uint8_t *)s, strlen(s), count_piece, &n, &e), PM_OK);
    return n;
}

static void test_unicode16_split(void **state) {
    const pm_tokenizer *t = *state;
    assert_int_equal(n_pieces(t, "x\xf0\x91\xbc\x84\xf0\x91\xbc\x85y"), 1); /* Kawi letters (Unicode 15.0) are \p{L} */
    assert_int_equal(n_pieces(t, "\xf0\x91\xbd\x90\xf0\x91\xbd\x91\xf0\x91\xbd\x92\xf0\x91\xbd\x93"), 2); /* Kawi digits: \p{N}{1,3} */
    assert_int_equal(n_pieces(t, "\xe1\xa0\x8e\xe1\xa0\x8e!"), 1); /* U+180E is punctuation-like, not \s */
    assert_int_equal(n_pieces(t, "Hello, world  !\n\n"), 5);
    char *tr = NULL;
    pm_err e = {0};
    assert_int_equal(pm_pretok_translate("\\s+(?!\\S)|[^\\s\\p{L}]", &tr, &e), PM_OK);
    assert_null(strstr(tr, "\\s"));
    assert_null(strstr(tr, "\\S"));
    assert_non_null(strstr(tr, "\\x{1C89}")); /* a Unicode 16 letter was added to \p{L} */
    free(tr);
}

static void test_fast_equals_naive(void **state) {
    const pm_tokenizer *t = *state;
    static const char *const alpha[] = {"a", "b", "e", "r", "x", "ab", "er", "in", "\xc3\xa9", "\xe4\xb8\xad"};
    uint32_t rng = 7;
    char *buf = malloc(8 * 6000 + 1);
    assert_non_null(buf);
    for (int round = 0; round < 40; round++) {
        size_t len = 0, target = round < 4 ? 5000 : 10 + (size_t)(rng % 3000);
        while (len < target) {
            rng = rng * 1664525u + 1013904223u;
            const char *a = round < 2 ? "x" : alpha[(rng >> 16) % (round % 3 ? 10 : 3)];
            memcpy(buf + len, a, strlen(a));
            len += strlen(a);
        }
        pm_err e = {0};
        int32_t *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        assert_int_equal(pm_tok_encode(t, buf, len, 1, &x, &nx, &e), PM_OK);
        assert_int_equal(pm_tok_encode_naive(t, buf, len, &y, &ny, &e), PM_OK);
        assert_int_equal(nx, ny);
        assert_memory_equal(x, y, nx * sizeof *x);
        char *back;
        size_t bl;
        assert_int_equal(pm_tok_decode(t, x, nx, 0, &back, &bl, &e), PM_OK);
        assert_int_equal(bl, len);
        assert_memory_equal(back, buf, len);
        free(back);
        free(x);
        free(y);
    }
    free(buf);
}

/* Random bytes (mostly invalid UTF-8, with special-token text mixed in): decode(encode(x)) is the lossy repair of x,
 * and the naive BPE agrees. */
static void test_random_bytes_roundtrip(void **state) {
    const pm_tokenizer *t = *state;
    static const char *const frag[] = {"<|end|>", "<|user|>", " ", "\n", "\xf0\x9f", "\xe4\xb8", "abc", "'s", "12345", "\xcc\x81"};
    uint32_t rng = 99;
    char buf[512];
    for (int round = 0; round < 300; round++) {
        size_t len = 0;
        while (len < (size_t)(round % 97) * 4) {
            rng = rng * 1664525u + 1013904223u;
            if ((rng >> 28) < 6) {
                buf[len++] = (char)(rng >> 8);
            } else {
                const char *f = frag[(rng >> 12) % 10];
                memcpy(buf + len, f, strlen(f));
                len += strlen(f);
            }
        }
        pm_err e = {0};
        int32_t *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        assert_int_equal(pm_tok_encode(t, buf, len, 1, &x, &nx, &e), PM_OK);
        assert_int_equal(pm_tok_encode_naive(t, buf, len, &y, &ny, &e), PM_OK);
        assert_int_equal(nx, ny);
        assert_memory_equal(x, y, nx * sizeof *x);
        pm_buf want = {0};
        assert_int_equal(pm_utf8_lossy((const uint8_t *)buf, len, 1, &want, NULL, &e), PM_OK);
        char *back;
        size_t bl;
        assert_int_equal(pm_tok_decode(t, x, nx, 0, &back, &bl, &e), PM_OK);
        assert_int_equal(bl, want.len);
        assert_memory_equal(back, want.p ? want.p : "", bl);
        free(back);
        pm_buf_free(&want);
        free(x);
        free(y);
    }
}

static void test_chat_render(void **state) {
    (void)state;
    pm_err e = {0};
    char *out;
    pm_chat_msg m[] = {{"system", "You are helpful.", "[{\"name\": \"f\"}]"}, {"user", "Hi", NULL}, {"assistant", "Hello", NULL}};
    assert_int_equal(pm_chat_render(m, 3, 1, &out, &e), PM_OK);
    assert_string_equal(out, "<|system|>You are helpful.<|tool|>[{\"name\": \"f\"}]<|/tool|><|end|><|user|>Hi<|end|>"
                             "<|assistant|>Hello<|end|><|assistant|>");
    free(out);
    assert_int_equal(pm_chat_render(m + 1, 1, 0, &out, &e), PM_OK);
    assert_string_equal(out, "<|user|>Hi<|end|><|endoftext|>");
    free(out);
    pm_chat_msg tool_user = {"user", "x", "ignored"}; /* tools only render in a system turn */
    assert_int_equal(pm_chat_render(&tool_user, 1, 1, &out, &e), PM_OK);
    assert_string_equal(out, "<|user|>x<|end|><|assistant|>");
    free(out);
    /* continue_final_message: the answer's prefix left open, no <|end|>, nothing after it */
    assert_int_equal(pm_chat_render(m + 1, 2, PM_CHAT_CONTINUE, &out, &e), PM_OK);
    assert_string_equal(out, "<|user|>Hi<|end|><|assistant|>Hello");
    free(out);
    assert_int_equal(pm_chat_render(m, 1, PM_CHAT_CONTINUE, &out, &e), PM_OK); /* an open system turn: its tools left out */
    assert_string_equal(out, "<|system|>You are helpful.");
    free(out);
    pm_chat_msg empty = {"assistant", "", NULL};
    assert_int_equal(pm_chat_render(&empty, 1, PM_CHAT_CONTINUE, &out, &e), PM_OK);
    assert_string_equal(out, "<|assistant|>");
    free(out);
    assert_int_equal(pm_chat_render(m, 0, PM_CHAT_CONTINUE, &out, &e), PM_EINVAL);
    assert_null(out);
    assert_int_equal(pm_chat_render(m, 1, 3, &out, &e), PM_EINVAL);
    assert_null(out);
    pm_chat_msg bad = {"user", NULL, NULL};
    assert_int_equal(pm_chat_render(&bad, 1, 1, &out, &e), PM_EINVAL);
    assert_null(out);
}

static void rewrite_fails(const char *prompt, int ni, int na, const char *needle) {
    pm_err e = {0};
    char *out = (char *)1;
    assert_int_equal(pm_prompt_rewrite_placeholders(prompt, ni, na, &out, &e), PM_EPLACEHOLDER);
    assert_null(out);
    if (!strstr(e.msg, needle)) fail_msg("error '%s' lacks '%s'", e.msg, needle);
}

static void test_placeholders_rewrite(void **state) {
    (void)state;
    pm_err e = {0};
    char *out;
    assert_int_equal(pm_prompt_rewrite_placeholders("<|user|><|image_1|><|audio_1|><|image_2|>Hi<|end|>", 2, 1, &out, &e), PM_OK);
    assert_string_equal(out, "<|user|><|endoftext10|><|endoftext11|><|endoftext10|>Hi<|end|>");
    free(out);
    assert_int_equal(pm_prompt_rewrite_placeholders("plain <|image|> text", 0, 0, &out, &e), PM_OK);
    assert_string_equal(out, "plain <|image|> text");
    free(out);
    rewrite_fails("<|audio_1|><|audio_2|><|audio_3|>", 0, 2, "<|audio_3|> has no audio clip");
    rewrite_fails("<|image_2|><|image_1|>", 2, 0, "comes before <|image_1|>");
    rewrite_fails("<|image_1|><|image_1|>", 2, 0, "more than once");
    rewrite_fails("<|image_1|>", 2, 0, "missing <|image_2|>");
    rewrite_fails("no media here", 0, 1, "missing <|audio_1|>");
    rewrite_fails("<|image_0|>", 1, 0, "numbered from 1");
}

static void test_placeholders_expand(void **state) {
    (void)state;
    pm_err e = {0};
    int32_t *out;
    size_t n;
    const int32_t ids[] = {200021, 200010, 200011, 5, 200010};
    const int img[] = {2, 3}, aud[] = {1};
    assert_int_equal(pm_expand_placeholders(ids, 5, img, 2, aud, 1, &out, &n, &e), PM_OK);
    const int32_t want[] = {200021, 200010, 200010, 200011, 5, 200010, 200010, 200010};
    assert_int_equal(n, 8);
    assert_memory_equal(out, want, sizeof want);
    free(out);
    const int32_t legacy[] = {7, -1, -10000, -9999, -123456};
    const int img2[] = {1, 2}, aud2[] = {2, 1};
    assert_int_equal(pm_expand_placeholders(legacy, 5, img2, 2, aud2, 2, &out, &n, &e), PM_OK);
    const int32_t want2[] = {7, 200010, 200011, 200011, 200010, 200010, 200011};
    assert_int_equal(n, 7);
    assert_memory_equal(out, want2, sizeof want2);
    free(out);
    const int aud3[] = {4, 4};
    assert_int_equal(pm_expand_placeholders(ids, 5, img, 2, aud3, 2, &out, &n, &e), PM_EPLACEHOLDER); /* 1 id, 2 clips */
    assert_non_null(strstr(e.msg, "1 audio placeholder token but 2 audio clips were given"));
    pm_err_clear(&e);
    assert_int_equal(pm_expand_placeholders(ids, 5, img, 1, aud, 1, &out, &n, &e), PM_EPLACEHOLDER); /* 2 ids, 1 image */
    pm_err_clear(&e);
    const int zero[] = {0, 1};
    assert_int_equal(pm_expand_placeholders(ids, 5, zero, 2, aud, 1, &out, &n, &e), PM_EINVAL);
}

/* Writes a small tokenizer.json into a fresh directory and tries to load it. */
static int load_json_text(const char *json, pm_err *e) {
    char dir[] = "/tmp/pm_tok_test_XXXXXX", path[64];
    if (!mkdtemp(dir)) return -100;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
    pm_tokenizer *t = NULL;
    int rc = pm_tok_load(&t, dir, e);
    pm_tok_free(t);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void test_loader_rejects(void **state) {
    (void)state;
    pm_err e = {0};
    assert_int_equal(load_json_text("{\"model\": {\"type\": \"Unigram\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": null}", &e),
                     PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "Unigram"));
    pm_err_clear(&e);
    assert_int_equal(load_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                                    " \"pre_tokenizer\": {\"type\": \"Metaspace\"}}", &e),
                     PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "Metaspace"));
    pm_err_clear(&e);
    assert_int_equal(load_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                                    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}}", &e),
                     PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "byte 0x00"));
    pm_err_clear(&e);
    assert_int_equal(load_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                                    " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"post_processor\": {\"type\":"
                                    " \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}]}}", &e),
                     PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "no BOS"));
    pm_err_clear(&e);
    assert_int_equal(load_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,}}}", &e), PM_EFORMAT);
    assert_non_null(strstr(e.msg, "line 1"));
    pm_err_clear(&e);
    pm_tokenizer *t = NULL;
    assert_int_equal(pm_tok_load(&t, "/nonexistent/dir", &e), PM_EIO);
    assert_null(t);
}

/* A tiny byte-level tokenizer.json: ids 0..255 are the bytes, 256 "ab", 257 "abc" (merges in both forms), an lstrip+
 * rstrip special token and a single_word plain added token, GPT-2 regex via ByteLevel(use_regex=true). */
static int write_tiny(char *dir, size_t cap) {
    char tmpl[] = "/tmp/pm_tok_tiny_XXXXXX", path[64];
    if (!mkdtemp(tmpl)) return -1;
    snprintf(dir, cap, "%s", tmpl);
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpl);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {", f);
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        fprintf(f, "\"\\u%04x\": %d, ", self ? b : 0x100 + k++, b);
    }
    fputs("\"ab\": 256, \"abc\": 257}, \"merges\": [[\"a\", \"b\"], \"ab c\"]},"
          " \"added_tokens\": [{\"id\": 258, \"content\": \"<|x|>\", \"lstrip\": true, \"rstrip\": true, \"special\": true},"
          " {\"id\": 259, \"content\": \"[w]\", \"single_word\": true, \"special\": false}],"
          " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
          " \"decoder\": {\"type\": \"ByteLevel\"}}", f);
    fclose(f);
    return 0;
}

static void test_tiny_tokenizer_flags(void **state) {
    (void)state;
    char dir[64], path[80];
    assert_int_equal(write_tiny(dir, sizeof dir), 0);
    pm_err e = {0};
    pm_tokenizer *t = NULL;
    int rc = pm_tok_load(&t, dir, &e);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    if (rc) fail_msg("%s", e.msg);
    expect_ids(t, "abc", 3, 1, IDS(257));
    expect_ids(t, "abd ab", 6, 1, IDS(256, 100, 32, 256));
    expect_ids(t, "a <|x|> b", 9, 1, IDS(97, 258, 98));           /* lstrip/rstrip eat the spaces */
    expect_ids(t, "a <|x|> b", 9, 0, IDS(97, 32, 60, 124, 120, 124, 62, 32, 98)); /* ordinary: plain text */
    expect_ids(t, "x[w]", 4, 1, IDS(120, 91, 119, 93));            /* single_word: touches a word character */
    expect_ids(t, " [w] ", 5, 0, IDS(32, 259, 32));                /* not special: matched in ordinary mode too */
    int32_t ids[] = {97, 258, 259};
    char *out;
    size_t ol;
    assert_int_equal(pm_tok_decode(t, ids, 3, 1, &out, &ol, &e), PM_OK);
    assert_string_equal(out, "a[w]");
    free(out);
    assert_int_equal(pm_tok_id(t, "\xc4\xa0"), 32); /* "Ġ" is the byte-level spelling of a space */
    assert_int_equal(pm_tok_vocab_size(t), 260);
    pm_tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_basic),         cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_decode),               cmocka_unit_test(test_stream_split_utf8),
        cmocka_unit_test(test_unicode16_split),      cmocka_unit_test(test_fast_equals_naive),
        cmocka_unit_test(test_random_bytes_roundtrip), cmocka_unit_test(test_chat_render),          cmocka_unit_test(test_placeholders_rewrite),
        cmocka_unit_test(test_placeholders_expand),  cmocka_unit_test(test_loader_rejects),
        cmocka_unit_test(test_tiny_tokenizer_flags),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
