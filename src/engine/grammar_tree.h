/* grammar_tree.h — what the grammar's readers share (grammar_parse.c reads GBNF and lowers the
 * tree, grammar_lark.c reads Lark): the parsed text as a tree of items per written rule, the
 * builders a reader calls, and the common tail that checks, lowers and lays out the tree. */
#ifndef PM_GRAMMAR_TREE_H
#define PM_GRAMMAR_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/grammar.h"
#include "engine/grammar_internal.h"
#include "util/err.h"

/* MAX_DEPTH: groups within groups; MAX_POSTFIX: postfixes on one item (x*+?...); MAX_FOLD: rules
 * inlined within rules (each a call deeper on the C stack, and a group deeper in the pattern). */
enum { MAX_DEPTH = 100, MAX_POSTFIX = 4, MAX_FOLD = 24, MAX_INLINE = 1 << 16, MAX_CP = 0x10FFFF };
enum { A_ICASE = 1, A_DOTALL = 2 };

/* A_RX: a pattern of regex.h's syntax (Lark's /.../ terminals), matched whole where it stands. */
typedef enum { A_LIT, A_CLASS, A_ANY, A_REF, A_SEQ, A_ALT, A_REP, A_RX } a_kind;

typedef struct a_node {
    a_kind kind;
    int32_t *v;   /* LIT: code points; CLASS: lo, hi pairs; SEQ, ALT: children; REP: the child in v[0] */
    int n, cap;
    int neg;      /* CLASS: [^...] */
    int flags;    /* LIT, RX: A_ICASE (ASCII letters either case), A_DOTALL (RX: `.` takes \n) */
    char *rx;     /* RX: the pattern (rx_len bytes) */
    size_t rx_len;
    int ref;      /* REF: the rule */
    int min, max; /* REP: counts, max < 0 unbounded */
    size_t at;    /* byte offset in the text */
} a_node;

typedef struct b_alt {
    g_elem *el;
    int n, cap;
} b_alt;

typedef struct b_rule {
    char *name;
    int body;             /* tree node; -1: not defined (or a rule made from alternatives) */
    size_t def_at, ref_at; /* where it is defined, and first named */
    int regular;          /* -1 not known yet, 2 being decided, 0 no, 1 yes (its text in rx) */
    char *rx;
    size_t rx_len;
    int queued;           /* lowered (or queued to be) */
    b_alt *alts;
    int n_alts, cap_alts;
} b_rule;

/* A growing string. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

/* Names (or patterns) to their index: open addressing over index + 1, so that a grammar of many rules
 * and terminals is read in linear time. */
typedef struct str_index {
    int32_t *slot;
    uint32_t cap; /* a power of two, at least twice the entries */
    int n;
} str_index;


typedef struct gp {
    const char *s;
    size_t len, p;
    a_node *nodes;
    int n_nodes, cap_nodes;
    b_rule *rules;
    int n_rules, cap_rules;
    str_index rule_names; /* the written rules by name */
    str_index term_texts; /* the terminals by pattern */
    struct sbuf *terms; /* the terminals' patterns */
    int n_terms, cap_terms;
    int n_elems;
    const char *notation; /* "GBNF" or "Lark": in messages that suggest a spelling */
    pm_err *e;
} gp;

/* Errors: PM_EINVAL "grammar: <msg> at byte <at>"; out of memory. Both return the code. */
int gp_fail(gp *P, size_t at, const char *fmt, ...) PM_PRINTF(3, 4);
int gp_oom(gp *P);
/* A new node of the kind (at P->p) / a value appended to node's v: the node's index or < 0. */
int gp_node(gp *P, a_kind kind);
int gp_push(gp *P, int node, int32_t v);
/* The rule named name[0, n), made (undefined, first named at `at`) when new: its index or < 0. */
int gp_rule(gp *P, const char *name, size_t n, size_t at);
/* One character of a literal at P->p, escapes (\n \r \t \xHH \uHHHH \UHHHHHHHH, escaped
 * punctuation) decoded. */
int gp_char(gp *P, uint32_t *cp);
int gp_grow(void **a, int *cap, int n, size_t elt);
/* After an alternative: 1 when a '|' follows, consumed with the space after it (outside groups also
 * at the start of a later line: a definition going on), else 0 with P->p where the alternative
 * ended; skip: the notation's spaces and comments (line ends too when newline_ok). */
int gp_next_alternative(gp *P, int nested, void (*skip)(gp *P, int newline_ok));
void gp_sb_put(sbuf *b, const char *s, size_t n);
void gp_sb_str(sbuf *b, const char *s);
/* After a reader: left recursion rewritten (gp_unleft), then the rules reachable from `root` (its
 * name) checked, lowered and laid out into *out; frees P. */
int gp_finish(gp *P, const char *root, pm_grammar **out);
/* grammar_left.c: the rules that may begin with a call of themselves (directly or through others)
 * rewritten into the same language without it, where the file's comment says how. */
int gp_unleft(gp *P);

/* Tarjan's strongly connected components over the rules, for the two left-recursion passes (the
 * rewrite's "may begin with" graph, the checks' "calls before writing"), run without recursion (a
 * valid chain of 16,384 rules would need megabytes of C stack at a frame a rule): rule r's edges
 * are to[from[r] .. from[r + 1]). Fills comp[r] (its component's root) and size[root] (its rules);
 * 0, or -1 out of memory. */
typedef struct gp_scc {
    int *comp, *size; /* [rules] */
} gp_scc;
int gp_scc_run(gp_scc *C, int n_rules, const int *from, const int *to);
void gp_scc_free(gp_scc *C);

/* grammar_lark.c: Lark text into P's tree (P->s, P->len set). */
int gp_read_lark(gp *P);

#endif
