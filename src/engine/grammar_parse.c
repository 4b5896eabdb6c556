/* grammar_parse.c — GBNF text to the compiled grammar (grammar.h, grammar_internal.h): the text
 * parsed into a tree; rules that name only such rules (no recursion) become regular expressions,
 * inlined where they are named; the rest lowered into alternatives of terminals (each maximal
 * stretch without a rule call one DFA) and rule calls, groups and repeats around calls becoming
 * rules of their own (left recursion rewritten first: grammar_left.c); then the checks: every rule
 * defined, a root, no left recursion left. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/grammar_internal.h"
#include "engine/grammar_tree.h"
#include "tok/utf8.h"

static uint32_t str_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}


void gp_sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->n + n + 1) c *= 2;
        char *t = realloc(b->s, c);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->s = t;
        b->cap = c;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void gp_sb_str(sbuf *b, const char *s) { gp_sb_put(b, s, strlen(s)); }

int gp_grow(void **a, int *cap, int n, size_t elt) {
    if (n < *cap) return 0;
    int c = *cap ? *cap * 2 : 16;
    void *t = realloc(*a, elt * (size_t)c);
    if (!t) return -1;
    *a = t;
    *cap = c;
    return 0;
}

int gp_fail(gp *P, size_t at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pm_errf(P->e, PM_EINVAL, "grammar: %s at byte %zu", msg, at);
}

int gp_oom(gp *P) { return pm_errf(P->e, PM_ENOMEM, "grammar: out of memory"); }

int gp_node(gp *P, a_kind kind) {
    if (gp_grow((void **)&P->nodes, &P->cap_nodes, P->n_nodes, sizeof *P->nodes)) return gp_oom(P);
    a_node *n = &P->nodes[P->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->at = P->p;
    return P->n_nodes++;
}

int gp_push(gp *P, int node, int32_t v) {
    a_node *n = &P->nodes[node];
    if (gp_grow((void **)&n->v, &n->cap, n->n, sizeof *n->v)) return gp_oom(P);
    n->v[n->n++] = v;
    return PM_OK;
}

/* ------------------------------------------------------------------ the text */

static int at_end(const gp *P) { return P->p >= P->len; }
static int peek(const gp *P) { return at_end(P) ? -1 : (unsigned char)P->s[P->p]; }

/* Spaces and comments; newlines too where the notation lets a sequence go on past them. */
static void skip_space(gp *P, int newline_ok) {
    while (!at_end(P)) {
        char c = P->s[P->p];
        if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) P->p++;
        else if (c == '#') {
            while (!at_end(P) && P->s[P->p] != '\n') P->p++;
        } else break;
    }
}

static int is_name_char(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

/* One UTF-8 character (well-formed: the tokenizer's own check) into *cp. */
static int utf8_char(gp *P, uint32_t *cp) {
    const uint8_t *s = (const uint8_t *)P->s + P->p;
    size_t left = P->len - P->p, len;
    if (!pm_utf8_valid_prefix(s, left < 4 ? left : 4)) return gp_fail(P, P->p, "invalid UTF-8");
    *cp = pm_utf8_decode(s, left, &len);
    P->p += len;
    return PM_OK;
}

/* A character of a literal or a class, escapes decoded. */
int gp_char(gp *P, uint32_t *cp) {
    if (peek(P) != '\\') return utf8_char(P, cp);
    size_t at = P->p++;
    int c = peek(P);
    if (c < 0) return gp_fail(P, at, "unfinished escape");
    P->p++;
    switch (c) {
    case 'n': *cp = '\n'; return PM_OK;
    case 'r': *cp = '\r'; return PM_OK;
    case 't': *cp = '\t'; return PM_OK;
    case 'x': case 'u': case 'U': {
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int i = 0; i < digits; i++, P->p++) {
            int h = peek(P);
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) return gp_fail(P, at, "\\%c needs %d hex digits", c, digits);
            v = v << 4 | (uint32_t)d;
        }
        if (v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return gp_fail(P, at, "\\%c escape U+%X is not a character", c, (unsigned)v);
        *cp = v;
        return PM_OK;
    }
    default:
        if (c < 0x80 && !is_name_char(c) && c > ' ') { /* escaped punctuation: itself */
            *cp = (uint32_t)c;
            return PM_OK;
        }
        return gp_fail(P, at, "unknown escape \\%c", c);
    }
}

static int parse_alternates(gp *P, int nested, int depth);

/* The entry of s[0, n) in ix (*at: its slot): its index, or -1 with *at the empty slot to fill. key(i)
 * gives entry i's bytes. */
typedef const char *(*str_key)(const gp *P, int i, size_t *len);

static int str_find(const gp *P, const str_index *ix, str_key key, const char *s, size_t n, uint32_t *at) {
    uint32_t i = str_hash(s, n) & (ix->cap - 1);
    for (; ix->slot[i]; i = (i + 1) & (ix->cap - 1)) {
        size_t len;
        const char *k = key(P, ix->slot[i] - 1, &len);
        if (len == n && !memcmp(k, s, n)) break;
    }
    *at = i;
    return ix->slot[i] - 1;
}

