/* json_mode.c — see json_mode.h. The grammar is RFC 8259's with the schema's nodes deciding what
 * each value may be, strings held to well-formed UTF-8 (no overlong forms, surrogates or code
 * points past U+10FFFF) and no control characters, no whitespace before the value and at most
 * PM_JSON_MAX_WS bytes of it in a row inside, nesting at PM_JSON_MAX_DEPTH. */
#include "json_mode.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/regex.h"
#include "tok/tokenizer.h"
#include "util/bits.h"

enum {
    M_VALUE,     /* before a value of pending */
    M_OBJ_FIRST, /* after '{': a key or '}' */
    M_OBJ_KEY,   /* after ',' in an object: a key */
    M_KEY,       /* in a key of an object with listed properties: cand / pos */
    M_COLON,     /* after a key */
    M_ARR_FIRST, /* after '[': a value or ']' */
    M_AFTER,     /* after a value in a container: ',' or the closing bracket */
    M_STRING,
    M_ESCAPE,    /* after '\' */
    M_HEX,       /* in \uXXXX: sub digits left, hex the value so far */
    M_LOW_BS,    /* after a high surrogate's escape: the '\' of its low half */
    M_LOW_U,     /* and its 'u' */
    M_NUMBER,    /* sub: N_* */
    M_LITERAL,   /* sub: literal * 8 + bytes matched */
    M_ENUM,      /* in one of an enum's values: cand / pos */
    M_DONE
};

enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

/* UTF-8: the range the next continuation byte must lie in (set by the lead byte). */
enum { U_ANY, U_A0_BF, U_80_9F, U_90_BF, U_80_8F };

static const char *const literals[3] = {"true", "false", "null"};

void pm_json_init(pm_json_state *s, const pm_json_node *root) {
    memset(s, 0, offsetof(pm_json_state, frames));
    s->pending = root;
    s->mode = M_VALUE;
}

void pm_json_copy(pm_json_state *dst, const pm_json_state *src) {
    memcpy(dst, src, offsetof(pm_json_state, frames) + sizeof src->frames[0] * src->depth);
}

