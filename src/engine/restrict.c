/* restrict.c — allowed_token_ids and bad_words (see restrict.h). */
#include "engine/restrict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The word without its leading whitespace (Python's str.lstrip for ASCII whitespace). */
static const char *lstrip(const char *w) {
    while (*w == ' ' || *w == '\t' || *w == '\n' || *w == '\r' || *w == '\v' || *w == '\f') w++;
    return w;
}

int pm_restrict_check(const pm_request *req, int vocab, pm_err *e) {
    if (req->n_allowed_ids < 0 || req->n_allowed_ids > PM_MAX_ALLOWED_IDS || (req->n_allowed_ids > 0 && !req->allowed_ids))
        return pm_errf(e, PM_EINVAL, "allowed token ids hold 0..%d entries (got %d)", PM_MAX_ALLOWED_IDS, req->n_allowed_ids);
    for (int i = 0; i < req->n_allowed_ids; i++)
        if (req->allowed_ids[i] < 0 || req->allowed_ids[i] >= vocab)
            return pm_errf(e, PM_EINVAL, "allowed token id %d (entry %d) is not in [0, %d)", (int)req->allowed_ids[i], i, vocab);
    if (req->n_bad_words < 0 || req->n_bad_words > PM_MAX_BAD_WORDS || (req->n_bad_words > 0 && !req->bad_words))
        return pm_errf(e, PM_EINVAL, "bad words hold 0..%d entries (got %d)", PM_MAX_BAD_WORDS, req->n_bad_words);
    for (int i = 0; i < req->n_bad_words; i++) {
        const char *w = req->bad_words[i] ? lstrip(req->bad_words[i]) : "";
        if (!*w || strlen(w) > PM_MAX_BAD_WORD_BYTES)
            return pm_errf(e, PM_EINVAL, "bad word %d must hold 1..%d bytes besides leading whitespace", i, PM_MAX_BAD_WORD_BYTES);
    }
    return PM_OK;
}

/* Appends ids[0, n) as a bad sequence. */
static int add_bad(pm_restrict *r, const int32_t *ids, int n, int *cap, pm_err *e) {
    int used = r->n_bad ? r->bad_end[r->n_bad - 1] : 0;
    if (used + n > *cap) {
        int c = 2 * (used + n);
        int32_t *p = realloc(r->bad, sizeof(int32_t) * (size_t)c);
        if (!p) return pm_errf(e, PM_ENOMEM, "out of memory for the bad words");
        r->bad = p;
        *cap = c;
    }
    memcpy(r->bad + used, ids, sizeof(int32_t) * (size_t)n);
    r->bad_end[r->n_bad++] = used + n;
    return PM_OK;
}

int pm_restrict_init(pm_restrict *r, const pm_tokenizer *tok, const pm_request *req, pm_err *e) {
    memset(r, 0, sizeof *r);
    int rc = PM_OK;
    if (req->n_allowed_ids > 0) {
        r->allowed = malloc(sizeof(int32_t) * (size_t)req->n_allowed_ids);
        r->kept = malloc(sizeof(float) * (size_t)req->n_allowed_ids);
        if (!r->allowed || !r->kept) {
            pm_restrict_free(r);
            return pm_errf(e, PM_ENOMEM, "out of memory for the allowed tokens");
        }
        memcpy(r->allowed, req->allowed_ids, sizeof(int32_t) * (size_t)req->n_allowed_ids);
        qsort(r->allowed, (size_t)req->n_allowed_ids, sizeof(int32_t), cmp_id);
        for (int i = 0; i < req->n_allowed_ids; i++)
            if (!r->n_allowed || r->allowed[r->n_allowed - 1] != r->allowed[i]) r->allowed[r->n_allowed++] = r->allowed[i];
    }
    if (req->n_bad_words > 0 && !(r->bad_end = malloc(sizeof(int) * 2 * (size_t)req->n_bad_words)))
        rc = pm_errf(e, PM_ENOMEM, "out of memory for the bad words");
    int cap = 0;
    char spaced[PM_MAX_BAD_WORD_BYTES + 2];
    for (int i = 0; i < req->n_bad_words && !rc; i++) {
        const char *w = lstrip(req->bad_words[i]);
        int32_t *plain = NULL, *sp = NULL;
        size_t n_plain = 0, n_sp = 0;
        snprintf(spaced, sizeof spaced, " %s", w);
        rc = pm_tok_encode(tok, w, strlen(w), 1, &plain, &n_plain, e);
        if (!rc) rc = pm_tok_encode(tok, spaced, strlen(spaced), 1, &sp, &n_sp, e);
        if (!rc && n_plain) rc = add_bad(r, plain, (int)n_plain, &cap, e);
        /* after a space: another spelling wherever its tokens differ (vLLM adds it only when it has as
         * many tokens as the plain one, so " Domino" = [" Domino"] next to "Domino" = ["Dom", "ino"] would
         * still come there) */
        if (!rc && n_sp && (n_sp != n_plain || memcmp(sp, plain, sizeof(int32_t) * n_sp))) rc = add_bad(r, sp, (int)n_sp, &cap, e);
        free(plain);
        free(sp);
    }
    if (rc) pm_restrict_free(r);
    return rc;
}

void pm_restrict_apply(const pm_restrict *r, const int32_t *out, int n_out, float *logits, int vocab) {
    for (int k = 0; k < r->n_bad; k++) {
        int b0 = k ? r->bad_end[k - 1] : 0, len = r->bad_end[k] - b0;
        const int32_t *w = r->bad + b0;
        if (len == 1 || (n_out >= len - 1 && !memcmp(out + n_out - (len - 1), w, sizeof(int32_t) * (size_t)(len - 1))))
            logits[w[len - 1]] = -INFINITY;
    }
    if (!r->allowed) return;
    for (int i = 0; i < r->n_allowed; i++) r->kept[i] = logits[r->allowed[i]];
    for (int v = 0; v < vocab; v++) logits[v] = -INFINITY;
    for (int i = 0; i < r->n_allowed; i++) logits[r->allowed[i]] = r->kept[i];
}

void pm_restrict_free(pm_restrict *r) {
    free(r->allowed);
    free(r->kept);
    free(r->bad);
    free(r->bad_end);
    memset(r, 0, sizeof *r);
}