/* Room for one more entry (the table doubled past half full); then str_find again for the slot. */
static int str_room(gp *P, str_index *ix, str_key key) {
    if (ix->cap && (uint32_t)(ix->n + 1) * 2 <= ix->cap) return PM_OK;
    uint32_t cap = ix->cap ? ix->cap * 2 : 256;
    int32_t *slot = calloc(cap, sizeof *slot);
    if (!slot) return gp_oom(P);
    for (uint32_t j = 0; j < ix->cap; j++) {
        if (!ix->slot[j]) continue;
        size_t len;
        const char *k = key(P, ix->slot[j] - 1, &len);
        uint32_t i = str_hash(k, len) & (cap - 1);
        while (slot[i]) i = (i + 1) & (cap - 1);
        slot[i] = ix->slot[j];
    }
    free(ix->slot);
    ix->slot = slot;
    ix->cap = cap;
    return PM_OK;
}

static const char *rule_key(const gp *P, int i, size_t *len) {
    *len = strlen(P->rules[i].name);
    return P->rules[i].name;
}

int gp_rule(gp *P, const char *name, size_t n, size_t at) {
    uint32_t slot;
    if (str_room(P, &P->rule_names, rule_key)) return P->e->code;
    int found = str_find(P, &P->rule_names, rule_key, name, n, &slot);
    if (found >= 0) return found;
    if (P->n_rules >= PM_GRAMMAR_MAX_RULES) return gp_fail(P, at, "more than %d rules", PM_GRAMMAR_MAX_RULES);
    if (gp_grow((void **)&P->rules, &P->cap_rules, P->n_rules, sizeof *P->rules)) return gp_oom(P);
    b_rule *r = &P->rules[P->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(n + 1))) return gp_oom(P);
    memcpy(r->name, name, n);
    r->name[n] = 0;
    r->body = -1;
    r->regular = -1;
    r->ref_at = r->def_at = at;
    P->rule_names.slot[slot] = P->n_rules + 1;
    P->rule_names.n++;
    return P->n_rules++;
}

static int parse_item(gp *P, int nested, int depth) {
    int c = peek(P), node;
    size_t at = P->p;
    if (c == '"') {
        if ((node = gp_node(P, A_LIT)) < 0) return node;
        P->p++;
        while (peek(P) != '"') {
            uint32_t cp;
            if (at_end(P) || peek(P) == '\n') return gp_fail(P, at, "unterminated literal");
            if (gp_char(P, &cp) || gp_push(P, node, (int32_t)cp)) return P->e->code;
        }
        P->p++;
    } else if (c == '[') {
        if ((node = gp_node(P, A_CLASS)) < 0) return node;
        P->p++;
        if (peek(P) == '^') P->nodes[node].neg = 1, P->p++;
        while (peek(P) != ']') {
            uint32_t lo, hi;
            if (at_end(P) || peek(P) == '\n') return gp_fail(P, at, "unterminated character class");
            if (gp_char(P, &lo)) return P->e->code;
            hi = lo;
            if (peek(P) == '-' && P->p + 1 < P->len && P->s[P->p + 1] != ']' && P->s[P->p + 1] != '\n') {
                P->p++;
                if (gp_char(P, &hi)) return P->e->code;
                if (hi < lo) return gp_fail(P, at, "range U+%X-U+%X is reversed", (unsigned)lo, (unsigned)hi);
            }
            if (gp_push(P, node, (int32_t)lo) || gp_push(P, node, (int32_t)hi)) return P->e->code;
        }
        P->p++;
        if (!P->nodes[node].n) return gp_fail(P, at, "empty character class");
    } else if (c == '.') {
        if ((node = gp_node(P, A_ANY)) < 0) return node;
        P->p++;
    } else if (c == '(') {
        if (depth >= MAX_DEPTH) return gp_fail(P, at, "groups nested deeper than %d", MAX_DEPTH);
        P->p++;
        skip_space(P, 1);
        if ((node = parse_alternates(P, 1, depth + 1)) < 0) return node;
        skip_space(P, 1);
        if (peek(P) != ')') return gp_fail(P, P->p, "expected ')' closing the group at byte %zu", at);
        P->p++;
    } else if (is_name_char(c)) {
        size_t s = P->p;
        while (is_name_char(peek(P))) P->p++;
        int r = gp_rule(P, P->s + s, P->p - s, s);
        if (r < 0 || (node = gp_node(P, A_REF)) < 0) return P->e->code;
        P->nodes[node].ref = r;
        P->nodes[node].at = s;
    } else return gp_fail(P, at, c < 0 ? "expected an item, found the end" : "unexpected '%c'", c);
    /* postfixes */
    for (int k = 0;; k++) {
        skip_space(P, nested);
        c = peek(P);
        int min, max;
        size_t pat = P->p;
        if (c == '*') min = 0, max = -1, P->p++;
        else if (c == '+') min = 1, max = -1, P->p++;
        else if (c == '?') min = 0, max = 1, P->p++;
        else if (c == '{') {
            P->p++;
            long a = -1, b;
            skip_space(P, nested);
            if (peek(P) >= '0' && peek(P) <= '9')
                for (a = 0; peek(P) >= '0' && peek(P) <= '9' && a <= PM_GRAMMAR_MAX_REPEAT; P->p++) a = a * 10 + (peek(P) - '0');
            if (a < 0) return gp_fail(P, pat, "expected a count after '{'");
            b = a;
            skip_space(P, nested);
            if (peek(P) == ',') {
                P->p++;
                skip_space(P, nested);
                b = -1;
                if (peek(P) >= '0' && peek(P) <= '9')
                    for (b = 0; peek(P) >= '0' && peek(P) <= '9' && b <= PM_GRAMMAR_MAX_REPEAT; P->p++) b = b * 10 + (peek(P) - '0');
                skip_space(P, nested);
            }
            if (peek(P) != '}') return gp_fail(P, pat, "expected '}' closing the count");
            P->p++;
            if (a > PM_GRAMMAR_MAX_REPEAT || b > PM_GRAMMAR_MAX_REPEAT)
                return gp_fail(P, pat, "a count above %d", PM_GRAMMAR_MAX_REPEAT);
            if (b >= 0 && b < a) return gp_fail(P, pat, "{%ld,%ld}: the larger count first", a, b);
            min = (int)a, max = (int)b;
        } else return node;
        if (k == MAX_POSTFIX) return gp_fail(P, pat, "more than %d postfixes in a row", MAX_POSTFIX);
        int rep = gp_node(P, A_REP);
        if (rep < 0 || gp_push(P, rep, node)) return P->e->code;
        P->nodes[rep].min = min;
        P->nodes[rep].max = max;
        P->nodes[rep].at = pat;
        node = rep;
    }
}

