/* test_server_parsers.c — the server's request parsers, which see untrusted bytes: strict base64,
 * data: URLs, multipart/form-data, the JSON guards, chat request validation (placeholders, media,
 * parameters, local-path policy) and the transcription form. The parsers live in tools/server/
 * (part of the binary, not the library), so this file compiles them in directly. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/server/audio_form.c"
#include "../../tools/server/base64.c"
#include "../../tools/server/call_reader.c"
#include "../../tools/server/chat_parse.c"
#include "../../tools/server/dataurl.c"
#include "../../tools/server/json_util.c"
#include "../../tools/server/local_media.c"
#include "../../tools/server/media_urls.c"
#include "../../tools/server/multipart.c"
#include "../../tools/server/response_items.c"
#include "../../tools/server/response_store.c"
#include "../../tools/server/responses_parse.c"
#include "../../tools/server/subtitles.c"
#include "../../tools/server/tool_calls.c"

/* ------------------------------------------------------------------ base64 */

static void test_b64_vectors(void **state) {
    (void)state;
    const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        uint8_t *out;
        size_t n;
        char err[128];
        assert_int_equal(srv_b64_decode(enc[i], strlen(enc[i]), &out, &n, err, sizeof err), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(out, plain[i], n);
        free(out);
        size_t el;
        char *e = srv_b64_encode((const uint8_t *)plain[i], strlen(plain[i]), &el);
        assert_string_equal(e, enc[i]);
        free(e);
    }
}

static void test_b64_roundtrip(void **state) {
    (void)state;
    uint8_t buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (uint8_t)(i * 37 + 11);
    for (size_t n = 0; n < sizeof buf; n += 7) {
        size_t el, dl;
        char *e = srv_b64_encode(buf, n, &el);
        uint8_t *d;
        char err[128];
        assert_int_equal(srv_b64_decode(e, el, &d, &dl, err, sizeof err), 0);
        assert_int_equal(dl, n);
        if (n) assert_memory_equal(d, buf, n);
        free(d);
        free(e);
    }
}

static void test_b64_rejects(void **state) {
    (void)state;
    const char *bad[] = {"Zg=", "Zm9", "Zm 9v", "Zm9v\n", "Z===", "Zg==Zg==", "Zh==", "Zm9=", "====", "Zm-v", "Zm_v", "=Zm9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *out = (uint8_t *)1;
        size_t n;
        char err[160] = "";
        assert_int_equal(srv_b64_decode(bad[i], strlen(bad[i]), &out, &n, err, sizeof err), -1);
        assert_null(out);
        assert_true(strstr(err, "invalid base64") != NULL);
    }
    uint8_t *out;
    size_t n;
    char err[160];
    srv_b64_decode("Zm9v$m9v", 8, &out, &n, err, sizeof err);
    assert_non_null(strstr(err, "'$' at offset 4"));
}

/* ------------------------------------------------------------------ data URLs */

