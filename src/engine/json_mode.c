/* json_mode.c — see json_mode.h. The grammar is RFC 8259's with an object at the top, strings
 * held to well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF) and no
 * control characters, whitespace capped at PM_JSON_MAX_WS bytes in a row and nesting at
 * PM_JSON_MAX_DEPTH. */
#include "json_mode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer.h"

enum {
    M_START,     /* before the top-level object */
    M_OBJ_FIRST, /* after '{': a key or '}' */
    M_OBJ_KEY,   /* after ',' in an object: a key */
    M_COLON,     /* after a key */
    M_VALUE,     /* after ':' or ',' in an array */
    M_ARR_FIRST, /* after '[': a value or ']' */
    M_AFTER,     /* after a value in a container: ',' or the closing bracket */
    M_STRING,
    M_ESCAPE,    /* after '\' */
    M_HEX,       /* in \uXXXX: sub digits left */
    M_NUMBER,    /* sub: N_* */
    M_LITERAL,   /* sub: literal * 8 + bytes matched */
    M_DONE
};

enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

/* UTF-8: the range the next continuation byte must lie in (set by the lead byte). */
enum { U_ANY, U_A0_BF, U_80_9F, U_90_BF, U_80_8F };

static const char *const literals[3] = {"true", "false", "null"};

void pm_json_init(pm_json_state *s) { memset(s, 0, sizeof *s); }

int pm_json_done(const pm_json_state *s) { return s->mode == M_DONE; }

static int is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void after_value(pm_json_state *s) { s->mode = s->depth ? M_AFTER : M_DONE; }

static int push(pm_json_state *s, int object) {
    if (s->depth >= PM_JSON_MAX_DEPTH) return -1;
    if (object) s->stack |= 1ull << s->depth;
    else s->stack &= ~(1ull << s->depth);
    s->depth++;
    s->mode = object ? M_OBJ_FIRST : M_ARR_FIRST;
    return 0;
}

static int top_is_object(const pm_json_state *s) { return (s->stack >> (s->depth - 1)) & 1; }

static int pop(pm_json_state *s, unsigned c) {
    if (!s->depth || top_is_object(s) != (c == '}')) return -1;
    s->depth--;
    after_value(s);
    return 0;
}

/* The first byte of a value. */
static int value_start(pm_json_state *s, unsigned c) {
    switch (c) {
    case '{': return push(s, 1);
    case '[': return push(s, 0);
    case '"': s->mode = M_STRING; s->in_key = 0; return 0;
    case '-': s->mode = M_NUMBER; s->sub = N_MINUS; return 0;
    case '0': s->mode = M_NUMBER; s->sub = N_ZERO; return 0;
    case 't': case 'f': case 'n':
        s->mode = M_LITERAL;
        s->sub = (uint8_t)((c == 't' ? 0 : c == 'f' ? 1 : 2) * 8 + 1);
        return 0;
    default:
        if (c >= '1' && c <= '9') {
            s->mode = M_NUMBER;
            s->sub = N_INT;
            return 0;
        }
        return -1;
    }
}

static int string_byte(pm_json_state *s, unsigned c) {
    if (s->utf8_left) {
        static const uint8_t lo[] = {0x80, 0xA0, 0x80, 0x90, 0x80}, hi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
        if (c < lo[s->sub] || c > hi[s->sub]) return -1;
        s->utf8_left--;
        s->sub = U_ANY;
        return 0;
    }
    if (c == '"') {
        if (s->in_key) s->mode = M_COLON;
        else after_value(s);
        return 0;
    }
    if (c == '\\') {
        s->mode = M_ESCAPE;
        return 0;
    }
    if (c < 0x20) return -1;
    if (c < 0x80) return 0;
    s->sub = U_ANY;
    if (c >= 0xC2 && c <= 0xDF) s->utf8_left = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        s->utf8_left = 2;
        s->sub = c == 0xE0 ? U_A0_BF : c == 0xED ? U_80_9F : U_ANY;
    } else if (c >= 0xF0 && c <= 0xF4) {
        s->utf8_left = 3;
        s->sub = c == 0xF0 ? U_90_BF : c == 0xF4 ? U_80_8F : U_ANY;
    } else return -1;
    return 0;
}

static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }

/* A number's byte; a byte that ends it (the number is complete) is handed back with 1. */
static int number_byte(pm_json_state *s, unsigned c) {
    switch (s->sub) {
    case N_MINUS:
        if (c == '0') s->sub = N_ZERO;
        else if (is_digit(c)) s->sub = N_INT;
        else return -1;
        return 0;
    case N_ZERO:
    case N_INT:
        if (s->sub == N_INT && is_digit(c)) return 0;
        if (c == '.') s->sub = N_DOT;
        else if (c == 'e' || c == 'E') s->sub = N_E;
        else return 1;
        return 0;
    case N_DOT:
        if (!is_digit(c)) return -1;
        s->sub = N_FRAC;
        return 0;
    case N_FRAC:
        if (is_digit(c)) return 0;
        if (c == 'e' || c == 'E') s->sub = N_E;
        else return 1;
        return 0;
    case N_E:
        if (c == '+' || c == '-') s->sub = N_ESIGN;
        else if (is_digit(c)) s->sub = N_EXP;
        else return -1;
        return 0;
    case N_ESIGN:
        if (!is_digit(c)) return -1;
        s->sub = N_EXP;
        return 0;
    default: /* N_EXP */
        return is_digit(c) ? 0 : 1;
    }
}