/* Items until '|', ')', the end, or (outside groups) the end of the line. */
static int parse_sequence(gp *P, int nested, int depth) {
    int seq = gp_node(P, A_SEQ);
    if (seq < 0) return seq;
    for (;;) {
        skip_space(P, nested);
        int c = peek(P);
        if (c < 0 || c == '|' || c == ')' || c == '\n' || c == '\r') return seq;
        int item = parse_item(P, nested, depth);
        if (item < 0 || gp_push(P, seq, item)) return P->e->code;
    }
}

static int parse_alternates(gp *P, int nested, int depth) {
    int alt = gp_node(P, A_ALT);
    if (alt < 0) return alt;
    for (;;) {
        int seq = parse_sequence(P, nested, depth);
        if (seq < 0 || gp_push(P, alt, seq)) return P->e->code;
        if (!gp_next_alternative(P, nested, skip_space)) return alt;
    }
}

int gp_next_alternative(gp *P, int nested, void (*skip)(gp *P, int newline_ok)) {
    skip(P, nested);
    if (P->p < P->len && P->s[P->p] != '|' && !nested) { /* a rule's next line may go on with "| ..." */
        size_t back = P->p;
        skip(P, 1);
        if (P->p >= P->len || P->s[P->p] != '|') P->p = back;
    }
    if (P->p >= P->len || P->s[P->p] != '|') return 0;
    P->p++;
    skip(P, 1);
    return 1;
}

static int parse_rules(gp *P) {
    skip_space(P, 1);
    while (!at_end(P)) {
        size_t at = P->p;
        if (!is_name_char(peek(P))) return gp_fail(P, at, "expected a rule name");
        while (is_name_char(peek(P))) P->p++;
        int r = gp_rule(P, P->s + at, P->p - at, at);
        if (r < 0) return r;
        skip_space(P, 0);
        if (P->len - P->p < 3 || memcmp(P->s + P->p, "::=", 3))
            return gp_fail(P, P->p, "expected '::=' after rule name '%s' (a sequence ends with its line outside parentheses)",
                           P->rules[r].name);
        if (P->rules[r].body >= 0) return gp_fail(P, at, "rule '%s' is defined twice (first at byte %zu)", P->rules[r].name, P->rules[r].def_at);
        P->p += 3;
        skip_space(P, 1);
        int body = parse_alternates(P, 0, 0);
        if (body < 0) return body;
        P->rules[r].body = body;
        P->rules[r].def_at = at;
        skip_space(P, 0);
        if (peek(P) == ')') return gp_fail(P, P->p, "')' without '('");
        skip_space(P, 1);
    }
    return PM_OK;
}

/* ------------------------------------------------------------------ regular parts */

static int rule_regular(gp *P, int r, int fold);

/* No call of a rule that is not regular below node; fold: rules being inlined around it. */
static int node_pure(gp *P, int node, int fold) {
    a_node *n = &P->nodes[node];
    if (n->kind == A_REF) return rule_regular(P, n->ref, fold) == 1;
    if (n->kind == A_SEQ || n->kind == A_ALT || n->kind == A_REP)
        for (int i = 0; i < n->n; i++)
            if (!node_pure(P, P->nodes[node].v[i], fold)) return 0;
    return 1;
}

static void put_cp(sbuf *b, uint32_t cp, int in_class) {
    char t[16];
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || (cp == ' ' && !in_class)) {
        t[0] = (char)cp;
        gp_sb_put(b, t, 1);
    } else {
        snprintf(t, sizeof t, "\\U%08X", (unsigned)cp);
        gp_sb_str(b, t);
    }
}