static int number_complete(unsigned sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

static int enum_complete(const pm_json_state *s) {
    for (int i = 0; i < s->pending->n_lits; i++)
        if ((s->cand >> i & 1) && s->pending->lit_len[i] == s->pos) return 1;
    return 0;
}

/* A bounded number or integer (json_schema.h) ends only where its digits are in range... */
static int number_in_range(const pm_json_state *s) { return !s->str || !s->str->pattern || pm_regex_accepts(s->str->pattern, s->rx); }

/* ... and takes a byte only where its range's DFA goes on (-1: no number of the range follows). */
static int range_feed(pm_json_state *s, unsigned c) {
    char ch = (char)c;
    return (s->rx = pm_regex_feed(s->str->pattern, s->rx, &ch, 1)) ? 0 : -1;
}

int pm_json_done(const pm_json_state *s) {
    if (s->mode == M_DONE) return 1;
    if (s->depth) return 0;
    return (s->mode == M_NUMBER && number_complete(s->sub) && number_in_range(s)) || (s->mode == M_ENUM && enum_complete(s));
}

static int is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static pm_json_frame *top(pm_json_state *s) { return &s->frames[s->depth - 1]; }

static void after_value(pm_json_state *s) {
    if (!s->depth) {
        s->mode = M_DONE;
        return;
    }
    if (top(s)->node->kind == PM_JN_ARRAY) top(s)->count++;
    s->mode = M_AFTER;
}

static int push(pm_json_state *s, const pm_json_node *n) {
    if (s->depth >= PM_JSON_MAX_DEPTH) return -1;
    pm_json_frame f = {n, -1, 0};
    s->frames[s->depth++] = f;
    s->mode = n->kind == PM_JN_OBJECT ? M_OBJ_FIRST : M_ARR_FIRST;
    return 0;
}

/* Whether a listed object may close: no required property after the last one given. */
static int may_close(const pm_json_frame *f) {
    for (int i = f->last + 1; i < f->node->n_props; i++)
        if (f->node->required[i]) return 0;
    return 1;
}

/* The schema of an array's item at index i: a tuple's position, then the items'. */
static const pm_json_node *item_node(const pm_json_node *a, int i) { return i < a->n_prefix ? a->prefix[i] : a->items; }

static int pop(pm_json_state *s, unsigned c) {
    if (!s->depth) return -1;
    pm_json_frame *f = top(s);
    const pm_json_node *n = f->node;
    if (n->kind == PM_JN_OBJECT ? c != '}' || !may_close(f) : c != ']' || f->count < n->min_items) return -1;
    s->depth--;
    after_value(s);
    return 0;
}

/* The first byte of a value of s->pending. */
static int value_start(pm_json_state *s, unsigned c) {
    const pm_json_node *n = pm_json_resolve(s->pending, c);
    if (!n) return -1;
    switch (n->kind) {
    case PM_JN_ENUM:
        s->cand = 0;
        for (int i = 0; i < n->n_lits; i++)
            if ((unsigned char)n->lit[i][0] == c) s->cand |= 1ull << i;
        if (!s->cand) return -1;
        s->pending = n;
        s->pos = 1;
        s->mode = M_ENUM;
        return 0;
    case PM_JN_OBJECT:
    case PM_JN_ARRAY: return push(s, n);
    case PM_JN_STRING:
        s->mode = M_STRING;
        s->in_key = 0;
        s->str = n;
        s->chars = 0;
        s->rx = n->pattern ? pm_regex_start(n->pattern) : 0;
        return 0;
    case PM_JN_NUMBER:
    case PM_JN_INTEGER:
        s->mode = M_NUMBER;
        s->integer = n->kind == PM_JN_INTEGER;
        s->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        s->str = n->pattern ? n : NULL; /* a bounded one: its digits through the range's DFA */
        if (!s->str) return 0;
        s->rx = pm_regex_start(n->pattern);
        return range_feed(s, c);
    default: /* BOOL, NULL: the class of c chose it */
        s->mode = M_LITERAL;
        s->sub = (uint8_t)((c == 't' ? 0 : c == 'f' ? 1 : 2) * 8 + 1);
        return 0;
    }
}

/* The opening quote of a key. */
static int key_start(pm_json_state *s) {
    pm_json_frame *f = top(s);
    const pm_json_node *o = f->node;
    if (!o->n_props) { /* any key: the values are extra's */
        if (!o->extra) return -1;
        s->mode = M_STRING;
        s->in_key = 1;
        s->str = NULL;
        s->chars = 0;
        return 0;
    }
    s->cand = 0; /* the properties after the last given, up to the first required one */
    for (int i = f->last + 1; i < o->n_props; i++) {
        s->cand |= 1ull << i;
        if (o->required[i]) break;
    }
    if (!s->cand) return -1;
    s->mode = M_KEY;
    s->pos = 0;
    return 0;
}

static int key_byte(pm_json_state *s, unsigned c) {
    pm_json_frame *f = top(s);
    const pm_json_node *o = f->node;
    uint64_t next = 0;
    for (int i = 0; i < o->n_props; i++) {
        if (!(s->cand >> i & 1)) continue;
        if (c == '"' && o->key_len[i] == s->pos) {
            f->last = (int16_t)i;
            s->pending = o->prop[i];
            s->mode = M_COLON;
            return 0;
        }
        if (s->pos < o->key_len[i] && (unsigned char)o->key[i][s->pos] == c) next |= 1ull << i;
    }
    if (!next) return -1;
    s->cand = next;
    s->pos++;
    return 0;
}

/* A new character of a string: within its maximum length. */
static int count_char(pm_json_state *s) {
    if (s->str && s->str->max_len >= 0 && s->chars >= (uint32_t)s->str->max_len) return -1;
    s->chars++;
    return 0;
}

/* A byte of a string's text (a short escape decoded) into its pattern's DFA: -1 once no match can
 * follow. (A pattern's text takes no \u escape: the characters only they write are out of its
 * sets, PM_REGEX_JSON_TEXT.) */
static int pattern_feed(pm_json_state *s, char byte) {
    if (!s->str || !s->str->pattern) return 0;
    s->rx = pm_regex_feed(s->str->pattern, s->rx, &byte, 1);
    return s->rx ? 0 : -1;
}

static int string_byte(pm_json_state *s, unsigned c) {
    if (s->utf8_left) {
        static const uint8_t lo[] = {0x80, 0xA0, 0x80, 0x90, 0x80}, hi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
        if (c < lo[s->utf8_range] || c > hi[s->utf8_range]) return -1;
        s->utf8_left--;
        s->utf8_range = U_ANY;
        return pattern_feed(s, (char)c);
    }
    if (c == '"') {
        if (s->in_key) {
            s->pending = top(s)->node->extra;
            s->mode = M_COLON;
        } else {
            if (s->str && s->chars < (uint32_t)s->str->min_len) return -1;
            if (s->str && s->str->pattern && !pm_regex_accepts(s->str->pattern, s->rx)) return -1;
            after_value(s);
        }
        return 0;
    }
    if (c < 0x20 || count_char(s)) return -1;
    if (c == '\\') {
        s->mode = M_ESCAPE;
        if (!s->str || !s->str->pattern) return 0;
        for (const char *e = "\"\\/\b\f\n\r\t"; *e; e++) /* a pattern's text: some short escape must go on */
            if (pm_regex_feed(s->str->pattern, s->rx, e, 1)) return 0;
        return -1;
    }
    if (pattern_feed(s, (char)c)) return -1;
    if (c < 0x80) return 0;
    s->utf8_range = U_ANY;
    if (c >= 0xC2 && c <= 0xDF) s->utf8_left = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        s->utf8_left = 2;
        s->utf8_range = c == 0xE0 ? U_A0_BF : c == 0xED ? U_80_9F : U_ANY;
    } else if (c >= 0xF0 && c <= 0xF4) {
        s->utf8_left = 3;
        s->utf8_range = c == 0xF0 ? U_90_BF : c == 0xF4 ? U_80_8F : U_ANY;
    } else return -1;
    return 0;
}