static void test_data_url(void **state) {
    (void)state;
    srv_data_url d;
    char err[160];
    const char *u = "data:image/PNG;base64,Zm9v";
    assert_int_equal(srv_data_url_parse(u, strlen(u), &d, err, sizeof err), 0);
    assert_string_equal(d.media_type, "image/png");
    assert_int_equal(d.payload_len, 4);
    assert_memory_equal(d.payload, "Zm9v", 4);
    u = "DATA:image/jpeg;name=a.jpg;base64,";
    assert_int_equal(srv_data_url_parse(u, strlen(u), &d, err, sizeof err), 0);
    assert_string_equal(d.media_type, "image/jpeg");
    assert_int_equal(d.payload_len, 0);
    const char *bad[] = {"data:image/png,Zm9v", "data:image/png;base64Zm9v", "data:image;base64,Zm9v", "data:im age/png;base64,x",
                         "http://x/data:", "data:/png;base64,x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(srv_data_url_parse(bad[i], strlen(bad[i]), &d, err, sizeof err), -1);
}

/* ------------------------------------------------------------------ multipart */

static void test_multipart_boundary(void **state) {
    (void)state;
    char b[80], err[160];
    assert_int_equal(srv_multipart_boundary("multipart/form-data; boundary=abc123", b, sizeof b, err, sizeof err), 0);
    assert_string_equal(b, "abc123");
    assert_int_equal(srv_multipart_boundary("multipart/form-data; charset=utf-8; boundary=\"a b;c\"", b, sizeof b, err, sizeof err), 0);
    assert_string_equal(b, "a b;c");
    assert_int_equal(srv_multipart_boundary("application/json", b, sizeof b, err, sizeof err), -1);
    assert_int_equal(srv_multipart_boundary("multipart/form-data", b, sizeof b, err, sizeof err), -1);
    char longb[200] = "multipart/form-data; boundary=";
    memset(longb + strlen(longb), 'x', 80);
    assert_int_equal(srv_multipart_boundary(longb, b, sizeof b, err, sizeof err), -1);
}

static void test_multipart_parse(void **state) {
    (void)state;
    const char body[] = "preamble\r\n"
                        "--XyZ\r\n"
                        "Content-Disposition: form-data; name=\"model\"\r\n\r\n"
                        "whisper-1\r\n"
                        "--XyZ\r\n"
                        "content-disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".wav\"\r\n"
                        "Content-Type: audio/wav\r\n\r\n"
                        "RIFF\r\n--XyZnot-a-boundary\0bin\r\n"
                        "--XyZ\r\n"
                        "Content-Disposition: form-data; name=\"empty\"\r\n\r\n"
                        "\r\n"
                        "--XyZ--\r\nepilogue";
    srv_part parts[8];
    int n;
    char err[160];
    int prc = srv_multipart_parse((const uint8_t *)body, sizeof body - 1, "XyZ", parts, 8, &n, err, sizeof err);
    if (prc) fail_msg("%s", err);
    assert_int_equal(n, 3);
    assert_string_equal(parts[0].name, "model");
    assert_int_equal(parts[0].len, 9);
    assert_memory_equal(parts[0].data, "whisper-1", 9);
    const srv_part *f = srv_multipart_find(parts, n, "file");
    assert_non_null(f);
    assert_true(f->has_filename);
    assert_string_equal(f->filename, "a \"b\".wav");
    assert_string_equal(f->content_type, "audio/wav");
    assert_int_equal(f->len, 29);
    assert_memory_equal(f->data, "RIFF\r\n--XyZnot-a-boundary\0bin", f->len);
    assert_int_equal(srv_multipart_find(parts, n, "empty")->len, 0);
    assert_null(srv_multipart_find(parts, n, "nope"));
    /* the opening delimiter may start the body */
    const char b2[] = "--B\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--B--";
    assert_int_equal(srv_multipart_parse((const uint8_t *)b2, sizeof b2 - 1, "B", parts, 8, &n, err, sizeof err), 0);
    assert_int_equal(n, 1);
}

static void test_multipart_rejects(void **state) {
    (void)state;
    srv_part parts[2];
    int n;
    char err[200];
    const char *bad[] = {
        "--B\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n",                    /* not closed */
        "--B\r\nContent-Type: text/plain\r\n\r\n1\r\n--B--",                                 /* no name */
        "--B\r\nContent-Disposition: attachment; name=\"x\"\r\n\r\n1\r\n--B--",              /* not form-data */
        "--B\nContent-Disposition: form-data; name=\"x\"\n\n1\n--B--",                       /* LF only */
        "no boundary here",                                                                  /* missing */
        "--B\r\nContent-Disposition: form-data; name=\"x\"\r\nbroken header\r\n\r\n1\r\n--B--", /* header without colon */
        "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--B\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n2\r\n"
        "--B\r\nContent-Disposition: form-data; name=\"c\"\r\n\r\n3\r\n--B--", /* 3 parts > max 2 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(srv_multipart_parse((const uint8_t *)bad[i], strlen(bad[i]), "B", parts, 2, &n, err, sizeof err), -1);
    /* a header block longer than the bound */
    size_t big = SRV_MP_MAX_HEADERS + 200;
    char *b = malloc(big + 100);
    int k = sprintf(b, "--B\r\nX-Pad: ");
    memset(b + k, 'a', big);
    strcpy(b + k + big, "\r\n\r\nx\r\n--B--");
    assert_int_equal(srv_multipart_parse((const uint8_t *)b, strlen(b), "B", parts, 2, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than"));
    free(b);
}

/* ------------------------------------------------------------------ JSON guards */

static void test_json_guards(void **state) {
    (void)state;
    srv_error e;
    assert_true(srv_json_depth_ok("[[[]]]", 6, 3));
    assert_false(srv_json_depth_ok("[[[[]]]]", 8, 3));
    assert_true(srv_json_depth_ok("[\"[[[[[[\"]", 10, 1)); /* brackets inside strings do not count */
    assert_true(srv_json_depth_ok("[\"\\\"[[[\"]", 9, 1));
    /* the value count bounds what jansson allocates: commas and brackets inside strings do not count */
    assert_int_equal(srv_json_count_values("{\"a\":[1,2,3],\"b\":\"x,y,[z]\"}", 27), 6);
    char *many = malloc(2 * SRV_JSON_MAX_VALUES + 8);
    size_t k = 0;
    many[k++] = '[';
    for (int i = 0; i < SRV_JSON_MAX_VALUES; i++) {
        many[k++] = '0';
        many[k++] = ',';
    }
    many[k - 1] = ']';
    srv_error je;
    json_t *jv = srv_json_parse(many, k, SRV_JSON_MAX_DEPTH, &je); /* SRV_JSON_MAX_VALUES + 1 by the count */
    assert_null(jv);
    assert_non_null(strstr(je.msg, "values"));
    many[k - 3] = ']'; /* one zero fewer: within the limit (and then refused as not an object) */
    jv = srv_json_parse(many, k - 2, SRV_JSON_MAX_DEPTH, &je);
    assert_null(jv);
    assert_non_null(strstr(je.msg, "must be a JSON object"));
    free(many);
    json_t *v = srv_json_parse("{\"a\":1}", 7, 64, &e);
    assert_non_null(v);
    json_decref(v);
    assert_null(srv_json_parse("{\"a\":1,\"a\":2}", 13, 64, &e));
    assert_string_equal(e.code, "invalid_json");
    assert_null(srv_json_parse("[1]", 3, 64, &e));
    assert_null(srv_json_parse("{\"a\":", 5, 64, &e));
    assert_non_null(strstr(e.msg, "column"));
    assert_null(srv_json_parse("", 0, 64, &e));
    assert_null(srv_json_parse("{\"a\":\"\xff\"}", 8, 64, &e)); /* invalid UTF-8 */
    /* model text with broken UTF-8 becomes U+FFFD, valid text is kept */
    json_t *s = srv_json_text("a\xff" "b\xe2\x82", 5);
    assert_string_equal(json_string_value(s), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(s);
    assert_int_equal(srv_utf8_valid_prefix("h\xc3\xa9\xe2\x82", 5), 3);
    json_t *o = json_loads("{\"i\":3,\"f\":2.0,\"x\":2.5,\"s\":\"3\",\"b\":true,\"n\":null}", 0, NULL);
    long long i;
    double d;
    int b;
    assert_int_equal(srv_get_int(o, "i", 0, 10, &i, &e), 1);
    assert_int_equal(i, 3);
    assert_int_equal(srv_get_int(o, "f", 0, 10, &i, &e), 1);
    assert_int_equal(srv_get_int(o, "x", 0, 10, &i, &e), -1);
    assert_int_equal(srv_get_int(o, "s", 0, 10, &i, &e), -1);
    assert_string_equal(e.param, "s");
    assert_int_equal(srv_get_int(o, "i", 5, 10, &i, &e), -1);
    assert_int_equal(srv_get_int(o, "n", 0, 10, &i, &e), 0);
    assert_int_equal(srv_get_int(o, "missing", 0, 10, &i, &e), 0);
    assert_int_equal(srv_get_num(o, "x", 0, 2, &d, &e), -1);
    assert_int_equal(srv_get_bool(o, "b", &b, &e), 1);
    assert_int_equal(srv_get_bool(o, "i", &b, &e), -1);
    json_decref(o);
    srv_fail(&e, 413, NULL, "p", "c", "too big: %d", 5);
    size_t len;
    char *body = srv_error_body(&e, &len);
    assert_string_equal(body, "{\"error\":{\"message\":\"too big: 5\",\"type\":\"invalid_request_error\",\"param\":\"p\",\"code\":\"c\"}}");
    free(body);
}

/* ------------------------------------------------------------------ chat requests */

static srv_parse_limits LIM = {.max_images = 4, .max_audios = 4, .max_media_bytes = 1 << 20};

/* js as a chat body, or as a completions body where completions is set. */
static int parse_as(const char *js, int completions, srv_chat_req *r, srv_error *e) {
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    if (!root) {
        fprintf(stderr, "test JSON does not parse: %s: %s\n", je.text, js);
        return -99;
    }
    int rc = completions ? srv_completion_parse(root, completions - 1, r, e) : srv_chat_parse(root, &LIM, r, e);
    json_decref(root);
    return rc;
}

static int parse(const char *js, srv_chat_req *r, srv_error *e) { return parse_as(js, 0, r, e); }

#define PNG_URL "data:image/png;base64,iVBORw0KGgo="
#define WAV_PART "{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"UklGRg==\",\"format\":\"wav\"}}"
#define IMG_PART "{\"type\":\"image_url\",\"image_url\":{\"url\":\"" PNG_URL "\"}}"

static void test_chat_prompt_and_placeholders(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    assert_int_equal(parse("{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi\"}]}", &r, &e), 0);
    assert_string_equal(r.prompt, "<|system|>S<|end|><|user|>Hi<|end|><|assistant|>");
    assert_int_equal(r.max_tokens, 0);
    assert_true(r.sampling.temperature == 0.0f && r.sampling.top_p == 1.0f);
    srv_chat_req_free(&r);
    /* parts keep their positions; numbering runs per kind across the conversation */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"A\"}," IMG_PART ",{\"type\":\"text\","
                           "\"text\":\"B\"}," WAV_PART "]},{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"developer\",\"content\":"
                           "\"D\"},{\"role\":\"user\",\"content\":[" WAV_PART "," IMG_PART ",{\"type\":\"text\",\"text\":\"C\"}]}]}",
                           &r, &e),
                     0);
    assert_string_equal(r.prompt, "<|user|>A<|image_1|>B<|audio_1|><|end|><|assistant|>ok<|end|><|system|>D<|end|>"
                                  "<|user|><|audio_2|><|image_2|>C<|end|><|assistant|>");
    assert_int_equal(r.n_images, 2);
    assert_int_equal(r.n_audios, 2);
    assert_int_equal(r.images[0].len, 8);
    assert_memory_equal(r.audios[0].data, "RIFF", 4);
    assert_string_equal(r.audios[1].format, "wav");
    assert_string_equal(r.images[1].what, "messages[3].content[1]");
    srv_chat_req_free(&r);
    /* explicit placeholders: parts add none */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":[" IMG_PART ",{\"type\":\"text\",\"text\":\"Look <|image_1|> now\"}]}]}",
                           &r, &e),
                     0);
    assert_true(r.explicit_placeholders);
    assert_string_equal(r.prompt, "<|user|>Look <|image_1|> now<|end|><|assistant|>");
    srv_chat_req_free(&r);
    /* mismatches */
    const char *bad[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"<|image_1|>x\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[" IMG_PART ",{\"type\":\"text\",\"text\":\"<|image_1|><|image_2|>\"}]}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[" WAV_PART ",{\"type\":\"text\",\"text\":\"<|audio_2|>\"}]}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":[" WAV_PART "," WAV_PART ",{\"type\":\"text\",\"text\":\"<|audio_1|>\"}]}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(bad[i], &r, &e), -1);
        assert_int_equal(e.http, 400);
        assert_string_equal(e.code, "placeholder_mismatch");
        srv_chat_req_free(&r);
    }
    assert_int_equal(srv_has_placeholder("a <|image_12|> b"), 1);
    assert_int_equal(srv_has_placeholder("a <|image_|> <|audio_x|> <|image_1| <|endoftext10|>"), 0);
}

static void expect_bad_as(const char *js, int completions, const char *code, const char *param) {
    srv_chat_req r;
    srv_error e;
    memset(&e, 0, sizeof e);
    int rc = parse_as(js, completions, &r, &e);
    if (rc != -1 || strcmp(e.code, code) || (param && strcmp(e.param, param)))
        fail_msg("%s\n  -> rc %d http %d code '%s' param '%s' msg '%s' (wanted %s / %s)", js, rc, e.http, e.code, e.param, e.msg, code,
                 param ? param : "-");
    srv_chat_req_free(&r);
}

static void expect_bad(const char *js, const char *code, const char *param) { expect_bad_as(js, 0, code, param); }

static void test_chat_rejects(void **state) {
    (void)state;
    expect_bad("{}", "missing_required_parameter", "messages");
    expect_bad("{\"messages\":[]}", "invalid_value", "messages");
    expect_bad("{\"messages\":{}}", "invalid_type", "messages");
    expect_bad("{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "invalid_value", "messages[0].role");
    expect_bad("{\"messages\":[{\"content\":\"x\"}]}", "invalid_type", "messages[0].role");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "invalid_type", "messages[0].content");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video_url\"}]}]}", "unknown_content_part",
               "messages[0].content[0].type");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", "invalid_type", "messages[0].content[0].type");
    expect_bad("{\"messages\":[{\"role\":\"assistant\",\"content\":[" IMG_PART "]}]}", "invalid_value", "messages[0].content[0].type");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://a/b.png\"}}]}]}",
               "unsupported_url", "messages[0].content[0].image_url.url");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"/etc/passwd\"}}]}]}",
               "invalid_image_url", NULL);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:text/plain;base64,Zm9v\"}}]}]}",
               "invalid_image_url", NULL);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,Zm9\"}}]}]}",
               "invalid_base64", "messages[0].content[0].image_url.url");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"UklGRg==\",\"format\":"
               "\"aac\"}}]}]}",
               "invalid_value", "messages[0].content[0].input_audio.format");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"\",\"format\":\"wav\"}}]}]}",
               "invalid_value", "messages[0].content[0].input_audio.data");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[" IMG_PART "," IMG_PART "," IMG_PART "," IMG_PART "," IMG_PART "]}]}",
               "too_many_media", NULL);
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char js[512];
    struct {
        const char *extra, *code, *param;
    } cases[] = {
        {"\"n\":17", "invalid_value", "n"},
        {"\"n\":0", "invalid_value", "n"},
        {"\"max_tokens\":0", "invalid_value", "max_tokens"},
        {"\"max_tokens\":\"9\"", "invalid_type", "max_tokens"},
        {"\"max_completion_tokens\":-1", "invalid_value", "max_completion_tokens"},
        {"\"temperature\":2.5", "invalid_value", "temperature"},
        {"\"top_p\":1.5", "invalid_value", "top_p"},
        {"\"stream\":\"yes\"", "invalid_type", "stream"},
        {"\"stream_options\":{\"include_usage\":1}", "invalid_type", "stream_options.include_usage"},
        {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "invalid_value", "stop"},
        {"\"stop\":[\"\"]", "invalid_value", "stop"},
        {"\"stop\":5", "invalid_type", "stop"},
        {"\"logprobs\":1", "invalid_type", "logprobs"},
        {"\"top_logprobs\":2", "invalid_value", "top_logprobs"},
        {"\"logprobs\":true,\"top_logprobs\":21", "invalid_value", "top_logprobs"},
        {"\"tools\":[{\"type\":\"function\"}]", "invalid_type", "tools[0].function"},
        {"\"tools\":{}", "invalid_type", "tools"},
        {"\"tools\":[{\"type\":\"custom\",\"function\":{\"name\":\"f\"}}]", "invalid_value", "tools[0]"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "invalid_value", "tools[0].function.name"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]", "invalid_type",
         "tools[0].function.parameters"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":"
         "\"f\"}}]", "invalid_value", "tools[1].function.name"},
        {"\"tool_choice\":\"required\"", "invalid_value", "tool_choice"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"any\"", "invalid_value", "tool_choice"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":"
         "{\"name\":\"g\"}}", "invalid_value", "tool_choice.function.name"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
         "{\"n\":{\"type\":\"array\",\"uniqueItems\":true}}}}}],\"tool_choice\":\"required\"", "unsupported_value", "tools[0].function.parameters"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"response_format\":{\"type\":\"json_object\"}",
         "invalid_value", "response_format"},
        {"\"parallel_tool_calls\":1", "invalid_type", "parallel_tool_calls"},
        {"\"presence_penalty\":2.5", "invalid_value", "presence_penalty"},
        {"\"frequency_penalty\":\"1\"", "invalid_type", "frequency_penalty"},
        {"\"repetition_penalty\":0", "invalid_value", "repetition_penalty"},
        {"\"min_tokens\":-1", "invalid_value", "min_tokens"},
        {"\"ignore_eos\":1", "invalid_type", "ignore_eos"},
        {"\"logit_bias\":[1]", "invalid_type", "logit_bias"},
        {"\"logit_bias\":{\"x\":1}", "invalid_value", "logit_bias"},
        {"\"logit_bias\":{\"-3\":1}", "invalid_value", "logit_bias"},
        {"\"logit_bias\":{\" 3\":1}", "invalid_value", "logit_bias"},
        {"\"logit_bias\":{\"3\":101}", "invalid_value", "logit_bias"},
        {"\"logit_bias\":{\"3\":\"1\"}", "invalid_value", "logit_bias"},
        {"\"response_format\":{\"type\":\"json_schema\"}", "invalid_type", "response_format.json_schema"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":[]}}", "invalid_type",
         "response_format.json_schema.schema"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"pattern\":\"a\\\\b\"}}}",
         "unsupported_value", "response_format.json_schema.schema"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"required\":[\"x\"]}}}",
         "invalid_value", "response_format.json_schema.schema"},
        {"\"response_format\":{\"type\":\"yaml\"}", "invalid_value", "response_format.type"},
        {"\"response_format\":\"json\"", "invalid_type", "response_format"},
        {"\"model\":5", "invalid_type", "model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(js, sizeof js, "{%s,%s}", m, cases[i].extra);
        expect_bad(js, cases[i].code, cases[i].param);
    }
}

/* tools: the prompt as the checkpoint's template renders a system message with tools, the schema
 * a forced choice holds the answer to, history with calls and results, and reading calls back. */
static void test_chat_tools(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
#define WEATHER "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\",\"parameters\":" \
                "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"],\"$defs\":{\"u\":{\"type\":\"string\"}}}}}"
