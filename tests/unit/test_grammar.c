/* test_grammar.c — grammars (src/engine/grammar.h): whole-output verdicts on GBNF written out
 * here (recursion, empty alternatives, repeats around rules, classes, escapes, comments, lines),
 * refusals naming the rule and byte, regular grammars folded into one DFA, and the mask over the
 * real tokenizer against two oracles: the regex engine's mask for a grammar that is regular (the
 * same language written as a pattern), and for a recursive one (nested parentheses) a check written
 * independently here: a token is allowed exactly when the text after it can still be completed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/regex.h"
#include "tok/tokenizer.h"
#include "test_util.h"

static pm_grammar *compile_ok(const char *text) {
    pm_grammar *g = NULL;
    pm_err e = {0};
    if (pm_grammar_compile(text, strlen(text), &g, &e)) fail_msg("grammar refused: %s\n%s", e.msg, text);
    return g;
}

typedef struct verdict {
    const char *text;
    int match;
} verdict;

static void check_verdicts(const char *grammar, const verdict *v, size_t n) {
    pm_grammar *g = compile_ok(grammar);
    for (size_t i = 0; i < n; i++) {
        pm_err e = {0};
        int got = pm_grammar_fullmatch(g, v[i].text, strlen(v[i].text), &e);
        if (got != v[i].match) fail_msg("'%s' on\n%s\ngave %d (%s), wanted %d", v[i].text, grammar, got, e.msg, v[i].match);
    }
    pm_grammar_free(g);
}

static void test_verdicts(void **state) {
    (void)state;
    static const verdict yn[] = {{"yes", 1}, {"no", 1}, {"maybe", 0}, {"", 0}, {"yesno", 0}};
    check_verdicts("root ::= \"yes\" | \"no\"\n", yn, sizeof yn / sizeof yn[0]);
    /* recursion, an empty alternative, comments and a rule over several lines */
    static const verdict paren[] = {{"", 1}, {"()", 1}, {"(())()", 1}, {"(()", 0}, {")(", 0}, {"((a))", 0}, {"()()()((()))", 1}};
    check_verdicts("# balanced\nroot ::= \"(\" root \")\" root # nest\n    | \"\"\n", paren, sizeof paren / sizeof paren[0]);
    /* right-recursive arithmetic with repeats around calls */
    static const verdict expr[] = {{"1", 1},      {"1+2*3", 1},   {"(1+2)*3", 1}, {"((4))", 1}, {"1+", 0},
                                   {"*1", 0},     {"(1+2", 0},    {"12", 0},      {"1 + 2", 0}, {"9*(8+7)*(6)", 1}};
    check_verdicts("root ::= term (\"+\" term)*\n"
                   "term ::= factor (\"*\" factor)*\n"
                   "factor ::= [0-9] | \"(\" root \")\"\n",
                   expr, sizeof expr / sizeof expr[0]);
    /* counted repeats of a rule that calls itself; '.', negated classes, escapes */
    static const verdict rep[] = {{"[x][x]", 1}, {"[x]", 0}, {"[x][[x]][x]", 1}, {"[x][x][x][x]", 0}, {"[x][x]\t\xc3\xa9!", 0},
                                  {"[x][x]\xc3\xa9", 1}, {"[x][x]\n", 1}, {"[x][x]\"", 0}};
    check_verdicts("root ::= b{2,3} tail\nb ::= \"[\" (b | \"x\") \"]\"\ntail ::= [^\\\"\\x21-\\x7e]?\n", rep, sizeof rep / sizeof rep[0]);
    static const verdict dot[] = {{"a\nb", 1}, {"a\xf0\x9f\x98\x80" "b", 1}, {"ab", 0}, {"a\xf0\x9f\x98\x80\xf0\x9f\x98\x80" "b", 0}};
    check_verdicts("root ::= \"a\" . \"b\"", dot, sizeof dot / sizeof dot[0]);
    /* llama.cpp's JSON grammar (json.gbnf) */
    static const verdict json[] = {
        {"{}", 1}, {"{\"a\": [1, 2.5e3, \"x\\n\", true, null]}", 1}, {"{\"a\": }", 0}, {"[1]", 0}, {"{\"a\":{\"b\":{}}} ", 1},
        {"{\"a\" : 1,}", 0}, {"{\"\\u00e9\": -0}", 1}, {"{\"a\": 01}", 0}, {"{\"a\": 10}", 1}, {"{'a': 1}", 0}};
    check_verdicts("root   ::= object\n"
                   "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
                   "object ::=\n"
                   "  \"{\" ws (\n"
                   "            string \":\" ws value\n"
                   "    (\",\" ws string \":\" ws value)*\n"
                   "  )? \"}\" ws\n"
                   "array  ::=\n"
                   "  \"[\" ws (\n"
                   "            value\n"
                   "    (\",\" ws value)*\n"
                   "  )? \"]\" ws\n"
                   "string ::=\n"
                   "  \"\\\"\" (\n"
                   "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
                   "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
                   "  )* \"\\\"\" ws\n"
                   "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
                   "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n",
                   json, sizeof json / sizeof json[0]);
}

/* A rule's alternatives that begin with the rule itself read as the others then a repeat; a rule
 * that begins with itself through others rewritten first (grammar_left.c). */
