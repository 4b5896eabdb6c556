/* test_json_mode.c — the JSON-mode recognizer on documents written out here: every prefix of a
 * valid object is accepted and only the whole is complete, whatever the split; invalid ones fail
 * where RFC 8259 says they do; the mask over a real tokenizer keeps exactly the tokens whose bytes
 * continue the text, and the end tokens only after the object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_mode.h"
#include "engine/json_schema.h"
#include "tok/tokenizer.h"
#include "test_util.h"

static const char *const valid[] = {
    "{}",
    "{ }",
    "{\"a\":1}",
    "{\"a\": [1, -2.5e+10, 0, 0.0, 1E5, -0, 3e-2], \"b\": {\"c\": null, \"d\": true, \"e\": false}}",
    "{\"s\":\"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\"}",
    "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":\"\xe4\xb8\xad\xe6\x96\x87\"}",
    "{\"nested\":[[[{\"x\":[]}]],{}],\"k\":\"\"}",
    "{\"a\":[{}, [], \"\", 1]}",
    "{\r\n\t\"pretty\": [\r\n\t\t1,\r\n\t\t2\r\n\t]\r\n}",
};

static const char *const invalid[] = {
    "[1,2]",            /* the top is an object */
    "\"str\"",
    "{\"a\":01}",       /* leading zero */
    "{\"a\":1.}",
    "{\"a\":.5}",
    "{\"a\":+1}",
    "{\"a\":1e}",
    "{\"a\":-}",
    "{\"a\":tru}",
    "{\"a\":True}",
    "{a:1}",            /* unquoted key */
    "{\"a\" 1}",
    "{\"a\":1,}",       /* trailing comma */
    "{\"a\":[1,]}",
    "{\"a\":[1}",       /* mismatched close */
    "{\"a\":1]",
    "{\"a\":\"\\x\"}",   /* bad escape */
    "{\"a\":\"\\u12G4\"}",
    "{\"a\":\"tab\there\"}", /* raw control character */
    "{\"a\":\"\xc0\xaf\"}",  /* overlong */
    "{\"a\":\"\xed\xa0\x80\"}", /* a surrogate in UTF-8 */
    "{\"a\":\"\xf4\x90\x80\x80\"}", /* past U+10FFFF */
    "{\"a\":\"\xe2\x82\"}", /* truncated sequence */
    "{}x",              /* anything after the object */
    "{} ",
    "{\"a\":1}}",
    "{,}",
    "{\"a\":nul}",
    " {}",              /* whitespace before the value: RFC 8259 allows it, JSON mode does not */
    "{\"a\":\"\\uD83D\"}",  /* a lone high surrogate */
    "{\"a\":\"\\uDE00\"}",  /* a lone low one */
    "{\"a\":\"\\uD83D\\n\"}",
};

/* Whether text is a prefix the recognizer accepts; *done: complete after it. */
static int accepts(const char *text, size_t n, int *done) {
    pm_json_state s;
    pm_json_init(&s, pm_json_any_object());
    if (pm_json_feed(&s, text, n)) return 0;
    *done = pm_json_done(&s);
    return 1;
}

static void test_valid_objects(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        size_t n = strlen(valid[i]);
        for (size_t k = 0; k <= n; k++) { /* every prefix, done only at the end */
            int done = -1;
            if (!accepts(valid[i], k, &done)) fail_msg("valid[%zu] refused at byte %zu: %s", i, k, valid[i]);
            assert_int_equal(done, k == n);
        }
        /* fed in pieces: the same state as whole */
        for (size_t cut = 1; cut < n; cut++) {
            pm_json_state s;
            pm_json_init(&s, pm_json_any_object());
            assert_int_equal(pm_json_feed(&s, valid[i], cut), 0);
            assert_int_equal(pm_json_feed(&s, valid[i] + cut, n - cut), 0);
            assert_true(pm_json_done(&s));
        }
    }
}

