/* tok_internal.h — the layout of a loaded tokenizer, shared by the files of src/tok (not a public header).
 *
 * Tokens are byte strings: tok_off/tok_len index a single blob (an added token stores its content). Two open-
 * addressing hash maps serve the hot paths: byte string -> id (vocabulary lookups, pm_tok_id) and (left id,
 * right id) -> (merge rank, merged id) for BPE. byte_id maps each byte to the id of its byte-level character. */
#ifndef PM_TOK_INTERNAL_H
#define PM_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tok/tokenizer.h"
#include "tok/utf8.h"

enum { PM_TOKF_KNOWN = 1, PM_TOKF_ADDED = 2, PM_TOKF_SPECIAL = 4 };

typedef struct pm_added_tok {
    int32_t id;
    char *content; /* UTF-8, NUL-terminated */
    size_t len;
    uint8_t lstrip, rstrip, single_word, special;
} pm_added_tok;

typedef struct pm_merge_ent {
    uint64_t key; /* (left id << 32) | right id */
    int32_t rank; /* -1: empty slot */
    int32_t id;   /* merged token */
} pm_merge_ent;

/* Pre-tokenizer: the split regex, translated for PCRE2 (see pretok.c), and a word-character test. */
typedef struct pm_pretok {
    pcre2_code *re;      /* translated pattern (Unicode 16 semantics); NULL: the whole text is one piece */
    pcre2_code *re_fast; /* the original pattern, used on text without trigger code points; NULL if same as re */
    int jit, jit_fast;   /* 1 when JIT-compiled (then pcre2_jit_match is used) */
    uint32_t (*trig)[2]; /* sorted disjoint code point ranges where re and re_fast may differ */
    size_t n_trig;
    pcre2_code *word; /* anchored [\p{L}\p{N}_], for single_word added tokens */
    char *pattern;    /* the translated pattern (for diagnostics) */
} pm_pretok;

struct pm_tokenizer {
    int32_t n_ids; /* max id + 1 */
    uint32_t *tok_off, *tok_len;
    uint8_t *tok_flags;
    char *blob;
    size_t blob_len;

    int32_t *vh; /* byte string -> id; -1 empty */
    uint32_t vh_mask;

    pm_merge_ent *mt;
    uint32_t mt_mask, mt_bits;
    size_t n_merges;

    int32_t byte_id[256];
    int ignore_merges;
    uint32_t max_tok_bytes; /* the longest vocabulary token: a piece of n bytes gives >= n / this ids */

    pm_added_tok *added;
    int n_added;
    uint8_t added_first[256]; /* 1 if some added token starts with this byte */

    pm_pretok pre;
};

/* A growable id vector. */
typedef struct pm_ids {
    int32_t *p;
    size_t n, cap;
} pm_ids;
int pm_ids_push(pm_ids *v, int32_t x, pm_err *e);

/* Hash of a byte string (shared by the loader and the lookups). */
uint32_t pm_tok_hash_bytes(const uint8_t *s, size_t n);
/* Id of the vocabulary token with exactly these bytes, or -1. */
int32_t pm_tok_lookup_bytes(const pm_tokenizer *t, const uint8_t *s, size_t n);

/* Merge of the adjacent pair (a, b): NULL if the pair is not a merge. */
static inline const pm_merge_ent *pm_merge_find(const pm_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - t->mt_bits));
    for (;;) {
        const pm_merge_ent *m = &t->mt[h];
        if (m->rank < 0) return NULL;
        if (m->key == key) return m;
        h = (h + 1) & t->mt_mask;
    }
}

/* Reusable scratch space of the BPE (one per encode call). */
typedef struct pm_bpe_work {
    int32_t *sym, *prev, *next;
    uint32_t *ver;
    void *heap;
    size_t cap, hcap;
} pm_bpe_work;
void pm_bpe_work_free(pm_bpe_work *w);
/* BPE of one pre-tokenized piece (raw bytes), ids appended to out. O(n log n) (heap + linked list). */
int pm_bpe_piece(const pm_tokenizer *t, const uint8_t *p, size_t n, pm_bpe_work *w, pm_ids *out, pm_err *e);
/* The same result by the naive method: rescan all pairs after every merge. */
int pm_bpe_piece_naive(const pm_tokenizer *t, const uint8_t *p, size_t n, pm_bpe_work *w, pm_ids *out, pm_err *e);

/* Pre-tokenizer. pattern: the split regex from tokenizer.json (NULL for none). */
int pm_pretok_init(pm_pretok *pt, const char *pattern, pm_err *e);
void pm_pretok_free(pm_pretok *pt);
/* Translates a tokenizer.json regex for PCRE2 with Unicode 16 semantics (see pretok.c); malloc'd result. */
int pm_pretok_translate(const char *pattern, char **out, pm_err *e);
typedef int (*pm_piece_fn)(void *ctx, const uint8_t *p, size_t n, pm_err *e);
/* Splits valid UTF-8 s[0..n) into pieces (matches and the gaps between them, in order) and calls fn on each. */
int pm_pretok_split(const pm_pretok *pt, const uint8_t *s, size_t n, pm_piece_fn fn, void *ctx, pm_err *e);
/* 1 if the code point at s[0..n) is a word character for single_word added tokens. */
int pm_pretok_is_word(const pm_pretok *pt, const uint8_t *s, size_t n);

/* Unicode White_Space (what HF's lstrip/rstrip strip and what the pattern's \s means). */
static inline int pm_is_white_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

#endif
