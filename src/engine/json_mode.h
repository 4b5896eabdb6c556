/* json_mode.h — JSON mode (OpenAI's response_format json_object and json_schema): a byte-level
 * recognizer of one JSON value (RFC 8259) held to a schema's graph (json_schema.h; JSON mode's is
 * any object), fed the generated tokens' bytes, and the mask that leaves a step only the tokens
 * that keep the output a prefix of such a value. Once the value is complete only an
 * end-of-sequence token remains (or, after a number, more digits), so a request that is not cut
 * by max_tokens ends with a complete value and nothing after it.
 *
 * The state is a few words and a frame per open container, so trying a token is a copy of the
 * live frames and a walk over its bytes; a step walks only the tokens whose first byte can come
 * next, and inside a string takes plain tokens by their count of characters (pm_json_vocab):
 * ~1 ms a step over the 200,064 tokens of Phi-4's vocabulary on the 2-vCPU Zen 5 VM. */
#ifndef PM_JSON_MODE_H
#define PM_JSON_MODE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/json_schema.h"

enum {
    PM_JSON_MAX_DEPTH = 64, /* nesting levels */
    PM_JSON_MAX_WS = 24     /* whitespace bytes in a row (a newline and indentation 5 deep): a
                             * model may not pad forever, as sampled ones under a mask tend to */
};

/* An open object or array: its node, and how far it has come. */
typedef struct pm_json_frame {
    const pm_json_node *node;
    int16_t last;   /* object: the last listed property given (-1: none yet) */
    uint16_t count; /* array: the items given */
} pm_json_frame;

typedef struct pm_json_state {
    const pm_json_node *pending; /* the node of the value expected next */
    const pm_json_node *str;     /* the string being read (its length limits), NULL for a key; a bounded integer being read */
    uint64_t cand;               /* an enum's values or a listed object's keys still matching */
    uint32_t pos;                /* bytes of them matched */
    uint32_t chars;              /* characters of the string being read */
    uint8_t depth;               /* open containers */
    uint8_t mode;                /* where in the grammar (json_mode.c) */
    uint8_t sub;                 /* within a literal, a number, an escape, a UTF-8 sequence */
    uint8_t integer;             /* the number being read admits no fraction or exponent */
    uint8_t in_key;              /* the string being read is a key */
    uint8_t utf8_left;           /* continuation bytes the string still owes */
    uint8_t utf8_range;          /* the range the next one must lie in */
    uint8_t ws;                  /* whitespace bytes in a row */
    uint8_t low;                 /* a \u escape of a high surrogate was read: its low half follows */
    uint16_t hex;                /* the \u escape's value so far */
    int32_t rx;                  /* a string with a pattern, a bounded integer: the DFA state of its text so far (regex.h) */
    pm_json_frame frames[PM_JSON_MAX_DEPTH];
} pm_json_state;

/* Starts before a value of root (pm_json_any_object() for JSON mode, a schema's root). */
void pm_json_init(pm_json_state *s, const pm_json_node *root);
/* Copies the live part of src (the open frames only). */
void pm_json_copy(pm_json_state *dst, const pm_json_state *src);
/* Feeds bytes; 0, or -1 (state unspecified) when they cannot continue a value of root. */
int pm_json_feed(pm_json_state *s, const char *bytes, size_t n);
/* 1 when what was fed is a complete value of root (a number or an enum value may still go on). */
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
 * value is complete. allow: scratch [vocab]. */
void pm_json_mask(const pm_json_state *s, const pm_json_vocab *jv, const int32_t *eos, int n_eos, float *logits, uint8_t *allow);

#endif