static void test_left_recursion_rewritten(void **state) {
    (void)state;
    static const verdict sum[] = {{"1", 1}, {"1+1", 1}, {"1+1+1", 1}, {"+1", 0}, {"1+", 0}, {"", 0}, {"2", 1}, {"1+2+1", 1}};
    check_verdicts("root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= \"1\" | \"2\"\n", sum, sizeof sum / sizeof sum[0]);
    /* two recursive alternatives, one that calls the rule again further on, an empty base */
    static const verdict mix[] = {{"", 1}, {"a", 1}, {"ab", 1}, {"a(a)", 1}, {"a(ab)b", 1}, {"(", 0}, {"a(", 0}, {"ba", 1}, {")", 0}, {"b", 1}};
    check_verdicts("root ::= e\ne ::= e \"a\" | e \"(\" e \")\" | e \"b\" | \"\"\n", mix, sizeof mix / sizeof mix[0]);
    /* a repeat of a group that can be empty around calls: a cycle of last-position calls, kept (each
     * (rule, continuation) expanded once a byte), where it was refused as left recursion before */
    static const verdict nul[] = {{".", 1}, {"().", 1}, {"(())().", 1}, {"(.", 0}, {"", 0}, {"()", 0}, {")(.", 0}};
    check_verdicts("root ::= (x)* \".\"\nx ::= \"(\" x \")\" | \"\"\n", nul, sizeof nul / sizeof nul[0]);
    static const verdict nul2[] = {{"", 1}, {"a", 1}, {"ba", 1}, {"bbb", 1}, {"c", 0}, {"ab", 1}};
    check_verdicts("root ::= (x? y?)+\nx ::= \"a\" x?\ny ::= \"b\" | \"\"\n", nul2, sizeof nul2 / sizeof nul2[0]);
    /* through other rules: a cycle of two, then three with a bare call, a group and an optional item
     * at the front, then Lark's usual shape of calls (a call of an expression is an expression) */
    static const verdict two[] = {{"y", 1}, {"wx", 1}, {"yzx", 1}, {"wxzx", 1}, {"yzxzx", 1}, {"w", 0}, {"yz", 0}, {"x", 0}, {"", 0}};
    check_verdicts("root ::= a\na ::= b \"x\" | \"y\"\nb ::= a \"z\" | \"w\"\n", two, sizeof two / sizeof two[0]);
    static const verdict three[] = {{"n", 1}, {"m*", 1}, {"*", 1}, {"n+*", 1}, {"m*+*+*", 1}, {"n+", 0}, {"+*", 0}, {"m", 0}, {"nn", 0}};
    check_verdicts("root ::= e\ne ::= t | \"n\"\nt ::= (f | \"m\")? \"*\"\nf ::= e \"+\"\n", three, sizeof three / sizeof three[0]);
    static const verdict opt[] = {{"y", 1}, {"x", 1}, {"yzx", 1}, {"xzxzx", 1}, {"yz", 0}, {"zx", 0}, {"", 0}};
    check_verdicts("root ::= a\na ::= b? \"x\" | \"y\"\nb ::= c\nc ::= a \"z\"\n", opt, sizeof opt / sizeof opt[0]);
    static const verdict rep[] = {{"x", 1}, {"xzx", 1}, {"xzxzx", 1}, {"xzxzxzx", 1}, {"xz", 0}, {"zx", 0}, {"", 0}, {"xx", 0}};
    check_verdicts("root ::= a\na ::= b* \"x\"\nb ::= c\nc ::= a \"z\"\n", rep, sizeof rep / sizeof rep[0]);
    static const verdict calls[] = {{"f", 1}, {"f()", 1}, {"f()()", 1}, {"f.g()", 1}, {"()", 0}, {"f(", 0}, {"f.", 0}};
    check_verdicts("start: expr\nexpr: call | attr | NAME\ncall: expr \"(\" \")\"\nattr: expr \".\" NAME\nNAME: /[a-z]+/\n", calls,
                   sizeof calls / sizeof calls[0]);
    char deep[4096]; /* long texts stay linear: nothing piles up on the stacks */
    for (int i = 0; i < 4000; i++) deep[i] = i % 2 ? ')' : '(';
    deep[4000] = '.', deep[4001] = 0;
    pm_grammar *g = compile_ok("root ::= (x)* \".\"\nx ::= \"(\" x \")\" | \"\"\n");
    pm_err e = {0};
    assert_int_equal(pm_grammar_fullmatch(g, deep, 4001, &e), 1);
    pm_grammar_free(g);
}

static void refused(const char *text, int code, const char *needle);