/* The regular expression (regex.h) of a pure node. */
static void node_regex(gp *P, int node, sbuf *b) {
    const a_node *n = &P->nodes[node];
    switch (n->kind) {
    case A_LIT: /* in a concatenation as it is; a repeat or an alternation groups it */
        if (n->flags & A_ICASE) gp_sb_str(b, "(?i:");
        for (int i = 0; i < n->n; i++) put_cp(b, (uint32_t)n->v[i], 0);
        if (n->flags & A_ICASE) gp_sb_str(b, ")");
        break;
    case A_RX: /* a group of its own, its flags scoped to it */
        gp_sb_str(b, n->flags & A_ICASE ? (n->flags & A_DOTALL ? "(?is:" : "(?i:") : n->flags & A_DOTALL ? "(?s:" : "(?:");
        gp_sb_put(b, n->rx, n->rx_len);
        gp_sb_str(b, ")");
        break;
    case A_CLASS:
        gp_sb_str(b, n->neg ? "[^" : "[");
        for (int i = 0; i < n->n; i += 2) {
            put_cp(b, (uint32_t)n->v[i], 1);
            if (n->v[i + 1] != n->v[i]) {
                gp_sb_str(b, "-");
                put_cp(b, (uint32_t)n->v[i + 1], 1);
            }
        }
        gp_sb_str(b, "]");
        break;
    case A_ANY: gp_sb_str(b, "[\\x00-\\U0010FFFF]"); break;
    case A_REF: /* a rule's text has no alternation outside a group: as it is */
        gp_sb_put(b, P->rules[n->ref].rx, P->rules[n->ref].rx_len);
        break;
    case A_SEQ: /* its items side by side: each is a group where it needs one */
        for (int i = 0; i < n->n; i++) node_regex(P, n->v[i], b);
        break;
    case A_ALT:
        if (n->n == 1) { /* a group of one sequence: no group needed */
            node_regex(P, n->v[0], b);
            break;
        }
        gp_sb_str(b, "(?:");
        for (int i = 0; i < n->n; i++) {
            if (i) gp_sb_str(b, "|");
            node_regex(P, n->v[i], b);
        }
        gp_sb_str(b, ")");
        break;
    case A_REP: {
        char q[48];
        gp_sb_str(b, "(?:");
        node_regex(P, n->v[0], b);
        if (n->min == 0 && n->max < 0) snprintf(q, sizeof q, ")*");
        else if (n->max < 0) snprintf(q, sizeof q, "){%d,}", n->min);
        else snprintf(q, sizeof q, "){%d,%d}", n->min, n->max);
        gp_sb_str(b, q);
        break;
    }
    }
}

/* 1 when rule r calls no rule that can reach r again, all the way down (its text in rx, unless
 * longer than MAX_INLINE or MAX_FOLD rules deep: then it stays a rule); 0 otherwise. */
static int rule_regular(gp *P, int r, int fold) {
    b_rule *R = &P->rules[r];
    if (R->regular == 2) return 0; /* reached again while being decided: recursive */
    if (R->regular >= 0) return R->regular;
    if (R->body < 0) return R->regular = 0; /* undefined: reported by the checks */
    if (fold >= MAX_FOLD) return 0;        /* not decided here: a rule of its own from this caller */
    R->regular = 2;
    int pure = node_pure(P, R->body, fold + 1);
    R = &P->rules[r];
    if (!pure) return R->regular = 0;
    sbuf b = {0};
    node_regex(P, R->body, &b);
    if (b.oom || b.n > MAX_INLINE) {
        free(b.s);
        return R->regular = 0;
    }
    R->rx = b.s ? b.s : strdup("");
    R->rx_len = b.n;
    return R->regular = R->rx ? 1 : 0;
}

/* ------------------------------------------------------------------ lowering */

static const char *term_key(const gp *P, int i, size_t *len) {
    *len = P->terms[i].n;
    return P->terms[i].s;
}

static int term_index(gp *P, const char *rx, size_t n) {
    uint32_t slot;
    if (str_room(P, &P->term_texts, term_key)) return P->e->code;
    int found = str_find(P, &P->term_texts, term_key, rx, n, &slot);
    if (found >= 0) return found;
    if (gp_grow((void **)&P->terms, &P->cap_terms, P->n_terms, sizeof *P->terms)) return gp_oom(P);
    sbuf *t = &P->terms[P->n_terms];
    memset(t, 0, sizeof *t);
    gp_sb_put(t, rx, n);
    if (t->oom || !t->s) return gp_oom(P);
    P->term_texts.slot[slot] = P->n_terms + 1;
    P->term_texts.n++;
    return P->n_terms++;
}

static int alt_push(gp *P, b_alt *a, int kind, int arg) {
    if (++P->n_elems > PM_GRAMMAR_MAX_RULES * 4) return pm_errf(P->e, PM_EINVAL, "grammar: more than %d elements after expansion", PM_GRAMMAR_MAX_RULES * 4);
    if (gp_grow((void **)&a->el, &a->cap, a->n, sizeof *a->el)) return gp_oom(P);
    a->el[a->n++] = (g_elem){kind, arg};
    return PM_OK;
}

/* A rule made by the lowering (a group or repeat around calls), named by where it stands. */
static int helper_rule(gp *P, const char *what, size_t at, int body) {
    char name[64];
    snprintf(name, sizeof name, "(%s at byte %zu)", what, at);
    int n = P->n_rules;
    if (n >= PM_GRAMMAR_MAX_RULES) return gp_fail(P, at, "more than %d rules after expansion", PM_GRAMMAR_MAX_RULES);
    if (gp_grow((void **)&P->rules, &P->cap_rules, n, sizeof *P->rules)) return gp_oom(P);
    b_rule *r = &P->rules[n];
    memset(r, 0, sizeof *r);
    if (!(r->name = strdup(name))) return gp_oom(P);
    r->body = body;
    r->regular = 0;
    r->def_at = r->ref_at = at;
    return P->n_rules++;
}