#define SEARCH "{\"type\":\"function\",\"function\":{\"name\":\"search\"}}"
#define WEATHER2 "{\"type\":\"function\",\"function\":{\"name\":\"w2\",\"parameters\":{\"type\":\"object\",\"$defs\":{\"u\":{}}}}}"
#define TREE "{\"type\":\"function\",\"function\":{\"name\":\"tree\",\"parameters\":{\"type\":\"object\",\"properties\":" \
             "{\"kid\":{\"$ref\":\"#\"}}}}}"
    /* no system message: one with empty content carries the tools; auto mode holds nothing */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[" WEATHER "," SEARCH "]}", &r, &e), 0);
    assert_string_equal(r.prompt, "<|system|><|tool|>[{\"name\": \"get_weather\", \"description\": \"d\", \"parameters\": {\"type\": "
                                  "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"], \"$defs\": {\"u\": {\"type\": \"string\"}}}}, "
                                  "{\"name\": \"search\"}]<|/tool|><|end|><|user|>Hi<|end|><|assistant|>");
    assert_int_equal(r.tool_mode, SRV_TOOLS_AUTO);
    /* auto: what follows the model's <|tool_call|> is held to a list of calls or one call (lazy) */
    assert_int_equal(r.format, PM_FORMAT_JSON_SCHEMA);
    assert_string_equal(r.json_schema, "{\"$defs\":{\"u\":{\"type\":\"string\"}},\"anyOf\":[{\"type\":\"array\",\"items\":{\"anyOf\":["
                                       "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":{\"type\":"
                                       "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}},\"required\":"
                                       "[\"name\",\"arguments\"]},{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"search\"},"
                                       "\"arguments\":{\"type\":\"object\",\"additionalProperties\":false}},\"required\":[\"name\",\"arguments\"]}]},"
                                       "\"minItems\":1},{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},"
                                       "\"arguments\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":"
                                       "[\"city\"]}},\"required\":[\"name\",\"arguments\"]},{\"type\":\"object\",\"properties\":{\"name\":"
                                       "{\"const\":\"search\"},\"arguments\":{\"type\":\"object\",\"additionalProperties\":false}},"
                                       "\"required\":[\"name\",\"arguments\"]}]}");
    srv_chat_req_free(&r);
    /* one function, no parallel calls: a list of one or the call alone; a parameters keyword the
     * mask cannot hold leaves auto reading only */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[" SEARCH "],"
                           "\"parallel_tool_calls\":false}", &r, &e), 0);
    assert_string_equal(r.json_schema, "{\"anyOf\":[{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":"
                                       "{\"const\":\"search\"},\"arguments\":{\"type\":\"object\",\"additionalProperties\":false}},"
                                       "\"required\":[\"name\",\"arguments\"]}]},\"minItems\":1,\"maxItems\":1},{\"type\":\"object\","
                                       "\"properties\":{\"name\":{\"const\":\"search\"},\"arguments\":{\"type\":\"object\","
                                       "\"additionalProperties\":false}},\"required\":[\"name\",\"arguments\"]}]}");
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                           "{\"name\":\"n\",\"parameters\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\","
                           "\"uniqueItems\":true}}}}}]}", &r, &e), 0);
    assert_int_equal(r.tool_mode, SRV_TOOLS_AUTO);
    assert_int_equal(r.format, PM_FORMAT_TEXT);
    assert_null(r.json_schema);
    srv_chat_req_free(&r);
    /* the first system message (a developer one is one) carries them; none: no tools at all */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"developer\",\"content\":\"S\"}],"
                           "\"tools\":[" SEARCH ",{\"type\":\"function\",\"function\":{\"name\":\"m\",\"description\":\"caf\u00e9\"}}]}", &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|>Hi<|end|><|system|>S<|tool|>[{\"name\": \"search\"}, {\"name\": \"m\", \"description\": "
                                  "\"caf\\u00e9\"}]<|/tool|><|end|><|assistant|>");
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[" SEARCH "],\"tool_choice\":\"none\"}", &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|>Hi<|end|><|assistant|>");
    assert_int_equal(r.tool_mode, SRV_TOOLS_OFF);
    srv_chat_req_free(&r);
    /* a named function: one call of it, arguments to its parameters, $defs at the root */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[" WEATHER "," SEARCH "],"
                           "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}", &r, &e), 0);
    assert_int_equal(r.tool_mode, SRV_TOOLS_FORCED);
    assert_int_equal(r.format, PM_FORMAT_JSON_SCHEMA);
    assert_string_equal(r.json_schema, "{\"$defs\":{\"u\":{\"type\":\"string\"}},\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":"
                                       "{\"const\":\"get_weather\"},\"arguments\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                                       "\"string\"}},\"required\":[\"city\"]}},\"required\":[\"name\",\"arguments\"]},\"minItems\":1,"
                                       "\"maxItems\":1}");
    srv_chat_req_free(&r);
    /* required among two: the calls of either, told apart by the name, as many as come */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[" WEATHER "," SEARCH "],"
                           "\"tool_choice\":\"required\"}", &r, &e), 0);
    assert_string_equal(r.json_schema, "{\"$defs\":{\"u\":{\"type\":\"string\"}},\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"object\",\"properties\":"
                                       "{\"name\":{\"const\":\"get_weather\"},\"arguments\":{\"type\":\"object\",\"properties\":{\"city\":"
                                       "{\"type\":\"string\"}},\"required\":[\"city\"]}},\"required\":[\"name\",\"arguments\"]},{\"type\":"
                                       "\"object\",\"properties\":{\"name\":{\"const\":\"search\"},\"arguments\":{\"type\":\"object\","
                                       "\"additionalProperties\":false}},\"required\":[\"name\",\"arguments\"]}]},\"minItems\":1}");
    srv_chat_req_free(&r);
    /* $defs of two functions under one name, a reference to the parameters' own root: any object for the later ones */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[" WEATHER "," WEATHER2 "," TREE "],"
                           "\"tool_choice\":\"required\"}", &r, &e), 0);
    assert_non_null(strstr(r.json_schema, "\"$defs\":{\"u\":{\"type\":\"string\"}}"));
    assert_non_null(strstr(r.json_schema, "{\"name\":{\"const\":\"w2\"},\"arguments\":{\"type\":\"object\"}}"));
    assert_non_null(strstr(r.json_schema, "{\"name\":{\"const\":\"tree\"},\"arguments\":{\"type\":\"object\"}}"));
    srv_chat_req_free(&r);
    /* required with one tool without parameters, no parallel calls: [{"name": "search", "arguments": {}}] only */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[" SEARCH "],\"tool_choice\":\"required\","
                           "\"parallel_tool_calls\":false}", &r, &e), 0);
    assert_string_equal(r.json_schema, "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
                                       "\"search\"},\"arguments\":{\"type\":\"object\",\"additionalProperties\":false}},\"required\":"
                                       "[\"name\",\"arguments\"]},\"minItems\":1,\"maxItems\":1}");
    srv_chat_req_free(&r);
    /* history: an assistant's calls (content null) after its content, a tool's result as its role */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
                           "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":"
                           "\"{\\\"q\\\":\\\"x\\\"}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"no json\"}}]},"
                           "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"R\"},{\"role\":\"assistant\",\"content\":\"A\","
                           "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}]}", &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|>Hi<|end|><|assistant|><|tool_call|>[{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}, "
                                  "{\"name\": \"f\", \"arguments\": \"no json\"}]<|/tool_call|><|end|><|tool|>R<|end|><|assistant|>A"
                                  "<|tool_call|>[{\"name\": \"g\", \"arguments\": {}}]<|/tool_call|><|end|><|assistant|>");
    assert_int_equal(r.tool_mode, SRV_TOOLS_OFF);
    srv_chat_req_free(&r);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\",\"tool_calls\":[]}]}", "invalid_value", "messages[0].tool_calls");
    expect_bad("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}]}", "invalid_type", "messages[0].tool_calls");
    expect_bad("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
               "invalid_type", "messages[0].tool_calls[0].function");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "invalid_type", "messages[0].content");
    expect_bad_as("{\"prompt\":\"x\",\"tools\":[" SEARCH "]}", 1, "unsupported_parameter", "tools");
#undef WEATHER
#undef SEARCH
#undef WEATHER2
#undef TREE
}

/* The streaming reader of calls: the same calls read at once and a byte at a time, the arguments
 * as written less the whitespace outside strings, every prefix's arguments a prefix of the final
 * ones; what it cannot stream makes it bad. */
static void test_call_reader(void **state) {
    (void)state;
    const char *t = " [ {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa ris\", \"n\": [1, 2.50, {\"x\": \"\\\"} \"}]}} ,\n"
                    "{\"parameters\": { }, \"name\": \"f-2\", \"note\": {\"name\": \"no\"}} ] trailing";
    const char *args0 = "{\"city\":\"Pa ris\",\"n\":[1,2.50,{\"x\":\"\\\"} \"}]}";
    srv_call_reader whole = {0}, bytes = {0};
    srv_call_reader_read(&whole, t, 1, strlen(t));
    assert_true(srv_call_reader_complete(&whole));
    assert_int_equal(whole.n, 2);
    assert_string_equal(whole.calls[0].name, "get_weather");
    assert_string_equal(whole.calls[0].args, args0);
    assert_string_equal(whole.calls[1].name, "f-2");
    assert_string_equal(whole.calls[1].args, "{}");
    for (size_t to = 1; to <= strlen(t); to++) {
        srv_call_reader_read(&bytes, t, 1, to);
        for (int k = 0; k < bytes.n; k++) {
            const srv_call_part *p = &bytes.calls[k];
            if (p->name_done) assert_string_equal(p->name, whole.calls[k].name);
            if (p->args_len) assert_memory_equal(p->args, whole.calls[k].args, p->args_len);
        }
        assert_int_equal(srv_call_reader_complete(&bytes), to >= strlen(t) - strlen(" trailing"));
    }
    assert_string_equal(bytes.calls[0].args, args0);
    srv_call_reader_free(&bytes);
    srv_call_reader_free(&whole);
    /* one call alone; a call cut short */
    t = "{\"name\":\"f\",\"arguments\":{\"a\":1}} then text";
    srv_call_reader_read(&whole, t, 0, strlen(t));
    assert_true(srv_call_reader_complete(&whole) && whole.n == 1);
    srv_call_reader_free(&whole);
    t = "[{\"name\":\"f\",\"arguments\":{\"a\": 1";
    srv_call_reader_read(&whole, t, 0, strlen(t));
    assert_false(srv_call_reader_complete(&whole));
    assert_true(whole.calls[0].name_done);
    assert_string_equal(whole.calls[0].args, "{\"a\":1");
    srv_call_reader_free(&whole);
    /* not streamable: a name with other characters, arguments as text or a number, twice, no list */
    const char *bad[] = {"[{\"name\": \"a b\"}]", "[{\"name\":\"f\",\"arguments\":\"{}\"}]", "[{\"name\":\"f\",\"arguments\":3}]",
                         "[{\"name\":\"f\",\"arguments\":{},\"parameters\":{}}]", "\"text\"", "[{\"name\":{}}]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_call_reader_read(&whole, bad[i], 0, strlen(bad[i]));
        assert_int_equal(whole.state, -1);
        assert_false(srv_call_reader_complete(&whole));
        srv_call_reader_free(&whole);
    }
}

static void test_tool_calls_find(void **state) {
    (void)state;
    size_t cl;
    const char *id = "chatcmpl-abc";
    /* forced: the whole text; a single object is a list of one; parameters read as arguments */
    const char *t = "[{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}, {\"name\":\"g\",\"parameters\":{}}]";
    json_t *c = srv_tool_calls_find(t, strlen(t), SRV_TOOLS_FORCED, SIZE_MAX, SIZE_MAX, id, 3, &cl);
    assert_non_null(c);
    assert_int_equal(cl, 0);
    char *s = json_dumps(c, JSON_COMPACT);
    assert_string_equal(s, "[{\"id\":\"call_abc_3_0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":[1,2]}\"}},"
                           "{\"id\":\"call_abc_3_1\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]");
    free(s);
    json_decref(c);
    /* the arguments as written (escapes, number forms), less the whitespace outside strings */
    t = "[{\"name\": \"f\", \"arguments\": {\"s\": \"\\u00e9\\/ x\", \"v\": 1.50e0}}]";
    c = srv_tool_calls_find(t, strlen(t), SRV_TOOLS_FORCED, SIZE_MAX, SIZE_MAX, id, 0, &cl);
    assert_non_null(c);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "arguments")),
                        "{\"s\":\"\\u00e9\\/ x\",\"v\":1.50e0}");
    json_decref(c);
    /* auto: after the <|tool_call|> token (the text before it is content, trailing space cut), up to <|/tool_call|> */
    t = "Let me look. {\"name\": \"f\", \"arguments\": \"{}\"} and more";
    size_t at = strlen("Let me look. "), end = strlen("Let me look. {\"name\": \"f\", \"arguments\": \"{}\"}");
    c = srv_tool_calls_find(t, strlen(t), SRV_TOOLS_AUTO, at, end, id, 0, &cl);
    assert_non_null(c);
    assert_int_equal(cl, strlen("Let me look."));
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(c, 0), "function"), "arguments")), "{}");
    json_decref(c);
    /* auto: a leading "functools" (vLLM's form), a nested list inside */
    t = " functools[{\"name\": \"f\", \"arguments\": {\"tags\": [\"a\", \"b\"]}}] trailing";
    c = srv_tool_calls_find(t, strlen(t), SRV_TOOLS_AUTO, SIZE_MAX, SIZE_MAX, id, 0, &cl);
    assert_non_null(c);
    assert_int_equal(cl, 0);
    json_decref(c);
    /* no calls: plain text, a marker over what is not a call, a bad name, arguments not an object, an empty list, text off */
    const char *none[] = {"Paris is sunny.", "functools is a module", "[{\"name\": \"a b\"}]", "[{\"name\": \"f\", \"arguments\": 3}]", "[]",
                          "[{\"arguments\": {}}]"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        assert_null(srv_tool_calls_find(none[i], strlen(none[i]), SRV_TOOLS_AUTO, SIZE_MAX, SIZE_MAX, id, 0, &cl));
        assert_int_equal(cl, strlen(none[i]));
        assert_null(srv_tool_calls_find(none[i], strlen(none[i]), SRV_TOOLS_AUTO, 0, SIZE_MAX, id, 0, &cl));
    }
    t = "[{\"name\": \"f\"}]";
    assert_null(srv_tool_calls_find(t, strlen(t), SRV_TOOLS_OFF, 0, SIZE_MAX, id, 0, &cl));
    /* streaming in auto mode: text that may still begin "functools" waits, the rest goes up to the marker */
    assert_int_equal(srv_tool_content_ready("  func", 6, SIZE_MAX), 0);
    assert_int_equal(srv_tool_content_ready("functools[", 10, SIZE_MAX), 0);
    assert_int_equal(srv_tool_content_ready("  ", 2, SIZE_MAX), 0);
    assert_int_equal(srv_tool_content_ready("fun times", 9, SIZE_MAX), 9);
    assert_int_equal(srv_tool_content_ready("Hello there", 11, 5), 5);
}