/* Lark's notation: told apart from GBNF by its first definition, read into the same grammar. */
static void test_lark(void **state) {
    (void)state;
    const char *json_like = "start: \"[\" [value (\",\" value)*] \"]\"\n"
                            "value: NUMBER | ESCAPED_STRING | \"true\"i\n"
                            "%import common.NUMBER\n%import common.ESCAPED_STRING\n%import common.WS\n%ignore WS\n";
    assert_true(pm_grammar_is_lark(json_like, strlen(json_like)));
    assert_false(pm_grammar_is_lark("root ::= \"a\"\n", 13));
    static const verdict json[] = {{"[]", 1}, {"[ 1 , 2.5e3 ]", 1}, {"[\"a\\\"b\"]", 1}, {"[TRUE]", 1}, {"[True , true]", 1},
                                   {"[1,]", 0}, {" [1] ", 1}, {"[1 2]", 0}, {"[\"a\"b\"]", 0}, {"[\"a\nb\"]", 0}, {"[\t\n1\r]", 1}};
    check_verdicts(json_like, json, sizeof json / sizeof json[0]);
    /* left recursion (Lark's usual way), tree marks, aliases, a priority, a range, ~, a pattern with flag i */
    static const verdict calc[] = {{"1+2*3", 1}, {"a - (b+ 12)", 1}, {"1234", 0}, {"Foo*-2", 1}, {"1+", 0},
                                   {" ( x ) ", 1}, {"_x9", 1}, {"9x", 0}, {"--1", 1}, {"", 0}};
    check_verdicts("?start: sum\n"
                   "?sum: product\n"
                   "    | sum \"+\" product   -> add\n"
                   "    | sum \"-\" product   -> sub\n"
                   "?product: atom | product \"*\" atom\n"
                   "?atom: NUMBER | \"-\" atom | NAME | \"(\" sum \")\"\n"
                   "NAME.2: /[a-z_]\\w*/i\n"
                   "NUMBER: DIGIT~1..3\n"
                   "DIGIT: \"0\"..\"9\"\n"
                   "%ignore \" \"\n",
                   calc, sizeof calc / sizeof calc[0]);
    /* comments, a definition going on with "|" after a comment line, a pattern, an exact count */
    static const verdict lines[] = {{"xy", 1}, {"xyyy", 1}, {"zz", 1}, {"z", 0}, {"x", 0}, {"x y", 0}};
    check_verdicts("// a comment\nstart: a b   # another\n  // between\n     | c\na: \"x\"\nb: /y+/\nc: \"z\" ~ 2\n", lines,
                   sizeof lines / sizeof lines[0]);
    /* an import list and an alias */
    static const verdict imp[] = {{"a1=5", 1}, {"abc", 1}, {"a1", 0}, {"_x=12", 1}, {"x=-1", 0}};
    check_verdicts("%import common (INT, WORD)\n%import common.CNAME -> ID\nstart: ID \"=\" INT | WORD\n", imp, sizeof imp / sizeof imp[0]);
    /* pattern flags: s lets `.` take a line end; the common comments end where the lexer ends them */
    static const verdict dot_s[] = {{"a\nb", 1}, {"axb", 1}};
    check_verdicts("start: /a.b/s\n", dot_s, 2);
    static const verdict dot[] = {{"a\nb", 0}, {"axb", 1}};
    check_verdicts("start: /a.b/\n", dot, 2);
    static const verdict cc[] = {{"/* x */", 1}, {"/* a */ b */", 0}, {"/**/", 1}, {"/* ** */", 1}, {"/*/", 0}, {"/* a\n*/", 1}};
    check_verdicts("%import common.C_COMMENT\nstart: C_COMMENT\n", cc, sizeof cc / sizeof cc[0]);
    /* ignored items between the tokens of rules, never inside a terminal */
    static const verdict ign[] = {{"ab", 1}, {"a b", 1}, {"a  /*c*/ b ", 1}, {"a", 0}, {"aa b", 0}};
    check_verdicts("start: A \"b\"\nA: \"a\"\n%import common.C_COMMENT\n%ignore \" \"\n%ignore C_COMMENT\n", ign, sizeof ign / sizeof ign[0]);
}

static void test_lark_refusals(void **state) {
    (void)state;
    refused("start: a{x}\n", PM_EUNSUPPORTED, "templates (a{...} at byte 7)");
    refused("%import python.NAME\nstart: NAME\n", PM_EUNSUPPORTED, "only Lark's `common`");
    refused("%declare X\nstart: X\n", PM_EUNSUPPORTED, "%declare at byte 0 is not read");
    refused("start: \"a\"\nstart: \"b\"\n", PM_EINVAL, "'start' is defined twice (first at byte 0)");
    refused("begin: \"a\"\n", PM_EINVAL, "no rule 'start'");
    refused("start: A\nA: b\nb: \"x\"\n", PM_EINVAL, "a terminal names rule 'b' (terminals are made of literals, patterns and terminals) at byte 12");
    refused("start: /a(?=b)/\n", PM_EUNSUPPORTED, "the pattern at byte 7: lookaround");
    refused("start: /^a/\n", PM_EUNSUPPORTED, "has an anchor");
    refused("start: /a/x\n", PM_EINVAL, "the pattern flag 'x'");
    refused("start: \"a\"**\n", PM_EINVAL, "a second operator");
    refused("start: \"ab\"..\"z\"\n", PM_EINVAL, "a range");
    refused("%import common.NOPE\nstart: NOPE\n", PM_EINVAL, "common terminals have no 'NOPE'");
    refused("start: (\"a\"\n", PM_EINVAL, "expected ')'");
    refused("start: \"a\" ~ 3..2\n", PM_EINVAL, "the larger count second");
    refused("start: a\na: a \"x\"\n", PM_EUNSUPPORTED, "list: item");
    refused("%foo\nstart: \"a\"\n", PM_EINVAL, "unknown directive '%foo'");
    refused("start: \"a\" )\n", PM_EINVAL, "')' without its opening bracket");
    refused("start: b\n", PM_EINVAL, "rule 'b' is used but not defined");
}