static b_alt *new_alt(gp *P, int r) {
    b_rule *R = &P->rules[r];
    if (gp_grow((void **)&R->alts, &R->cap_alts, R->n_alts, sizeof *R->alts)) {
        gp_oom(P);
        return NULL;
    }
    memset(&R->alts[R->n_alts], 0, sizeof *R->alts);
    return &R->alts[R->n_alts++];
}

/* Appends a pure run's regex as a terminal. */
static int flush_run(gp *P, int r, int alt, sbuf *run) {
    if (!run->n && !run->oom) return PM_OK;
    if (run->oom) return gp_oom(P);
    int t = term_index(P, run->s, run->n);
    run->n = 0;
    return t < 0 ? t : alt_push(P, &P->rules[r].alts[alt], G_TERM, t);
}

static int lower_items(gp *P, int r, int alt, int node, sbuf *run);

/* The element that calls what a repeat repeats. */
static int repeat_unit(gp *P, int child) {
    const a_node *c = &P->nodes[child];
    if (c->kind == A_REF) return c->ref;
    return helper_rule(P, "group", c->at, child);
}

/* x{min,max} around calls: min calls of x, then a rule for the rest: `s ::= x s | ""` when
 * unbounded, else max - min nested optional ones (`o_k ::= x o_(k-1) | ""`). */
static int lower_repeat(gp *P, int r, int alt, int node) {
    const a_node n = P->nodes[node];
    int x = repeat_unit(P, n.v[0]);
    if (x < 0) return x;
    for (int i = 0; i < n.min; i++)
        if (alt_push(P, &P->rules[r].alts[alt], G_RULE, x)) return P->e->code;
    int tail = -1;
    if (n.max < 0) {
        if ((tail = helper_rule(P, "repeat", n.at, -1)) < 0) return tail;
        b_alt *a = new_alt(P, tail);
        if (!a || alt_push(P, a, G_RULE, x) || alt_push(P, a, G_RULE, tail) || !new_alt(P, tail)) return P->e->code;
    } else
        for (int k = 0; k < n.max - n.min; k++) {
            int o = helper_rule(P, "repeat", n.at, -1);
            if (o < 0) return o;
            b_alt *a = new_alt(P, o);
            if (!a || alt_push(P, a, G_RULE, x) || (tail >= 0 && alt_push(P, a, G_RULE, tail)) || !new_alt(P, o)) return P->e->code;
            tail = o;
        }
    return tail >= 0 ? alt_push(P, &P->rules[r].alts[alt], G_RULE, tail) : PM_OK;
}

static int lower_items(gp *P, int r, int alt, int node, sbuf *run) {
    const a_node *n = &P->nodes[node];
    if (n->kind == A_SEQ) {
        for (int i = 0; i < P->nodes[node].n; i++)
            if (lower_items(P, r, alt, P->nodes[node].v[i], run)) return P->e->code;
        return PM_OK;
    }
    if (node_pure(P, node, 0)) {
        node_regex(P, node, run);
        return run->oom ? gp_oom(P) : PM_OK;
    }
    if (flush_run(P, r, alt, run)) return P->e->code;
    n = &P->nodes[node];
    if (n->kind == A_REF) return alt_push(P, &P->rules[r].alts[alt], G_RULE, n->ref);
    if (n->kind == A_REP) return lower_repeat(P, r, alt, node);
    int h = helper_rule(P, "group", n->at, node); /* an alternation around calls */
    return h < 0 ? h : alt_push(P, &P->rules[r].alts[alt], G_RULE, h);
}

static int lower_rule(gp *P, int r) {
    int body = P->rules[r].body;
    if (body < 0) return PM_OK; /* made from alternatives already */
    if (rule_regular(P, r, 0) == 1) { /* one terminal */
        b_alt *a = new_alt(P, r);
        int t = a ? term_index(P, P->rules[r].rx, P->rules[r].rx_len) : -1;
        return t < 0 ? P->e->code : alt_push(P, a, G_TERM, t);
    }
    const a_node *n = &P->nodes[body];
    int k = n->kind == A_ALT ? n->n : 1, pure = 0;
    for (int i = 0; i < k && k > 1; i++) pure += node_pure(P, P->nodes[body].v[i], 0);
    if (pure > 1) { /* the alternatives that call no rule as one terminal: one parse thread for them, not one each */
        sbuf run = {0};
        gp_sb_str(&run, "(?:");
        for (int i = 0, first = 1; i < k; i++) {
            if (!node_pure(P, P->nodes[body].v[i], 0)) continue;
            if (!first) gp_sb_str(&run, "|");
            node_regex(P, P->nodes[body].v[i], &run);
            first = 0;
        }
        gp_sb_str(&run, ")");
        int rc = new_alt(P, r) ? flush_run(P, r, P->rules[r].n_alts - 1, &run) : P->e->code;
        free(run.s);
        if (rc) return rc;
    }
    for (int i = 0; i < k; i++) {
        int item = P->nodes[body].kind == A_ALT ? P->nodes[body].v[i] : body;
        if (pure > 1 && node_pure(P, item, 0)) continue;
        if (!new_alt(P, r)) return P->e->code;
        int alt = P->rules[r].n_alts - 1;
        sbuf run = {0};
        int rc = lower_items(P, r, alt, item, &run);
        if (!rc) rc = flush_run(P, r, alt, &run);
        free(run.s);
        if (rc) return rc;
    }
    return PM_OK;
}