static void test_chat_params(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,\"max_completion_tokens\":7,"
                           "\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,\"seed\":42,\"stop\":\"END\",\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true},\"n\":1,\"tools\":[],\"response_format\":{\"type\":\"text\"},"
                           "\"presence_penalty\":0,\"user\":\"u\",\"frequency_penalty\":null}",
                           &r, &e),
                     0);
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.sampling.temperature > 0.69f && r.sampling.temperature < 0.71f);
    assert_true(r.sampling.top_p > 0.89f && r.sampling.top_p < 0.91f);
    assert_int_equal(r.sampling.top_k, 40);
    assert_int_equal(r.sampling.seed, 42);
    assert_true(r.seed_given);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "END");
    assert_true(r.stream && r.include_usage);
    assert_false(r.logprobs);
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":20}", &r, &e), 0);
    assert_true(r.logprobs && r.top_logprobs == 20);
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":0.5,\"presence_penalty\":-1,"
                           "\"repetition_penalty\":1.2,\"logit_bias\":{\"50256\":-100,\"7\":2.5}}",
                           &r, &e),
                     0);
    assert_true(r.sampling.frequency_penalty == 0.5f && r.sampling.presence_penalty == -1.0f && r.sampling.repetition_penalty == 1.2f);
    assert_true(r.min_tokens == 0 && !r.ignore_eos);
    assert_int_equal(r.n_logit_bias, 2);
    assert_int_equal(r.format, PM_FORMAT_TEXT);
    assert_true(r.logit_bias[0].token == 50256 && r.logit_bias[0].bias == -100.0f); /* in the body's order */
    assert_true(r.logit_bias[1].token == 7 && r.logit_bias[1].bias == 2.5f);
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}", &r, &e), 0);
    assert_int_equal(r.format, PM_FORMAT_JSON_OBJECT);
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_tokens\":7,\"ignore_eos\":true}", &r, &e), 0);
    assert_true(r.min_tokens == 7 && r.ignore_eos);
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                           "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}}",
                           &r, &e),
                     0);
    assert_int_equal(r.format, PM_FORMAT_JSON_SCHEMA);
    assert_string_equal(r.json_schema, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"bb\"],\"max_tokens\":3}", &r, &e), 0);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[1], "bb");
    assert_int_equal(r.max_tokens, 3);
    assert_false(r.seed_given);
    srv_chat_req_free(&r);
}

/* /v1/completions: the prompt kept byte for byte (special tokens included, no template), an array
 * of one prompt, logprobs as a count, completions' own parameters at their no-op values accepted;
 * the rest refused. */
static void test_completions(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    assert_int_equal(parse_as("{\"prompt\":\"<|user|>hi\\n<|end|><|assistant|>\",\"max_tokens\":4,\"temperature\":0.5,\"seed\":3,"
                              "\"stop\":[\"x\"],\"stream\":true,\"logprobs\":0,\"echo\":false,\"suffix\":\"\",\"best_of\":1,\"n\":1}",
                              1, &r, &e),
                     0);
    assert_string_equal(r.prompt, "<|user|>hi\n<|end|><|assistant|>");
    assert_int_equal(r.n_images + r.n_audios, 0);
    assert_true(r.logprobs && r.top_logprobs == 0); /* logprobs 0: the chosen token's alone */
    assert_int_equal(r.max_tokens, 4);
    assert_true(r.seed_given && r.stream && r.n_stop == 1);
    srv_chat_req_free(&r);
    assert_int_equal(parse_as("{\"prompt\":[\"one\"],\"logprobs\":null}", 1, &r, &e), 0);
    assert_string_equal(r.prompt, "one");
    assert_false(r.logprobs);
    srv_chat_req_free(&r);
    assert_int_equal(parse_as("{\"prompt\":\"x\",\"logprobs\":5}", 1, &r, &e), 0);
    assert_true(r.logprobs && r.top_logprobs == 5);
    assert_false(r.echo || r.score_only);
    srv_chat_req_free(&r);
    /* echo: the prompt back (scored with logprobs); max_tokens 0 beside it scores only */
    assert_int_equal(parse_as("{\"prompt\":\"x\",\"echo\":true,\"max_tokens\":0,\"logprobs\":1}", 1, &r, &e), 0);
    assert_true(r.echo && r.score_only && r.max_tokens == 0 && r.logprobs && r.top_logprobs == 1);
    srv_chat_req_free(&r);
    assert_int_equal(parse_as("{\"prompt\":\"x\",\"echo\":true}", 1, &r, &e), 0);
    assert_true(r.echo && !r.score_only && r.max_tokens == 0); /* not given: the server's default */
    srv_chat_req_free(&r);
    /* token ids: bare, or an array of one array */
    const char *id_forms[] = {"{\"prompt\":[200019,5,0]}", "{\"prompt\":[[200019,5,0]]}"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(parse_as(id_forms[i], 1, &r, &e), 0);
        assert_null(r.prompt);
        assert_int_equal(r.n_prompt_ids, 3);
        assert_true(r.prompt_ids[0] == 200019 && r.prompt_ids[1] == 5 && r.prompt_ids[2] == 0);
        srv_chat_req_free(&r);
    }
    struct {
        const char *js, *code, *param;
    } bad[] = {
        {"{}", "missing_required_parameter", "prompt"},
        {"{\"prompt\":null}", "missing_required_parameter", "prompt"},
        {"{\"prompt\":\"\"}", "invalid_value", "prompt"},
        {"{\"prompt\":7}", "invalid_type", "prompt"},
        {"{\"prompt\":[]}", "invalid_value", "prompt"},
        {"{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]}",
         "invalid_value", "prompt"},
        {"{\"prompt\":[[1,\"a\"]]}", "invalid_type", "prompt[0][1]"},
        {"{\"prompt\":[1,-2]}", "invalid_value", "prompt[1]"},
        {"{\"prompt\":[1,2147483648]}", "invalid_value", "prompt[1]"},
        {"{\"prompt\":[1,2.5]}", "invalid_type", "prompt[1]"},
        {"{\"prompt\":[[]]}", "invalid_value", "prompt[0]"},
        {"{\"prompt\":[true]}", "invalid_type", "prompt[0]"},
        {"{\"prompt\":\"<|image_1|>What is this?\"}", "placeholder_mismatch", "prompt"},
        {"{\"prompt\":\"x\",\"logprobs\":6}", "invalid_value", "logprobs"},
        {"{\"prompt\":\"x\",\"logprobs\":true}", "invalid_type", "logprobs"},
        {"{\"prompt\":\"x\",\"echo\":1}", "invalid_type", "echo"},
        {"{\"prompt\":\"x\",\"echo\":false,\"max_tokens\":0}", "invalid_value", "max_tokens"},
        {"{\"prompt\":\"x\",\"echo\":true,\"max_tokens\":-1}", "invalid_value", "max_tokens"},
        {"{\"prompt\":\"x\",\"suffix\":\"end\"}", "unsupported_parameter", "suffix"},
        {"{\"prompt\":\"x\",\"best_of\":2}", "unsupported_value", "best_of"},
        {"{\"prompt\":\"x\",\"n\":17}", "invalid_value", "n"},
        {"{\"prompt\":\"x\",\"n\":3,\"best_of\":2}", "unsupported_value", "best_of"},
        {"{\"prompt\":\"x\",\"max_tokens\":0}", "invalid_value", "max_tokens"},
        {"[\"x\"]", "invalid_json", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_bad_as(bad[i].js, 1, bad[i].code, bad[i].param);
    /* several prompts: each read by its index, with the same parameters; a bad one named by its index */
    json_t *root = json_loads("{\"prompt\":[\"a\",[7,8],\"c\"],\"n\":2,\"best_of\":2,\"max_tokens\":3}", 0, NULL);
    assert_int_equal(srv_completion_prompts(root), 3);
    assert_int_equal(srv_completion_parse(root, 0, &r, &e), 0);
    assert_true(r.prompt && !strcmp(r.prompt, "a") && r.n == 2 && r.max_tokens == 3);
    srv_chat_req_free(&r);
    assert_int_equal(srv_completion_parse(root, 1, &r, &e), 0);
    assert_true(!r.prompt && r.n_prompt_ids == 2 && r.prompt_ids[1] == 8);
    srv_chat_req_free(&r);
    assert_int_equal(srv_completion_parse(root, 2, &r, &e), 0);
    assert_string_equal(r.prompt, "c");
    srv_chat_req_free(&r);
    json_decref(root);
    root = json_loads("{\"prompt\":[\"a\",\"<|audio_1|>\"]}", 0, NULL);
    assert_int_equal(srv_completion_parse(root, 0, &r, &e), 0);
    srv_chat_req_free(&r);
    assert_int_equal(srv_completion_parse(root, 1, &r, &e), -1);
    assert_string_equal(e.param, "prompt[1]");
    srv_chat_req_free(&r);
    json_decref(root);
    root = json_loads("{\"prompt\":[1,2,3]}", 0, NULL); /* token ids: one prompt */
    assert_int_equal(srv_completion_prompts(root), 1);
    json_decref(root);
}

/* ------------------------------------------------------------------ /v1/responses bodies */

/* js as a responses body: translated, then parsed as chat; errors in the body's terms. */
static int resp_parse(const char *js, srv_chat_req *r, srv_error *e) {
    json_t *root = json_loads(js, 0, NULL), *chat = NULL, *names = NULL;
    if (!root) {
        fprintf(stderr, "test JSON does not parse: %s\n", js);
        return -99;
    }
    memset(r, 0, sizeof *r);
    int rc = srv_responses_to_chat(root, NULL, &chat, &names, e);
    if (!rc) rc = srv_chat_parse(chat, &LIM, r, e);
    if (rc) srv_responses_rename(names, e);
    json_decref(root);
    json_decref(chat);
    json_decref(names);
    return rc;
}

/* The responses body and the chat body give the same request: prompt, media, tools, format. */
static void same_as_chat(const char *resp, const char *chat) {
    srv_chat_req a, b;
    srv_error e;
    int ra = resp_parse(resp, &a, &e);
    if (ra) fprintf(stderr, "%s: %s\n", e.param, e.msg);
    assert_int_equal(ra, 0);
    assert_int_equal(parse(chat, &b, &e), 0);
    assert_string_equal(a.prompt, b.prompt);
    assert_int_equal(a.n_images, b.n_images);
    assert_int_equal(a.n_audios, b.n_audios);
    assert_int_equal(a.max_tokens, b.max_tokens);
    assert_int_equal(a.tool_mode, b.tool_mode);
    assert_int_equal(a.format, b.format);
    assert_int_equal(!a.json_schema, !b.json_schema);
    if (a.json_schema) assert_string_equal(a.json_schema, b.json_schema);
    assert_true(a.sampling.temperature == b.sampling.temperature && a.stream == b.stream && a.sampling.min_p == b.sampling.min_p);
    srv_chat_req_free(&a);
    srv_chat_req_free(&b);
}

#define WFN "\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}"

static void test_responses_parse(void **state) {
    (void)state;
    same_as_chat("{\"instructions\":\"Be brief.\",\"input\":\"Hi\",\"max_output_tokens\":7,\"temperature\":0.5,\"stream\":true,\"min_p\":0.2}",
                 "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":7,"
                 "\"temperature\":0.5,\"stream\":true,\"min_p\":0.2}");
    same_as_chat("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Look\"},{\"type\":\"input_image\","
                 "\"image_url\":\"" PNG_URL "\",\"detail\":\"auto\"}," WAV_PART "]}]}",
                 "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Look\"}," IMG_PART "," WAV_PART "]}]}");
    /* a history with a message and its calls, their outputs, the next question */
    same_as_chat("{\"input\":[{\"type\":\"message\",\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"user\",\"content\":\"Q\"},"
                 "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Let me see.\"}]},"
                 "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
                 "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"get_weather\",\"arguments\":\"{}\"},"
                 "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"18 C\"},"
                 "{\"type\":\"function_call\",\"call_id\":\"c3\",\"name\":\"get_weather\",\"arguments\":\"{}\"},"
                 "{\"type\":\"function_call_output\",\"call_id\":\"c3\",\"output\":[{\"type\":\"input_text\",\"text\":\"20 C\"}]},"
                 "{\"role\":\"user\",\"content\":\"And?\"}],\"tools\":[{\"type\":\"function\"," WFN ",\"strict\":true}],"
                 "\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"}}",
                 "{\"messages\":[{\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"user\",\"content\":\"Q\"},"
                 "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me see.\"}],\"tool_calls\":["
                 "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
                 "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{}\"}}]},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"18 C\"},"
                 "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c3\",\"type\":\"function\",\"function\":"
                 "{\"name\":\"get_weather\",\"arguments\":\"{}\"}}]},"
                 "{\"role\":\"tool\",\"tool_call_id\":\"c3\",\"content\":[{\"type\":\"text\",\"text\":\"20 C\"}]},"
                 "{\"role\":\"user\",\"content\":\"And?\"}],\"tools\":[{\"type\":\"function\",\"function\":{" WFN "}}],"
                 "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}");
    same_as_chat("{\"input\":\"Hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":"
                 "\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}}",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                 "{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                 "\"required\":[\"a\"]}}}}");
    /* previous_response_id's conversation goes after the new instructions, before the input */
    {
        json_t *root = json_loads("{\"instructions\":\"S\",\"input\":\"Next\"}", 0, NULL), *chat = NULL, *names = NULL;
        json_t *prev = json_loads("[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\",\"content\":\"A\"}]", 0, NULL);
        srv_chat_req a, b;
        srv_error e;
        assert_int_equal(srv_responses_to_chat(root, prev, &chat, &names, &e), 0);
        assert_int_equal(srv_chat_parse(chat, &LIM, &a, &e), 0);
        assert_int_equal(parse("{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Q\"},"
                               "{\"role\":\"assistant\",\"content\":\"A\"},{\"role\":\"user\",\"content\":\"Next\"}]}", &b, &e),
                         0);
        assert_string_equal(a.prompt, b.prompt);
        srv_chat_req_free(&a);
        srv_chat_req_free(&b);
        json_decref(chat);
        json_decref(names);
        json_decref(prev);
        json_decref(root);
    }
    /* log-probabilities: asked by include, or by top_logprobs alone */
    srv_chat_req r;
    srv_error e;
    assert_int_equal(resp_parse("{\"input\":\"Hi\",\"include\":[\"message.output_text.logprobs\"],\"top_logprobs\":3}", &r, &e), 0);
    assert_true(r.logprobs && r.top_logprobs == 3);
    srv_chat_req_free(&r);
    assert_int_equal(resp_parse("{\"input\":\"Hi\",\"top_logprobs\":2}", &r, &e), 0);
    assert_true(r.logprobs && r.top_logprobs == 2);
    srv_chat_req_free(&r);
    assert_int_equal(resp_parse("{\"input\":\"Hi\",\"include\":[]}", &r, &e), 0);
    assert_false(r.logprobs);
    srv_chat_req_free(&r);
    /* refusals name the body's own fields */
    static const struct { const char *body, *code, *param; } bad[] = {
        {"{\"input\":\"Hi\",\"conversation\":\"conv_1\"}", "unsupported_parameter", "conversation"},
        {"{\"input\":\"Hi\",\"include\":[\"message.output_text.logprobs\",\"file_search_call.results\"]}", "unsupported_value",
         "include[1]"},
        {"{\"input\":\"Hi\",\"top_logprobs\":21}", "invalid_value", "top_logprobs"},
        {"{\"input\":\"Hi\",\"truncation\":\"auto\"}", "unsupported_value", "truncation"},
        {"{\"input\":\"Hi\",\"background\":true}", "unsupported_parameter", "background"},
        {"{\"max_output_tokens\":5}", "missing_required_parameter", "input"},
        {"{\"input\":[]}", "invalid_value", "input"},
        {"{\"input\":7}", "invalid_type", "input"},
        {"{\"input\":[{\"content\":\"x\"}]}", "missing_required_parameter", "input[0].role"},
        {"{\"input\":[{\"role\":\"user\",\"content\":\"x\"},{\"type\":\"reasoning\",\"summary\":[]}]}", "unsupported_value", "input[1].type"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"x\"},{\"type\":\"input_image\",\"image_url\":"
         "\"https://x/y.png\"}]}]}", "unsupported_url", "input[0].content[1].image_url"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_id\":\"f\"}]}]}", "unknown_content_part",
         "input[0].content[0]"},
        {"{\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "invalid_value", "input[0].role"},
        {"{\"input\":[{\"role\":\"user\",\"content\":\"x\"},{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":3}]}",
         "invalid_type", "input[1]"},
        {"{\"input\":\"Hi\",\"max_output_tokens\":0}", "invalid_value", "max_output_tokens"},
        {"{\"input\":\"Hi\",\"tools\":[{\"type\":\"web_search\"}]}", "unsupported_value", "tools[0].type"},
        {"{\"input\":\"Hi\",\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]}", "invalid_value", "tools[0].name"},
        {"{\"input\":\"Hi\",\"tools\":[{\"type\":\"function\"," WFN "}],\"tool_choice\":{\"type\":\"function\",\"name\":\"nope\"}}",
         "invalid_value", "tool_choice.name"},
        {"{\"input\":\"Hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{\"type\":\"array\",\"uniqueItems\":true}}}}",
         "unsupported_value", "text.format.schema"},
        {"{\"input\":\"<|image_1|>Hi\"}", "placeholder_mismatch", "input"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_chat_req r;
        srv_error e;
        memset(&e, 0, sizeof e);
        int rc = resp_parse(bad[i].body, &r, &e);
        if (rc != -1 || strcmp(e.code, bad[i].code) || strcmp(e.param, bad[i].param))
            fprintf(stderr, "case %zu: rc %d code '%s' param '%s': %s\n", i, rc, e.code, e.param, e.msg);
        assert_int_equal(rc, -1);
        assert_string_equal(e.code, bad[i].code);
        assert_string_equal(e.param, bad[i].param);
        assert_null(strstr(e.msg, "messages"));
        srv_chat_req_free(&r);
    }
}