static void test_regular_folds(void **state) {
    (void)state;
    int rules, terms;
    pm_grammar *g = compile_ok("root ::= greet \" \" name punct\ngreet ::= \"hi\" | \"hello\"\nname ::= [A-Z] [a-z]*\npunct ::= [.!]?\n");
    pm_grammar_stats(g, &rules, &terms);
    assert_int_equal(rules, 1); /* all regular: one rule, one DFA */
    assert_int_equal(terms, 1);
    pm_grammar_free(g);
    g = compile_ok("root ::= \"<\" root \">\" | [a-z]+\n");
    pm_grammar_stats(g, &rules, &terms);
    assert_int_equal(rules, 1);
    assert_int_equal(terms, 3);
    pm_grammar_free(g);
}

static void refused(const char *text, int code, const char *needle) {
    pm_grammar *g = NULL;
    pm_err e = {0};
    int rc = pm_grammar_compile(text, strlen(text), &g, &e);
    if (rc != code || !strstr(e.msg, needle)) fail_msg("%d '%s', wanted %d and '%s' for\n%s", rc, e.msg, code, needle, text);
    assert_null(g);
}

static void test_refusals(void **state) {
    (void)state;
    refused("root ::= \"a\" b\n", PM_EINVAL, "rule 'b' is used but not defined at byte 13");
    refused("start ::= \"a\"\n", PM_EINVAL, "no rule 'root'");
    refused("root ::= \"a\"\nroot ::= \"b\"\n", PM_EINVAL, "rule 'root' is defined twice (first at byte 0)");
    refused("root ::= expr\nexpr ::= expr \"+\" \"1\"\n", PM_EUNSUPPORTED, "left recursion: rule 'expr'"); /* nothing to begin with */
    refused("root ::= a\na ::= b c \"x\" | \"y\"\nb ::= \"\" | \"q\"\nc ::= a \"z\"\n", PM_EUNSUPPORTED, "left recursion"); /* through b, empty */
    refused("root ::= a\na ::= b | c\nb ::= a \"x\"\nc ::= b \"y\"\n", PM_EUNSUPPORTED, "left recursion"); /* nothing to begin with */
    refused("root ::= ws root \"x\" | \"y\"\nws ::= [ ]*\n", PM_EUNSUPPORTED, "left recursion: rule 'root'"); /* through an empty prefix */
    refused("root ::= \"a\n", PM_EINVAL, "unterminated literal at byte 9");
    refused("root ::= [a-\n", PM_EINVAL, "unterminated character class");
    refused("root ::= []\n", PM_EINVAL, "empty character class");
    refused("root ::= [z-a]\n", PM_EINVAL, "reversed");
    refused("root ::= (\"a\"\n", PM_EINVAL, "expected ')'");
    refused("root ::= \"a\"{3,2}\n", PM_EINVAL, "the larger count first");
    refused("root ::= \"a\"{1001}\n", PM_EINVAL, "a count above 1000");
    refused("root ::= \"a\"\n  \"b\"\n", PM_EINVAL, "expected a rule name");
    refused("root ::= \"a\" \"\\q\"\n", PM_EINVAL, "unknown escape \\q");
    refused("root ::= \"\\uD800\"\n", PM_EINVAL, "is not a character");
    refused("root := \"a\"\n", PM_EINVAL, "expected '::=' after rule name 'root'");
    refused("root ::= \"a\" )\n", PM_EINVAL, "')' without '('");
    refused("root ::= \"\xff\"\n", PM_EINVAL, "invalid UTF-8 at byte 10");
    /* many terminals, each within the pattern engine's own limit, over the grammar's budget together */
    char big[4096];
    int n = snprintf(big, sizeof big, "root ::= r0");
    for (int i = 1; i < 24; i++) n += snprintf(big + n, sizeof big - (size_t)n, " | r%d", i);
    n += snprintf(big + n, sizeof big - (size_t)n, "\n");
    for (int i = 0; i < 24; i++) n += snprintf(big + n, sizeof big - (size_t)n, "r%d ::= [ab]* \"a\" [ab]{14} \"%c\" r%d?\n", i, 'c' + i, i);
    refused(big, PM_EUNSUPPORTED, "terminals' automata take too long to build together");
}

/* The real vocabulary's bytes, and its trie. */
typedef struct vocab {
    pm_tokenizer *tok;
    int n;
    const char **bytes;
    size_t *len;
} vocab;

static int load_vocab(vocab *v) {
    memset(v, 0, sizeof *v);
    if (!(v->tok = tu_fixture_tokenizer())) return -1;
    v->n = pm_tok_vocab_size(v->tok);
    v->bytes = calloc((size_t)v->n, sizeof *v->bytes);
    v->len = calloc((size_t)v->n, sizeof *v->len);
    for (int t = 0; t < v->n; t++)
        if (!pm_tok_is_special(v->tok, t)) v->bytes[t] = pm_tok_token_bytes(v->tok, t, &v->len[t]);
    return 0;
}

static void free_vocab(vocab *v) {
    free(v->bytes);
    free(v->len);
    pm_tok_free(v->tok);
}

