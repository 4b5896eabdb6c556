/* load.c — reads a Hugging Face tokenizer.json (byte-level BPE) into a pm_tokenizer.
 *
 * The file is walked once with json_scan.c: model.vocab and model.merges (400k entries) are decoded straight into
 * flat arrays; every other member is small and is parsed by jansson from its byte span (that keeps the load of the
 * 6.7 MB Phi-4 file around 0.1 s, where a full jansson DOM takes about a second).
 *
 * What is accepted: model.type "BPE" without byte_fallback, subword prefixes or word suffixes; no normalizer; a
 * pre-tokenizer that is ByteLevel (GPT-2 regex built in) or a Sequence of a Split(Regex, Isolated) and a
 * ByteLevel(use_regex=false); add_prefix_space=false; a post-processor that adds no tokens; a ByteLevel decoder.
 * Everything else is rejected with a sentence naming the field, because a silently different tokenization would
 * corrupt every prompt.
 *
 * Vocabulary keys are spelled in the GPT-2 byte alphabet (bytes 21-7E, A1-AC, AE-FF stand for themselves, the other
 * 68 bytes are U+0100.. in byte order); they are turned back into raw bytes here, so the hot paths work on bytes.
 * Merges come as "a b" strings or ["a", "b"] pairs; merge i gets rank i (a later duplicate overrides, as HF's
 * HashMap collect does). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/json_scan.h"
#include "tok/tok_internal.h"

#define PM_TOK_MAX_ID (1 << 24) /* sanity cap on ids in a tokenizer.json */

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Byte-level alphabet: code point (< 0x144) -> byte, or -1. */
typedef struct bl_map {
    int16_t u2b[0x144];
} bl_map;

static void bl_init(bl_map *m) {
    for (int i = 0; i < 0x144; i++) m->u2b[i] = -1;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (self) m->u2b[b] = (int16_t)b;
        else m->u2b[0x100 + k++] = (int16_t)b;
    }
}

/* Byte-level string (valid UTF-8) -> raw bytes in out (room for n bytes). Returns the length or -1 if some character
 * is outside the byte alphabet. */
static long bl_decode(const bl_map *m, const char *s, size_t n, uint8_t *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        size_t l;
        uint32_t cp = pm_utf8_decode((const uint8_t *)s + i, n - i, &l);
        if (cp >= 0x144 || m->u2b[cp] < 0) return -1;
        out[o++] = (uint8_t)m->u2b[cp];
        i += l;
    }
    return (long)o;
}

uint32_t pm_tok_hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return (uint32_t)(((h ^ (h >> 32)) * 0x9E3779B97F4A7C15ull) >> 32);
}

int32_t pm_tok_lookup_bytes(const pm_tokenizer *t, const uint8_t *s, size_t n) {
    uint32_t h = pm_tok_hash_bytes(s, n) & t->vh_mask;
    for (;;) {
        int32_t id = t->vh[h];
        if (id < 0) return -1;
        if (t->tok_len[id] == n && !memcmp(t->blob + t->tok_off[id], s, n)) return id;
        h = (h + 1) & t->vh_mask;
    }
}

static void vh_insert(pm_tokenizer *t, int32_t id) {
    const uint8_t *s = (const uint8_t *)t->blob + t->tok_off[id];
    size_t n = t->tok_len[id];
    uint32_t h = pm_tok_hash_bytes(s, n) & t->vh_mask;
    while (t->vh[h] >= 0) {
        int32_t o = t->vh[h];
        if (t->tok_len[o] == n && !memcmp(t->blob + t->tok_off[o], s, n)) return; /* first id wins */
        h = (h + 1) & t->vh_mask;
    }
    t->vh[h] = id;
}

static void mt_insert(pm_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - t->mt_bits));
    for (;;) {
        pm_merge_ent *m = &t->mt[h];
        if (m->rank < 0 || m->key == key) {
            m->key = key;
            m->rank = rank;
            m->id = id;
            return;
        }
        h = (h + 1) & t->mt_mask;
    }
}

static uint32_t pow2_at_least(size_t n) {
    uint32_t p = 1024;
    while (p < n) p <<= 1;
    return p;
}

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jtrue(json_t *o, const char *key) { return json_is_true(json_object_get(o, key)); }

