/* regex.h — output held to a regular expression (vLLM's guided_regex and guided_choice): the
 * pattern compiled once into a byte-level DFA whose every state can still reach a match, so a
 * step's mask keeps exactly the tokens whose bytes lead from the current state to a live one, and
 * the end token only where what was written is a whole match.
 *
 * The syntax is the common core of Python's re and ECMAScript: literals (UTF-8), `.` (any
 * character but a newline), classes `[...]` / `[^...]` with ranges, `\d \w \s` and their negations
 * (ASCII: [0-9], [A-Za-z0-9_], [ \t\n\v\f\r]), escapes `\n \t \r \f \v \a \0 \xHH \uHHHH
 * \UHHHHHHHH` and escaped punctuation, groups `(...)`, `(?:...)`, `(?P<name>...)`, `(?<name>...)`,
 * alternation, and the quantifiers `* + ? {n} {n,} {,m} {n,m}` (lazy ones too: the set of whole
 * matches is the same), and inline flags i (ASCII letters either case, as re.IGNORECASE with
 * re.ASCII), s (`.` takes line ends too) and m (nothing to change here) scoped to a group,
 * `(?i:...)`, `(?-i:...)`, or for the whole pattern at its start, `(?i)`. The whole output must match
 * (as vLLM holds it), so `^` / `\A` at the very start and `$` / `\Z` at the very end are accepted
 * and change nothing. Refused with the byte where they stand: back-references, lookaround, word
 * boundaries, the inline flags x, a, u, L, possessive
 * quantifiers, anchors elsewhere, counts above PM_REGEX_MAX_REPEAT, and a pattern whose automaton
 * outgrows PM_REGEX_MAX_NFA / PM_REGEX_MAX_DFA states or takes longer than PM_REGEX_MAX_WORK steps to
 * build (say so rather than hold an answer loosely, or stall the thread that compiles it). */
#ifndef PM_REGEX_H
#define PM_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum {
    PM_REGEX_MAX_PATTERN = 1 << 20, /* bytes */
    PM_REGEX_MAX_REPEAT = 1000,     /* the largest count of a {n,m} */
    PM_REGEX_MAX_NFA = 1 << 18,     /* states of the automaton before determinizing */
    PM_REGEX_MAX_DFA = 1 << 16,     /* states of the DFA */
    PM_REGEX_MAX_TABLE = 1 << 21,   /* its transitions (states x byte classes): 8 MB */
    PM_REGEX_MAX_WORK = 1 << 24     /* automaton states visited while determinizing: ~0.2 s */
};

typedef struct pm_regex pm_regex;

/* Compiles pattern[0, len); otherwise PM_EINVAL with a message naming the construct and its byte
 * offset (PM_EUNSUPPORTED for valid syntax it does not hold an answer to). */
int pm_regex_compile(const char *pattern, size_t len, pm_regex **out, pm_err *e);

/* As pm_regex_compile, with flags:
 *   PM_REGEX_SEARCH: a text matches when the pattern matches somewhere in it (JSON Schema's
 *     `pattern`), unless `^` / `$` anchor its start / end; an anchor beside an alternation outside
 *     every group (`^a|b`) is refused (group it: `^(?:a|b)`);
 *   PM_REGEX_ECMA: ECMAScript's `.` (no \n, \r, U+2028, U+2029) and `\s` (Unicode's spaces too);
 *   PM_REGEX_JSON_TEXT: only the characters JSON mode lets a string hold (raw, or as the short
 *     escapes \b \f \n \r \t: not U+0000-U+0007, U+000B, U+000E-U+001F, which need \u), so
 *     that no state waits for a character the answer cannot write. */
enum { PM_REGEX_SEARCH = 1, PM_REGEX_ECMA = 2, PM_REGEX_JSON_TEXT = 4 };
int pm_regex_compile_flags(const char *pattern, size_t len, int flags, pm_regex **out, pm_err *e);
void pm_regex_free(pm_regex *rx);

