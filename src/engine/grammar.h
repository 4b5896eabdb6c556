/* grammar.h — output held to a context-free grammar (vLLM's guided_grammar, llama.cpp's grammar):
 * GBNF, llama.cpp's notation, read left to right, or Lark's (grammar_lark.c says what of it is
 * read: `start: ...`, rules and TERMINALS, /patterns/, %import common, %ignore), told apart by the
 * first definition: `name ::=` is GBNF, `name:` (or a leading %directive) Lark.
 *
 *   root   ::= answer ws "."            # a rule: a name, ::=, alternatives separated by |
 *   answer ::= "yes" | "no" | list
 *   list   ::= "[" ( item ("," item)* )? "]"
 *   item   ::= [a-z]+ | "\"" [^"\\]* "\""
 *   ws     ::= [ \t\n]*
 *
 * Items: "literal" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [class] / [^class] of
 * characters and ranges (the same escapes), `.` (any character), a rule's name, ( grouping ), and
 * the postfixes * + ? {m} {m,} {m,n}. `#` comments to the end of the line. A sequence ends at the
 * end of its line except inside parentheses and after `::=` or `|`; a line that begins with `|`
 * goes on with the rule above it. The whole output must be a `root`.
 *
 * How it is held: every stretch of a rule that names no rule (a literal, a class, a group or
 * repeat of them) becomes one byte-level DFA of regex.h, so a regular grammar runs as one DFA; the
 * rest is a set of parse threads, each a terminal DFA's state and a stack of where to go on once it
 * is matched (stacks shared and hash-consed; a call in last position pops first, so right
 * recursion does not grow them). A step's mask walks the vocabulary's bytes as a trie, the thread
 * set one byte at a time, and keeps the tokens after which some thread lives or the root is
 * complete; the end token only where the root is complete. Where a thread's terminal does not
 * end on a token's way before a byte that may begin what follows it, its DFA alone decides the
 * token: those verdicts are cached per (terminal, state, what may follow) in the parse state, so the
 * walk goes only where what follows the terminal matters (inside a JSON string: the tokens that
 * close it), and each stack's expansion is made once per mask (grammar.c).
 *
 * A rule's alternatives that begin with a call of the rule itself (`expr ::= expr "+" term |
 * term`, Lark's usual way) are read as the others followed by a repeat (`term ("+" term)*`): the
 * same language. Rules that begin with one another in a cycle (`expr ::= call | name`, `call ::=
 * expr "()"`) are first rewritten into the same language without the cycle (grammar_left.c).
 *
 * Refused at compile time, with the rule and byte: a syntax error, an undefined or twice-defined
 * rule, no `root` (Lark: `start`), left recursion the rewrite leaves (a cycle closed through a rule
 * that may be empty, or one with no alternative to begin with: it would never end; write it
 * right-recursively or with *), groups nested over 100 deep, more than 4
 * postfixes on one item, repeats above PM_GRAMMAR_MAX_REPEAT, more than
 * PM_GRAMMAR_MAX_RULES rules after expansion, a terminal the regex limits refuse, and terminals that
 * take longer than PM_GRAMMAR_MAX_WORK to build together (a request's grammar is compiled on a
 * server thread: no stalling it). At run time a
 * grammar whose thread set outgrows PM_GRAMMAR_MAX_THREADS, or whose mask would step more than
 * PM_GRAMMAR_MAX_MASK_STEPS threads over the trie (a very ambiguous one: thousands of threads walked
 * over 200k tokens took 0.6 s a step and could take seconds, the whole batch waiting; the grammars
 * of the tests and the bench step at most ~0.5 M), fails the request rather than hold it loosely
 * or late. */
#ifndef PM_GRAMMAR_H
#define PM_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "engine/regex.h"
#include "util/err.h"

enum {
    PM_GRAMMAR_MAX_TEXT = 1 << 20,  /* bytes of GBNF */
    PM_GRAMMAR_MAX_REPEAT = 1000,   /* the largest count of a {m,n} around a rule */
    PM_GRAMMAR_MAX_RULES = 1 << 14, /* rules and alternatives' elements after expansion */
    PM_GRAMMAR_MAX_THREADS = 4096,  /* parse threads at one point of the output */
    PM_GRAMMAR_MAX_MASK_STEPS = 1 << 23, /* threads a mask steps over the trie, all nodes together (~0.1 s) */
    PM_GRAMMAR_MAX_NODES = 1 << 20, /* stack nodes a state (and one step's mask) may hold: <= 16 MB with their index */
    PM_GRAMMAR_MAX_DEPTH = 4096,    /* levels one byte's expansion may pass through (nested rules ending together) */
    PM_GRAMMAR_MAX_WORK = 2 * PM_REGEX_MAX_WORK, /* its terminals' DFA builds together (pm_regex_work): ~0.4 s */
    PM_GRAMMAR_CLASS_BYTES = 4 << 20 /* a state's cache of its threads' token classes (grammar.c) */
};