/* A post-processor must not add tokens: phi4mm never adds BOS/EOS (Phi-4 has add_bos_token=false). Accepted: null,
 * ByteLevel (offsets only), TemplateProcessing whose single-sequence template has no SpecialToken, and a Sequence of
 * those. */
static int check_post(json_t *pp, int depth, pm_err *e) {
    if (!pp || json_is_null(pp)) return PM_OK;
    const char *ty = jstr(pp, "type");
    if (ty && !strcmp(ty, "ByteLevel")) return PM_OK;
    if (ty && !strcmp(ty, "Sequence") && depth < 4) {
        json_t *arr = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(arr); i++) {
            int rc = check_post(json_array_get(arr, i), depth + 1, e);
            if (rc) return rc;
        }
        return PM_OK;
    }
    if (ty && !strcmp(ty, "TemplateProcessing")) {
        json_t *single = json_object_get(pp, "single");
        for (size_t i = 0; i < json_array_size(single); i++)
            if (json_object_get(json_array_get(single, i), "SpecialToken"))
                return pm_errf(e, PM_EUNSUPPORTED, "post_processor TemplateProcessing adds special tokens around the text; "
                                                   "phi4mm adds none (Phi-4 has no BOS)");
        return PM_OK;
    }
    return pm_errf(e, PM_EUNSUPPORTED, "post_processor '%s' is not supported", ty ? ty : "?");
}

/* Checks the normalizer / pre-tokenizer / decoder / model options; sets *pattern (borrowed from root). */
static int check_pipeline(json_t *root, json_t *model, const char **pattern, pm_err *e) {
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm))
        return pm_errf(e, PM_EUNSUPPORTED, "normalizer '%s' is not supported (byte-level BPE without normalizer only)",
                       jstr(norm, "type") ? jstr(norm, "type") : "?");
    const char *type = jstr(model, "type");
    if (type && strcmp(type, "BPE"))
        return pm_errf(e, PM_EUNSUPPORTED, "model type '%s' is not supported (phi4mm reads byte-level BPE only)", type);
    if (jtrue(model, "byte_fallback"))
        return pm_errf(e, PM_EUNSUPPORTED, "model.byte_fallback=true is a SentencePiece-style BPE, not byte-level");
    const char *pre = jstr(model, "continuing_subword_prefix"), *suf = jstr(model, "end_of_word_suffix");
    if ((pre && *pre) || (suf && *suf))
        return pm_errf(e, PM_EUNSUPPORTED, "model.continuing_subword_prefix/end_of_word_suffix are not byte-level BPE");

    json_t *pt = json_object_get(root, "pre_tokenizer");
    if (!json_is_object(pt)) return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer is missing: not a byte-level BPE tokenizer");
    json_t *items[2] = {pt, NULL};
    size_t n_items = 1;
    const char *pt_type = jstr(pt, "type");
    if (pt_type && !strcmp(pt_type, "Sequence")) {
        json_t *arr = json_object_get(pt, "pretokenizers");
        if (!json_is_array(arr) || json_array_size(arr) < 1 || json_array_size(arr) > 2)
            return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer Sequence: expected [Split, ByteLevel] or [ByteLevel]");
        n_items = json_array_size(arr);
        for (size_t i = 0; i < n_items; i++) items[i] = json_array_get(arr, i);
    }
    *pattern = NULL;
    int have_bl = 0;
    for (size_t i = 0; i < n_items; i++) {
        const char *ty = json_is_object(items[i]) ? jstr(items[i], "type") : NULL;
        if (!ty) return pm_errf(e, PM_EFORMAT, "pre_tokenizer: an entry has no type");
        if (!strcmp(ty, "Split")) {
            if (have_bl || *pattern) return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer: Split must come once, before ByteLevel");
            json_t *pat = json_object_get(items[i], "pattern");
            const char *rx = json_is_object(pat) ? jstr(pat, "Regex") : NULL;
            if (!rx) return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer Split: only a {\"Regex\": ...} pattern is supported");
            const char *beh = jstr(items[i], "behavior");
            if (!beh || strcmp(beh, "Isolated"))
                return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer Split: behavior '%s' is not supported (Isolated only)",
                               beh ? beh : "?");
            if (jtrue(items[i], "invert")) return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer Split: invert=true is not supported");
            *pattern = rx;
        } else if (!strcmp(ty, "ByteLevel")) {
            if (jtrue(items[i], "add_prefix_space"))
                return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer ByteLevel: add_prefix_space=true is not supported");
            json_t *ur = json_object_get(items[i], "use_regex");
            int use_regex = !ur || json_is_true(ur); /* HF default: true */
            if (use_regex) {
                if (*pattern) return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer: Split followed by ByteLevel(use_regex=true)");
                *pattern = GPT2_PATTERN;
            }
            have_bl = 1;
        } else {
            return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer '%s' is not supported (byte-level BPE only)", ty);
        }
    }
    if (!have_bl) return pm_errf(e, PM_EUNSUPPORTED, "pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer");
    int prc = check_post(json_object_get(root, "post_processor"), 0, e);
    if (prc) return prc;
    json_t *dec = json_object_get(root, "decoder");
    if (dec && !json_is_null(dec)) {
        const char *dt = jstr(dec, "type");
        if (!dt || strcmp(dt, "ByteLevel"))
            return pm_errf(e, PM_EUNSUPPORTED, "decoder '%s' is not supported (ByteLevel only)", dt ? dt : "?");
    }
    return PM_OK;
}