static int is_hex(unsigned c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int feed_byte(pm_json_state *s, unsigned c) {
    switch (s->mode) {
    case M_STRING: return string_byte(s, c);
    case M_ESCAPE:
        if (c == 'u') {
            s->mode = M_HEX;
            s->sub = 4;
        } else if (strchr("\"\\/bfnrt", (int)c) && c) s->mode = M_STRING;
        else return -1;
        return 0;
    case M_HEX:
        if (!is_hex(c)) return -1;
        if (--s->sub == 0) s->mode = M_STRING;
        return 0;
    case M_NUMBER: {
        int r = number_byte(s, c);
        if (r <= 0) return r;
        after_value(s); /* the number ended: the byte is the container's */
        break;
    }
    case M_LITERAL: {
        const char *lit = literals[s->sub / 8];
        int at = s->sub % 8;
        if (c != (unsigned char)lit[at]) return -1;
        if (lit[at + 1]) s->sub++;
        else after_value(s);
        return 0;
    }
    case M_DONE: return -1;
    default: break;
    }
    if (is_ws(c)) return ++s->ws > PM_JSON_MAX_WS ? -1 : 0;
    s->ws = 0;
    switch (s->mode) {
    case M_START:
        return c == '{' ? push(s, 1) : -1;
    case M_OBJ_FIRST:
        if (c == '}') return pop(s, c);
        /* fall through */
    case M_OBJ_KEY:
        if (c != '"') return -1;
        s->mode = M_STRING;
        s->in_key = 1;
        return 0;
    case M_COLON:
        if (c != ':') return -1;
        s->mode = M_VALUE;
        return 0;
    case M_ARR_FIRST:
        if (c == ']') return pop(s, c);
        /* fall through */
    case M_VALUE:
        return value_start(s, c);
    case M_AFTER:
        if (c == ',') {
            s->mode = top_is_object(s) ? M_OBJ_KEY : M_VALUE;
            return 0;
        }
        return c == '}' || c == ']' ? pop(s, c) : -1;
    default:
        return -1;
    }
}

int pm_json_feed(pm_json_state *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (feed_byte(s, (unsigned char)bytes[i])) return -1;
    return 0;
}

struct pm_json_vocab {
    const pm_tokenizer *tok;
    int vocab;
    int32_t *ids;       /* the known, non-special tokens, by first byte */
    int start[257];     /* ids[start[c] .. start[c + 1]) begin with byte c */
    uint8_t *plain;     /* [vocab]: whole string content */
};

void pm_json_vocab_free(pm_json_vocab *jv) {
    if (!jv) return;
    free(jv->ids);
    free(jv->plain);
    free(jv);
}

pm_json_vocab *pm_json_vocab_new(const pm_tokenizer *tok, int vocab) {
    pm_json_vocab *jv = calloc(1, sizeof *jv);
    if (!jv) return NULL;
    jv->tok = tok;
    jv->vocab = vocab;
    jv->ids = malloc(sizeof *jv->ids * (size_t)vocab);
    jv->plain = calloc((size_t)vocab, 1);
    if (!jv->ids || !jv->plain) {
        pm_json_vocab_free(jv);
        return NULL;
    }
    int count[256] = {0};
    pm_json_state in_string = {.mode = M_STRING};
    for (int v = 0; v < vocab; v++) {
        size_t len = 0;
        const unsigned char *b = pm_tok_is_special(tok, v) ? NULL : (const unsigned char *)pm_tok_token_bytes(tok, v, &len);
        if (!len) continue;
        count[b[0]]++;
        pm_json_state t = in_string;
        jv->plain[v] = !pm_json_feed(&t, (const char *)b, len) && t.mode == M_STRING && !t.utf8_left;
    }
    for (int c = 0; c < 256; c++) jv->start[c + 1] = jv->start[c] + count[c];
    int at[256];
    memcpy(at, jv->start, sizeof at);
    for (int v = 0; v < vocab; v++) {
        size_t len = 0;
        const unsigned char *b = pm_tok_is_special(tok, v) ? NULL : (const unsigned char *)pm_tok_token_bytes(tok, v, &len);
        if (len) jv->ids[at[b[0]]++] = v;
    }
    return jv;
}

void pm_json_mask(const pm_json_state *s, const pm_json_vocab *jv, const int32_t *eos, int n_eos, float *logits, uint8_t *allow) {
    int vocab = jv->vocab;
    memset(allow, 0, (size_t)vocab);
    if (!pm_json_done(s))
        for (int c = 0; c < 256; c++) {
            pm_json_state first = *s;
            if (jv->start[c] == jv->start[c + 1] || feed_byte(&first, (unsigned)c)) continue;
            /* inside a string after a whole character, plain content leaves the state as it is */
            int plain_ok = s->mode == M_STRING && !s->utf8_left;
            for (int i = jv->start[c]; i < jv->start[c + 1]; i++) {
                int v = jv->ids[i];
                if (plain_ok && jv->plain[v]) {
                    allow[v] = 1;
                    continue;
                }
                size_t len;
                const char *b = pm_tok_token_bytes(jv->tok, v, &len);
                pm_json_state t = first;
                allow[v] = !pm_json_feed(&t, b + 1, len - 1);
            }
        }
    for (int i = 0; i < n_eos; i++) /* the end: only once the object is complete, then only it */
        if (eos[i] >= 0 && eos[i] < vocab) allow[eos[i]] = (uint8_t)pm_json_done(s);
    for (int v = 0; v < vocab; v++)
        if (!allow[v]) logits[v] = -INFINITY;
}