/* The texts both a and b match (their product automaton), within the same limits. */
int pm_regex_intersect(const pm_regex *a, const pm_regex *b, pm_regex **out, pm_err *e);

/* States are ints; 0 is dead (no continuation matches). */
int32_t pm_regex_start(const pm_regex *rx);
/* The state after bytes[0, n) from st (0 once they leave every match). */
int32_t pm_regex_feed(const pm_regex *rx, int32_t st, const char *bytes, size_t n);
/* What was fed up to st is a whole match. */
int pm_regex_accepts(const pm_regex *rx, int32_t st);
/* ... and nothing may follow it (only the end token remains). */
int pm_regex_final(const pm_regex *rx, int32_t st);
/* The tables behind feed / accepts / final, for loops that step many states a byte at a time
 * (grammar.c): the state after byte b from s is next[s * n_classes + cls[b]]. Valid while rx is. */
typedef struct pm_regex_dfa {
    const int32_t *next;
    const uint8_t *cls, *accept, *final;
    int n_classes;
} pm_regex_dfa;
void pm_regex_dfa_of(const pm_regex *rx, pm_regex_dfa *d);
static inline int32_t pm_regex_dfa_step(const pm_regex_dfa *d, int32_t s, unsigned char b) { return d->next[(size_t)s * d->n_classes + d->cls[b]]; }
/* Whether live states a and b cannot be told apart within depth bytes: every string of at most
 * depth bytes leaves both alive or kills both (with accepting: and leaves both accepting or
 * neither). What a mask reads of a state over tokens of at most depth bytes is then the same for
 * both: a count's states ([^"]{0,1000}: a character each, times the states inside a UTF-8
 * sequence) until its end comes within a token's reach. The pairs of states the two reach are
 * walked breadth-first, each once, at the least depth it is met (what tells a pair apart within
 * fewer bytes does within more); a pair of one state needs no walk. At most *steps DFA steps
 * (counted down) and PM_REGEX_SAME_PAIRS pairs; 0 when they differ or the budget runs out.
 * scratch: PM_REGEX_SAME_SCRATCH words, zeroed before the first call (calloc); each call leaves it
 * so (it clears only the entries it made). */
enum { PM_REGEX_SAME_PAIRS = 4096, PM_REGEX_SAME_SCRATCH = 3 * PM_REGEX_SAME_PAIRS };
int pm_regex_same_within(const pm_regex_dfa *d, int32_t a, int32_t b, int depth, int accepting, uint64_t *scratch, int *steps);
/* Whether s[0, n) is a whole match. */
int pm_regex_fullmatch(const pm_regex *rx, const char *s, size_t n);
/* DFA states (the dead one included), for tests and limits. */
int pm_regex_states(const pm_regex *rx);
/* The bytes it holds (its table and flags): what a request holding it reserves beside its KV cache. */
size_t pm_regex_bytes(const pm_regex *rx);
/* The automaton states its compile visited (at most PM_REGEX_MAX_WORK): what a caller compiling
 * many patterns (a grammar's terminals) sums against a budget of its own. */
size_t pm_regex_work(const pm_regex *rx);

/* The alternation of the literal strings choices[0, n) (vLLM's guided_choice), each escaped:
 * a NUL-terminated pattern to free(), or NULL (e set). */
char *pm_regex_of_choices(const char *const *choices, int n, pm_err *e);
/* The decimal integers x with lo <= x (when has_lo) and x <= hi (when has_hi) in JSON's canonical
 * form (no '+', no leading zero, no "-0") as a pattern to free(), or NULL (e set: bounds beyond
 * +/-10^18 are PM_EUNSUPPORTED, an empty range PM_EINVAL). regex_range.c. */