/* The two big members, decoded to raw bytes while scanning (merges may precede the vocabulary in the file). */
typedef struct raw_vocab {
    int32_t *id;
    uint32_t *off;
    int32_t *len; /* -1: not spelled in the byte alphabet (allowed only for an added token's own entry) */
    size_t n, cap;
    pm_buf blob;
} raw_vocab;

typedef struct raw_merges {
    uint32_t *off, *alen, *blen; /* bytes of a then b, contiguous in blob */
    size_t n, cap;
    pm_buf blob;
} raw_merges;

static void raw_free(raw_vocab *v, raw_merges *m) {
    free(v->id);
    free(v->off);
    free(v->len);
    pm_buf_free(&v->blob);
    free(m->off);
    free(m->alen);
    free(m->blen);
    pm_buf_free(&m->blob);
}

static int grow(void **p, size_t elem, size_t *cap, size_t need, pm_err *e) {
    if (need <= *cap) return PM_OK;
    size_t c = *cap ? *cap * 2 : 4096;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return pm_errf(e, PM_ENOMEM, "out of memory reading tokenizer.json");
    *p = q;
    *cap = c;
    return PM_OK;
}

/* Appends the raw bytes of byte-level string s (n bytes) to b; returns the byte count or -1 (not byte-level). */
static long put_bl(pm_buf *b, const bl_map *bl, const char *s, size_t n, pm_err *e) {
    if (pm_buf_put(b, s, n, e)) return -2; /* reserve n bytes (decoding never grows a string) */
    b->len -= n;
    long l = bl_decode(bl, s, n, (uint8_t *)b->p + b->len);
    if (l >= 0) b->len += (size_t)l;
    return l;
}

static int parse_vocab(pm_js *j, raw_vocab *v, const bl_map *bl, pm_err *e) {
    pm_buf key = {0};
    int rc = pm_js_expect(j, '{', e), more;
    for (int first = 1; !rc; first = 0) {
        if ((rc = pm_js_next(j, '}', first, &more, e)) || !more) break;
        long long id;
        if ((rc = pm_js_string(j, &key, e)) || (rc = pm_js_expect(j, ':', e)) || (rc = pm_js_int(j, &id, e))) break;
        if (id < 0 || id >= PM_TOK_MAX_ID) {
            rc = pm_errf(e, PM_EFORMAT, "model.vocab['%s']: id %lld out of range", key.p, id);
            break;
        }
        if (!key.len) {
            rc = pm_errf(e, PM_EFORMAT, "model.vocab: empty token string (id %lld)", id);
            break;
        }
        size_t k = v->n, c0 = v->cap;
        if ((rc = grow((void **)&v->id, sizeof *v->id, &c0, k + 1, e))) break;
        c0 = v->cap;
        if ((rc = grow((void **)&v->off, sizeof *v->off, &c0, k + 1, e))) break;
        c0 = v->cap;
        if ((rc = grow((void **)&v->len, sizeof *v->len, &c0, k + 1, e))) break;
        v->cap = c0;
        v->id[k] = (int32_t)id;
        v->off[k] = (uint32_t)v->blob.len;
        long l = put_bl(&v->blob, bl, key.p, key.len, e);
        if (l == -2) {
            rc = PM_ENOMEM;
            break;
        }
        v->len[k] = (int32_t)l;
        v->n++;
    }
    pm_buf_free(&key);
    return rc;
}

