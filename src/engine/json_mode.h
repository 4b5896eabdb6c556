/* json_mode.h — JSON mode (OpenAI's response_format {"type": "json_object"}): a byte-level
 * recognizer of one JSON object (RFC 8259), fed the generated tokens' bytes, and the mask that
 * leaves a step only the tokens that keep the output a prefix of such an object. Once the object
 * is closed only an end-of-sequence token remains, so a request that is not cut by max_tokens ends
 * with a complete object and nothing after it.
 *
 * The state is a few bytes and a 64-bit stack (object or array a level), so trying a token is a
 * copy and a walk over its bytes; a step walks only the tokens whose first byte can come next,
 * and inside a string takes plain tokens without a walk (pm_json_vocab). */
#ifndef PM_JSON_MODE_H
#define PM_JSON_MODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    PM_JSON_MAX_DEPTH = 64, /* nesting levels (the stack's bits) */
    PM_JSON_MAX_WS = 64     /* whitespace bytes in a row: a model may not pad forever */
};

typedef struct pm_json_state {
    uint64_t stack;    /* bit d: level d is an object (1) or an array (0) */
    uint8_t depth;     /* open containers */
    uint8_t mode;      /* where in the grammar (json_mode.c) */
    uint8_t sub;       /* within a literal, a number, an escape, a UTF-8 sequence */
    uint8_t in_key;    /* the open string is an object key */
    uint8_t utf8_left; /* continuation bytes the open string still owes */
    uint8_t ws;        /* whitespace bytes in a row */
} pm_json_state;

void pm_json_init(pm_json_state *s);
/* Feeds bytes; 0, or -1 (state unspecified) when they cannot continue a JSON object. */
int pm_json_feed(pm_json_state *s, const char *bytes, size_t n);
/* 1 when the top-level object is complete. */
int pm_json_done(const pm_json_state *s);

struct pm_tokenizer;
/* The vocabulary as the mask reads it, built once per engine (immutable after): the tokens grouped
 * by their first byte, so that a step walks only the groups whose byte can come next, and a flag
 * for tokens that are plain string content (no quote, backslash or control byte; whole UTF-8
 * characters), which a string takes without a walk. Special tokens and unknown ids are left out. */
typedef struct pm_json_vocab pm_json_vocab;
pm_json_vocab *pm_json_vocab_new(const struct pm_tokenizer *tok, int vocab);
void pm_json_vocab_free(pm_json_vocab *jv);

/* Sets logits[v] = -INFINITY for every token v < vocab that cannot come next: a token whose bytes
 * do not continue s, a special token, an unknown id, and an end token (eos[n_eos]) before the
 * object is complete; after it, every token but the end tokens. allow: scratch [vocab]. */
void pm_json_mask(const pm_json_state *s, const pm_json_vocab *jv, const int32_t *eos, int n_eos, float *logits, uint8_t *allow);

#endif