char *pm_regex_of_int_range(long long lo, int has_lo, long long hi, int has_hi, pm_err *e);
/* The DFA of the decimal numbers x with lo <= x (lo < x when lo_exclusive; when has_lo) and x <= hi
 * (x < hi; when has_hi), written without an exponent ([-]I[.F], I without leading zeros; "-0" only
 * where 0 is taken): what a schema's bounds on a number hold JSON mode's digits to. A bound is taken
 * as the shortest decimal that reads back as its double (0.1, not 0.1000000000000000055...); beyond
 * +/-10^18 or finer than 10^-40: PM_EUNSUPPORTED; an empty range: PM_EINVAL. regex_range.c. */
int pm_regex_number_range(double lo, int has_lo, int lo_exclusive, double hi, int has_hi, int hi_exclusive, pm_regex **out, pm_err *e);

/* The decimal numbers that are whole multiples of m > 0 (JSON Schema's multipleOf), written as the
 * bounds above write them ([-]I[.F], no exponent; "-0" taken as 0), or with integer != 0 the
 * integers among them in canonical form (no '.', no "-0"). m is taken as the shortest decimal that
 * reads back as its double, M / 10^d: a number is a multiple when it has no digit other than 0
 * past d fraction digits and its digits as one integer, scaled to d fraction digits, divide by M;
 * the DFA follows that remainder. M x (d + 3) states at most PM_REGEX_MAX_DFA (else
 * PM_EUNSUPPORTED, as beyond 10^18 or finer than 10^-40); m <= 0: PM_EINVAL. regex_range.c. */
int pm_regex_multiples(double m, int integer, pm_regex **out, pm_err *e);
/* A DFA given as its table: n_states rows of n_classes next states (row 0 the dead state, 1 the
 * start), cls mapping bytes to classes, accept per state; the states that reach no accepting one
 * folded into the dead one. For builders of number sets (regex_range.c). */
int pm_regex_of_table(int n_states, int n_classes, const uint8_t cls[256], const int32_t *next, const uint8_t *accept, pm_regex **out,
                      pm_err *e);

struct pm_tokenizer;
/* The vocabulary as the mask reads it, built once per engine (immutable after): the usable tokens
 * (no special token, no unknown id) grouped by first byte, their bytes side by side. */
typedef struct pm_regex_vocab pm_regex_vocab;
pm_regex_vocab *pm_regex_vocab_new(const struct pm_tokenizer *tok, int vocab);
/* The same over tokens[v] of len[v] bytes (NULL or empty: never allowed), for tests and fuzzing. */
pm_regex_vocab *pm_regex_vocab_from(const char *const *tokens, const size_t *len, int vocab);
void pm_regex_vocab_free(pm_regex_vocab *rv);

/* A sequence's recent masks by state (a pattern's output often stays in a few states: inside a word,
 * after a space), PM_REGEX_MASKS of them, a bit per token each: the masks of rx over rv, for as
 * long as both live (pm_regex_mask ignores it for any other pair). A new state takes a kept mask
 * whose state keeps the same tokens (a count's states, one a character: no string as long as a
 * token tells them apart), found within a bounded walk of the two states' pairs. */
enum { PM_REGEX_MASKS = 16 };
typedef struct pm_regex_masks pm_regex_masks;
pm_regex_masks *pm_regex_masks_new(const pm_regex *rx, const pm_regex_vocab *rv);
void pm_regex_masks_free(pm_regex_masks *m);
/* The bytes it may come to with a vocabulary of vocab tokens (what a request reserves for it). */
size_t pm_regex_masks_bytes(int vocab);

/* Sets logits[v] = -INFINITY for every token v < vocab that cannot come next from st: one whose
 * bytes lead to the dead state, a special token, an unknown id, and an end token (eos[n_eos])
 * unless st accepts. allow: scratch [vocab]. masks (NULL: none) keeps the mask for st or gives it
 * back. */
void pm_regex_mask(const pm_regex *rx, int32_t st, const pm_regex_vocab *rv, pm_regex_masks *masks, const int32_t *eos, int n_eos,
                   float *logits, uint8_t *allow);

#endif