static int parse_merges(pm_js *j, raw_merges *m, const bl_map *bl, pm_err *e) {
    pm_buf s1 = {0}, s2 = {0};
    int rc = pm_js_expect(j, '[', e), more;
    for (int first = 1; !rc; first = 0) {
        if ((rc = pm_js_next(j, ']', first, &more, e)) || !more) break;
        size_t i = m->n;
        const char *a, *b;
        size_t al, bl_;
        if (pm_js_peek(j) == '"') {
            if ((rc = pm_js_string(j, &s1, e))) break;
            const char *sp = memchr(s1.p, ' ', s1.len);
            if (!sp || memchr(sp + 1, ' ', s1.len - (size_t)(sp + 1 - s1.p)) || sp == s1.p || sp + 1 == s1.p + s1.len) {
                rc = pm_errf(e, PM_EFORMAT, "model.merges[%zu] '%s': expected \"a b\"", i, s1.p);
                break;
            }
            a = s1.p;
            al = (size_t)(sp - s1.p);
            b = sp + 1;
            bl_ = s1.len - al - 1;
        } else {
            int more2;
            if ((rc = pm_js_expect(j, '[', e)) || (rc = pm_js_string(j, &s1, e)) || (rc = pm_js_next(j, ']', 0, &more2, e)))
                break;
            if (!more2 || (rc = pm_js_string(j, &s2, e)) || (rc = pm_js_expect(j, ']', e))) {
                if (!rc) rc = pm_errf(e, PM_EFORMAT, "model.merges[%zu]: expected a [\"a\", \"b\"] pair", i);
                break;
            }
            if (!s1.len || !s2.len) {
                rc = pm_errf(e, PM_EFORMAT, "model.merges[%zu]: empty part", i);
                break;
            }
            a = s1.p;
            al = s1.len;
            b = s2.p;
            bl_ = s2.len;
        }
        size_t c0 = m->cap;
        if ((rc = grow((void **)&m->off, sizeof *m->off, &c0, i + 1, e))) break;
        c0 = m->cap;
        if ((rc = grow((void **)&m->alen, sizeof *m->alen, &c0, i + 1, e))) break;
        c0 = m->cap;
        if ((rc = grow((void **)&m->blen, sizeof *m->blen, &c0, i + 1, e))) break;
        m->cap = c0;
        m->off[i] = (uint32_t)m->blob.len;
        long la = put_bl(&m->blob, bl, a, al, e), lb = la < 0 ? -1 : put_bl(&m->blob, bl, b, bl_, e);
        if (la == -2 || lb == -2) {
            rc = PM_ENOMEM;
            break;
        }
        if (la < 0 || lb < 0) {
            rc = pm_errf(e, PM_EUNSUPPORTED, "model.merges[%zu] '%.*s' '%.*s': not in the byte-level alphabet", i, (int)al, a,
                         (int)bl_, b);
            break;
        }
        m->alen[i] = (uint32_t)la;
        m->blen[i] = (uint32_t)lb;
        m->n++;
    }
    pm_buf_free(&s1);
    pm_buf_free(&s2);
    return rc;
}

/* Parses one JSON member value with jansson from its span and stores it in obj under key. */
static int put_small(json_t *obj, const char *key, const char *from, const char *to, pm_err *e) {
    json_error_t je;
    json_t *v = json_loadb(from, (size_t)(to - from), JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) return pm_errf(e, PM_EFORMAT, "'%s': %s", key, je.text);
    json_object_set_new(obj, key, v);
    return PM_OK;
}

