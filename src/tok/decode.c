/* decode.c — ids -> text, whole and streaming.
 *
 * Whole: concatenate the tokens' bytes (an added token gives its content; skip_special drops special ones; unknown
 * ids give nothing), then lossy UTF-8 (utf8.c). This equals HF decode(ids, skip_special_tokens=...) for byte-level
 * BPE with clean_up_tokenization_spaces=false.
 * Streaming: the same bytes pushed token by token through a WHATWG-style streaming decoder: up to 3 bytes of an
 * incomplete but still valid character are held back; concat(all pushes) + flush == whole decode. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

struct pm_tok_stream {
    const pm_tokenizer *t;
    int skip_special;
    uint8_t held[4];
    size_t n_held;
};

/* Bytes of id as decoding sees them (NULL, 0 when the id contributes nothing). */
static const char *dec_bytes(const pm_tokenizer *t, int32_t id, int skip_special, size_t *len) {
    if (skip_special && pm_tok_is_special(t, id)) {
        *len = 0;
        return NULL;
    }
    return pm_tok_token_bytes(t, id, len);
}

int pm_tok_decode(const pm_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out, size_t *out_len,
                  pm_err *e) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return pm_errf(e, PM_EINVAL, "tokenizer: not loaded");
    if (!ids && n) return pm_errf(e, PM_EINVAL, "decode: NULL ids");
    pm_buf raw = {0}, txt = {0};
    int rc = PM_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t l;
        const char *b = dec_bytes(t, ids[i], skip_special, &l);
        if (l) rc = pm_buf_put(&raw, b, l, e);
    }
    if (!rc) rc = pm_utf8_lossy((const uint8_t *)raw.p, raw.len, 1, &txt, NULL, e);
    if (!rc) rc = pm_buf_take(&txt, out, out_len, e);
    pm_buf_free(&raw);
    pm_buf_free(&txt);
    return rc;
}

pm_tok_stream *pm_tok_stream_new(const pm_tokenizer *t, int skip_special) {
    pm_tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip_special = skip_special;
    return s;
}

int pm_tok_stream_push(pm_tok_stream *s, int32_t id, char **text, size_t *len, pm_err *e) {
    *text = NULL;
    if (len) *len = 0;
    if (!s) return pm_errf(e, PM_EINVAL, "stream: NULL");
    size_t l;
    const char *b = dec_bytes(s->t, id, s->skip_special, &l);
    pm_buf raw = {0}, txt = {0};
    int rc = pm_buf_put(&raw, s->held, s->n_held, e);
    if (!rc && l) rc = pm_buf_put(&raw, b, l, e);
    size_t held = 0;
    if (!rc) rc = pm_utf8_lossy((const uint8_t *)raw.p, raw.len, 0, &txt, &held, e);
    if (!rc) {
        PM_ASSERT(held < sizeof s->held);
        memcpy(s->held, raw.p + raw.len - held, held);
        s->n_held = held;
        rc = pm_buf_take(&txt, text, len, e);
    }
    pm_buf_free(&raw);
    pm_buf_free(&txt);
    return rc;
}

int pm_tok_stream_flush(pm_tok_stream *s, char **text, size_t *len, pm_err *e) {
    *text = NULL;
    if (len) *len = 0;
    if (!s) return pm_errf(e, PM_EINVAL, "stream: NULL");
    pm_buf txt = {0};
    int rc = pm_utf8_lossy(s->held, s->n_held, 1, &txt, NULL, e);
    s->n_held = 0;
    if (!rc) rc = pm_buf_take(&txt, text, len, e);
    pm_buf_free(&txt);
    return rc;
}

void pm_tok_stream_free(pm_tok_stream *s) { free(s); }
