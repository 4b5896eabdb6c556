/* grammar_internal.h — the compiled grammar grammar_parse.c hands grammar.c: rules as
 * alternatives of elements (a terminal DFA or a rule), laid out flat, each alternative ended by
 * G_END, so that a parse position is one index. */
#ifndef PM_GRAMMAR_INTERNAL_H
#define PM_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "engine/regex.h"

enum { G_END = 0, G_TERM = 1, G_RULE = 2 };

typedef struct g_elem {
    int32_t kind; /* G_* */
    int32_t arg;  /* G_TERM: the terminal; G_RULE: the rule */
} g_elem;

struct pm_grammar {
    g_elem *elems;          /* every alternative's elements, each alternative ended by G_END */
    int n_elems;
    int32_t *alt_start;     /* alternative a begins at elems[alt_start[a]] */
    int n_alts;
    int32_t *rule_alt;      /* rule r's alternatives: [rule_alt[r], rule_alt[r + 1]) */
    int n_rules;
    int root;
    pm_regex **terms;       /* terminal DFAs (whole-match patterns) */
    int32_t *term_start;    /* their start states */
    uint64_t (*term_first)[4]; /* the bytes that may begin each (256 bits) */
    pm_regex_dfa *dfa;      /* their tables */
    int n_terms;
};

#endif