/* A regular language two ways: the grammar's mask must be the pattern's at every prefix of text. */
static void test_mask_matches_regex(void **state) {
    (void)state;
    vocab v;
    if (load_vocab(&v)) fail_msg("no fixture tokenizer");
    pm_grammar_vocab *gv = pm_grammar_vocab_new(v.tok, v.n);
    pm_regex_vocab *rv = pm_regex_vocab_new(v.tok, v.n);
    const char *grammar = "root ::= item (\", \" item)* \".\"\nitem ::= [A-Z] [a-z]* | [0-9]+ (\".\" [0-9]+)? | \"\\\"\" [^\"\\n]* \"\\\"\"\n";
    const char *pattern = "(?:[A-Z][a-z]*|[0-9]+(?:\\.[0-9]+)?|\"[^\"\\n]*\")(?:, (?:[A-Z][a-z]*|[0-9]+(?:\\.[0-9]+)?|\"[^\"\\n]*\"))*\\.";
    const char *text = "Paris, 12.5, \"a b\", Zoo.";
    pm_grammar *g = compile_ok(grammar);
    pm_regex *rx = NULL;
    pm_err e = {0};
    assert_int_equal(pm_regex_compile(pattern, strlen(pattern), &rx, &e), 0);
    pm_grammar_state *st = pm_grammar_start(g, &e);
    assert_non_null(st);
    float *la = malloc(sizeof(float) * (size_t)v.n), *lb = malloc(sizeof(float) * (size_t)v.n);
    uint8_t *allow = malloc((size_t)v.n);
    int32_t eos[2] = {199999, 200020};
    int32_t rs = pm_regex_start(rx);
    for (size_t k = 0; k <= strlen(text); k++) {
        for (int t = 0; t < v.n; t++) la[t] = lb[t] = 1.0f;
        assert_int_equal(pm_grammar_mask(st, gv, eos, 2, la, allow, &e), 0);
        pm_regex_mask(rx, rs, rv, NULL, eos, 2, lb, allow);
        int allowed = 0;
        for (int t = 0; t < v.n; t++) {
            if (isinf(la[t]) != isinf(lb[t])) fail_msg("prefix %zu: token %d (%.*s) grammar %g, regex %g", k, t, (int)v.len[t], v.bytes[t] ? v.bytes[t] : "", la[t], lb[t]);
            allowed += !isinf(la[t]);
        }
        assert_true(allowed > 0);
        if (k == strlen(text)) break;
        assert_int_equal(pm_grammar_feed(st, text + k, 1, &e), 1);
        rs = pm_regex_feed(rx, rs, text + k, 1);
        assert_int_equal(pm_grammar_accepts(st), pm_regex_accepts(rx, rs));
    }
    assert_true(pm_grammar_accepts(st) && pm_grammar_final(st));
    free(la);
    free(lb);
    free(allow);
    pm_grammar_state_free(st);
    pm_grammar_free(g);
    pm_regex_free(rx);
    pm_grammar_vocab_free(gv);
    pm_regex_vocab_free(rv);
    free_vocab(&v);
}

/* Nested lists, written independently: "[" items "]" where an item is a letter or a list, items
 * separated by ",". A text can be completed when it is made of those characters, its depth never
 * drops below 1 inside the outer list (or 0 once it closed, then nothing follows), no ",", "]" right
 * after "[" or ",", and it starts with "[". */
static int completable(const char *s, size_t n, int *whole) {
    int depth = 0;
    char prev = 0;
    *whole = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (i == 0 && c != '[') return 0;
        if (i > 0 && depth == 0) return 0; /* the outer list has closed */
        if (c == '[') {
            if (i > 0 && prev != '[' && prev != ',') return 0;
            depth++;
        } else if (c == ']') {
            if (prev == ',' ) return 0;
            depth--;
        } else if (c == ',') {
            if (prev == '[' || prev == ',') return 0;
        } else if (c >= 'a' && c <= 'z') {
            if (prev != '[' && prev != ',') return 0;
        } else return 0;
        prev = c;
    }
    *whole = n > 0 && depth == 0;
    return 1;
}

static void test_mask_recursive(void **state) {
    (void)state;
    vocab v;
    if (load_vocab(&v)) fail_msg("no fixture tokenizer");
    pm_grammar_vocab *gv = pm_grammar_vocab_new(v.tok, v.n);
    pm_grammar *g = compile_ok("root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [a-z] | list\n");
    pm_err e = {0};
    pm_grammar_state *st = pm_grammar_start(g, &e);
    const char *text = "[a,[b,[]],[[c]],d]";
    float *l = malloc(sizeof(float) * (size_t)v.n);
    uint8_t *allow = malloc((size_t)v.n);
    char buf[512];
    int32_t eos = 199999;
    for (size_t k = 0; k <= strlen(text); k++) {
        for (int t = 0; t < v.n; t++) l[t] = 0.0f;
        assert_int_equal(pm_grammar_mask(st, gv, &eos, 1, l, allow, &e), 0);
        int whole;
        for (int t = 0; t < v.n; t++) {
            int want = 0;
            if (t == eos) completable(text, k, &whole), want = whole;
            else if (v.bytes[t] && v.len[t] && k + v.len[t] < sizeof buf) {
                memcpy(buf, text, k);
                memcpy(buf + k, v.bytes[t], v.len[t]);
                want = completable(buf, k + v.len[t], &whole);
            }
            if (want != !isinf(l[t])) fail_msg("after '%.*s': token %d '%.*s' allowed %d, wanted %d", (int)k, text, t, (int)v.len[t], v.bytes[t] ? v.bytes[t] : "", !isinf(l[t]), want);
        }
        if (k == strlen(text)) break;
        assert_int_equal(pm_grammar_feed(st, text + k, 1, &e), 1);
    }
    assert_true(pm_grammar_final(st));
    assert_int_equal(pm_grammar_feed(st, "x", 1, &e), 0);
    free(l);
    free(allow);
    pm_grammar_state_free(st);
    pm_grammar_free(g);
    pm_grammar_vocab_free(gv);
    free_vocab(&v);
}

