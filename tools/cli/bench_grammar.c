/* bench_grammar.c — the sampling section's grammar row: a grammar's mask over the whole vocabulary
 * (guided_grammar, generate --grammar), the work it adds to each step, at places of an answer where
 * its parse threads differ: llama.cpp's JSON grammar before the value, inside a string, after a
 * member, in a number and in a nested array; nested lists deep inside; free text up to a newline
 * (one DFA); a Lark grammar of sums (ignored spaces before every token). The trie built once and
 * the compile times beside. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "engine/grammar.h"
#include "tok/tokenizer.h"

static const char json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

/* Lark's notation: left recursion, terminals from common, ignored spaces before every token. */
static const char sum_lark[] = "?start: sum\n"
                               "?sum: product | sum \"+\" product -> add | sum \"-\" product -> sub\n"
                               "?product: atom | product \"*\" atom\n"
                               "?atom: NUMBER | NAME | \"(\" sum \")\"\n"
                               "%import common (NUMBER, WS)\n"
                               "%import common.CNAME -> NAME\n"
                               "%ignore WS\n";

int bench_grammar_mask(bench_ctx *b, const pm_tokenizer *tok) {
    enum { REPS = 20, PLACES = 8, GRAMMARS = 4 };
    static const struct {
        int grammar; /* 0 JSON, 1 nested lists, 2 a line, 3 a Lark sum */
        const char *where, *prefix;
    } at[PLACES] = {{0, "JSON start", ""},
                    {0, "JSON in a string", "{\"name\": \"Ada Love"},
                    {0, "JSON after a member", "{\"name\": \"Ada\", \"born\": 1815"},
                    {0, "JSON in a number", "{\"a\": [1, 2.5e"},
                    {0, "JSON nested array", "{\"a\": [[{\"b\": [[["},
                    {1, "lists 8 deep", "[a,[b,[c,[d,[e,[f,[g,[h"},
                    {2, "a line", "Once upon a time"},
                    {3, "Lark sum", "(x1 + 2.5) * (y -"}};
    const char *grammars[GRAMMARS] = {json_gbnf, "root ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= [a-z]+ | root\n",
                                      "root ::= [^\\n]* \"\\n\"\n", sum_lark};
    int V = pm_tok_vocab_size(tok);
    double t0 = bench_now();
    pm_grammar_vocab *gv = pm_grammar_vocab_new(tok, V);
    double t_trie = bench_now() - t0;
    pm_grammar *g[GRAMMARS] = {0};
    double cms[GRAMMARS] = {0}, ms[PLACES] = {0}, worst = 0, first_worst = 0;
    int kept[PLACES] = {0}, worst_at = 0;
    float *lg = malloc(sizeof(float) * (size_t)V);
    uint8_t *allow = malloc((size_t)V);
    pm_err e = {0};
    if (!gv || !lg || !allow) pm_errf(&e, PM_ENOMEM, "out of memory for the grammar bench");
    for (int k = 0; k < GRAMMARS && !e.code; k++) {
        t0 = bench_now();
        pm_grammar_compile(grammars[k], strlen(grammars[k]), &g[k], &e);
        cms[k] = 1e3 * (bench_now() - t0);
    }
    const int32_t eos[] = {pm_tok_id(tok, "<|end|>"), pm_tok_id(tok, "<|endoftext|>")};
    for (int p = 0; p < PLACES && !e.code; p++) {
        pm_grammar_state *st = pm_grammar_start(g[at[p].grammar], &e);
        if (!st || pm_grammar_feed(st, at[p].prefix, strlen(at[p].prefix), &e) != 1) {
            if (!e.code) pm_errf(&e, PM_EINVAL, "grammar bench: '%s' is not a prefix", at[p].prefix);
            pm_grammar_state_free(st);
            break;
        }
        double t[REPS];
        for (int r = 0; r < REPS && !e.code; r++) {
            for (int v = 0; v < V; v++) lg[v] = 0.0f;
            double s0 = bench_now();
            pm_grammar_mask(st, gv, eos, 2, lg, allow, &e);
            t[r] = bench_now() - s0;
        }
        for (int v = 0; v < V; v++) kept[p] += allow[v];
        if (1e3 * t[0] > first_worst) first_worst = 1e3 * t[0]; /* the state's caches made: its classes, its closures */
        ms[p] = 1e3 * bench_median(t, REPS);
        if (ms[p] > worst) worst = ms[p], worst_at = p;
        pm_grammar_state_free(st);
    }
    /* along an answer, 3 bytes a step, one state and its caches kept: a count's terminal ([^"]{0,1000}),
     * a new DFA state each step whose tokens are an earlier state's until the count's end is near */
    double along = 0;
    if (!e.code) {
        static const char counted[] = "root ::= [^\"]{0,1000} \"\\\"\"\n",
                          answer[] = "Once upon a time, in a land far away, there lived a cat who loved the sea.\"";
        pm_grammar *gc = NULL;
        pm_grammar_state *st = NULL;
        double t[REPS * 2];
        int steps = 0;
        if (!pm_grammar_compile(counted, strlen(counted), &gc, &e) && (st = pm_grammar_start(gc, &e)))
            for (size_t at = 0, n = strlen(answer); at < n && steps < REPS * 2 && !e.code; at += 3, steps++) {
                for (int v = 0; v < V; v++) lg[v] = 0.0f;
                double s0 = bench_now();
                pm_grammar_mask(st, gv, eos, 2, lg, allow, &e);
                t[steps] = bench_now() - s0;
                if (!e.code && pm_grammar_feed(st, answer + at, n - at < 3 ? n - at : 3, &e) != 1 && !e.code)
                    pm_errf(&e, PM_EINVAL, "grammar bench: the counted answer is not a prefix");
            }
        if (steps && !e.code) along = 1e3 * bench_median(t, steps);
        pm_grammar_state_free(st);
        pm_grammar_free(gc);
    }
    if (!e.code)
        bench_row(b, "sampling", "grammar mask a step", worst, "ms", -1, -1,
                  json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "vocab", V, "trie_s", t_trie, "first_mask_worst_ms", first_worst, "along_counted_ms", along,
                            "json_start_ms", ms[0], "json_string_ms", ms[1], "json_member_ms", ms[2], "json_number_ms", ms[3], "json_nested_ms",
                            ms[4], "lists_ms", ms[5], "line_ms", ms[6], "lark_sum_ms", ms[7], "json_compile_ms", cms[0], "lists_compile_ms",
                            cms[1], "line_compile_ms", cms[2], "lark_compile_ms", cms[3], "slowest", at[worst_at].where),
                  "the slowest of: %s %.2f (%d tokens kept), %s %.2f (%d), %s %.2f (%d), %s %.2f (%d), %s %.2f (%d), %s %.2f (%d), %s "
                  "%.2f (%d), %s %.2f ms (%d) (median of %d masks over %d tokens; a place's first mask, its caches made, %.2f ms at "
                  "worst; along an answer of [^\"]{0,1000}, 3 bytes a step: %.2f ms); compiled in %.2f / %.2f / %.2f / %.2f ms; trie "
                  "built once in %.0f ms",
                  at[0].where, ms[0], kept[0], at[1].where, ms[1], kept[1], at[2].where, ms[2], kept[2], at[3].where, ms[3], kept[3],
                  at[4].where, ms[4], kept[4], at[5].where, ms[5], kept[5], at[6].where, ms[6], kept[6], at[7].where, ms[7], kept[7], REPS,
                  V, first_worst, along, cms[0], cms[1], cms[2], cms[3], 1e3 * t_trie);
    else fprintf(stderr, "phi4mm bench: grammar: %s\n", e.msg);
    for (int k = 0; k < GRAMMARS; k++) pm_grammar_free(g[k]);
    pm_grammar_vocab_free(gv);
    free(lg);
    free(allow);
    return e.code;
}
