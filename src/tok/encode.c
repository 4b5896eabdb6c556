/* encode.c — text -> ids: UTF-8 repair, added-token split, pre-tokenizer, BPE.
 *
 * Added tokens are found as HF's AddedVocabulary finds them: leftmost-longest, non-overlapping; a match that is
 * rejected (a special token in ordinary mode, a single_word token touching a word character) is skipped whole.
 * lstrip/rstrip widen a match over adjacent White_Space (never into the previous match). The text between matches
 * goes through the pre-tokenizer and BPE. Invalid UTF-8 is first rewritten with one U+FFFD per maximal ill-formed
 * subsequence (the policy of Python's decode('utf-8', 'replace'), which is how HF receives such input).
 * The fast path memoises piece -> ids within one call (the naive baseline does not). */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

enum { CACHE_MAX_PIECE = 64, CACHE_MAX_ENTRIES = 1 << 18 }; /* <= ~30 MB for a huge input of unique pieces */

/* Per-call memo of piece -> ids (real text repeats its words): open addressing over entries that point into two
 * arenas. It lives and dies with one encode call, so the tokenizer stays immutable and thread-safe. */
typedef struct cache_ent {
    uint32_t hash, key_off, ids_off;
    uint16_t key_len, n_ids; /* key_len 0: empty slot */
} cache_ent;

typedef struct piece_cache {
    cache_ent *slot;
    size_t cap, used;
    pm_buf keys;
    pm_ids ids;
} piece_cache;

typedef struct enc_ctx {
    const pm_tokenizer *t;
    pm_bpe_work w;
    pm_ids out;
    int naive;
    size_t max_ids; /* 0: no limit */
    piece_cache cache;
} enc_ctx;

/* PM_ELIMIT once more than max_ids ids were made: the rest of the text is not encoded. */
static int over_limit(const enc_ctx *c, pm_err *e) {
    if (!c->max_ids || c->out.n <= c->max_ids) return PM_OK;
    return pm_errf(e, PM_ELIMIT, "the text encodes to more than %zu tokens (encoding stopped there)", c->max_ids);
}

static void cache_free(piece_cache *c) {
    free(c->slot);
    pm_buf_free(&c->keys);
    free(c->ids.p);
}

static int cache_grow(piece_cache *c, pm_err *e) {
    size_t cap = c->cap ? c->cap * 2 : 4096;
    cache_ent *s = calloc(cap, sizeof *s);
    if (!s) return pm_errf(e, PM_ENOMEM, "out of memory for the piece cache");
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->slot[i].key_len) continue;
        size_t h = c->slot[i].hash & (cap - 1);
        while (s[h].key_len) h = (h + 1) & (cap - 1);
        s[h] = c->slot[i];
    }
    free(c->slot);
    c->slot = s;
    c->cap = cap;
    return PM_OK;
}

static int on_piece(void *vctx, const uint8_t *p, size_t n, pm_err *e) {
    enc_ctx *c = vctx;
    int lim = over_limit(c, e);
    if (lim) return lim;
    /* a piece too long to fit whatever its merges (BPE work and memory grow with its length: a
     * 10 MB one-word piece took 2.8 s and 400 MB) */
    if (c->max_ids && c->t->max_tok_bytes && n / c->t->max_tok_bytes > c->max_ids - c->out.n)
        return pm_errf(e, PM_ELIMIT, "the text encodes to more than %zu tokens (a %zu-byte word; encoding stopped there)", c->max_ids, n);
    if (c->naive) return pm_bpe_piece_naive(c->t, p, n, &c->w, &c->out, e);
    if (n < 2 || n > CACHE_MAX_PIECE) return pm_bpe_piece(c->t, p, n, &c->w, &c->out, e);
    piece_cache *pc = &c->cache;
    uint32_t h = pm_tok_hash_bytes(p, n);
    size_t i = 0;
    if (pc->cap) {
        for (i = h & (pc->cap - 1); pc->slot[i].key_len; i = (i + 1) & (pc->cap - 1)) {
            const cache_ent *s = &pc->slot[i];
            if (s->hash != h || s->key_len != n || memcmp(pc->keys.p + s->key_off, p, n)) continue;
            for (uint32_t k = 0; k < s->n_ids; k++) {
                int rc = pm_ids_push(&c->out, pc->ids.p[s->ids_off + k], e);
                if (rc) return rc;
            }
            return PM_OK;
        }
    }
    size_t before = c->out.n;
    int rc = pm_bpe_piece(c->t, p, n, &c->w, &c->out, e);
    if (rc || pc->used >= CACHE_MAX_ENTRIES) return rc;
    if (2 * (pc->used + 1) > pc->cap) { /* grow, then find the free slot again */
        if ((rc = cache_grow(pc, e))) return rc;
        i = h & (pc->cap - 1);
        while (pc->slot[i].key_len) i = (i + 1) & (pc->cap - 1);
    }
    cache_ent s = {h, (uint32_t)pc->keys.len, (uint32_t)pc->ids.n, (uint16_t)n, (uint16_t)(c->out.n - before)};
    if ((rc = pm_buf_put(&pc->keys, p, n, e))) return rc;
    for (size_t k = before; k < c->out.n; k++)
        if ((rc = pm_ids_push(&pc->ids, c->out.p[k], e))) return rc;
    pc->slot[i] = s;
    pc->used++;
    return PM_OK;
}