static void test_invalid_objects(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        int done = 0;
        if (accepts(invalid[i], strlen(invalid[i]), &done) && done) fail_msg("invalid[%zu] accepted: %s", i, invalid[i]);
    }
    /* the limits: nesting and whitespace runs */
    char deep[2 * PM_JSON_MAX_DEPTH + 8];
    size_t n = 0;
    deep[n++] = '{';
    deep[n++] = '"';
    deep[n++] = '"';
    deep[n++] = ':';
    for (int d = 1; d < PM_JSON_MAX_DEPTH; d++) deep[n++] = '[';
    int done;
    assert_true(accepts(deep, n, &done));
    deep[n++] = '[';
    assert_false(accepts(deep, n, &done));
    char ws[PM_JSON_MAX_WS + 3] = "{";
    memset(ws + 1, ' ', PM_JSON_MAX_WS);
    assert_true(accepts(ws, 1 + PM_JSON_MAX_WS, &done));
    ws[1 + PM_JSON_MAX_WS] = '\n';
    assert_false(accepts(ws, 2 + PM_JSON_MAX_WS, &done));
}

/* Where an invalid text fails: the bytes before it are accepted, not the next one. */
static void test_fails_where_it_should(void **state) {
    (void)state;
    static const struct {
        const char *text;
        size_t at;
    } cases[] = {
        {"[1,2]", 0}, {"\"str\"", 0}, {"x", 0}, {"{\"a\":01}", 6}, {"{\"a\":1.}", 7}, {"{\"a\":+1}", 5},
        {"{\"a\":[1}", 7}, {"{\"a\":1]", 6}, {"{a:1}", 1}, {"{\"a\":1,}", 7}, {"{}x", 2}, {"{\"a\":\"\\x\"}", 7},
        {"{\"a\":nul}", 8}, {"{\"a\":\"\xc0\xaf\"}", 6}, {"{\"a\":\"\xed\xa0\x80\"}", 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int done;
        if (!accepts(cases[i].text, cases[i].at, &done)) fail_msg("case %zu: refused before byte %zu", i, cases[i].at);
        if (accepts(cases[i].text, cases[i].at + 1, &done)) fail_msg("case %zu: byte %zu accepted", i, cases[i].at);
    }
}

/* Whether schema accepts text as a prefix (1), whole (2), or not (0). */
static int schema_accepts(const pm_json_schema *sch, const char *text) {
    pm_json_state s;
    pm_json_init(&s, pm_json_schema_root(sch));
    if (pm_json_feed(&s, text, strlen(text))) return 0;
    return pm_json_done(&s) ? 2 : 1;
}

static pm_json_schema *compile_ok(const char *text) {
    pm_json_schema *sch = NULL;
    pm_err e = {0};
    if (pm_json_schema_compile(text, &sch, &e)) fail_msg("schema refused: %s (%s)", e.msg, text);
    return sch;
}

static void test_schemas(void **state) {
    (void)state;
    static const struct {
        const char *schema;
        const char *whole[6], *prefix_only[4], *refused[10];
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},\"age\":{\"type\":\"integer\"},"
         "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2},\"opt\":{\"type\":[\"number\",\"null\"]}},"
         "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
         {"{\"name\":\"Ada\",\"age\":36}", "{\"name\":\"Ada\", \"age\":36, \"tags\":[\"a\",\"b\"]}", "{\"name\":\"\",\"age\":-1,\"opt\":null}",
          "{\"name\":\"abcde\",\"age\":0,\"tags\":[],\"opt\":1.5e3}", "{\"name\":\"\\u00e9\\n\",\"age\":7}"},
         {"{\"name\":\"Ada\",\"age\":3", "{\"name\":\"Ada\""},
         {"{\"age\":36,\"name\":\"Ada\"}", "{\"name\":\"Ada\"}", "{\"name\":\"abcdef\",\"age\":1}", "{\"name\":\"Ada\",\"age\":1.5}",
          "{\"name\":\"Ada\",\"age\":1,\"tags\":[\"c\"]}", "{\"name\":\"Ada\",\"age\":1,\"tags\":[\"a\",\"b\",\"a\"]}",
          "{\"name\":\"Ada\",\"age\":1,\"extra\":1}", "{\"name\":\"Ada\",\"age\":1,\"opt\":\"x\"}", "{\"name\":\"Ada\",\"age\":1,}"}},
        {"{\"enum\":[\"red\",\"green\",1,12,{\"k\":[true]}]}", {"\"red\"", "\"green\"", "1", "12", "{\"k\":[true]}"}, {"\"gr"},
         {"\"blue\"", "2", "123", "\"red\" ", "{\"k\": [true]}"}},
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
         "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
         {"{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}", "{\"v\":0}"}, {"{\"v\":1,\"kids\":[{\"v\":2"},
         {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}"}},
        {"{\"anyOf\":[{\"type\":\"string\",\"minLength\":2},{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"boolean\"}}}]}",
         {"\"ab\"", "{\"x\":true}", "{}"}, {"\"a"}, {"[1]", "\"a\"", "{\"x\":null}", "{\"y\":1}"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2}", {"[1,2]", "[1,2,3]"}, {"[1", "[1,2"}, {"[1]", "[]", "[1.0,2]"}},
        {"{\"properties\":{\"a\\\"b\":{\"type\":\"null\"},\"c\":{\"const\":\"x\",\"description\":\"d\"}},\"required\":[\"a\\\"b\"],"
         "\"title\":\"t\"}",
         {"{\"a\\\"b\":null}", "{\"a\\\"b\":null,\"c\":\"x\"}"}, {"{\"a\\\"b\":nul"}, {"{\"ab\":null}", "{\"a\\\"b\":null,\"c\":\"y\"}"}},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", {"{}", "{\"any\":1,\"key\":2}"}, {"{\"k\":"},
         {"{\"k\":\"v\"}"}},
        {"{\"type\":\"string\",\"nullable\":true}", {"null", "\"s\""}, {"nu"}, {"1"}},
        /* a discriminated union: the first property's value picks the object the rest follows */
        {"{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"t\",\"x\"]},"
         "{\"type\":\"object\",\"properties\":{\"t\":{\"enum\":[\"b\",\"ab\"]},\"y\":{\"type\":\"string\"}},\"required\":[\"t\"]},"
         "{\"type\":\"string\"}]}",
         {"{\"t\":\"a\",\"x\":1}", "{\"t\":\"b\"}", "{\"t\":\"ab\",\"y\":\"s\"}", "{\"t\":\"b\" , \"y\":\"\"}", "\"s\""},
         {"{\"t\":\"a\"", "{\"t\":\"a\",\"x\":1"},
         {"{\"t\":\"a\",\"y\":\"s\"}", "{\"t\":\"a\"}", "{\"t\":\"b\",\"x\":1}", "{\"t\":\"c\"}", "{\"x\":1}", "{}",
          "{\"t\":\"ab\",\"x\":1}"}},
        {"true", {"[1,{\"a\":null}]", "\"x\"", "-0.5e-3", "false"}, {"tr"}, {"tru1"}},
        /* pattern: ECMAScript's, matched anywhere unless anchored, on the text with escapes decoded */
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", {"\"AB-123\""}, {"\"AB-12", "\"A"},
         {"\"AB-12\"", "\"AB-1234", "\"ab-123\"", "\"\""}},
        {"{\"type\":\"string\",\"pattern\":\"b+\"}", {"\"abba\"", "\"b\""}, {"\"ac"}, {"\"ac\"", "\"\"", "\"\\u0062\""}}, /* no \\u */
        {"{\"type\":\"string\",\"pattern\":\"^a\\\\nb\\u00e9\\\\/$\"}", {"\"a\\nb\xc3\xa9/\"", "\"a\\nb\xc3\xa9\\/\""}, {"\"a\\n"},
         {"\"anb\xc3\xa9/\"", "\"a\\tb\xc3\xa9/\"", "\"a\\nb\\u00e9/\""}},
        {"{\"type\":\"string\",\"pattern\":\"^ab$\"}", {"\"ab\""}, {"\"ab"}, {"\"ab\\", "\"ab\\n", "\"ab \""}}, /* no escape goes on */
        {"{\"type\":\"string\",\"pattern\":\"^\xf0\x9f\x98\x80.$\"}", {"\"\xf0\x9f\x98\x80x\"", "\"\xf0\x9f\x98\x80\\t\""},
         {"\"\xf0\x9f\x98\x80"},
         {"\"\xf0\x9f\x98\x80\"", "\"\xf0\x9f\x98\x80\\r\"", "\"\xf0\x9f\x98\x80\\n\"", "\"\\ud83d\\ude00x\""}},
        {"{\"type\":\"string\",\"pattern\":\"^[\\\\x00-\\\\x1f]$\"}", {"\"\\n\"", "\"\\b\""}, {"\""}, {"\"\\u0001\"", "\"\\u000b\""}},
        /* beside lengths: a state with no room left for its match is a dead end the mask never enters */
        {"{\"type\":\"string\",\"pattern\":\"ok\",\"maxLength\":8}", {"\"xxokxxxx\"", "\"ok\"", "\"abcdefok\""}, {"\"abcdef", "\"abcdefo"},
         {"\"abcdefg", "\"xxxxxxxok\"", "\"abcdefgh\"", "\"\""}},
        {"{\"type\":\"string\",\"pattern\":\"^a+$\",\"minLength\":3}", {"\"aaa\"", "\"aaaaa\""}, {"\"aa", "\"a"}, {"\"aa\"", "\"aab"}},
        {"{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":\"^[0-9]{1,3}$\"}},"
         "\"required\":[\"code\"]}",
         {"{\"code\":\"123\"}", "{\"code\":\"7\"}"}, {"{\"code\":\"12"}, {"{\"code\":\"1234\"}", "{\"code\":\"12a\"}", "{\"code\":\"\"}"}},
        /* an integer's bounds: the digits held to the range as they come, the end only inside it */
        {"{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"age\"]}",
         {"{\"age\":0}", "{\"age\":7}", "{\"age\":150}", "{\"age\":99 }"}, {"{\"age\":15", "{\"age\":1"},
         {"{\"age\":151}", "{\"age\":-1}", "{\"age\":1500", "{\"age\":-0}", "{\"age\":00}", "{\"age\":1.5}", "{\"age\":2e1}"}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":-3.5,\"exclusiveMaximum\":10}", {"-3", "0", "9"}, {"-"},
         {"-4", "10", "-10", "100"}},
        {"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true}", {"6", "123456789012345678901234"}, {"1"}, {"5", "0", "-6"}},
        {"{\"type\":[\"integer\",\"null\"],\"maximum\":-2}", {"-2", "-1000", "null"}, {"-"}, {"-1", "0", "5"}},
        {"{\"type\":\"integer\",\"minimum\":10}", {"10", "99999999999999999999"}, {"1"}, {"9", "-10"}},
        /* tuples: prefixItems (Pydantic's tuple[int, str]), the rest by items (false: none); the older items list */
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"minItems\":2,\"maxItems\":2}",
         {"[1,\"a\"]", "[-5, \"\"]"}, {"[1", "[1,\"a\""}, {"[\"a\",1]", "[1]", "[1,\"a\",2]", "[1,2]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"}],\"items\":{\"type\":\"null\"}}", {"[]", "[true]", "[false,null,null]"},
         {"[true,"}, {"[null]", "[true,true]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"const\":1},{\"const\":2}],\"items\":false}", {"[]", "[1]", "[1,2]"}, {"[1,"},
         {"[1,2,3]", "[2]"}},
        {"{\"type\":\"array\",\"items\":[{\"type\":\"string\"}],\"additionalItems\":{\"type\":\"integer\"}}", {"[\"x\",1,2]", "[\"x\"]"},
         {"[\"x\","}, {"[1]", "[\"x\",\"y\"]"}},
        {"{\"type\":\"array\",\"maxItems\":0}", {"[]"}, {"["}, {"[1]", "[[]]"}},
        /* formats held: a part of each that validators take (no February 29, Python's 6 fraction digits) */
        {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-03-31T23:59:59Z\"", "\"0001-01-01T00:00:00.123456+05:30\""},
         {"\"2024-0", "\"2024-03-31T23:59:59"},
         {"\"2024-02-30T00:00:00Z\"", "\"2024-04-31T00:00:00Z\"", "\"2024-03-31T24:00:00Z\"", "\"2024-03-31 12:00:00Z\"",
          "\"2024-03-31T12:00:00\"", "\"0000-01-01T00:00:00Z\"", "\"2024-03-31T12:00:00.1234567Z\"", "\"2024-13-01T00:00:00Z\""}},
        {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-28\"", "\"1999-12-31\""}, {"\"1999-1"},
         {"\"2024-02-29\"", "\"99-12-31\"", "\"1999-1-01\""}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"ABCDEF01-2345-6789-abcd-ef0123456789\""},
         {"\"123e4567-"}, {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400\"", "\"g23e4567-e89b-12d3-a456-426614174000\""}},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"192.168.0.1\"", "\"0.0.0.0\"", "\"255.255.255.255\""}, {"\"10.0."},
         {"\"256.1.1.1\"", "\"01.2.3.4\"", "\"1.2.3\"", "\"1.2.3.4.5\""}},
        {"{\"type\":\"string\",\"format\":\"email\"}", {"\"ada.lovelace+x@example.co.uk\"", "\"a@b.io\""}, {"\"ada@"},
         {"\"ada@localhost\"", "\".ada@x.io\"", "\"a..b@x.io\"", "\"ada@-x.io\"", "\"ada@x.i\"", "\"@x.io\""}},
        {"{\"type\":\"string\",\"format\":\"hostname\",\"maxLength\":12}", {"\"example.com\"", "\"a\"", "\"x-1.y\""}, {"\"ex"},
         {"\"-a.com\"", "\"a-.com\"", "\"a..b\"", "\"example.co.uk\""}},
        {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^0\"}", {"\"0a3e4567-e89b-12d3-a456-426614174000\""}, {"\"0"},
         {"\"1a3e4567-e89b-12d3-a456-426614174000\""}},
        {"{\"type\":\"string\",\"format\":\"duration\"}", {"\"P1D\"", "\"PT0.5S\"", "\"P1Y2M3DT4H5M6.7S\"", "\"P2W\"", "\"PT36H\""},
         {"\"P", "\"P1DT"}, {"\"P\"", "\"PT\"", "\"P1DT\"", "\"P1H\"", "\"1D\"", "\"P1D2Y\""}},
        {"{\"type\":\"string\",\"format\":\"uri\"}",
         {"\"https://example.com\"", "\"http://a.b.io:8080/p/q%20r?x=1&y=/z#top\"", "\"https://10.0.0.1/\"", "\"https://x.org/a(b)\""},
         {"\"https://example.com:"}, {"\"ftp://x.org\"", "\"https://localhost/\"", "\"https://x.org/a b\"", "\"https://x.org/%zz\"", "\"x.org\""}},
        {"{\"type\":\"string\",\"format\":\"ipv6\"}", {"\"::\"", "\"::1\"", "\"2001:db8::1\"", "\"1:2:3:4:5:6:7:8\"", "\"fe80::a:b\"", "\"1::\""},
         {"\"2001:"}, {"\"1:2:3:4:5:6:7:8:9\"", "\":::1\"", "\"1::2::3\"", "\"12345::1\"", "\"g::1\"", "\"1:2:3:4:5:6:7\""}},
        {"{\"type\":\"string\",\"format\":\"iri\"}", {"\"anything\"", "\"\""}, {"\"x"}, {"1"}}, /* an annotation still */
        /* a number's bounds: written without an exponent, the digits held to the range */
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", {"0", "1", "0.5", "1.000", "0.999"}, {"0.", "1."},
         {"1.5", "-0.1", "2", "1e0", "0.5e1", "1.0001", "10"}},
        {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":[\"number\",\"null\"],\"exclusiveMinimum\":0,\"exclusiveMaximum\":2.5}}}",
         {"{\"p\":0.001}", "{\"p\":2.49}", "{\"p\":null}", "{\"p\":1}"}, {"{\"p\":0.0", "{\"p\":2"},
         {"{\"p\":0}", "{\"p\":0.0}", "{\"p\":2.5}", "{\"p\":-1}", "{\"p\":3}", "{\"p\":2.50}"}},
        {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":10}}}", {"{\"n\":10}", "{\"n\":25 }"}, {"{\"n\":1"},
         {"{\"n\":1}", "{\"n\":9 }", "{\"n\":2,"}}, /* a prefix of the range ended by what follows it */
        /* multipleOf: the multiples' digits, within the bounds beside it */
        {"{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":0,\"maximum\":20}", {"0", "5", "20", "15"}, {"1", "2"},
         {"3", "25", "-5", "7", "21", "5.0"}},
        {"{\"type\":\"number\",\"multipleOf\":0.25}", {"0.25", "1", "-2.75", "3.50", "0", "-0.0"}, {"0.2", "1.", "-"},
         {"0.1", "1e2", "0.125", "2.30", "0.2"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pm_json_schema *sch = compile_ok(cases[i].schema);
        for (int k = 0; k < 6 && cases[i].whole[k]; k++)
            if (schema_accepts(sch, cases[i].whole[k]) != 2) fail_msg("schema %zu: '%s' is not taken whole", i, cases[i].whole[k]);
        for (int k = 0; k < 4 && cases[i].prefix_only[k]; k++)
            if (schema_accepts(sch, cases[i].prefix_only[k]) != 1) fail_msg("schema %zu: '%s' is not a prefix only", i, cases[i].prefix_only[k]);
        for (int k = 0; k < 10 && cases[i].refused[k]; k++)
            if (schema_accepts(sch, cases[i].refused[k]) == 2) fail_msg("schema %zu: '%s' taken", i, cases[i].refused[k]);
        pm_json_schema_free(sch);
    }
}