static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }

/* A number's byte; a byte that ends it (the number is complete) is handed back with 1. */
static int number_byte(pm_json_state *s, unsigned c) {
    int frac = !s->integer && c == '.', exp = !s->integer && (c == 'e' || c == 'E');
    switch (s->sub) {
    case N_MINUS:
        if (!is_digit(c)) return -1;
        s->sub = c == '0' ? N_ZERO : N_INT;
        return 0;
    case N_ZERO:
    case N_INT:
        if (s->sub == N_INT && is_digit(c)) return 0;
        if (frac) s->sub = N_DOT;
        else if (exp) s->sub = N_E;
        else return 1;
        return 0;
    case N_DOT:
        if (!is_digit(c)) return -1;
        s->sub = N_FRAC;
        return 0;
    case N_FRAC:
        if (is_digit(c)) return 0;
        if (exp) s->sub = N_E;
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

/* The value of a discriminated object's first property has ended (json_schema.h): the rest of the
 * object follows the branch of the literal it matched. */
static void pick_variant(pm_json_state *s) {
    pm_json_frame *f = s->depth ? top(s) : NULL;
    if (!f || !f->node->variant || f->last != 0 || s->pending != f->node->prop[0]) return;
    for (int i = 0; i < s->pending->n_lits; i++)
        if ((s->cand >> i & 1) && s->pending->lit_len[i] == s->pos) {
            f->node = f->node->variant[i];
            return;
        }
}

/* A byte of an enum's value; one that continues none of them ends a complete one (handed back
 * with 1), as a number is ended. */
static int enum_byte(pm_json_state *s, unsigned c) {
    const pm_json_node *n = s->pending;
    uint64_t next = 0;
    for (int i = 0; i < n->n_lits; i++)
        if ((s->cand >> i & 1) && s->pos < n->lit_len[i] && (unsigned char)n->lit[i][s->pos] == c) next |= 1ull << i;
    if (next) {
        s->cand = next;
        s->pos++;
        return 0;
    }
    return enum_complete(s) ? 1 : -1;
}

static int is_hex(unsigned c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int feed_byte(pm_json_state *s, unsigned c) {
    switch (s->mode) {
    case M_STRING: return string_byte(s, c);
    case M_KEY: return key_byte(s, c);
    case M_ESCAPE:
    case M_LOW_U:
        if (c == 'u' && s->str && s->str->pattern) return -1; /* a pattern's text: short escapes only */
        if (c == 'u') {
            s->mode = M_HEX;
            s->sub = 4;
            s->hex = 0;
        } else if (s->mode == M_ESCAPE && c && strchr("\"\\/bfnrt", (int)c)) {
            static const char from[] = "bfnrt", to[] = "\b\f\n\r\t";
            const char *k = strchr(from, (int)c);
            s->mode = M_STRING;
            return pattern_feed(s, k ? to[k - from] : (char)c);
        } else return -1;
        return 0;
    case M_LOW_BS:
        if (c != '\\') return -1;
        s->mode = M_LOW_U;
        return 0;
    case M_HEX: /* surrogates only in pairs, as strict parsers demand */
        if (!is_hex(c)) return -1;
        s->hex = (uint16_t)(s->hex << 4 | (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10));
        if (--s->sub) return 0;
        if (s->low != (s->hex >= 0xDC00 && s->hex <= 0xDFFF)) return -1;
        s->low = s->hex >= 0xD800 && s->hex <= 0xDBFF;
        s->mode = s->low ? M_LOW_BS : M_STRING;
        return 0;
    case M_NUMBER:
    case M_ENUM: {
        int r = s->mode == M_NUMBER ? number_byte(s, c) : enum_byte(s, c);
        if (s->mode == M_NUMBER && s->str && s->str->pattern) { /* a bounded number: a digit in range, an end where it is */
            if (r == 0 && range_feed(s, c)) return -1;
            if (r == 1 && !number_in_range(s)) return -1;
        }
        if (r <= 0) return r;
        if (s->mode == M_ENUM) pick_variant(s);
        after_value(s); /* it ended: the byte is the container's (nothing follows a whole value) */
        if (s->mode == M_DONE) return -1;
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
    if (is_ws(c)) /* none before the value itself: the answer starts with it */
        return (s->mode == M_VALUE && !s->depth) || ++s->ws > PM_JSON_MAX_WS ? -1 : 0;
    s->ws = 0;
    switch (s->mode) {
    case M_OBJ_FIRST:
        if (c == '}') return pop(s, c);
        /* fall through */
    case M_OBJ_KEY:
        return c == '"' ? key_start(s) : -1;
    case M_COLON:
        if (c != ':') return -1;
        s->mode = M_VALUE;
        return 0;
    case M_ARR_FIRST:
        if (c == ']') return pop(s, c);
        if (!top(s)->node->max_items) return -1; /* maxItems 0 */
        s->pending = item_node(top(s)->node, 0);
        return value_start(s, c);
    case M_VALUE:
        return value_start(s, c);
    case M_AFTER: {
        pm_json_frame *f = top(s);
        const pm_json_node *n = f->node;
        if (c != ',') return pop(s, c);
        if (n->kind == PM_JN_ARRAY) {
            if (n->max_items >= 0 && f->count >= n->max_items) return -1;
            s->pending = item_node(n, f->count);
            s->mode = M_VALUE;
            return 0;
        }
        if (n->n_props && f->last + 1 >= n->n_props) return -1; /* every listed property given */
        s->mode = M_OBJ_KEY;
        return 0;
    }
    default:
        return -1;
    }
}

int pm_json_feed(pm_json_state *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (feed_byte(s, (unsigned char)bytes[i])) return -1;
    return 0;
}

/* The vocabulary's tokens bucketed by a byte: ids[start[k] .. start[k + 1]) hold key k's. */
typedef struct token_groups {
    int32_t *ids;
    int start[258]; /* keys 0..255 a byte, 256 none */
} token_groups;

struct pm_json_vocab {
    const pm_tokenizer *tok;
    int vocab;
    token_groups by_first;   /* the known, non-special tokens by their first byte */
    token_groups by_content; /* by their first byte past leading whitespace (256: all whitespace) */
    uint8_t *lead;           /* [vocab]: leading whitespace bytes (255: that many or more) */
    uint8_t *plain;          /* [vocab]: whole string content of this many characters (0: not) */
    uint8_t *escaped;        /* [vocab]: plain, and holds an escape (its bytes are not its text) */
};

void pm_json_vocab_free(pm_json_vocab *jv) {
    if (!jv) return;
    free(jv->by_first.ids);
    free(jv->by_content.ids);
    free(jv->lead);
    free(jv->plain);
    free(jv->escaped);
    free(jv);
}

/* A token's bytes, NULL for a special token or an unknown id (never allowed). */
static const unsigned char *usable(const pm_json_vocab *jv, int v, size_t *len) {
    *len = 0;
    return pm_tok_is_special(jv->tok, v) ? NULL : (const unsigned char *)pm_tok_token_bytes(jv->tok, v, len);
}

static int group_key(const pm_json_vocab *jv, int v, size_t len, const unsigned char *b, int past_ws) {
    return past_ws ? (jv->lead[v] < len ? b[jv->lead[v]] : 256) : b[0];
}

static int group(pm_json_vocab *jv, token_groups *g, int past_ws) {
    int count[257] = {0}, at[257];
    if (!(g->ids = malloc(sizeof *g->ids * (size_t)jv->vocab))) return -1;
    for (int pass = 0; pass < 2; pass++) {
        for (int v = 0; v < jv->vocab; v++) {
            size_t len;
            const unsigned char *b = usable(jv, v, &len);
            if (!len) continue;
            int k = group_key(jv, v, len, b, past_ws);
            if (pass) g->ids[at[k]++] = v;
            else count[k]++;
        }
        if (pass) break;
        g->start[0] = 0;
        for (int k = 0; k < 257; k++) g->start[k + 1] = g->start[k] + count[k];
        memcpy(at, g->start, sizeof at);
    }
    return 0;
}

pm_json_vocab *pm_json_vocab_new(const pm_tokenizer *tok, int vocab) {
    pm_json_vocab *jv = calloc(1, sizeof *jv);
    if (!jv) return NULL;
    jv->tok = tok;
    jv->vocab = vocab;
    jv->plain = calloc((size_t)vocab, 1);
    jv->lead = calloc((size_t)vocab, 1);
    jv->escaped = calloc((size_t)vocab, 1);
    if (!jv->plain || !jv->lead || !jv->escaped) {
        pm_json_vocab_free(jv);
        return NULL;
    }
    pm_json_state in_string;
    pm_json_init(&in_string, pm_json_any());
    in_string.mode = M_STRING; /* an unbounded string's value */
    for (int v = 0; v < vocab; v++) {
        size_t len, n = 0;
        const unsigned char *b = usable(jv, v, &len);
        if (!len) continue;
        while (n < len && n < 255 && is_ws(b[n])) n++;
        jv->lead[v] = (uint8_t)n;
        pm_json_state t;
        pm_json_copy(&t, &in_string);
        if (!pm_json_feed(&t, (const char *)b, len) && t.mode == M_STRING && !t.utf8_left && t.chars < 256) {
            jv->plain[v] = (uint8_t)t.chars;
            jv->escaped[v] = memchr(b, '\\', len) != NULL;
        }
    }
    if (group(jv, &jv->by_first, 0) || group(jv, &jv->by_content, 1)) {
        pm_json_vocab_free(jv);
        return NULL;
    }
    return jv;
}

/* Where whitespace only counts: between the parts of a container. */
static int between_parts(const pm_json_state *s) {
    return (s->mode == M_VALUE && s->depth) || s->mode == M_OBJ_FIRST || s->mode == M_OBJ_KEY || s->mode == M_COLON ||
           s->mode == M_ARR_FIRST || s->mode == M_AFTER;
}

/* The tokens with at least min_lead bytes of leading whitespace, from base, reached by `used` of
 * those bytes already: whitespace between parts only counts, so a token goes by its first byte
 * past it (most of a vocabulary begins with a space). */
static void walk_past_ws(const pm_json_state *base, const pm_json_vocab *jv, int used, int min_lead, uint8_t *allow) {
    const token_groups *g = &jv->by_content;
    pm_json_state first, t;
    for (int i = g->start[256]; i < g->start[257]; i++) { /* whitespace alone */
        int v = g->ids[i];
        if (jv->lead[v] >= min_lead) allow[v] = base->ws + jv->lead[v] - used <= PM_JSON_MAX_WS;
    }
    for (int c = 0; c < 256; c++) {
        pm_json_copy(&first, base);
        if (g->start[c] == g->start[c + 1] || feed_byte(&first, (unsigned)c)) continue;
        for (int i = g->start[c]; i < g->start[c + 1]; i++) {
            int v = g->ids[i], lead = jv->lead[v];
            if (lead < min_lead || base->ws + lead - used > PM_JSON_MAX_WS) continue;
            size_t len;
            const char *b = pm_tok_token_bytes(jv->tok, v, &len);
            pm_json_copy(&t, &first);
            allow[v] = !pm_json_feed(&t, b + lead + 1, len - (size_t)lead - 1);
        }
    }
}

/* The tokens by their first byte, from s (those that begin with whitespace left out with skip_ws). */
static void walk_first(const pm_json_state *s, const pm_json_vocab *jv, int skip_ws, uint8_t *allow) {
    const token_groups *g = &jv->by_first;
    pm_json_state first, t;
    /* inside a string after a whole character, plain content leaves the state as it is but for the
     * count of characters, which a maximum length bounds */
    int plain_ok = s->mode == M_STRING && !s->utf8_left;
    const pm_regex *pat = plain_ok && s->str ? s->str->pattern : NULL;
    int64_t room = s->str && s->str->max_len >= 0 ? (int64_t)s->str->max_len - s->chars : INT32_MAX;
    for (int c = 0; c < 256; c++) {
        if (skip_ws && is_ws((unsigned)c)) continue;
        pm_json_copy(&first, s);
        if (g->start[c] == g->start[c + 1] || feed_byte(&first, (unsigned)c)) continue;
        for (int i = g->start[c]; i < g->start[c + 1]; i++) {
            int v = g->ids[i];
            /* plain content: its count of characters, and a pattern's DFA over its bytes (one with an
             * escape, which a pattern reads decoded, is walked) */
            int plain = plain_ok && jv->plain[v] && !(pat && jv->escaped[v]);
            if (plain && !pat) {
                allow[v] = jv->plain[v] <= room;
                continue;
            }
            size_t len;
            const char *b = pm_tok_token_bytes(jv->tok, v, &len);
            if (plain) {
                allow[v] = jv->plain[v] <= room && pm_regex_feed(pat, first.rx, b + 1, len - 1);
                continue;
            }
            pm_json_copy(&t, &first);
            allow[v] = !pm_json_feed(&t, b + 1, len - 1);
        }
    }
}

void pm_json_mask(const pm_json_state *s, const pm_json_vocab *jv, const int32_t *eos, int n_eos, float *logits, uint8_t *allow) {
    int vocab = jv->vocab;
    memset(allow, 0, (size_t)vocab);
    if (between_parts(s)) walk_past_ws(s, jv, 0, 0, allow);
    else {
        /* where a space would end a number or an enum's value (or a key's colon is next...), the
         * tokens that begin with whitespace go on between parts from one space in */
        pm_json_state s1;
        pm_json_copy(&s1, s);
        int past = !feed_byte(&s1, ' ') && between_parts(&s1);
        walk_first(s, jv, past, allow);
        if (past) walk_past_ws(&s1, jv, 1, 1, allow);
    }
    for (int i = 0; i < n_eos; i++) /* the end: only once the value is complete */
        if (eos[i] >= 0 && eos[i] < vocab) allow[eos[i]] = (uint8_t)pm_json_done(s);
    pm_mask_logits(allow, logits, (size_t)vocab);
}