/* Walks the whole file: big members into v/m, the small ones into root/model. */
static int parse_file(pm_js *j, json_t *root, json_t *model, raw_vocab *v, raw_merges *m, int *have, pm_err *e) {
    bl_map bl;
    bl_init(&bl);
    pm_buf key = {0}, key2 = {0};
    int rc = pm_js_expect(j, '{', e), more, more2;
    for (int first = 1; !rc; first = 0) {
        if ((rc = pm_js_next(j, '}', first, &more, e)) || !more) break;
        if ((rc = pm_js_string(j, &key, e)) || (rc = pm_js_expect(j, ':', e))) break;
        const char *from, *to;
        if (strcmp(key.p, "model") || pm_js_peek(j) != '{') {
            if (!(rc = pm_js_skip(j, &from, &to, e))) rc = put_small(root, key.p, from, to, e);
            continue;
        }
        *have |= 1;
        j->p++;
        for (int f2 = 1; !rc; f2 = 0) {
            if ((rc = pm_js_next(j, '}', f2, &more2, e)) || !more2) break;
            if ((rc = pm_js_string(j, &key2, e)) || (rc = pm_js_expect(j, ':', e))) break;
            if (!strcmp(key2.p, "vocab") && pm_js_peek(j) == '{') {
                *have |= 2;
                rc = parse_vocab(j, v, &bl, e);
            } else if (!strcmp(key2.p, "merges") && pm_js_peek(j) == '[') {
                *have |= 4;
                rc = parse_merges(j, m, &bl, e);
            } else if (!(rc = pm_js_skip(j, &from, &to, e))) {
                rc = put_small(model, key2.p, from, to, e);
            }
        }
    }
    if (!rc && pm_js_peek(j)) rc = pm_js_fail(j, e, "trailing characters after the top-level object");
    pm_buf_free(&key);
    pm_buf_free(&key2);
    return rc;
}

static int load_added(pm_tokenizer *t, json_t *added, pm_buf *blob, pm_err *e) {
    size_t n = json_array_size(added);
    t->added = pm_calloc(n ? n : 1, sizeof *t->added, e);
    if (!t->added) return PM_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(added, i);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        json_t *jc = json_object_get(a, "content");
        pm_added_tok *k = &t->added[t->n_added++];
        k->id = id;
        k->len = json_string_length(jc);
        k->content = malloc(k->len + 1);
        if (!k->content) return pm_errf(e, PM_ENOMEM, "out of memory");
        memcpy(k->content, json_string_value(jc), k->len + 1);
        k->lstrip = (uint8_t)jtrue(a, "lstrip");
        k->rstrip = (uint8_t)jtrue(a, "rstrip");
        k->single_word = (uint8_t)jtrue(a, "single_word");
        k->special = (uint8_t)jtrue(a, "special");
        t->tok_off[id] = (uint32_t)blob->len;
        t->tok_len[id] = (uint32_t)k->len;
        int rc = pm_buf_put(blob, k->content, k->len, e);
        if (rc) return rc;
        t->tok_flags[id] = PM_TOKF_KNOWN | PM_TOKF_ADDED | (k->special ? PM_TOKF_SPECIAL : 0);
        t->added_first[(uint8_t)k->content[0]] = 1;
    }
    return PM_OK;
}