/* A grammar whose parse threads multiply past the limit fails the step, not the process. */
/* The mask's caches (closures made once, token classes per terminal state) and its walk by DFAs
 * alone against the plain walk: the same tokens at every prefix, the mask taken twice (the second
 * from the caches), on a JSON grammar, Lark's ignored spaces, one DFA of free text, a start with
 * more terminal states than the class cache holds (the walk alone, then the cache again), and
 * grammars where a terminal may end before bytes that may begin what follows it. */
static void test_mask_caches(void **state) {
    (void)state;
    vocab v;
    if (load_vocab(&v)) fail_msg("no fixture tokenizer");
    pm_grammar_vocab *gv = pm_grammar_vocab_new(v.tok, v.n);
    char wide[16384];
    size_t w = (size_t)snprintf(wide, sizeof wide, "root ::= x0");
    for (int i = 1; i < 300; i++) w += (size_t)snprintf(wide + w, sizeof wide - w, " | x%d", i);
    w += (size_t)snprintf(wide + w, sizeof wide - w, "\n");
    for (int i = 0; i < 300; i++) w += (size_t)snprintf(wide + w, sizeof wide - w, "x%d ::= \"t%d:\" root | \"t%d.\"\n", i, i, i);
    const char *const cases[][2] = {
        {"root   ::= object\n"
         "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
         "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
         "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
         "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
         "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
         "ws ::= [ \\t\\n]*\n",
         "{\"name\": \"Ada \\\"Love\\\" \\u00e9\", \"born\": [1815, -2.5e3], \"ok\": true}"},
        {"?start: sum\n?sum: product | sum \"+\" product | sum \"-\" product\n?product: atom | product \"*\" atom\n"
         "?atom: NUMBER | NAME | \"(\" sum \")\"\n%import common (NUMBER, WS)\n%import common.CNAME -> NAME\n%ignore WS\n",
         "(x1 + 2.5) * (y - foo_bar)  "},
        {"root ::= [^\\n]* \"\\n\"\n", "Once upon a time\n"},
        {wide, "t5:t17:t299."},
        /* the walk by DFAs alone (grammar.c): a word that may end before a letter (another word
         * follows), a name followed by an optional repeat ("?" or "!" follow it), by "é" (a byte
         * above 127), by "q"s (a token such as "ique" lives on in the name alone) or by nothing
         * (the root done), a terminal that may match nothing beside ignored comments, terminals
         * whose match ends them (no byte may follow in them) */
        {"root ::= w root | w \".\"\nw ::= [a-z]+ \" \"?\n", "so words."},
        {"start: NAME opt \"!\"\nopt: (\"?\" opt)?\nNAME: /[a-z]+/\n", "what?" "?!"},
        {"start: NAME tail\ntail: \"\xc3\xa9\" NAME tail | \"!\"\nNAME: /[a-z]+/\n", "caf\xc3\xa9" "ol!"},
        {"start: NAME tail\ntail: \"q\" tail | \"!\"\nNAME: /[a-z]+/\n", "equq!"}, /* "equal": only the name goes on */
        {"root ::= [a-z]+\n", "words"},
        {"start: NAME x | NAME y\nx: \"\xc3\xa9\" x | \".\"\ny: \"'\" y | \"!\"\nNAME: /[a-z]+/\n", "don'!"}, /* one name, two follows */
        {"start: A \"b\" B\nA: /a*/\nB: /[a-z]+/\n%ignore /#[^\\n]*\\n/\n%ignore \" \"\n", "aa #c\n b xyz"},
        {"root ::= \"ab\" \"cd\" x | \"a\" \"bcd\" x\nx ::= \"e\"* \"f\" | [0-9]+\n", "abcdeeef"},
        /* counts longer than a token (128 bytes here): a new DFA state a character, whose class is
         * an earlier one's until the count's end comes within a token's reach (liveness: UTF-8
         * inside; acceptance: a count that may end at every character before letters that may
         * follow it, one that may end only from its third) */
        {"root ::= [^\"]{0,140} \"\\\"\"\n", "Once upon a time, in a land far away (tr\xc3\xa8s loin), there lived a cat who loved the sea and "
                                                 "the sand, and every morning she walked to it.\""},
        {"root ::= [a-z ]{0,140} x\nx ::= [a-z]* \"!\"\n", "so many words that the count runs on and on past any token of the vocabulary "
                                                          "until it comes near its end and then it stops right here at last!"},
        {"start: WORD \"!\"\nWORD: /[a-z ]{3,140}/\n", "a cat who loved the sea and the sand walked to the shore every morning of "
                                                       "the year in rain or in shine and then she came back home again!"},
        {"root ::= w tail\nw ::= [a-z]{3,140}\ntail ::= \"'t\" tail | \"!\"\n", "wouldn't!"}, /* "n't": from w's 3rd letter on */
    };
    float *la = malloc(sizeof(float) * (size_t)v.n), *lb = malloc(sizeof(float) * (size_t)v.n);
    uint8_t *allow = malloc((size_t)v.n);
    int32_t eos = 199999;
    pm_err e = {0};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        pm_grammar *g = compile_ok(cases[c][0]);
        pm_grammar_state *a = pm_grammar_start(g, &e), *b = pm_grammar_start(g, &e);
        assert_non_null(a);
        assert_non_null(b);
        pm_grammar_set_plain(b, 1);
        const char *text = cases[c][1];
        for (size_t k = 0; k <= strlen(text); k++) {
            for (int rep = 0; rep < 2; rep++) {
                for (int t = 0; t < v.n; t++) la[t] = lb[t] = 0.0f;
                assert_int_equal(pm_grammar_mask(a, gv, &eos, 1, la, allow, &e), 0);
                assert_int_equal(pm_grammar_mask(b, gv, &eos, 1, lb, allow, &e), 0);
                int kept = 0;
                for (int t = 0; t < v.n; t++) {
                    if (isinf(la[t]) != isinf(lb[t]))
                        fail_msg("case %zu after '%.*s' (mask %d): token %d '%.*s' cached %d, plain %d", c, (int)k, text, rep, t,
                                 (int)v.len[t], v.bytes[t] ? v.bytes[t] : "", !isinf(la[t]), !isinf(lb[t]));
                    kept += !isinf(la[t]);
                }
                assert_true(kept > 0);
            }
            if (k == strlen(text)) break;
            assert_int_equal(pm_grammar_feed(a, text + k, 1, &e), 1);
            assert_int_equal(pm_grammar_feed(b, text + k, 1, &e), 1);
            assert_int_equal(pm_grammar_accepts(a), pm_grammar_accepts(b));
        }
        assert_true(pm_grammar_accepts(a));
        pm_grammar_state_free(a);
        pm_grammar_state_free(b);
        pm_grammar_free(g);
    }
    free(la);
    free(lb);
    free(allow);
    pm_grammar_vocab_free(gv);
    free_vocab(&v);
}