/* The response store: found by id and salt alike, replaced by id, the least recently used gone
 * over the cap, one larger than the cap not kept. */
static void test_response_store(void **state) {
    (void)state;
    srv_response_store *s = srv_response_store_new(310); /* three entries of the sizes below do not fit */
    size_t n, bytes;
    srv_response_store_put(s, "resp_a", NULL, strdup("[\"a\"]"), strdup("{}"));
    srv_response_store_put(s, "resp_b", "tenant", strdup("[\"b\"]"), strdup("{}"));
    char *got = srv_response_store_get(s, "resp_a", NULL, 0);
    assert_string_equal(got, "[\"a\"]");
    free(got);
    assert_null(srv_response_store_get(s, "resp_a", "tenant", 0)); /* another salt */
    assert_null(srv_response_store_get(s, "resp_b", NULL, 0));
    got = srv_response_store_get(s, "resp_b", "tenant", 0);
    assert_string_equal(got, "[\"b\"]");
    free(got);
    srv_response_store_put(s, "resp_a", NULL, strdup("[\"a2\"]"), strdup("{}")); /* replaced */
    got = srv_response_store_get(s, "resp_a", NULL, 0);
    assert_string_equal(got, "[\"a2\"]");
    free(got);
    srv_response_store_usage(s, &n, &bytes);
    assert_int_equal(n, 2);
    char big[160];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    srv_response_store_put(s, "resp_c", NULL, strdup(big), strdup("{}")); /* over the cap with the others: resp_b, used least recently, goes */
    assert_null(srv_response_store_get(s, "resp_b", "tenant", 0));
    got = srv_response_store_get(s, "resp_c", NULL, 0);
    assert_non_null(got);
    free(got);
    char *huge = malloc(4096);
    memset(huge, 'y', 4095);
    huge[4095] = 0;
    srv_response_store_put(s, "resp_d", NULL, huge, strdup("{}")); /* larger than the cap: not kept, nothing dropped for it */
    assert_null(srv_response_store_get(s, "resp_d", NULL, 0));
    got = srv_response_store_get(s, "resp_c", NULL, 0);
    assert_non_null(got);
    free(got);
    srv_response_store_usage(s, &n, &bytes);
    assert_true(n >= 1 && bytes <= 310);
    /* the response object beside the messages (GET), and deleted by id and salt alike */
    srv_response_store_put(s, "resp_e", "tenant", strdup("[\"e\"]"), strdup("{\"id\":\"resp_e\"}"));
    got = srv_response_store_get(s, "resp_e", "tenant", 1);
    assert_string_equal(got, "{\"id\":\"resp_e\"}");
    free(got);
    assert_int_equal(srv_response_store_delete(s, "resp_e", NULL), 0); /* another salt */
    assert_int_equal(srv_response_store_delete(s, "resp_e", "tenant"), 1);
    assert_null(srv_response_store_get(s, "resp_e", "tenant", 1));
    assert_int_equal(srv_response_store_delete(s, "resp_e", "tenant"), 0);
    srv_response_store_free(s);
    /* texts of 64 KB and more live in their own mappings: kept, found, replaced and dropped alike */
    s = srv_response_store_new(1 << 20);
    for (int round = 0; round < 3; round++) {
        size_t n = (size_t)(100 << 10) + (size_t)round;
        char *m = malloc(n + 1), *r = malloc(n + 1);
        memset(m, 'a' + round, n), memset(r, 'A' + round, n);
        m[n] = r[n] = 0;
        char *want = strdup(m);
        srv_response_store_put(s, "resp_big", NULL, m, r);
        got = srv_response_store_get(s, "resp_big", NULL, 0);
        assert_non_null(got);
        assert_string_equal(got, want);
        free(got);
        got = srv_response_store_get(s, "resp_big", NULL, 1);
        assert_int_equal(strlen(got), n);
        assert_int_equal(got[0], 'A' + round);
        free(got);
        free(want);
    }
    srv_response_store_usage(s, &n, &bytes);
    assert_int_equal(n, 1);
    assert_int_equal(srv_response_store_delete(s, "resp_big", NULL), 1);
    srv_response_store_free(s);
}

/* A kept conversation as input items: ids given once (a client's own and ones already given stay),
 * each message kind as its item, an assistant's calls after its text, image urls only when asked. */