static int build(pm_tokenizer *t, json_t *root, json_t *model, raw_vocab *v, raw_merges *m, pm_err *e) {
    const char *pattern = NULL;
    int rc = check_pipeline(root, model, &pattern, e);
    if (rc) return rc;
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added)) return pm_errf(e, PM_EFORMAT, "added_tokens is not an array");
    t->ignore_merges = jtrue(model, "ignore_merges");

    int32_t max_id = -1;
    for (size_t i = 0; i < v->n; i++)
        if (v->id[i] > max_id) max_id = v->id[i];
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *jid = json_object_get(a, "id"), *jc = json_object_get(a, "content");
        if (!json_is_integer(jid) || !json_is_string(jc))
            return pm_errf(e, PM_EFORMAT, "added_tokens[%zu]: needs an integer id and a content string", i);
        json_int_t id = json_integer_value(jid);
        if (id < 0 || id >= PM_TOK_MAX_ID) return pm_errf(e, PM_EFORMAT, "added_tokens[%zu]: id %lld out of range", i, (long long)id);
        if (!json_string_length(jc)) return pm_errf(e, PM_EFORMAT, "added_tokens[%zu]: empty content", i);
        if (id > max_id) max_id = (int32_t)id;
    }
    if (max_id < 0) return pm_errf(e, PM_EFORMAT, "model.vocab is empty");
    t->n_ids = max_id + 1;
    t->tok_off = pm_calloc((size_t)t->n_ids, sizeof *t->tok_off, e);
    t->tok_len = pm_calloc((size_t)t->n_ids, sizeof *t->tok_len, e);
    t->tok_flags = pm_calloc((size_t)t->n_ids, 1, e);
    if (!t->tok_off || !t->tok_len || !t->tok_flags) return PM_ENOMEM;
    for (size_t i = 0; i < v->n; i++) {
        int32_t id = v->id[i];
        if (t->tok_flags[id]) return pm_errf(e, PM_EFORMAT, "model.vocab: id %d is used twice", id);
        t->tok_flags[id] = PM_TOKF_KNOWN | (v->len[i] < 0 ? 0x80 : 0); /* 0x80: must turn out to be an added token */
        t->tok_off[id] = v->off[i];
        t->tok_len[id] = v->len[i] < 0 ? 0 : (uint32_t)v->len[i];
        if (t->tok_len[id] > t->max_tok_bytes) t->max_tok_bytes = t->tok_len[id];
    }
    pm_buf blob = v->blob; /* the added tokens' contents go after the vocabulary bytes */
    v->blob = (pm_buf){0};
    rc = load_added(t, added, &blob, e);
    t->blob = blob.p;
    t->blob_len = blob.len;
    if (rc) return rc;
    for (int32_t id = 0; id < t->n_ids; id++)
        if (t->tok_flags[id] & 0x80)
            return pm_errf(e, PM_EUNSUPPORTED, "model.vocab: token id %d is not spelled in the byte-level alphabet: not a byte-level BPE", id);

    uint32_t vsize = pow2_at_least((size_t)t->n_ids * 2 + 1);
    t->vh = pm_malloc(sizeof *t->vh * vsize, e);
    if (!t->vh) return PM_ENOMEM;
    t->vh_mask = vsize - 1;
    memset(t->vh, 0xFF, sizeof *t->vh * vsize);
    for (int32_t id = 0; id < t->n_ids; id++)
        if ((t->tok_flags[id] & PM_TOKF_KNOWN) && !(t->tok_flags[id] & PM_TOKF_ADDED)) vh_insert(t, id);
    for (int i = 0; i < t->n_added; i++) vh_insert(t, t->added[i].id);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_id[b] = pm_tok_lookup_bytes(t, &c, 1);
        if (t->byte_id[b] < 0)
            return pm_errf(e, PM_EUNSUPPORTED, "model.vocab lacks the byte-level token for byte 0x%02X: not a byte-level BPE", b);
    }

    uint32_t size = pow2_at_least(m->n * 2 + 1);
    t->mt_bits = 0;
    while ((1u << t->mt_bits) < size) t->mt_bits++;
    t->mt_mask = size - 1;
    t->mt = pm_malloc(sizeof *t->mt * size, e);
    if (!t->mt) return PM_ENOMEM;
    for (uint32_t i = 0; i < size; i++) t->mt[i].rank = -1;
    for (size_t i = 0; i < m->n; i++) {
        const uint8_t *a = (const uint8_t *)m->blob.p + m->off[i];
        int32_t ia = pm_tok_lookup_bytes(t, a, m->alen[i]), ib = pm_tok_lookup_bytes(t, a + m->alen[i], m->blen[i]),
                iab = pm_tok_lookup_bytes(t, a, m->alen[i] + m->blen[i]);
        if (ia < 0 || ib < 0 || iab < 0)
            return pm_errf(e, PM_EFORMAT, "model.merges[%zu]: %s is not in the vocabulary", i,
                           ia < 0 ? "the left part" : ib < 0 ? "the right part" : "the merged token");
        mt_insert(t, ia, ib, (int32_t)i, iab);
    }
    t->n_merges = m->n;
    return pm_pretok_init(&t->pre, pattern, e);
}

/* Reads the whole file into memory. */
static int read_file(const char *path, char **buf, size_t *n, pm_err *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return pm_errf(e, PM_EIO, "%s: cannot open", path);
    pm_buf b = {0};
    char chunk[65536];
    size_t r;
    int rc = PM_OK;
    while (!rc && (r = fread(chunk, 1, sizeof chunk, f)) > 0) rc = pm_buf_put(&b, chunk, r, e);
    if (!rc && ferror(f)) rc = pm_errf(e, PM_EIO, "%s: read error", path);
    fclose(f);
    if (rc) {
        pm_buf_free(&b);
        return rc;
    }
    return pm_buf_take(&b, buf, n, e);
}