/* A grammar whose threads multiply and each may end before any byte (`.`): before the thread limit,
 * a mask over the real vocabulary would step millions of threads (0.6 s and more a step, the batch
 * waiting). The mask fails with PM_ELIMIT instead, leaving the state as it was (a mask with fewer
 * threads before it passed); the walk without caches too (there the thread limit may come first). */
static void test_mask_limit(void **state) {
    (void)state;
    vocab v;
    if (load_vocab(&v)) fail_msg("no fixture tokenizer");
    pm_grammar_vocab *gv = pm_grammar_vocab_new(v.tok, v.n);
    pm_grammar *g = compile_ok("root ::= s\ns ::= \"z\" s \"y\" | \"z\" s . | \"\"\n");
    float *lg = malloc(sizeof(float) * (size_t)v.n);
    uint8_t *allow = malloc((size_t)v.n);
    int32_t eos = 199999;
    for (int plain = 0; plain < 2; plain++) {
        pm_err e = {0};
        pm_grammar_state *st = pm_grammar_start(g, &e);
        assert_non_null(st);
        pm_grammar_set_plain(st, plain);
        int rc = 0, k = 0;
        for (; k < 12 && !rc; k++) {
            for (int t = 0; t < v.n; t++) lg[t] = 0.0f;
            rc = pm_grammar_mask(st, gv, &eos, 1, lg, allow, &e);
            if (!rc) assert_int_equal(pm_grammar_feed(st, "z", 1, &e), 1);
        }
        assert_int_equal(rc, PM_ELIMIT);
        assert_true(k > 2);
        /* without the caches the walk's sets (no shared closures) outgrow the thread limit first */
        if (!strstr(e.msg, plain ? "grammar: more than" : "mask would step more than") && !strstr(e.msg, "mask would step more than"))
            fail_msg("plain %d mask %d: %s", plain, k, e.msg);
        assert_int_equal(pm_grammar_feed(st, "y", 1, &e), 1); /* the state goes on */
        pm_grammar_state_free(st);
    }
    free(lg);
    free(allow);
    pm_grammar_free(g);
    pm_grammar_vocab_free(gv);
    free_vocab(&v);
}

static void test_ambiguity_limit(void **state) {
    (void)state;
    pm_grammar *g = compile_ok("root ::= s\ns ::= \"z\" s \"y\" | \"z\" s \"w\" | \"\"\n"); /* 2^k stacks after k z's */
    pm_err e = {0};
    pm_grammar_state *st = pm_grammar_start(g, &e);
    assert_non_null(st);
    int rc = 1;
    for (int i = 0; i < 64 && rc == 1; i++) rc = pm_grammar_feed(st, "z", 1, &e);
    assert_true(rc < 0);
    assert_non_null(strstr(e.msg, "grammar: more than"));
    pm_grammar_state_free(st);
    pm_grammar_free(g);
}