static int encode_text(enc_ctx *c, const uint8_t *s, size_t n, pm_err *e) {
    return pm_pretok_split(&c->t->pre, s, n, on_piece, c, e);
}

/* Longest added token starting at s[0..n), or NULL. */
static const pm_added_tok *added_at(const pm_tokenizer *t, const uint8_t *s, size_t n) {
    const pm_added_tok *best = NULL;
    for (int i = 0; i < t->n_added; i++) {
        const pm_added_tok *a = &t->added[i];
        if (a->len <= n && (!best || a->len > best->len) && !memcmp(a->content, s, a->len)) best = a;
    }
    return best;
}

static size_t back_one(const uint8_t *s, size_t i) {
    do i--;
    while (i && (s[i] & 0xC0) == 0x80);
    return i;
}

static int encode_all(enc_ctx *c, const uint8_t *s, size_t n, int allow_special, pm_err *e) {
    const pm_tokenizer *t = c->t;
    size_t seg = 0, pos = 0;
    int rc;
    while (pos < n) {
        if (!t->added_first[s[pos]]) {
            pos++;
            continue;
        }
        const pm_added_tok *a = added_at(t, s + pos, n - pos);
        if (!a) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + a->len;
        if (a->special && !allow_special) {
            pos = stop;
            continue;
        }
        if (a->single_word) {
            int before = start > 0 && pm_pretok_is_word(&t->pre, s + back_one(s, start), start - back_one(s, start));
            int after = stop < n && pm_pretok_is_word(&t->pre, s + stop, n - stop);
            if (before || after) {
                pos = stop;
                continue;
            }
        }
        if (a->lstrip) {
            while (start > seg) {
                size_t b = back_one(s, start), l;
                if (!pm_is_white_space(pm_utf8_decode(s + b, start - b, &l))) break;
                start = b;
            }
        }
        if (a->rstrip) {
            while (stop < n) {
                size_t l;
                if (!pm_is_white_space(pm_utf8_decode(s + stop, n - stop, &l))) break;
                stop += l;
            }
        }
        if ((rc = encode_text(c, s + seg, start - seg, e))) return rc;
        if ((rc = pm_ids_push(&c->out, a->id, e))) return rc;
        seg = pos = stop;
    }
    return encode_text(c, s + seg, n - seg, e);
}

static int encode(const pm_tokenizer *t, const char *text, size_t len, int allow_special, int naive, size_t max_ids,
                  int32_t **ids, size_t *n_ids, pm_err *e) {
    *ids = NULL;
    *n_ids = 0;
    if (!t) return pm_errf(e, PM_EINVAL, "tokenizer: not loaded");
    if (!text && len) return pm_errf(e, PM_EINVAL, "tokenizer: NULL text");
    const uint8_t *s = (const uint8_t *)text;
    pm_buf fixed = {0};
    int rc = PM_OK;
    if (len && pm_utf8_valid_prefix(s, len) != len) {
        if ((rc = pm_utf8_lossy(s, len, 1, &fixed, NULL, e))) return rc;
        s = (const uint8_t *)fixed.p;
        len = fixed.len;
    }
    enc_ctx c = {.t = t, .naive = naive, .max_ids = max_ids};
    rc = encode_all(&c, s, len, allow_special, e);
    if (!rc) rc = over_limit(&c, e); /* the last piece */
    pm_bpe_work_free(&c.w);
    cache_free(&c.cache);
    pm_buf_free(&fixed);
    if (!rc && !c.out.p) { /* always hand back an allocation, even for no ids */
        rc = pm_ids_push(&c.out, 0, e);
        c.out.n = 0;
    }
    if (rc) {
        free(c.out.p);
        return rc;
    }
    *ids = c.out.p;
    *n_ids = c.out.n;
    return PM_OK;
}

int pm_tok_encode(const pm_tokenizer *t, const char *text, size_t len, int allow_special, int32_t **ids, size_t *n_ids,
                  pm_err *e) {
    return encode(t, text, len, allow_special, 0, 0, ids, n_ids, e);
}

int pm_tok_encode_max(const pm_tokenizer *t, const char *text, size_t len, int allow_special, size_t max_ids, int32_t **ids,
                      size_t *n_ids, pm_err *e) {
    return encode(t, text, len, allow_special, 0, max_ids, ids, n_ids, e);
}

int pm_tok_encode_naive(const pm_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids, pm_err *e) {
    return encode(t, text, len, 1, 1, 0, ids, n_ids, e);
}