/* ------------------------------------------------------------------ checks */

/* Rules that can match the empty string, to a fixed point. */
static void find_nullable(const gp *P, const uint8_t *term_null, uint8_t *null) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < P->n_rules; r++) {
            if (null[r]) continue;
            for (int a = 0; a < P->rules[r].n_alts && !null[r]; a++) {
                const b_alt *A = &P->rules[r].alts[a];
                int all = 1;
                for (int i = 0; i < A->n && all; i++) all = A->el[i].kind == G_TERM ? term_null[A->el[i].arg] : null[A->el[i].arg];
                if (all) null[r] = 1, changed = 1;
            }
        }
    }
}

/* Left recursion that grows the stack: a cycle of calls made before anything is written (each
 * after elements that can be empty) in which some call is not in last position, so that going round
 * it pushes a continuation every time and would never end. A cycle of calls in last position only
 * (s ::= x s | "" with x able to be empty: what a repeat of such a group becomes) pushes nothing,
 * and the parse expands each (rule, continuation) once per byte (grammar.c): it is kept. Found as
 * the strongly connected components of the calls-before-writing graph (Tarjan's algorithm); a
 * call that is not last between two rules of one component is refused. */
typedef struct scc {
    const uint8_t *term_null, *null;
} scc;

int gp_scc_run(gp_scc *C, int n, const int *from, const int *to) {
    size_t m = (size_t)n + 1;
    int *index = calloc(m, sizeof(int)), *low = calloc(m, sizeof(int)), *stack = malloc(m * sizeof(int));
    int *rule = malloc(m * sizeof(int)), *next = malloc(m * sizeof(int)), counter = 0, sp = 0, top = 0;
    uint8_t *on = calloc(m, 1);
    C->comp = calloc(m, sizeof(int)), C->size = calloc(m, sizeof(int));
    int ok = index && low && stack && rule && next && on && C->comp && C->size;
    for (int r0 = 0; r0 < n && ok; r0++) {
        if (index[r0]) continue;
        for (int r = r0, enter = 1;;) {
            if (enter) { /* r seen: on the stack of the component being found, and on the walk's */
                index[r] = low[r] = ++counter;
                stack[sp++] = r, on[r] = 1;
                rule[top] = r, next[top++] = from[r];
            }
            if (next[top - 1] < from[r + 1]) { /* r's next edge */
                int c = to[next[top - 1]++];
                if ((enter = !index[c])) r = c;
                else if (on[c] && index[c] < low[r]) low[r] = index[c];
                continue;
            }
            if (low[r] == index[r]) { /* r's component closes */
                int x;
                do {
                    x = stack[--sp];
                    on[x] = 0, C->comp[x] = r, C->size[r]++;
                } while (x != r);
            }
            if (!--top) break;
            int parent = rule[top - 1];
            if (low[r] < low[parent]) low[parent] = low[r];
            r = parent, enter = 0;
        }
    }
    free(index), free(low), free(stack), free(rule), free(next), free(on);
    return ok ? 0 : -1;
}

void gp_scc_free(gp_scc *C) { free(C->comp), free(C->size); }

/* Calls alternative A of a rule makes before anything is written: the i-th element is one when
 * every element before it can be empty; returns the count, fills at (element indexes). */
static int early_calls(const b_alt *A, const scc *C, int *at) {
    int k = 0;
    for (int i = 0; i < A->n; i++) {
        if (A->el[i].kind == G_TERM) {
            if (!C->term_null[A->el[i].arg]) break;
            continue;
        }
        at[k++] = i;
        if (!C->null[A->el[i].arg]) break;
    }
    return k;
}

static int growing_cycle(gp *P, const int *queue, int nq, const uint8_t *term_null, const uint8_t *null) {
    int n = P->n_rules, maxlen = 1;
    for (int r = 0; r < n; r++)
        for (int a = 0; a < P->rules[r].n_alts; a++)
            if (P->rules[r].alts[a].n > maxlen) maxlen = P->rules[r].alts[a].n;
    scc C = {term_null, null};
    gp_scc T = {0};
    int *at = malloc(sizeof *at * (size_t)maxlen), *from = calloc((size_t)n + 2, sizeof(int)), *to = NULL, n_to = 0, cap_to = 0;
    if (!at || !from) gp_oom(P);
    for (int r = 0; r < n && !P->e->code; r++) { /* the early calls, as early_calls finds them */
        from[r] = n_to;
        if (!P->rules[r].queued) continue;
        for (int a = 0; a < P->rules[r].n_alts && !P->e->code; a++) {
            const b_alt *A = &P->rules[r].alts[a];
            for (int j = 0, k = early_calls(A, &C, at); j < k; j++)
                if (gp_grow((void **)&to, &cap_to, n_to, sizeof *to)) gp_oom(P);
                else to[n_to++] = A->el[at[j]].arg;
        }
    }
    from[n] = n_to;
    if (!P->e->code && gp_scc_run(&T, n, from, to)) gp_oom(P);
    for (int qi = 0; qi < nq && !P->e->code; qi++) {
        int r = queue[qi];
        for (int a = 0; a < P->rules[r].n_alts && !P->e->code; a++) {
            const b_alt *A = &P->rules[r].alts[a];
            int k = early_calls(A, &C, at);
            for (int j = 0; j < k; j++) {
                int c = A->el[at[j]].arg;
                if (at[j] == A->n - 1 || T.comp[c] != T.comp[r]) continue; /* last: pushes nothing; or no way back */
                pm_errf(P->e, PM_EUNSUPPORTED,
                        "grammar: left recursion: rule '%s' can reach itself before writing anything (it would never end; write it "
                        "right-recursively, e.g. list%s item (\",\" item)*)",
                        P->rules[r].name, strcmp(P->notation, "Lark") ? " ::=" : ":");
                break;
            }
        }
    }
    gp_scc_free(&T);
    free(at), free(from), free(to);
    return P->e->code;
}