/* Nested rules that can all end at one byte: the expansion passes through every level, up to a
 * bound that keeps the C stack safe; past it the feed fails with a message. */
static void test_depth_limit(void **state) {
    (void)state;
    pm_grammar *g = compile_ok("root ::= \"a\" root? \"b\"?\n");
    pm_err e = {0};
    pm_grammar_state *st = pm_grammar_start(g, &e);
    int rc = 1, k = 0;
    for (; k < 3 * PM_GRAMMAR_MAX_DEPTH && rc == 1; k++) {
        rc = pm_grammar_feed(st, "a", 1, &e);
        if (rc == 1) assert_true(pm_grammar_accepts(st));
    }
    assert_true(rc < 0 && k > PM_GRAMMAR_MAX_DEPTH / 4); /* each level passes two expansions: its pop and its empty "b"? */
    assert_non_null(strstr(e.msg, "levels of rules expand at one byte"));
    pm_grammar_state_free(st);
    pm_grammar_free(g);
}

/* Grammars of many rules (a request may send 1 MB of them): read in linear time, folded a bounded
 * number of rules deep (the C stack), run or refused with a message. */
static void test_large_grammars(void **state) {
    (void)state;
    size_t cap = 1 << 20;
    char *g = malloc(cap);
    int n = snprintf(g, cap, "root ::= r0\n");
    for (int i = 0; i < 16000; i++) n += snprintf(g + n, cap - (size_t)n, "r%d ::= \"x\" r%d | \"y\"\n", i, i + 1);
    n += snprintf(g + n, cap - (size_t)n, "r16000 ::= \"z\"\n");
    pm_grammar *gr = NULL;
    pm_err e = {0};
    assert_int_equal(pm_grammar_compile(g, (size_t)n, &gr, &e), 0);
    char text[1200];
    memset(text, 'x', 1000);
    text[1000] = 'y';
    assert_int_equal(pm_grammar_fullmatch(gr, text, 1001, &e), 1);
    assert_int_equal(pm_grammar_fullmatch(gr, text, 1000, &e), 0);
    pm_grammar_free(gr);
    /* the same chain called in first place: it compiles, and its start expands past the depth bound */
    n = snprintf(g, cap, "root ::= r0\n");
    for (int i = 0; i < 16000; i++) n += snprintf(g + n, cap - (size_t)n, "r%d ::= r%d \"x\" | \"y\"\n", i, i + 1);
    n += snprintf(g + n, cap - (size_t)n, "r16000 ::= \"z\"\n");
    assert_int_equal(pm_grammar_compile(g, (size_t)n, &gr, &e), 0);
    assert_null(pm_grammar_start(gr, &e));
    assert_non_null(strstr(e.msg, "levels of rules expand at one byte"));
    pm_grammar_free(gr);
    /* ... and closed into a cycle (the last calls the first in first place): its rewrite would run through
     * every rule, so it is refused naming the rule, without recursing a C frame a rule */
    n = snprintf(g, cap, "root ::= r0\n");
    for (int i = 0; i < 16000; i++) n += snprintf(g + n, cap - (size_t)n, "r%d ::= r%d \"x\" | \"y\"\n", i, i + 1);
    n += snprintf(g + n, cap - (size_t)n, "r16000 ::= r0 \"z\" | \"q\"\n");
    e = (pm_err){0};
    assert_int_equal(pm_grammar_compile(g, (size_t)n, &gr, &e), PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "left recursion through rule 'r16000': rewriting it takes more than 4096 alternatives"));
    /* three rules in a cycle, 3,000 alternatives each: the rewrite's size bound */
    n = snprintf(g, cap, "root ::= r0\n");
    for (int i = 0; i < 3; i++) {
        n += snprintf(g + n, cap - (size_t)n, "r%d ::= r%d \"a\"", i, (i + 1) % 3);
        for (int k = 0; k < 3000; k++) n += snprintf(g + n, cap - (size_t)n, " | \"b%d\" r%d | \"c%d\"", k, (i + 1) % 3, k);
        g[n++] = '\n';
    }
    e = (pm_err){0};
    assert_int_equal(pm_grammar_compile(g, (size_t)n, &gr, &e), PM_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "rewriting it takes more than 4096 alternatives"));
    /* postfixes piled on one item */
    n = snprintf(g, cap, "root ::= \"a\"");
    while (n < 100000) g[n++] = '*';
    g[n++] = '\n';
    e = (pm_err){0};
    assert_int_equal(pm_grammar_compile(g, (size_t)n, &gr, &e), PM_EINVAL);
    assert_non_null(strstr(e.msg, "more than 4 postfixes in a row at byte 16"));
    free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_left_recursion_rewritten),
        cmocka_unit_test(test_lark),
        cmocka_unit_test(test_lark_refusals),
        cmocka_unit_test(test_regular_folds),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_mask_matches_regex),
        cmocka_unit_test(test_mask_recursive),
        cmocka_unit_test(test_mask_caches),
        cmocka_unit_test(test_ambiguity_limit),
        cmocka_unit_test(test_mask_limit),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_large_grammars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