int pm_tok_load_file(pm_tokenizer **out, const char *path, pm_err *e) {
    *out = NULL;
    char *buf;
    size_t n;
    int rc = read_file(path, &buf, &n, e);
    if (rc) return rc;
    pm_tokenizer *t = pm_calloc(1, sizeof *t, e);
    json_t *root = json_object(), *model = json_object();
    raw_vocab v = {0};
    raw_merges m = {0};
    int have = 0;
    if (!t || !root || !model) rc = pm_errf(e, PM_ENOMEM, "out of memory");
    pm_js j = {.start = buf, .p = buf, .end = buf + n, .name = path};
    if (!rc) rc = parse_file(&j, root, model, &v, &m, &have, e);
    if (!rc && !(have & 1)) rc = pm_errf(e, PM_EFORMAT, "'model' object is missing");
    if (!rc && !(have & 2)) rc = pm_errf(e, PM_EFORMAT, "model.vocab object is missing");
    if (!rc && !(have & 4)) rc = pm_errf(e, PM_EFORMAT, "model.merges array is missing");
    if (!rc) rc = build(t, root, model, &v, &m, e);
    raw_free(&v, &m);
    json_decref(root);
    json_decref(model);
    free(buf);
    if (rc) {
        if (strncmp(e->msg, path, strlen(path))) pm_err_ctx(e, "%s: ", path);
        pm_tok_free(t);
        return rc;
    }
    *out = t;
    return PM_OK;
}

int pm_tok_load(pm_tokenizer **out, const char *model_dir, pm_err *e) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    if (n < 0 || (size_t)n >= sizeof path) return pm_errf(e, PM_EINVAL, "model directory path too long");
    return pm_tok_load_file(out, path, e);
}

void pm_tok_free(pm_tokenizer *t) {
    if (!t) return;
    pm_pretok_free(&t->pre);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_flags);
    free(t->blob);
    free(t->vh);
    free(t->mt);
    free(t);
}

int pm_tok_id(const pm_tokenizer *t, const char *s) {
    if (!t || !s) return -1;
    size_t n = strlen(s);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, s, n)) return t->added[i].id;
    if (!n || pm_utf8_valid_prefix((const uint8_t *)s, n) != n) return -1;
    uint8_t stack_buf[256];
    uint8_t *buf = n <= sizeof stack_buf ? stack_buf : malloc(n);
    if (!buf) return -1;
    bl_map bl;
    bl_init(&bl);
    long l = bl_decode(&bl, s, n, buf);
    int32_t id = l > 0 ? pm_tok_lookup_bytes(t, buf, (size_t)l) : -1;
    if (id >= 0 && (t->tok_flags[id] & PM_TOKF_ADDED)) id = -1; /* added tokens answer only to their content */
    if (buf != stack_buf) free(buf);
    return id;
}

int pm_tok_is_special(const pm_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids && (t->tok_flags[id] & PM_TOKF_SPECIAL) ? 1 : 0;
}

int32_t pm_tok_vocab_size(const pm_tokenizer *t) { return t ? t->n_ids : 0; }

int pm_tok_plain_bytes(const pm_tokenizer *t, int vocab, const char ***tokens, size_t **len) {
    *tokens = calloc(vocab > 0 ? (size_t)vocab : 1, sizeof **tokens);
    *len = calloc(vocab > 0 ? (size_t)vocab : 1, sizeof **len);
    if (!*tokens || !*len) {
        free(*tokens), free(*len);
        *tokens = NULL, *len = NULL;
        return -1;
    }
    for (int v = 0; v < vocab; v++)
        if (!pm_tok_is_special(t, v)) (*tokens)[v] = pm_tok_token_bytes(t, v, &(*len)[v]);
    return 0;
}

const char *pm_tok_token_bytes(const pm_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_ids || !(t->tok_flags[id] & PM_TOKF_KNOWN)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->tok_len[id];
    return t->blob + t->tok_off[id];
}