/* ------------------------------------------------------------------ assembly */

static void gp_free(gp *P) {
    for (int i = 0; i < P->n_nodes; i++) free(P->nodes[i].v), free(P->nodes[i].rx);
    free(P->nodes);
    for (int r = 0; r < P->n_rules; r++) {
        free(P->rules[r].name);
        free(P->rules[r].rx);
        for (int a = 0; a < P->rules[r].n_alts; a++) free(P->rules[r].alts[a].el);
        free(P->rules[r].alts);
    }
    free(P->rules);
    for (int i = 0; i < P->n_terms; i++) free(P->terms[i].s);
    free(P->terms);
    free(P->rule_names.slot);
    free(P->term_texts.slot);
}

void pm_grammar_free(pm_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_terms; i++) pm_regex_free(g->terms[i]);
    free(g->terms);
    free(g->term_start);
    free(g->term_first);
    free(g->dfa);
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alt);
    free(g);
}

size_t pm_grammar_bytes(const pm_grammar *g) {
    size_t n = sizeof *g + sizeof *g->elems * (size_t)g->n_elems + sizeof *g->alt_start * (size_t)g->n_alts +
               sizeof *g->rule_alt * (size_t)(g->n_rules + 1) + (sizeof *g->terms + sizeof *g->term_start + sizeof *g->term_first + sizeof *g->dfa) * (size_t)g->n_terms;
    for (int t = 0; t < g->n_terms; t++) n += pm_regex_bytes(g->terms[t]);
    return n;
}

void pm_grammar_stats(const pm_grammar *g, int *rules, int *terminals) {
    *rules = g->n_rules;
    *terminals = g->n_terms;
}

