/* placeholders.c — <|image_N|>/<|audio_N|> rewrite with validation, and placeholder-id expansion (see chat.h).
 *
 * The official processor matches <\|image_\d+\|> and <\|audio_\d+\|> with Python's re on str, where \d is any
 * Unicode decimal digit; here the same pattern runs on PCRE2 (\p{Nd} widened to Unicode 16 like the pre-tokenizer),
 * and a digit's value is its offset in its block of ten (decimal digits come in contiguous 0..9 runs). The official
 * code ignores N; phi4mm insists on 1..k in order so that a prompt's numbering cannot silently disagree with the
 * order in which media are attached. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tok/chat.h"
#include "tok/tok_internal.h"

static const char *const KIND_NAME[2] = {"image", "audio"};
static const char *const KIND_MEDIA[2] = {"image", "audio clip"};
static const char *const KIND_TOKEN[2] = {"<|endoftext10|>", "<|endoftext11|>"};

typedef struct rx_pair {
    pcre2_code *ph, *nd;
    pcre2_match_data *md;
} rx_pair;

static void rx_free(rx_pair *r) {
    pcre2_code_free(r->ph);
    pcre2_code_free(r->nd);
    pcre2_match_data_free(r->md);
}

static pcre2_code *rx_compile(const char *pat, uint32_t opt, pm_err *e) {
    char *tr = NULL;
    if (pm_pretok_translate(pat, &tr, e)) return NULL;
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)tr, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | opt, &ec, &eo, NULL);
    free(tr);
    if (!re) pm_errf(e, PM_ESTATE, "placeholders: internal regex failed to compile (%d)", ec);
    return re;
}

static int is_nd(const rx_pair *r, uint32_t cp) {
    uint8_t b[4];
    size_t n = pm_utf8_encode(cp, b);
    return pcre2_match(r->nd, b, n, 0, PCRE2_NO_UTF_CHECK, r->md, NULL) >= 0;
}

/* Numeric value of the digits s[0..n) (valid UTF-8, all \p{Nd}), saturating at INT_MAX. */
static long long digits_value(const rx_pair *r, const uint8_t *s, size_t n) {
    long long v = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t cp = pm_utf8_decode(s + i, n - i, &l), start = cp;
        i += l;
        if (cp >= '0' && cp <= '9') start = '0';
        else
            while (start > 0 && is_nd(r, start - 1)) start--;
        v = v * 10 + (cp - start) % 10;
        if (v > INT_MAX) v = INT_MAX;
    }
    return v;
}

