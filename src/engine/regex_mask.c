/* regex_mask.c — the step's mask under a guided pattern (regex.h): the usable tokens grouped by
 * their first byte with their bytes side by side, so a step looks up each first byte once, skips
 * the groups it kills, and walks the DFA over the rest of each surviving token; a sequence's recent
 * masks kept by state, a bit per token, for the states its output comes back to. */
#include <stdlib.h>
#include <string.h>

#include "engine/regex.h"
#include "tok/tokenizer.h"
#include "util/bits.h"

struct pm_regex_vocab {
    int vocab;
    int start[257];   /* the tokens of first byte c: ids[start[c], start[c + 1]) */
    int32_t *ids;
    uint32_t *off;    /* [usable + 1]: token i's bytes are bytes[off[i], off[i + 1]) (i in ids' order) */
    uint8_t *bytes;
    int max_len;      /* the longest usable token's bytes */
};

void pm_regex_vocab_free(pm_regex_vocab *rv) {
    if (!rv) return;
    free(rv->ids);
    free(rv->off);
    free(rv->bytes);
    free(rv);
}

pm_regex_vocab *pm_regex_vocab_from(const char *const *tokens, const size_t *len, int vocab) {
    pm_regex_vocab *rv = calloc(1, sizeof *rv);
    if (!rv) return NULL;
    rv->vocab = vocab;
    int count[256] = {0}, n = 0;
    size_t total = 0;
    for (int v = 0; v < vocab; v++)
        if (tokens[v] && len[v]) count[(unsigned char)*tokens[v]]++, total += len[v], n++;
    rv->ids = malloc(sizeof *rv->ids * (size_t)(n ? n : 1));
    rv->off = malloc(sizeof *rv->off * ((size_t)n + 1));
    rv->bytes = malloc(total ? total : 1);
    if (!rv->ids || !rv->off || !rv->bytes || total > UINT32_MAX) {
        pm_regex_vocab_free(rv);
        return NULL;
    }
    int at[256];
    rv->start[0] = 0;
    for (int c = 0; c < 256; c++) rv->start[c + 1] = rv->start[c] + count[c];
    memcpy(at, rv->start, sizeof at);
    for (int v = 0; v < vocab; v++)
        if (tokens[v] && len[v]) {
            rv->ids[at[(unsigned char)*tokens[v]]++] = v;
            if ((int)len[v] > rv->max_len) rv->max_len = (int)len[v];
        }
    uint32_t o = 0;
    for (int i = 0; i < n; i++) {
        rv->off[i] = o;
        memcpy(rv->bytes + o, tokens[rv->ids[i]], len[rv->ids[i]]);
        o += (uint32_t)len[rv->ids[i]];
    }
    rv->off[n] = o;
    return rv;
}

pm_regex_vocab *pm_regex_vocab_new(const pm_tokenizer *tok, int vocab) {
    const char **t;
    size_t *len;
    if (pm_tok_plain_bytes(tok, vocab, &t, &len)) return NULL;
    pm_regex_vocab *out = pm_regex_vocab_from(t, len, vocab);
    free(t);
    free(len);
    return out;
}

/* The DFA steps a mask may spend looking for a kept state whose tokens are st's (~0.1 ms, against
 * ~2.5 ms for a fresh mask over a 200k vocabulary). */
enum { SAME_STEPS = 1 << 17 };

struct pm_regex_masks {
    const pm_regex *rx;
    const pm_regex_vocab *rv;
    int32_t state[PM_REGEX_MASKS]; /* 0: an empty slot (the dead state's mask needs no keeping) */
    uint64_t *bits[PM_REGEX_MASKS];
    int next;                      /* the slot the next new mask takes */
    uint64_t *pairs;               /* pm_regex_same_within's scratch */
};

pm_regex_masks *pm_regex_masks_new(const pm_regex *rx, const pm_regex_vocab *rv) {
    pm_regex_masks *m = calloc(1, sizeof *m);
    if (m) m->rx = rx, m->rv = rv;
    return m;
}

void pm_regex_masks_free(pm_regex_masks *m) {
    if (!m) return;
    for (int i = 0; i < PM_REGEX_MASKS; i++) free(m->bits[i]);
    free(m->pairs);
    free(m);
}

size_t pm_regex_masks_bytes(int vocab) {
    return sizeof(pm_regex_masks) + PM_REGEX_MASKS * (((size_t)vocab + 63) / 64 * 8) + PM_REGEX_SAME_SCRATCH * sizeof(uint64_t);
}

/* The tokens st allows into allow (0 / 1), the end tokens aside. */
static void mask_tokens(const pm_regex *rx, int32_t st, const pm_regex_vocab *rv, uint8_t *allow) {
    memset(allow, 0, (size_t)rv->vocab);
    char one;
    for (int c = 0; c < 256 && st && !pm_regex_final(rx, st); c++) {
        if (rv->start[c] == rv->start[c + 1]) continue;
        one = (char)c;
        int32_t s1 = pm_regex_feed(rx, st, &one, 1);
        if (!s1) continue;
        for (int i = rv->start[c]; i < rv->start[c + 1]; i++) {
            uint32_t a = rv->off[i] + 1, b = rv->off[i + 1];
            allow[rv->ids[i]] = pm_regex_feed(rx, s1, (const char *)rv->bytes + a, b - a) != 0;
        }
    }
}

void pm_regex_mask(const pm_regex *rx, int32_t st, const pm_regex_vocab *rv, pm_regex_masks *masks, const int32_t *eos, int n_eos,
                   float *logits, uint8_t *allow) {
    int vocab = rv->vocab;
    size_t words = ((size_t)vocab + 63) / 64;
    int slot = -1;
    if (masks && (masks->rx != rx || masks->rv != rv)) masks = NULL; /* another pattern's */
    if (masks && st) {
        for (int i = 0; i < PM_REGEX_MASKS && slot < 0; i++)
            if (masks->state[i] == st) slot = i;
        /* else a kept state no token tells apart from st, the latest kept first (out of memory: none) */
        if (slot < 0 && (masks->pairs || (masks->pairs = calloc(PM_REGEX_SAME_SCRATCH, sizeof *masks->pairs)))) {
            pm_regex_dfa d;
            pm_regex_dfa_of(rx, &d);
            int steps = SAME_STEPS;
            for (int k = 1; k <= PM_REGEX_MASKS && slot < 0 && steps > 0; k++) {
                int i = (masks->next - k + PM_REGEX_MASKS) % PM_REGEX_MASKS;
                if (masks->state[i] && pm_regex_same_within(&d, st, masks->state[i], rv->max_len, 0, masks->pairs, &steps)) slot = i;
            }
        }
    }
    if (slot >= 0) pm_bits_expand(masks->bits[slot], (size_t)vocab, allow); /* kept */
    else {
        mask_tokens(rx, st, rv, allow);
        int i = masks && st ? masks->next : -1;
        if (i >= 0 && (masks->bits[i] || (masks->bits[i] = malloc(words * 8)))) { /* kept (out of memory: not kept) */
            pm_bits_pack(allow, (size_t)vocab, masks->bits[i]);
            masks->state[i] = st;
            masks->next = (i + 1) % PM_REGEX_MASKS;
        }
    }
    for (int i = 0; i < n_eos; i++) /* the end: only where the output is a whole match */
        if (eos[i] >= 0 && eos[i] < vocab) allow[eos[i]] = (uint8_t)(st && pm_regex_accepts(rx, st));
    pm_mask_logits(allow, logits, (size_t)vocab);
}