/* Schemas that cannot be held are refused, naming the keyword and where. */
static void test_schema_refusals(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"{\"pattern\":\"a+\"}", "'pattern'"}, /* of a schema not typed "string" */
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "pattern: lookaround"},
        {"{\"type\":\"string\",\"pattern\":\"^a|b\"}", "anchor beside an alternation"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", "pattern: the group opened at byte 0"},
        {"{\"type\":\"string\",\"pattern\":5}", "pattern must be a string"},
        {"{\"type\":\"string\",\"pattern\":\"^ab+$\",\"maxLength\":1}", "no string of the pattern has such a length"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":2000}", "above 1000"},
        {"{\"properties\":{\"a\":{\"minimum\":1}}}", "#/properties/a"},
        {"{\"type\":\"number\",\"maximum\":1,\"enum\":[1]}", "'maximum' is not supported here"},
        {"{\"type\":\"string\",\"format\":\"uuid\",\"pattern\":\"^z\"}", "format 'uuid' beside its pattern: no string is both"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"maximum\":1}", "no number lies between 1 and 1"},
        {"{\"type\":\"number\",\"minimum\":1e-50}", "finer than 10^-40"},
        {"{\"type\":\"string\",\"multipleOf\":2}", "'multipleOf'"},
        {"{\"type\":\"integer\",\"multipleOf\":0}", "multipleOf must be a number above 0"},
        {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":1,\"maximum\":6}", "no multiple of 7 lies within the bounds"},
        {"{\"type\":\"number\",\"multipleOf\":0.00001234567}", "too large an automaton"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer lies between 5 and 4"},
        {"{\"type\":\"integer\",\"minimum\":\"1\"}", "minimum must be a number"},
        {"{\"type\":\"integer\",\"maximum\":1e19}", "beyond +/-10^18"},
        {"{\"type\":\"integer\",\"minimum\":1,\"enum\":[1,2]}", "'minimum'"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"enum\":[\"x\"]}]}", "both admit a string"},
        {"{\"type\":[\"integer\",\"number\"]}", "both admit a number"},
        {"{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\"}]}", "tell them apart"},
        {"{\"anyOf\":[{\"properties\":{\"t\":{\"const\":1}},\"required\":[\"t\"]},{\"properties\":{\"t\":{\"const\":1}},"
         "\"required\":[\"t\"]}]}", "tell them apart"},
        {"{\"anyOf\":[{\"properties\":{\"t\":{\"const\":1}}},{\"properties\":{\"t\":{\"const\":2}}}]}", "tell them apart"},
        {"{\"anyOf\":[{\"properties\":{\"t\":{\"const\":1}},\"required\":[\"t\"]},{\"properties\":{\"u\":{\"const\":2}},"
         "\"required\":[\"u\"]}]}", "tell them apart"},
        {"{\"anyOf\":[{\"properties\":{\"t\":{\"const\":1}},\"required\":[\"t\"]},{}]}", "both admit an object"},
        {"{\"type\":\"object\",\"required\":[\"q\"]}", "'q' is not among"},
        {"{\"$ref\":\"#/$defs/missing\"}", "points nowhere"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "deeper than"},
        {"{\"type\":\"foo\"}", "unknown type"},
        {"{\"type\":\"array\",\"prefixItems\":{}}", "prefixItems must be a list"},
        {"{\"type\":\"array\",\"items\":[{}],\"prefixItems\":[{}]}", "items as a list beside prefixItems"},
        {"{\"type\":\"array\",\"additionalItems\":false}", "additionalItems goes with items as a list"},
        {"{\"allOf\":[{},{}]}", "allOf"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "maxLength below"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "leaves the document"},
        {"{\"type\":", "not JSON"},
        {"false", "must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pm_json_schema *sch = NULL;
        pm_err e = {0};
        int rc = pm_json_schema_compile(cases[i][0], &sch, &e);
        if (!rc) fail_msg("schema %zu compiled: %s", i, cases[i][0]);
        assert_int_equal(rc, strstr(e.msg, "not supported") ? PM_EUNSUPPORTED : rc == PM_ELIMIT ? PM_ELIMIT : PM_EINVAL);
        if (!strstr(e.msg, cases[i][1])) fail_msg("schema %zu: '%s' lacks '%s'", i, e.msg, cases[i][1]);
        assert_null(sch);
    }
    /* many patterns, each within the regex engine's own limit, over the schema's budget together */
    char big[8192];
    int n = snprintf(big, sizeof big, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 30; i++)
        n += snprintf(big + n, sizeof big - (size_t)n, "%s\"p%d\":{\"type\":\"string\",\"pattern\":\"^[ab]*a[ab]{14}%c$\"}", i ? "," : "", i, 'c' + i % 20);
    snprintf(big + n, sizeof big - (size_t)n, "}}");
    pm_json_schema *sch = NULL;
    pm_err e = {0};
    int rc = pm_json_schema_compile(big, &sch, &e);
    if (rc != PM_EUNSUPPORTED) fail_msg("%d %s", rc, e.msg);
    assert_non_null(strstr(e.msg, "patterns' automata take too long to build together"));
    assert_null(sch);
}

/* The mask on the fixture's tokenizer: a token survives iff its bytes continue the text (fed
 * whole, through the recognizer: the mask's first-byte groups and plain-string shortcut agree). */
static void test_mask(void **state) {
    (void)state;
    pm_tokenizer *tok = tu_fixture_tokenizer();
    assert_non_null(tok);
    int V = pm_tok_vocab_size(tok) + 40; /* ids past the tokenizer's: masked */
    float *lg = malloc(sizeof(float) * (size_t)V);
    uint8_t *allow = malloc((size_t)V);
    pm_json_vocab *jv = pm_json_vocab_new(tok, V);
    assert_non_null(jv);
    const int32_t eos[] = {199999, 200020};
    /* JSON mode's any object, then a schema's bounded string, enum, listed keys, root number */
    pm_json_schema *sch = compile_ok("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":3},"
                                     "\"e\":{\"enum\":[\"ab\",\"abc\",5]},\"n\":{\"type\":\"number\"}},\"required\":[\"s\",\"e\"]}");
    pm_json_schema *num = compile_ok("{\"type\":\"integer\"}");
    pm_json_schema *range = compile_ok("{\"type\":\"integer\",\"minimum\":-20,\"maximum\":35}");
    pm_json_schema *prob = compile_ok("{\"type\":\"number\",\"minimum\":0,\"exclusiveMaximum\":0.75}");
    pm_json_schema *age = compile_ok("{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
                                     "\"n\":{\"type\":\"integer\"}}}");
    pm_json_schema *pat = compile_ok("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[a-z]{2}[0-9]+$\"},"
                                     "\"tag\":{\"type\":\"string\",\"pattern\":\"x\",\"maxLength\":6}}}");
    pm_json_schema *calls = compile_ok("{\"type\":\"array\",\"items\":{\"anyOf\":[{\"properties\":{\"name\":{\"const\":\"get\"},\"arguments\":"
                                       "{\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}},\"required\":[\"name\",\"arguments\"]},"
                                       "{\"properties\":{\"name\":{\"const\":\"getall\"},\"arguments\":{\"properties\":{\"q\":{\"type\":\"string\"}}}},"
                                       "\"required\":[\"name\",\"arguments\"]}]}}");
    const struct {
        const pm_json_node *root;
        const char *text;
    } cases[] = {
        {pm_json_any_object(), ""}, {pm_json_any_object(), "{\"name\": \"Ada\", \"age\": 3"}, {pm_json_any_object(), "{\"a\": [1, 2"},
        {pm_json_any_object(), "{\"s\": \"caf\xc3"}, {pm_json_any_object(), "{\"s\": \"x\\"}, {pm_json_any_object(), "{\"s\": \"x\\u12"},
        {pm_json_any_object(), "{\"k\": tr"}, {pm_json_schema_root(sch), "{\"s\":\"ab"}, {pm_json_schema_root(sch), "{\""},
        {pm_json_schema_root(sch), "{\"s\":\"\",\"e\":\"ab"}, {pm_json_schema_root(sch), "{\"s\":\"\",\"e\":"},
        {pm_json_schema_root(num), "-12"}, {pm_json_any_object(), "{\"a\": 1, "}, {pm_json_any_object(), "{\"a\":"},
        {pm_json_any_object(), "{\"a\": ["}, {pm_json_any_object(), "{\"a\": \"x\""},
        {pm_json_any_object(), "{\"a\": \"x\"                    "}, /* 20 of the 24 spaces in a row */
        {pm_json_any_object(), "{\"a\":                       "},  /* 23 */
        {pm_json_any_object(), "{\"a\":                        "}, /* 24: none more */
        {pm_json_schema_root(sch), "{\"s\":\"\" ,\n "}, {pm_json_schema_root(sch), "{\"s\":\"\",\"e\":5"},
        {pm_json_any_object(), "{\"a\": 12"}, {pm_json_any_object(), "{\"a\": 1.5e3"}, {pm_json_any_object(), "{\"a\": [0"},
        {pm_json_schema_root(calls), "[{\"name\": \"get"}, {pm_json_schema_root(calls), "[{\"name\": \"get\""},
        {pm_json_schema_root(calls), "[{\"name\": \"getall\", \"arguments\": {"},
        {pm_json_schema_root(calls), "[{\"name\": \"get\", \"arguments\": {"},
        {pm_json_schema_root(pat), "{\"id\": \""}, {pm_json_schema_root(pat), "{\"id\": \"ab"}, {pm_json_schema_root(pat), "{\"id\": \"ab1"},
        {pm_json_schema_root(pat), "{\"tag\": \"ab"}, {pm_json_schema_root(pat), "{\"tag\": \"abcd"}, {pm_json_schema_root(pat), "{\"tag\": \"abcde"},
        {pm_json_schema_root(range), ""}, {pm_json_schema_root(range), "3"}, {pm_json_schema_root(range), "-2"},
        {pm_json_schema_root(range), "-"}, {pm_json_schema_root(age), "{\"age\": "}, {pm_json_schema_root(age), "{\"age\": 1"},
        {pm_json_schema_root(prob), ""}, {pm_json_schema_root(prob), "0"}, {pm_json_schema_root(prob), "0."}, {pm_json_schema_root(prob), "0.7"},
        {pm_json_schema_root(age), "{\"age\": 15"}, {pm_json_schema_root(age), "{\"age\": 150, \"n\": 1"},
        {pm_json_any_object(), "{\"x\": {}}"},
    };
    size_t n_cases = sizeof cases / sizeof cases[0];
    for (size_t k = 0; k < n_cases; k++) {
        const char *text = cases[k].text;
        pm_json_state s;
        pm_json_init(&s, cases[k].root);
        assert_int_equal(pm_json_feed(&s, text, strlen(text)), 0);
        for (int v = 0; v < V; v++) lg[v] = (float)(v % 7);
        pm_json_mask(&s, jv, eos, 2, lg, allow);
        int kept = 0;
        for (int v = 0; v < V; v++) {
            size_t len = 0;
            const char *b = pm_tok_token_bytes(tok, v, &len);
            int want;
            if (v == eos[0] || v == eos[1]) want = pm_json_done(&s);
            else if (pm_tok_is_special(tok, v) || !len) want = 0;
            else {
                pm_json_state t;
                pm_json_init(&t, cases[k].root);
                want = !pm_json_feed(&t, text, strlen(text)) && !pm_json_feed(&t, b, len);
            }
            if ((!isinf(lg[v])) != want) fail_msg("case %zu ('%s'): token %d '%.*s' %s", k, text, v, (int)len, b ? b : "", want ? "masked" : "kept");
            if (want) assert_true(lg[v] == (float)(v % 7)); /* kept tokens keep their logits */
            kept += want;
        }
        assert_true(kept > 0);
        if (k == n_cases - 1) assert_int_equal(kept, 2); /* complete: the end tokens alone */
    }
    pm_json_schema_free(sch);
    pm_json_schema_free(num);
    pm_json_schema_free(range);
    pm_json_schema_free(prob);
    pm_json_schema_free(age);
    pm_json_schema_free(pat);
    pm_json_schema_free(calls);
    free(lg);
    free(allow);
    pm_json_vocab_free(jv);
    pm_tok_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_objects),
        cmocka_unit_test(test_invalid_objects),
        cmocka_unit_test(test_fails_where_it_should),
        cmocka_unit_test(test_schemas),
        cmocka_unit_test(test_schema_refusals),
        cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