static void test_response_items(void **state) {
    (void)state;
    json_t *msgs = json_loads(
        "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,QQ\"},"
        "{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"UklG\",\"format\":\"wav\"}}]},"
        "{\"role\":\"assistant\",\"content\":\"Let me look.\",\"id\":\"msg_out\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"id\":\"call_2\",\"item_id\":\"fc_mine\",\"type\":\"function\","
        "\"function\":{\"name\":\"g\",\"arguments\":\"{\\\"a\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"18 C\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_3\",\"function\":{\"name\":\"h\",\"arguments\":\"\"}}]},"
        "{\"role\":\"developer\",\"content\":\"Be brief\"}]",
        0, NULL);
    assert_non_null(msgs);
    assert_int_equal(srv_items_name(msgs, "abc"), 0);
    json_t *items = srv_items_from_messages(msgs, 0), *with_urls = srv_items_from_messages(msgs, 1);
    char *got = json_dumps(items, JSON_COMPACT | JSON_SORT_KEYS);
    const char *want =
        "[{\"content\":[{\"text\":\"Hi\",\"type\":\"input_text\"},{\"detail\":\"auto\",\"image_url\":null,\"type\":\"input_image\"},"
        "{\"input_audio\":{\"data\":\"UklG\",\"format\":\"wav\"},\"type\":\"input_audio\"}],\"id\":\"msg_abc_0\",\"role\":\"user\","
        "\"status\":\"completed\",\"type\":\"message\"},"
        "{\"content\":[{\"annotations\":[],\"text\":\"Let me look.\",\"type\":\"output_text\"}],\"id\":\"msg_out\",\"role\":\"assistant\","
        "\"status\":\"completed\",\"type\":\"message\"},"
        "{\"arguments\":\"{}\",\"call_id\":\"call_1\",\"id\":\"fc_abc_1_0\",\"name\":\"f\",\"status\":\"completed\",\"type\":\"function_call\"},"
        "{\"arguments\":\"{\\\"a\\\":1}\",\"call_id\":\"call_2\",\"id\":\"fc_mine\",\"name\":\"g\",\"status\":\"completed\","
        "\"type\":\"function_call\"},"
        "{\"call_id\":\"call_1\",\"id\":\"fco_abc_2\",\"output\":\"18 C\",\"status\":\"completed\",\"type\":\"function_call_output\"},"
        "{\"arguments\":\"\",\"call_id\":\"call_3\",\"id\":\"fc_abc_3_0\",\"name\":\"h\",\"status\":\"completed\",\"type\":\"function_call\"},"
        "{\"content\":[{\"text\":\"Be brief\",\"type\":\"input_text\"}],\"id\":\"msg_abc_4\",\"role\":\"developer\","
        "\"status\":\"completed\",\"type\":\"message\"}]";
    assert_string_equal(got, want);
    free(got);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(with_urls, 0), "content"), 1),
                                                          "image_url")),
                        "data:image/png;base64,QQ");
    /* named again (a next turn keeps the conversation): nothing changes */
    char *before = json_dumps(msgs, JSON_COMPACT);
    assert_int_equal(srv_items_name(msgs, "def"), 0);
    char *after = json_dumps(msgs, JSON_COMPACT);
    assert_string_equal(before, after);
    free(before);
    free(after);
    json_decref(items);
    json_decref(with_urls);
    json_decref(msgs);
}

/* Subtitle cues: srt numbered with comma milliseconds, vtt after its header with dot milliseconds,
 * rounded to the millisecond; a line break in a text becomes a space, a "-->" (however many dashes)
 * never survives, and the text's length is honoured (not its NUL). */
static void test_subtitles(void **state) {
    (void)state;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    srv_subtitles_header(f, 0);
    srv_subtitles_cue(f, 0, 1, 0.0, 13.85, "a\nb --> c", 9);
    srv_subtitles_cue(f, 0, 2, 13.85, 3661.2345, "x ---> y -> z", 13);
    fclose(f);
    assert_string_equal(out, "1\n00:00:00,000 --> 00:00:13,850\na b -- > c\n\n2\n00:00:13,850 --> 01:01:01,235\nx --- > y -> z\n\n");
    free(out);
    f = open_memstream(&out, &len);
    srv_subtitles_header(f, 1);
    srv_subtitles_cue(f, 1, 1, 59.9996, 60.5, "hi\0there", 2);
    fclose(f);
    assert_string_equal(out, "WEBVTT\n\n00:01:00.000 --> 00:01:00.500\nhi\n\n");
    free(out);
}

static void test_local_media_policy(void **state) {
    (void)state;
    char dir[] = "/tmp/phi4mm_media_XXXXXX", out[] = "/tmp/phi4mm_out_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_non_null(mkdtemp(out));
    char p[512], secret[512], link[512], url[600];
    snprintf(p, sizeof p, "%s/img.png", dir);
    snprintf(secret, sizeof secret, "%s/secret.png", out);
    snprintf(link, sizeof link, "%s/escape.png", dir);
    FILE *f = fopen(p, "wb");
    fwrite("PNGDATA", 1, 7, f);
    fclose(f);
    f = fopen(secret, "wb");
    fwrite("SECRET", 1, 6, f);
    fclose(f);
    assert_int_equal(symlink(secret, link), 0);
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(srv_read_local_media(dir, p, 100, &buf, &len, err, sizeof err), 0);
    assert_int_equal(len, 7);
    free(buf);
    snprintf(url, sizeof url, "file://%s", p);
    assert_int_equal(srv_read_local_media(dir, url, 100, &buf, &len, err, sizeof err), 0);
    free(buf);
    assert_int_equal(srv_read_local_media(dir, p, 3, &buf, &len, err, sizeof err), -1);       /* too large */
    assert_int_equal(srv_read_local_media(dir, link, 100, &buf, &len, err, sizeof err), -1);  /* symlink out */
    assert_int_equal(srv_read_local_media(dir, secret, 100, &buf, &len, err, sizeof err), -1); /* outside */
    snprintf(url, sizeof url, "%s/../%s", dir, strrchr(out, '/') + 1);
    assert_int_equal(srv_read_local_media(dir, url, 100, &buf, &len, err, sizeof err), -1);   /* .. out */
    assert_int_equal(srv_read_local_media(dir, dir, 100, &buf, &len, err, sizeof err), -1);   /* a directory */
    assert_int_equal(srv_read_local_media(NULL, p, 100, &buf, &len, err, sizeof err), -1);    /* not enabled */
    assert_int_equal(srv_read_local_media(dir, "img.png", 100, &buf, &len, err, sizeof err), -1); /* relative */
    /* through the chat parser */
    srv_parse_limits lim = LIM;
    lim.media_dir = dir;
    char js[1024];
    snprintf(js, sizeof js, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}}]}]}", p);
    json_t *root = json_loads(js, 0, NULL);
    srv_chat_req r;
    srv_error e;
    assert_int_equal(srv_chat_parse(root, &lim, &r, &e), 0);
    assert_int_equal(r.n_images, 1);
    assert_memory_equal(r.images[0].data, "PNGDATA", 7);
    srv_chat_req_free(&r);
    json_decref(root);
    unlink(link);
    unlink(p);
    unlink(secret);
    rmdir(dir);
    rmdir(out);
}

/* ------------------------------------------------------------------ transcription form */

static int form(const char *fields[][2], int n, srv_part *parts) {
    for (int i = 0; i < n; i++) {
        memset(&parts[i], 0, sizeof parts[i]);
        snprintf(parts[i].name, sizeof parts[i].name, "%s", fields[i][0]);
        parts[i].data = (const uint8_t *)fields[i][1];
        parts[i].len = strlen(fields[i][1]);
    }
    return n;
}