int pm_prompt_rewrite_placeholders(const char *prompt, int n_images, int n_audios, char **out, pm_err *e) {
    *out = NULL;
    if (!prompt) return pm_errf(e, PM_EINVAL, "prompt: NULL");
    if (n_images < 0 || n_audios < 0) return pm_errf(e, PM_EINVAL, "prompt: negative media count");
    const int n_media[2] = {n_images, n_audios};
    size_t n = strlen(prompt);
    pm_buf fixed = {0}, b = {0};
    const uint8_t *s = (const uint8_t *)prompt;
    rx_pair r = {0};
    int rc = PM_OK;
    if (pm_utf8_valid_prefix(s, n) != n) { /* the encoder would repair it the same way */
        if ((rc = pm_utf8_lossy(s, n, 1, &fixed, NULL, e))) goto done;
        s = (const uint8_t *)fixed.p;
        n = fixed.len;
    }
    r.ph = rx_compile("<\\|(image|audio)_(\\p{Nd}+)\\|>", 0, e);
    r.nd = rx_compile("\\p{Nd}", PCRE2_ANCHORED, e);
    r.md = pcre2_match_data_create(4, NULL);
    if (!r.ph || !r.nd || !r.md) {
        rc = pm_errf(e, PM_ENOMEM, "placeholders: out of memory");
        goto done;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r.ph, NULL);
    if (!md) {
        rc = pm_errf(e, PM_ENOMEM, "placeholders: out of memory");
        goto done;
    }
    int next[2] = {1, 1};
    size_t off = 0;
    while (!rc) {
        int m = pcre2_match(r.ph, s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            rc = pm_errf(e, PM_EINVAL, "prompt: placeholder search failed (%d)", m);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int kind = s[ov[2]] == 'a';
        long long v = digits_value(&r, s + ov[4], ov[5] - ov[4]);
        const char *nm = KIND_NAME[kind];
        if (v < 1)
            rc = pm_errf(e, PM_EPLACEHOLDER, "prompt: <|%s_0|>: placeholders are numbered from 1", nm);
        else if (v < next[kind])
            rc = pm_errf(e, PM_EPLACEHOLDER, "prompt: <|%s_%lld|> appears more than once (duplicated placeholder)", nm, v);
        else if (v > next[kind])
            rc = pm_errf(e, PM_EPLACEHOLDER, "prompt: <|%s_%lld|> comes before <|%s_%d|> (placeholders must run 1, 2, ... in order)",
                         nm, v, nm, next[kind]);
        else if (next[kind] > n_media[kind])
            rc = pm_errf(e, PM_EPLACEHOLDER, "prompt: <|%s_%lld|> has no %s: only %d %s%s given", nm, v, KIND_MEDIA[kind],
                         n_media[kind], KIND_MEDIA[kind], n_media[kind] == 1 ? " was" : "s were");
        if (rc) break;
        next[kind]++;
        if ((rc = pm_buf_put(&b, s + off, ov[0] - off, e))) break;
        if ((rc = pm_buf_put(&b, KIND_TOKEN[kind], strlen(KIND_TOKEN[kind]), e))) break;
        off = ov[1];
    }
    pcre2_match_data_free(md);
    for (int k = 0; k < 2 && !rc; k++)
        if (next[k] - 1 < n_media[k])
            rc = pm_errf(e, PM_EPLACEHOLDER, "prompt: missing <|%s_%d|>: %d %s%s given but the prompt has %d <|%s_N|> placeholder%s",
                         KIND_NAME[k], next[k], n_media[k], KIND_MEDIA[k], n_media[k] == 1 ? " was" : "s were", next[k] - 1,
                         KIND_NAME[k], next[k] - 1 == 1 ? "" : "s");
    if (!rc) rc = pm_buf_put(&b, s + off, n - off, e);
    if (!rc) rc = pm_buf_take(&b, out, NULL, e);
done:
    rx_free(&r);
    pm_buf_free(&b);
    pm_buf_free(&fixed);
    return rc;
}

int pm_expand_placeholders(const int32_t *ids, size_t n, const int *image_tokens, int n_images, const int *audio_tokens,
                           int n_audios, int32_t **out, size_t *n_out, pm_err *e) {
    *out = NULL;
    *n_out = 0;
    if ((!ids && n) || n_images < 0 || n_audios < 0 || (n_images && !image_tokens) || (n_audios && !audio_tokens))
        return pm_errf(e, PM_EINVAL, "expand placeholders: bad arguments");
    const int *counts[2] = {image_tokens, audio_tokens};
    const int n_media[2] = {n_images, n_audios};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n_media[k]; i++)
            if (counts[k][i] < 1)
                return pm_errf(e, PM_EINVAL, "expand placeholders: %s %d has %d tokens (must be >= 1)", KIND_MEDIA[k], i + 1,
                               counts[k][i]);
    size_t found[2] = {0, 0}, total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        int k = id == PM_TOK_IMAGE_ID || (id >= -9999 && id <= -1) ? 0 : id == PM_TOK_AUDIO_ID || id <= -10000 ? 1 : -1;
        if (k < 0) {
            total++;
            continue;
        }
        if (found[k] < (size_t)n_media[k]) total += (size_t)counts[k][found[k]];
        found[k]++;
    }
    for (int k = 0; k < 2; k++)
        if (found[k] != (size_t)n_media[k])
            return pm_errf(e, PM_EPLACEHOLDER, "expand placeholders: the prompt has %zu %s placeholder token%s but %d %s%s given",
                           found[k], KIND_NAME[k], found[k] == 1 ? "" : "s", n_media[k], KIND_MEDIA[k],
                           n_media[k] == 1 ? " was" : "s were");
    int32_t *o = pm_malloc(pm_mul_size(total ? total : 1, sizeof *o), e);
    if (!o) return PM_ENOMEM;
    size_t j = 0, used[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        int k = id == PM_TOK_IMAGE_ID || (id >= -9999 && id <= -1) ? 0 : id == PM_TOK_AUDIO_ID || id <= -10000 ? 1 : -1;
        if (k < 0) {
            o[j++] = id;
            continue;
        }
        int32_t tok = k ? PM_TOK_AUDIO_ID : PM_TOK_IMAGE_ID;
        for (int c = 0; c < counts[k][used[k]]; c++) o[j++] = tok;
        used[k]++;
    }
    PM_ASSERT(j == total);
    *out = o;
    *n_out = total;
    return PM_OK;
}