typedef struct pm_grammar pm_grammar;
typedef struct pm_grammar_state pm_grammar_state;

/* Compiles GBNF or Lark text[0, len); otherwise PM_EINVAL naming the rule and byte offset
 * (PM_EUNSUPPORTED for valid notation it does not hold an answer to: left recursion, a terminal
 * the regex engine refuses, Lark's templates and %declare). */
int pm_grammar_compile(const char *text, size_t len, pm_grammar **out, pm_err *e);
/* Whether pm_grammar_compile reads text[0, len) as Lark. */
int pm_grammar_is_lark(const char *text, size_t len);
void pm_grammar_free(pm_grammar *g);
/* Rules (those written and those its groups and repeats became) and terminal DFAs, for tests. */
void pm_grammar_stats(const pm_grammar *g, int *rules, int *terminals);
/* The bytes the compiled grammar holds (its terminals' DFAs and its tables), and the most a parse
 * state may come to within the limits (its stack nodes and their index, PM_GRAMMAR_MAX_NODES of
 * each, the thread sets beside, the mask's caches: closures and their steps <= 6 MB, token classes
 * and their union <= 2 x PM_GRAMMAR_CLASS_BYTES, the classes' state comparison's scratch): what a
 * request held to a grammar reserves beside its KV cache. */
size_t pm_grammar_bytes(const pm_grammar *g);
#define PM_GRAMMAR_STATE_BYTES                                                                                              \
    ((int64_t)PM_GRAMMAR_MAX_NODES * 16 + ((int64_t)1 << 20) + ((int64_t)6 << 20) + 2 * (int64_t)PM_GRAMMAR_CLASS_BYTES + \
     (int64_t)PM_REGEX_SAME_SCRATCH * 8)

/* Where an output stands: nothing written yet. NULL (e set) when out of memory or the start
 * already outgrows the limits. */
pm_grammar_state *pm_grammar_start(const pm_grammar *g, pm_err *e);
void pm_grammar_state_free(pm_grammar_state *st);
/* Advances over bytes[0, n): 1 while the output can still become a root (or is one), 0 once it
 * cannot (the state is then dead), < 0 on a limit (e set). */
int pm_grammar_feed(pm_grammar_state *st, const char *bytes, size_t n, pm_err *e);
/* What was fed is a whole root. */
int pm_grammar_accepts(const pm_grammar_state *st);
/* ... and nothing may follow it (only the end token remains). */
int pm_grammar_final(const pm_grammar_state *st);
/* Whether s[0, n) is a whole root (a fresh state fed it). */
int pm_grammar_fullmatch(const pm_grammar *g, const char *s, size_t n, pm_err *e);

/* The vocabulary as a byte trie, built once per engine (immutable after): the usable tokens (no
 * special token, no unknown id). */
struct pm_tokenizer;
typedef struct pm_grammar_vocab pm_grammar_vocab;
pm_grammar_vocab *pm_grammar_vocab_new(const struct pm_tokenizer *tok, int vocab);
/* The same from raw token bytes (tests): tokens[v] of len[v] bytes, NULL for an unusable one. */
pm_grammar_vocab *pm_grammar_vocab_from(const char *const *tokens, const size_t *len, int vocab);
void pm_grammar_vocab_free(pm_grammar_vocab *gv);

/* Sets logits[v] = -INFINITY for every token v < vocab after whose bytes the output can no longer
 * be a root, every special token and unknown id, and the end tokens (eos[n_eos]) unless st accepts.
 * allow: scratch [vocab]. < 0 (e set) on a limit: the state is left as it was. */
int pm_grammar_mask(pm_grammar_state *st, const pm_grammar_vocab *gv, const int32_t *eos, int n_eos, float *logits, uint8_t *allow,
                    pm_err *e);
/* plain = 1: masks walk the whole trie, feeds close every stack afresh (no caches): the reference
 * the caches are tested against. */
void pm_grammar_set_plain(pm_grammar_state *st, int plain);

#endif