/* The rules reachable from root, lowered, then laid out flat. */
static int assemble(gp *P, int root, pm_grammar **out) {
    int *queue = NULL, nq = 0, capq = 0;
    if (gp_grow((void **)&queue, &capq, nq, sizeof *queue)) return gp_oom(P);
    queue[nq++] = root;
    P->rules[root].queued = 1;
    for (int qi = 0; qi < nq; qi++) {
        if (lower_rule(P, queue[qi])) break;
        const b_rule *R = &P->rules[queue[qi]];
        for (int a = 0; a < R->n_alts; a++)
            for (int i = 0; i < R->alts[a].n; i++) {
                int c = R->alts[a].el[i].arg;
                if (R->alts[a].el[i].kind != G_RULE || P->rules[c].queued) continue;
                if (P->rules[c].body < 0 && !P->rules[c].n_alts) {
                    gp_fail(P, P->rules[c].ref_at, "rule '%s' is used but not defined", P->rules[c].name);
                    goto done;
                }
                if (gp_grow((void **)&queue, &capq, nq, sizeof *queue)) {
                    gp_oom(P);
                    goto done;
                }
                P->rules[c].queued = 1;
                queue[nq++] = c;
                R = &P->rules[queue[qi]];
            }
    }
    if (P->e->code) goto done;
    pm_grammar *g = calloc(1, sizeof *g);
    int *index = malloc(sizeof *index * (size_t)P->n_rules);
    uint8_t *term_null = calloc((size_t)P->n_terms + 1, 1), *null = calloc((size_t)P->n_rules, 1);
    if (!g || !index || !term_null || !null) {
        gp_oom(P);
        goto fail;
    }
    *out = g;
    g->terms = calloc((size_t)P->n_terms + 1, sizeof *g->terms);
    g->term_start = calloc((size_t)P->n_terms + 1, sizeof *g->term_start);
    g->term_first = calloc((size_t)P->n_terms + 1, sizeof *g->term_first);
    g->dfa = calloc((size_t)P->n_terms + 1, sizeof *g->dfa);
    if (!g->terms || !g->term_start || !g->term_first || !g->dfa) {
        gp_oom(P);
        goto fail;
    }
    size_t work = 0;
    for (int t = 0; t < P->n_terms; t++) {
        if (pm_regex_compile(P->terms[t].s, P->terms[t].n, &g->terms[t], P->e)) {
            pm_err_ctx(P->e, "grammar: a terminal: ");
            goto fail;
        }
        g->n_terms = t + 1; /* the grammar's to free from here */
        work += pm_regex_work(g->terms[t]);
        if (work > PM_GRAMMAR_MAX_WORK) { /* many terminals each just within the pattern's own limit */
            pm_errf(P->e, PM_EUNSUPPORTED, "grammar: its terminals' automata take too long to build together (%d of %d built; fewer or "
                                           "smaller counts)", t + 1, P->n_terms);
            goto fail;
        }
        g->term_start[t] = pm_regex_start(g->terms[t]);
        pm_regex_dfa_of(g->terms[t], &g->dfa[t]);
        for (int b = 0; b < 256; b++)
            if (pm_regex_dfa_step(&g->dfa[t], g->term_start[t], (unsigned char)b)) g->term_first[t][b >> 6] |= (uint64_t)1 << (b & 63);
        term_null[t] = (uint8_t)pm_regex_accepts(g->terms[t], g->term_start[t]);
    }
    find_nullable(P, term_null, null);
    if (growing_cycle(P, queue, nq, term_null, null)) goto fail;
    int n_alts = 0, n_elems = 0;
    for (int qi = 0; qi < nq; qi++) {
        index[queue[qi]] = qi;
        n_alts += P->rules[queue[qi]].n_alts;
        for (int a = 0; a < P->rules[queue[qi]].n_alts; a++) n_elems += P->rules[queue[qi]].alts[a].n + 1;
    }
    g->elems = malloc(sizeof *g->elems * (size_t)(n_elems ? n_elems : 1));
    g->alt_start = malloc(sizeof *g->alt_start * (size_t)(n_alts ? n_alts : 1));
    g->rule_alt = malloc(sizeof *g->rule_alt * (size_t)(nq + 1));
    if (!g->elems || !g->alt_start || !g->rule_alt) {
        gp_oom(P);
        goto fail;
    }
    for (int qi = 0; qi < nq; qi++) {
        const b_rule *R = &P->rules[queue[qi]];
        g->rule_alt[qi] = g->n_alts;
        for (int a = 0; a < R->n_alts; a++) {
            g->alt_start[g->n_alts++] = g->n_elems;
            for (int i = 0; i < R->alts[a].n; i++) {
                g_elem el = R->alts[a].el[i];
                if (el.kind == G_RULE) el.arg = index[el.arg];
                g->elems[g->n_elems++] = el;
            }
            g->elems[g->n_elems++] = (g_elem){G_END, 0};
        }
    }
    g->rule_alt[nq] = g->n_alts;
    g->n_rules = nq;
    g->root = 0;
fail:
    if (P->e->code) {
        pm_grammar_free(g);
        *out = NULL;
    }
    free(index);
    free(term_null);
    free(null);
done:
    free(queue);
    return P->e->code;
}

int gp_finish(gp *P, const char *root, pm_grammar **out) {
    *out = NULL;
    int r0 = -1, n = P->n_rules;
    gp_unleft(P);
    for (int r = 0; r < n && !P->e->code; r++)
        if (!strcmp(P->rules[r].name, root)) r0 = r;
    if (!P->e->code) {
        if (r0 < 0 || P->rules[r0].body < 0) pm_errf(P->e, PM_EINVAL, "grammar: no rule '%s' (the whole output is a %s)", root, root);
        else assemble(P, r0, out);
    }
    gp_free(P);
    return P->e->code;
}

/* Lark's text begins with a directive (%import ...) or its first definition is `name:` (GBNF's
 * `name ::=`); comments (# and //) and blank lines before it skipped. */
static int is_lark(const char *s, size_t len) {
    size_t p = 0;
    for (;;) {
        while (p < len && (s[p] == ' ' || s[p] == '\t' || s[p] == '\r' || s[p] == '\n')) p++;
        if (p < len && (s[p] == '#' || (s[p] == '/' && p + 1 < len && s[p + 1] == '/')))
            while (p < len && s[p] != '\n') p++;
        else break;
    }
    if (p < len && s[p] == '%') return 1;
    while (p < len && (s[p] == '?' || s[p] == '!')) p++;
    while (p < len && is_name_char((unsigned char)s[p])) p++;
    if (p < len && s[p] == '.') /* a priority: name.2 */
        for (p++; p < len && ((s[p] >= '0' && s[p] <= '9') || s[p] == '-'); p++) {}
    while (p < len && (s[p] == ' ' || s[p] == '\t')) p++;
    return p < len && s[p] == ':' && !(p + 1 < len && (s[p + 1] == ':' || s[p + 1] == '=')); /* not ::= nor := */
}

int pm_grammar_is_lark(const char *text, size_t len) { return is_lark(text, len); }

int pm_grammar_compile(const char *text, size_t len, pm_grammar **out, pm_err *e) {
    *out = NULL;
    if (len > PM_GRAMMAR_MAX_TEXT) return pm_errf(e, PM_EINVAL, "grammar: %zu bytes, more than %d", len, PM_GRAMMAR_MAX_TEXT);
    int lark = is_lark(text, len);
    gp P = {.s = text, .len = len, .e = e, .notation = lark ? "Lark" : "GBNF"};
    if (lark ? gp_read_lark(&P) : parse_rules(&P)) {
        gp_free(&P);
        return e->code;
    }
    return gp_finish(&P, lark ? "(start)" : "root", out);
}