static void test_audio_form(void **state) {
    (void)state;
    srv_part parts[8];
    srv_audio_req r;
    srv_error e;
    const char *f1[][2] = {{"file", "RIFFxxxx"}, {"model", "whisper-1"}};
    assert_int_equal(srv_audio_parse(parts, form(f1, 2, parts), 0, &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|><|audio_1|>Transcribe the audio clip into text.<|end|><|assistant|>");
    assert_int_equal(r.format, SRV_RF_JSON);
    assert_int_equal(r.file_len, 8);
    assert_false(r.stream);
    srv_audio_req_free(&r);
    assert_int_equal(srv_audio_parse(parts, form(f1, 2, parts), 1, &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|><|audio_1|>Translate the audio to English.<|end|><|assistant|>");
    srv_audio_req_free(&r);
    const char *f2[][2] = {{"file", "x"}, {"language", "fr"}, {"response_format", "verbose_json"}, {"stream", "true"},
                           {"temperature", "0.5"}, {"max_tokens", "17"}};
    assert_int_equal(srv_audio_parse(parts, form(f2, 6, parts), 1, &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|><|audio_1|>Translate the audio to French.<|end|><|assistant|>");
    assert_string_equal(r.language, "French");
    assert_int_equal(r.format, SRV_RF_VERBOSE_JSON);
    assert_true(r.stream);
    assert_int_equal(r.max_tokens, 17);
    assert_true(r.temperature == 0.5f);
    assert_true(r.chunk_seconds == 0); /* the clip whole unless asked */
    srv_audio_req_free(&r);
    const char *f5[][2] = {{"file", "x"}, {"chunking_strategy", "auto"}};
    assert_int_equal(srv_audio_parse(parts, form(f5, 2, parts), 0, &r, &e), 0);
    assert_true(r.chunk_seconds == SRV_CHUNK_SECONDS);
    srv_audio_req_free(&r);
    const char *f7[][2] = {{"file", "x"}, {"response_format", "srt"}};
    assert_int_equal(srv_audio_parse(parts, form(f7, 2, parts), 0, &r, &e), 0);
    assert_int_equal(r.format, SRV_RF_SRT);
    srv_audio_req_free(&r);
    f7[1][1] = "vtt";
    assert_int_equal(srv_audio_parse(parts, form(f7, 2, parts), 0, &r, &e), 0);
    assert_int_equal(r.format, SRV_RF_VTT);
    srv_audio_req_free(&r);
    const char *f6[][2] = {{"file", "x"}, {"response_format", "verbose_json"}, {"include[]", "logprobs"}, {"timestamp_granularities[]", "segment"}};
    assert_int_equal(srv_audio_parse(parts, form(f6, 4, parts), 0, &r, &e), 0);
    assert_true(r.logprobs);
    srv_audio_req_free(&r);
    struct {
        const char *k1, *v1, *k2, *v2, *param, *code;
    } bad2[] = {{"include[]", "usage", "model", "x", "include[]", "unsupported_value"},
                {"timestamp_granularities[]", "word", "response_format", "verbose_json", "timestamp_granularities[]", "unsupported_value"},
                {"timestamp_granularities[]", "segment", "response_format", "json", "timestamp_granularities[]", "invalid_value"},
                {"timestamp_granularities[]", "line", "response_format", "verbose_json", "timestamp_granularities[]", "invalid_value"},
                {"include[]", "logprobs", "response_format", "text", "include[]", "invalid_value"}};
    for (size_t i = 0; i < sizeof bad2 / sizeof bad2[0]; i++) {
        const char *f[][2] = {{"file", "x"}, {bad2[i].k2, bad2[i].v2}, {bad2[i].k1, bad2[i].v1}};
        assert_int_equal(srv_audio_parse(parts, form(f, 3, parts), 0, &r, &e), -1);
        assert_string_equal(e.param, bad2[i].param);
        assert_string_equal(e.code, bad2[i].code);
        srv_audio_req_free(&r);
    }
    const char *f3[][2] = {{"file", "x"}, {"prompt", "Summarize the talk."}};
    assert_int_equal(srv_audio_parse(parts, form(f3, 2, parts), 0, &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|><|audio_1|>Summarize the talk.<|end|><|assistant|>");
    srv_audio_req_free(&r);
    struct {
        const char *k, *v, *param;
    } bad[] = {{"response_format", "ass", "response_format"}, {"stream", "maybe", "stream"}, {"temperature", "hot", "temperature"},
               {"max_tokens", "0", "max_tokens"},           {"language", "fr_FR!", "language"}, {"prompt", "<|audio_2|>x", "prompt"},
               {"chunking_strategy", "{\"type\": \"server_vad\"}", "chunking_strategy"}, {"chunking_strategy", "Auto", "chunking_strategy"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *f[][2] = {{"file", "x"}, {bad[i].k, bad[i].v}};
        assert_int_equal(srv_audio_parse(parts, form(f, 2, parts), 0, &r, &e), -1);
        assert_int_equal(e.http, 400);
        assert_string_equal(e.param, bad[i].param);
        srv_audio_req_free(&r);
    }
    const char *f4[][2] = {{"model", "x"}};
    assert_int_equal(srv_audio_parse(parts, form(f4, 1, parts), 0, &r, &e), -1);
    assert_string_equal(e.code, "missing_required_parameter");
    srv_audio_req_free(&r);
    char name[48];
    assert_int_equal(srv_language_name("DE", name, sizeof name), 0);
    assert_string_equal(name, "German");
    assert_int_equal(srv_language_name("klingon", name, sizeof name), 0);
    assert_string_equal(name, "Klingon");
    assert_int_equal(srv_language_name("", name, sizeof name), -1);
}

/* ------------------------------------------------------------------ remote image URLs */

static int addr_internal(const char *ip) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, ip, &a->sin_addr), 1);
    }
    return srv_addr_internal((struct sockaddr *)&ss);
}

static void test_media_hosts(void **state) {
    (void)state;
    srv_media_hosts h;
    char err[256];
    assert_int_equal(srv_media_hosts_parse(" Images.Example.com ,*.cdn.example.org, 127.0.0.1,[::1]", &h, err, sizeof err), 0);
    assert_int_equal(h.n, 4);
    assert_int_equal(srv_media_host_allowed(&h, "images.example.com"), SRV_HOST_EXACT);
    assert_int_equal(srv_media_host_allowed(&h, "IMAGES.EXAMPLE.COM."), SRV_HOST_EXACT);
    assert_int_equal(srv_media_host_allowed(&h, "example.com"), SRV_HOST_REFUSED);
    assert_int_equal(srv_media_host_allowed(&h, "evil-images.example.com"), SRV_HOST_REFUSED);
    assert_int_equal(srv_media_host_allowed(&h, "a.b.cdn.example.org"), SRV_HOST_PUBLIC);
    assert_int_equal(srv_media_host_allowed(&h, "cdn.example.org"), SRV_HOST_REFUSED); /* *.name: subdomains only */
    assert_int_equal(srv_media_host_allowed(&h, "xcdn.example.org"), SRV_HOST_REFUSED);
    assert_int_equal(srv_media_host_allowed(&h, "127.0.0.1"), SRV_HOST_EXACT);
    assert_int_equal(srv_media_host_allowed(&h, "[::1]"), SRV_HOST_EXACT);
    assert_int_equal(srv_media_host_allowed(&h, "127.0.0.2"), SRV_HOST_REFUSED);
    assert_int_equal(srv_media_host_allowed(&h, ""), SRV_HOST_REFUSED);
    assert_int_equal(srv_media_host_allowed(&h, "images.example.com/x"), SRV_HOST_REFUSED);
    srv_media_hosts_free(&h);
    assert_int_equal(srv_media_hosts_parse("*", &h, err, sizeof err), 0);
    assert_int_equal(srv_media_host_allowed(&h, "anything.example"), SRV_HOST_PUBLIC);
    srv_media_hosts_free(&h);
    /* an exact entry wins over a wildcard, whatever the order */
    assert_int_equal(srv_media_hosts_parse("*,localhost", &h, err, sizeof err), 0);
    assert_int_equal(srv_media_host_allowed(&h, "localhost"), SRV_HOST_EXACT);
    srv_media_hosts_free(&h);
    const char *bad[] = {"", "a,,b", "a b", "*.", "**", "a.*.com", "ex ample.com", "user@host", "host/path"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(srv_media_hosts_parse(bad[i], &h, err, sizeof err), -1);
        assert_non_null(strstr(err, "--allow-media-hosts"));
        assert_null(h.rules);
    }
    const char *internal[] = {"127.0.0.1", "127.9.9.9", "10.1.2.3",   "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
                              "100.64.0.1", "0.0.0.0",   "224.0.0.1", "255.255.255.255", "198.18.0.1", "::1", "::",
                              "fe80::1",   "fd00::1",   "ff02::1",   "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2001:db8::1"};
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++) assert_int_equal(addr_internal(internal[i]), 1);
    const char *public[] = {"8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "192.169.0.1", "2606:4700::1111", "::ffff:8.8.8.8",
                            "64:ff9b::808:808"};
    for (size_t i = 0; i < sizeof public / sizeof public[0]; i++) assert_int_equal(addr_internal(public[i]), 0);
}

static void test_fetched_images(void **state) {
    (void)state;
    const char *js = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://h/a.png\"}},"
                     "{\"type\":\"image_url\",\"image_url\":\"HTTP://h/b.png\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://h/a.png\"}},"
                     "{\"type\":\"image_url\",\"image_url\":{\"url\":\"" PNG_URL "\"}},{\"type\":\"text\",\"text\":\"https://h/c.png\"}]}]}";
    json_t *root = json_loads(js, 0, NULL);
    assert_non_null(root);
    srv_fetch_table t = {0};
    assert_int_equal(srv_fetch_collect(&t, root, 8), 2); /* each URL once, data: URLs and text left alone */
    assert_string_equal(t.items[0].url, "https://h/a.png");
    assert_string_equal(t.items[1].url, "HTTP://h/b.png");
    assert_null(srv_fetch_find(&t, "https://h/c.png"));
    /* a.png came, b.png failed: the parse names b's place and why */
    t.items[0].data = malloc(8);
    memcpy(t.items[0].data, "\x89PNG\r\n\x1a\n", 8);
    t.items[0].len = 8;
    snprintf(t.items[1].err, sizeof t.items[1].err, "the host 'h' answered HTTP 404");
    srv_parse_limits lim = LIM;
    lim.fetched = &t;
    srv_chat_req r;
    srv_error e;
    memset(&e, 0, sizeof e);
    assert_int_equal(srv_chat_parse(root, &lim, &r, &e), -1);
    assert_string_equal(e.code, "invalid_image_url");
    assert_string_equal(e.param, "messages[0].content[1].image_url");
    assert_non_null(strstr(e.msg, "answered HTTP 404"));
    srv_chat_req_free(&r);
    /* both came: the bytes are the parse's own copies, in placeholder order */
    t.items[1].err[0] = 0;
    t.items[1].data = malloc(3);
    memcpy(t.items[1].data, "GIF", 3);
    t.items[1].len = 3;
    assert_int_equal(srv_chat_parse(root, &lim, &r, &e), 0);
    assert_int_equal(r.n_images, 4);
    assert_int_equal(r.images[0].len, 8);
    assert_int_equal(r.images[1].len, 3);
    assert_memory_equal(r.images[2].data, "\x89PNG", 4);
    assert_ptr_not_equal(r.images[0].data, t.items[0].data);
    assert_string_equal(r.prompt, "<|user|><|image_1|><|image_2|><|image_3|><|image_4|>https://h/c.png<|end|><|assistant|>");
    srv_chat_req_free(&r);
    /* the table's size is bounded: the parse refuses the image count anyway */
    srv_fetch_table_free(&t);
    assert_int_equal(srv_fetch_collect(&t, root, 1), 1);
    srv_fetch_table_free(&t);
    /* without a table (no --allow-media-hosts) a remote URL is unsupported_url */
    assert_int_equal(srv_chat_parse(root, &LIM, &r, &e), -1);
    assert_string_equal(e.code, "unsupported_url");
    assert_non_null(strstr(e.msg, "--allow-media-hosts"));
    srv_chat_req_free(&r);
    json_decref(root);
}

/* vLLM's audio_url part: a data:audio/... URL, a fetched URL, a path under --allow-media-dir. */
static void test_audio_url_part(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":{\"url\":"
                           "\"data:audio/wav;base64,UklGRg==\"}}," WAV_PART ",{\"type\":\"text\",\"text\":\"T\"}]}]}",
                           &r, &e),
                     0);
    assert_string_equal(r.prompt, "<|user|><|audio_1|><|audio_2|>T<|end|><|assistant|>");
    assert_int_equal(r.n_audios, 2);
    assert_memory_equal(r.audios[0].data, "RIFF", 4);
    assert_string_equal(r.audios[0].format, "wav");
    srv_chat_req_free(&r);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":{\"url\":\"" PNG_URL "\"}}]}]}",
               "invalid_audio_url", "messages[0].content[0].audio_url.url");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":\"/tmp/a.wav\"}]}]}",
               "invalid_audio_url", "messages[0].content[0].audio_url");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":{\"url\":\"https://h/a.wav\"}}]}]}",
               "unsupported_url", "messages[0].content[0].audio_url.url");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":5}]}]}", "invalid_type",
               "messages[0].content[0].audio_url");
    expect_bad("{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":\"https://h/a.wav\"}]}]}",
               "invalid_value", "messages[0].content[0].type");
    /* a fetched one; image and audio URLs share the table, each counted as its own kind */
    json_t *root = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":{\"url\":"
                              "\"https://h/a.wav\"}},{\"type\":\"image_url\",\"image_url\":\"https://h/i.png\"}]}]}", 0, NULL);
    srv_fetch_table t = {0};
    assert_int_equal(srv_fetch_collect(&t, root, 8), 2);
    for (int i = 0; i < 2; i++) {
        t.items[i].data = malloc(4);
        memcpy(t.items[i].data, i ? "\x89PNG" : "RIFF", 4);
        t.items[i].len = 4;
    }
    srv_parse_limits lim = LIM;
    lim.fetched = &t;
    assert_int_equal(srv_chat_parse(root, &lim, &r, &e), 0);
    assert_int_equal(r.n_audios, 1);
    assert_int_equal(r.n_images, 1);
    assert_memory_equal(r.audios[0].data, "RIFF", 4);
    assert_memory_equal(r.images[0].data, "\x89PNG", 4);
    srv_chat_req_free(&r);
    snprintf(t.items[0].err, sizeof t.items[0].err, "timed out");
    assert_int_equal(srv_chat_parse(root, &lim, &r, &e), -1);
    assert_string_equal(e.code, "invalid_audio_url");
    assert_string_equal(e.param, "messages[0].content[0].audio_url.url");
    srv_chat_req_free(&r);
    srv_fetch_table_free(&t);
    json_decref(root);
}

/* mm_processor_kwargs (vLLM's): dynamic_hd, the HD crops per image at most. */
static void test_mm_processor_kwargs(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mm_processor_kwargs\":{\"dynamic_hd\":16}}", &r, &e), 0);
    assert_int_equal(r.max_crops, 16);
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mm_processor_kwargs\":null}", &r, &e), 0);
    assert_int_equal(r.max_crops, 0);
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mm_processor_kwargs\":{}}", &r, &e), 0);
    assert_int_equal(r.max_crops, 0);
    srv_chat_req_free(&r);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mm_processor_kwargs\":[1]}", "invalid_type", "mm_processor_kwargs");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mm_processor_kwargs\":{\"dynamic_hd\":4097}}", "invalid_value",
               "mm_processor_kwargs.dynamic_hd");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mm_processor_kwargs\":{\"dynamic_hd\":\"4\"}}", "invalid_type",
               "mm_processor_kwargs.dynamic_hd");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mm_processor_kwargs\":{\"dynamic_hd\":4,\"x\":1}}",
               "unsupported_parameter", "mm_processor_kwargs");
}

/* prediction (OpenAI's Predicted Outputs): its text, from a string or text parts. */
static void test_prediction_param(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"type\":\"content\",\"content\":\"a b\"}}",
                           &r, &e),
                     0);
    assert_string_equal(r.prediction, "a b");
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"type\":\"content\",\"content\":["
                           "{\"type\":\"text\",\"text\":\"a \"},{\"type\":\"text\",\"text\":\"b\"}]}}",
                           &r, &e),
                     0);
    assert_string_equal(r.prediction, "a b");
    srv_chat_req_free(&r);
    assert_int_equal(parse_as("{\"prompt\":\"x\",\"prediction\":{\"type\":\"content\",\"content\":\"c\"}}", 1, &r, &e), 0);
    assert_string_equal(r.prediction, "c");
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":null}", &r, &e), 0);
    assert_null(r.prediction);
    srv_chat_req_free(&r);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":\"a\"}", "invalid_type", "prediction");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"content\":\"a\"}}", "invalid_value",
               "prediction.type");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"type\":\"content\",\"content\":5}}",
               "invalid_type", "prediction.content");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prediction\":{\"type\":\"content\",\"content\":["
               "{\"type\":\"image_url\",\"image_url\":\"x\"}]}}",
               "invalid_value", "prediction.content[0]");
}

/* vLLM's guided decoding: guided_regex kept as given, guided_choice as the escaped alternation of
 * its strings, guided_json as a schema (an object or its JSON text), the structured_outputs
 * spellings the same, min_p; a bad pattern names its construct and byte, two that shape the answer
 * at once and whitespace patterns are refused; a grammar (GBNF) is kept as given under each of its
 * spellings, a bad one refused naming its rule and byte. */
static void test_guided_params(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    const char *m = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
    char js[1024];
    static const struct {
        const char *extra;
        pm_format format;
        const char *regex, *schema; /* what the request carries (NULL: none) */
    } good[] = {
        {"\"guided_regex\":\"\\\\d{3}-[a-z]+\",\"min_p\":0.05", PM_FORMAT_REGEX, "\\d{3}-[a-z]+", NULL},
        {"\"guided_choice\":[\"a.b\",\"c\",\"\"]", PM_FORMAT_REGEX, "(a\\.b|c|)", NULL},
        {"\"structured_outputs\":{\"choice\":[\"yes\",\"no\"]}", PM_FORMAT_REGEX, "(yes|no)", NULL},
        {"\"structured_outputs\":{\"regex\":\"x+\"},\"guided_decoding_backend\":\"xgrammar\"", PM_FORMAT_REGEX, "x+", NULL},
        {"\"guided_json\":{\"type\":\"integer\"}", PM_FORMAT_JSON_SCHEMA, NULL, "{\"type\":\"integer\"}"},
        {"\"guided_json\":\"{\\\"enum\\\": [1, 2]}\"", PM_FORMAT_JSON_SCHEMA, NULL, "{\"enum\":[1,2]}"},
        {"\"structured_outputs\":{\"json_object\":true}", PM_FORMAT_JSON_OBJECT, NULL, NULL},
        {"\"guided_grammar\":\"root ::= [a-z]+ | \\\"(\\\" root \\\")\\\"\"", PM_FORMAT_GRAMMAR, "root ::= [a-z]+ | \"(\" root \")\"", NULL},
        {"\"structured_outputs\":{\"grammar\":\"root ::= \\\"x\\\"\"}", PM_FORMAT_GRAMMAR, "root ::= \"x\"", NULL},
        {"\"grammar\":\"root ::= \\\"y\\\"\\n\"", PM_FORMAT_GRAMMAR, "root ::= \"y\"\n", NULL},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(js, sizeof js, "%s%s}", m, good[i].extra);
        assert_int_equal(parse(js, &r, &e), 0);
        assert_int_equal(r.format, good[i].format);
        if (good[i].regex) assert_string_equal(r.guide, good[i].regex);
        else assert_null(r.guide);
        if (good[i].schema) assert_string_equal(r.json_schema, good[i].schema);
        if (i == 0) assert_true(r.sampling.min_p > 0.049f && r.sampling.min_p < 0.051f);
        srv_chat_req_free(&r);
    }
    assert_int_equal(parse_as("{\"prompt\":\"x\",\"guided_choice\":[\"1\",\"2\"]}", 1, &r, &e), 0);
    assert_string_equal(r.guide, "(1|2)");
    srv_chat_req_free(&r);
    static const struct {
        const char *extra, *code, *param, *needle;
    } bad[] = {
        {"\"guided_regex\":\"a(?=b)\"", "unsupported_value", "guided_regex", "lookaround (the group at byte 1)"},
        {"\"guided_regex\":\"(ab\"", "invalid_value", "guided_regex", "never closed"},
        {"\"guided_regex\":5", "invalid_type", "guided_regex", "a string"},
        {"\"guided_choice\":[]", "invalid_value", "guided_choice", "1 to 4096"},
        {"\"guided_choice\":[\"a\",3]", "invalid_value", "guided_choice", "guided_choice[1]"},
        {"\"guided_choice\":\"a\"", "invalid_value", "guided_choice", "array"},
        {"\"guided_json\":\"{not json\"", "invalid_value", "guided_json", "JSON Schema"},
        {"\"guided_json\":{\"type\":\"array\",\"uniqueItems\":true}", "unsupported_value", "guided_json", "uniqueItems"},
        {"\"guided_grammar\":\"root ::= x\"", "invalid_value", "guided_grammar", "rule 'x' is used but not defined at byte 9 (read as GBNF"},
        {"\"guided_grammar\":\"root ::= root \\\"a\\\"\"", "unsupported_value", "guided_grammar", "left recursion"},
        {"\"guided_grammar\":\"start: x{y}\"", "unsupported_value", "guided_grammar", "templates (x{...} at byte 7) are not read (read as Lark"},
        {"\"guided_grammar\":7", "invalid_type", "guided_grammar", "GBNF"},
        {"\"grammar\":\"root ::= \\\"a\\\"\",\"guided_regex\":\"a\"", "invalid_value", "grammar", "cannot be combined"},
        {"\"guided_whitespace_pattern\":\" \"", "unsupported_parameter", "guided_whitespace_pattern", "not supported"},
        {"\"structured_outputs\":{\"grammar\":\"x\"}", "invalid_value", "structured_outputs.grammar", "expected '::='"},
        {"\"structured_outputs\":[1]", "invalid_type", "structured_outputs", "object"},
        {"\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]", "invalid_value", "guided_choice", "cannot be combined with guided_regex"},
        {"\"response_format\":{\"type\":\"json_object\"},\"guided_regex\":\"a\"", "invalid_value", "guided_regex",
         "cannot be combined with response_format"},
        {"\"guided_regex\":\"a\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", "invalid_value", "response_format",
         "guided decoding"},
        {"\"min_p\":1.5", "invalid_value", "min_p", "between 0 and 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(js, sizeof js, "%s%s}", m, bad[i].extra);
        expect_bad(js, bad[i].code, bad[i].param);
        assert_int_equal(parse(js, &r, &e), -1);
        if (!strstr(e.msg, bad[i].needle)) fail_msg("'%s': '%s' lacks '%s'", bad[i].extra, e.msg, bad[i].needle);
        srv_chat_req_free(&r);
    }
}

/* Fields nothing reads: named in order, chat's and completions' own fields told apart, the list cut
 * with "..." where it outgrows its buffer. */
static void test_ignored_fields(void **state) {
    (void)state;
    json_error_t je;
    char out[32];
    json_t *root = json_loads("{\"messages\": [], \"max_token\": 1, \"prompt\": \"x\", \"user\": \"u\", \"temperature\": 0}", 0, &je);
    assert_int_equal(srv_ignored_fields(root, 0, out, sizeof out), 3);
    assert_string_equal(out, "max_token, prompt, user");
    assert_int_equal(srv_ignored_fields(root, 1, out, sizeof out), 3);
    assert_string_equal(out, "messages, max_token, user");
    json_decref(root);
    root = json_loads("{\"aaaaaaaaaa\": 1, \"bbbbbbbbbb\": 2, \"cccccccccc\": 3, \"dddddddddd\": 4, \"model\": \"m\"}", 0, &je);
    assert_int_equal(srv_ignored_fields(root, 0, out, sizeof out), 4);
    assert_string_equal(out, "aaaaaaaaaa, bbbbbbbbbb...");
    json_decref(root);
    root = json_loads("{\"\": 1, \"a\\r\\nX: y\\u00e9\": 2}", 0, &je);
    assert_int_equal(srv_ignored_fields(root, 0, out, sizeof out), 2);
    assert_string_equal(out, "\"\", a??X: y??");
    json_decref(root);
    root = json_loads("{\"model\": \"m\", \"tool_choice\": \"none\", \"best_of\": 1}", 0, &je);
    assert_int_equal(srv_ignored_fields(root, 0, out, sizeof out), 1);
    assert_string_equal(out, "best_of");
    assert_int_equal(srv_ignored_fields(root, 1, out, sizeof out), 1);
    assert_string_equal(out, "tool_choice");
    json_decref(root);
}

/* vLLM's template switches and stop extensions: continue_final_message leaves the final message open
 * (not beside add_generation_prompt true, nor beside a held answer), add_generation_prompt false ends
 * with the eos text, echo keeps the final assistant message's text; stop_token_ids, include_stop_str_in_output,
 * skip_special_tokens (not false beside tools the model may call). */
static void test_template_switches(void **state) {
    (void)state;
    srv_chat_req r;
    srv_error e;
    const char *convo = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
                        "\"text\":\"The answer\"},{\"type\":\"text\",\"text\":\" is\"}]}],";
    char js[1024];
    snprintf(js, sizeof js, "%s\"continue_final_message\":true,\"add_generation_prompt\":false,\"echo\":true}", convo);
    assert_int_equal(parse(js, &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|>Hi<|end|><|assistant|>The answer is");
    assert_string_equal(r.echo_text, "The answer is");
    srv_chat_req_free(&r);
    snprintf(js, sizeof js, "%s\"continue_final_message\":true}", convo); /* add_generation_prompt not given: continued */
    assert_int_equal(parse(js, &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|>Hi<|end|><|assistant|>The answer is");
    assert_null(r.echo_text);
    srv_chat_req_free(&r);
    snprintf(js, sizeof js, "%s\"add_generation_prompt\":false}", convo);
    assert_int_equal(parse(js, &r, &e), 0);
    assert_string_equal(r.prompt, "<|user|>Hi<|end|><|assistant|>The answer is<|end|><|endoftext|>");
    srv_chat_req_free(&r);
    /* echo of a conversation whose final message is the user's: nothing to echo */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"echo\":true}", &r, &e), 0);
    assert_null(r.echo_text);
    assert_string_equal(r.prompt, "<|user|>Hi<|end|><|assistant|>");
    srv_chat_req_free(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop_token_ids\":[200020,7],"
                           "\"include_stop_str_in_output\":true,\"skip_special_tokens\":false}",
                           &r, &e),
                     0);
    assert_int_equal(r.n_stop_ids, 2);
    assert_true(r.stop_ids[0] == 200020 && r.stop_ids[1] == 7);
    assert_true(r.stop_in_output && r.keep_special);
    srv_chat_req_free(&r);
    assert_int_equal(parse_as("{\"prompt\":\"x\",\"stop_token_ids\":[],\"skip_special_tokens\":true}", 1, &r, &e), 0);
    assert_true(r.n_stop_ids == 0 && !r.keep_special && !r.stop_in_output);
    srv_chat_req_free(&r);
    static const struct {
        const char *body, *code, *param, *needle;
    } bad[] = {
        {"\"continue_final_message\":true,\"add_generation_prompt\":true}", "invalid_value", "continue_final_message", "both"},
        {"\"continue_final_message\":true,\"response_format\":{\"type\":\"json_object\"}}", "invalid_value", "continue_final_message",
         "response_format"},
        {"\"continue_final_message\":1}", "invalid_type", "continue_final_message", "true or false"},
        {"\"stop_token_ids\":5}", "invalid_type", "stop_token_ids", "array"},
        {"\"stop_token_ids\":[1,-2]}", "invalid_value", "stop_token_ids[1]", "token id"},
        {"\"stop_token_ids\":[\"1\"]}", "invalid_type", "stop_token_ids[0]", "token id"},
        {"\"skip_special_tokens\":false,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", "invalid_value",
         "skip_special_tokens", "tool_calls"},
        {"\"include_stop_str_in_output\":\"yes\"}", "invalid_type", "include_stop_str_in_output", "true or false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(js, sizeof js, "%s%s", convo, bad[i].body);
        expect_bad(js, bad[i].code, bad[i].param);
        assert_int_equal(parse(js, &r, &e), -1);
        if (!strstr(e.msg, bad[i].needle)) fail_msg("'%s': '%s' lacks '%s'", bad[i].body, e.msg, bad[i].needle);
        srv_chat_req_free(&r);
    }
    /* a system message that carries the tools cannot be the one left open */
    expect_bad("{\"messages\":[{\"role\":\"system\",\"content\":\"S\"}],\"continue_final_message\":true,\"tools\":[{\"type\":\"function\","
               "\"function\":{\"name\":\"f\"}}]}",
               "invalid_value", "continue_final_message");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64_vectors),         cmocka_unit_test(test_b64_roundtrip),
        cmocka_unit_test(test_b64_rejects),         cmocka_unit_test(test_data_url),
        cmocka_unit_test(test_multipart_boundary),  cmocka_unit_test(test_multipart_parse),
        cmocka_unit_test(test_multipart_rejects),   cmocka_unit_test(test_json_guards),
        cmocka_unit_test(test_chat_prompt_and_placeholders), cmocka_unit_test(test_chat_rejects),
        cmocka_unit_test(test_chat_params),         cmocka_unit_test(test_completions),
        cmocka_unit_test(test_guided_params),
        cmocka_unit_test(test_ignored_fields),
        cmocka_unit_test(test_template_switches),
        cmocka_unit_test(test_chat_tools),          cmocka_unit_test(test_tool_calls_find),
        cmocka_unit_test(test_call_reader),         cmocka_unit_test(test_responses_parse), cmocka_unit_test(test_response_store),
        cmocka_unit_test(test_response_items),
        cmocka_unit_test(test_subtitles),
        cmocka_unit_test(test_local_media_policy),
        cmocka_unit_test(test_media_hosts),         cmocka_unit_test(test_fetched_images),
        cmocka_unit_test(test_audio_url_part),      cmocka_unit_test(test_mm_processor_kwargs),
        cmocka_unit_test(test_prediction_param),
        cmocka_unit_test(test_audio_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
