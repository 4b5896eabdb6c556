/* regex_parse.c — a pattern (regex.h's syntax) into the tree regex.c compiles: recursive descent
 * over alternation, concatenation, repeats and atoms, each error naming its byte offset. Python's re
 * is the reference where the dialects differ: a `{` that does not make a count is a literal, as is
 * a `]` or `}` outside a class; `[]...]` and `[^]...]` take the `]` literally (in the ECMAScript
 * dialect `[]` is the empty class and `[^]` any character, as there). */
#include <stdlib.h>
#include <string.h>

#include "engine/regex.h"
#include "engine/regex_internal.h"
#include "tok/utf8.h"

enum { MAX_DEPTH = 200, MAX_CP = 0x10FFFF };

typedef struct parser {
    const unsigned char *s, *p, *end;
    rx_tree *t;
    int depth;
    int ecma; /* PM_REGEX_ECMA: ECMAScript's `.` and `\s` */
    pm_err *e;
    int icase, dotall;        /* the flags i and s where P->p stands ((?i:...), (?s:...)) */
    const unsigned char *top; /* where the pattern proper begins: after global flags (?i) at its start */
} parser;

static int at(const parser *P) { return (int)(P->p - P->s); }

void rx_tree_free(rx_tree *t) {
    for (int i = 0; i < t->n_sets; i++) free(t->sets[i].r);
    free(t->sets);
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

static int oom(parser *P) { return pm_errf(P->e, PM_ENOMEM, "out of memory for the regular expression"); }

/* ---- code-point sets ---- */

static int set_add(rx_set *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        rx_range *r = realloc(s->r, sizeof *r * (size_t)cap);
        if (!r) return -1;
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (rx_range){lo, hi};
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const rx_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, overlapping and adjacent ranges merged. */
static void set_normalize(rx_set *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int k = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) {
            if (s->r[i].hi > s->r[k].hi) s->r[k].hi = s->r[i].hi;
        } else
            s->r[++k] = s->r[i];
    }
    s->n = k + 1;
}

/* Every code point not in s (normalized first). */
static int set_negate(rx_set *s) {
    set_normalize(s);
    rx_set o = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && set_add(&o, next, s->r[i].lo - 1)) goto fail;
        next = s->r[i].hi + 1;
    }
    if (next <= MAX_CP && set_add(&o, next, MAX_CP)) goto fail;
    free(s->r);
    *s = o;
    return 0;
fail:
    free(o.r);
    return -1;
}

/* s without lo..hi (normalized first). */
static int set_remove(rx_set *s, uint32_t lo, uint32_t hi) {
    set_normalize(s);
    int n = s->n;
    for (int i = 0; i < n; i++) {
        rx_range r = s->r[i];
        if (r.hi < lo || r.lo > hi) continue;
        s->r[i].hi = r.lo < lo ? lo - 1 : 0, s->r[i].lo = r.lo < lo ? r.lo : 1; /* the part below lo, or an empty range */
        if (r.hi > hi && set_add(s, hi + 1, r.hi)) return -1;
    }
    int k = 0;
    for (int i = 0; i < s->n; i++)
        if (s->r[i].lo <= s->r[i].hi) s->r[k++] = s->r[i];
    s->n = k;
    set_normalize(s);
    return 0;
}

/* \d \w \s (negated: \D \W \S) into s; ecma: \s is ECMAScript's, Unicode's spaces and line ends too. */
static int set_class(rx_set *s, int c, int ecma) {
    rx_set k = {0};
    int lc = c | 0x20, bad = 0;
    if (lc == 'd') bad = set_add(&k, '0', '9');
    else if (lc == 'w') bad = set_add(&k, '0', '9') || set_add(&k, 'A', 'Z') || set_add(&k, 'a', 'z') || set_add(&k, '_', '_');
    else {
        bad = set_add(&k, '\t', '\r') || set_add(&k, ' ', ' '); /* \t \n \v \f \r */
        if (ecma)
            bad = bad || set_add(&k, 0xA0, 0xA0) || set_add(&k, 0x1680, 0x1680) || set_add(&k, 0x2000, 0x200A) ||
                  set_add(&k, 0x2028, 0x2029) || set_add(&k, 0x202F, 0x202F) || set_add(&k, 0x205F, 0x205F) ||
                  set_add(&k, 0x3000, 0x3000) || set_add(&k, 0xFEFF, 0xFEFF);
    }
    if (!bad && c != lc) bad = set_negate(&k);
    for (int i = 0; !bad && i < k.n; i++) bad = set_add(s, k.r[i].lo, k.r[i].hi);
    free(k.r);
    return bad ? -1 : 0;
}

/* ---- the tree ---- */

static int node(parser *P, int kind, int a, int b) {
    rx_tree *t = P->t;
    if (t->n_nodes == t->cap_nodes) {
        int cap = t->cap_nodes ? 2 * t->cap_nodes : 64;
        rx_node *n = realloc(t->nodes, sizeof *n * (size_t)cap);
        if (!n) return oom(P);
        t->nodes = n;
        t->cap_nodes = cap;
    }
    t->nodes[t->n_nodes] = (rx_node){kind, a, b, 0, 0, -1};
    return t->n_nodes++;
}

/* A new set node; *set receives the set to fill. */
static int set_node(parser *P, rx_set **set) {
    rx_tree *t = P->t;
    if (t->n_sets == t->cap_sets) {
        int cap = t->cap_sets ? 2 * t->cap_sets : 16;
        rx_set *s = realloc(t->sets, sizeof *s * (size_t)cap);
        if (!s) return oom(P);
        t->sets = s;
        t->cap_sets = cap;
    }
    int n = node(P, RX_SET, -1, -1);
    if (n < 0) return n;
    t->nodes[n].set = t->n_sets;
    t->sets[t->n_sets] = (rx_set){0};
    *set = &t->sets[t->n_sets++];
    return n;
}

/* Adds the other case of the ASCII letters in s (flag i: as Python's re.IGNORECASE | re.ASCII). */
static int case_close(rx_set *s) {
    for (int i = 0, n = s->n; i < n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        if (lo <= 'z' && hi >= 'a' && set_add(s, (lo > 'a' ? lo : 'a') - 32, (hi < 'z' ? hi : 'z') - 32)) return -1;
        if (lo <= 'Z' && hi >= 'A' && set_add(s, (lo > 'A' ? lo : 'A') + 32, (hi < 'Z' ? hi : 'Z') + 32)) return -1;
    }
    set_normalize(s);
    return 0;
}

static int literal(parser *P, uint32_t cp) {
    rx_set *s;
    int n = set_node(P, &s);
    if (n >= 0 && (set_add(s, cp, cp) || (P->icase && case_close(s)))) return oom(P);
    return n;
}

/* ---- lexing ---- */

/* One UTF-8 character at P->p into *cp (well-formed: no overlong form, surrogate or code point
 * past U+10FFFF, as the tokenizer's own check holds it). */
static int utf8(parser *P, uint32_t *cp) {
    size_t avail = (size_t)(P->end - P->p), len;
    if (!pm_utf8_valid_prefix(P->p, avail < 4 ? avail : 4))
        return pm_errf(P->e, PM_EINVAL, "the pattern is not valid UTF-8 at byte %d", at(P));
    *cp = pm_utf8_decode(P->p, avail, &len);
    P->p += len;
    return 0;
}

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1; }

/* The escape after a backslash (P->p past it) as a code point (*cp) or a class (*cls: d w s D W S,
 * 0 when a code point). In a class, \b is a backspace; outside, anchors were taken by the caller. */
static int escape(parser *P, int in_class, uint32_t *cp, int *cls) {
    int off = at(P) - 1;
    *cls = 0;
    if (P->p == P->end) return pm_errf(P->e, PM_EINVAL, "the pattern ends with a lone backslash");
    int c = *P->p;
    if (c >= 0x80) return utf8(P, cp); /* an escaped non-ASCII character is itself */
    P->p++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': *cls = c; return 0;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'a': *cp = 7; return 0;
    case '0': { /* \0 and up to two more octal digits */
        uint32_t v = 0;
        for (int k = 0; k < 2 && P->p < P->end && *P->p >= '0' && *P->p <= '7'; k++) v = v * 8 + (uint32_t)(*P->p++ - '0');
        *cp = v;
        return 0;
    }
    case 'x': case 'u': case 'U': {
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = P->p < P->end ? hexval(*P->p) : -1;
            if (h < 0) return pm_errf(P->e, PM_EINVAL, "\\%c at byte %d needs %d hexadecimal digits", c, off, digits);
            v = v * 16 + (uint32_t)h;
            P->p++;
        }
        if (v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
            return pm_errf(P->e, PM_EINVAL, "\\%c at byte %d is not a character (U+%X)", c, off, (unsigned)v);
        *cp = v;
        return 0;
    }
    case 'b':
        if (in_class) {
            *cp = 8;
            return 0;
        }
        return pm_errf(P->e, PM_EUNSUPPORTED, "a word boundary (\\b at byte %d) is not supported", off);
    case 'B': return pm_errf(P->e, PM_EUNSUPPORTED, "a word boundary (\\B at byte %d) is not supported", off);
    }
    if (c >= '1' && c <= '7' && P->end - P->p >= 2 && P->p[0] >= '0' && P->p[0] <= '7' && P->p[1] >= '0' && P->p[1] <= '7') {
        uint32_t v = (uint32_t)(c - '0') * 64 + (uint32_t)(P->p[0] - '0') * 8 + (uint32_t)(P->p[1] - '0'); /* three octal digits */
        if (v > 0377) return pm_errf(P->e, PM_EINVAL, "the octal escape at byte %d is above \\377", off);
        P->p += 2;
        *cp = v;
        return 0;
    }
    if (c >= '1' && c <= '9')
        return pm_errf(P->e, PM_EUNSUPPORTED, "a back-reference (\\%c at byte %d) is not supported", c, off);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return pm_errf(P->e, PM_EINVAL, "bad escape \\%c at byte %d", c, off);
    *cp = (uint32_t)c; /* escaped punctuation, space, a digit-free symbol: itself */
    return 0;
}

/* ---- grammar ---- */

static int parse_alt(parser *P);

/* A class after its '['. */
static int parse_class(parser *P) {
    int open = at(P) - 1;
    rx_set *s;
    int n = set_node(P, &s);
    if (n < 0) return n;
    int neg = P->p < P->end && *P->p == '^';
    if (neg) P->p++;
    for (int first = 1;; first = 0) {
        if (P->p == P->end) return pm_errf(P->e, PM_EINVAL, "the class opened at byte %d is never closed", open);
        if (*P->p == ']' && (!first || P->ecma)) { /* ECMAScript: "[]" matches nothing, "[^]" any character */
            P->p++;
            break;
        }
        uint32_t lo, hi;
        int cls = 0, item = at(P);
        if (*P->p == '\\') {
            P->p++;
            if (escape(P, 1, &lo, &cls)) return P->e->code;
        } else if (utf8(P, &lo))
            return P->e->code;
        if (cls) {
            if (set_class(s, cls, P->ecma)) return oom(P);
            if (P->p + 1 < P->end && *P->p == '-' && P->p[1] != ']')
                return pm_errf(P->e, PM_EINVAL, "a range from a class escape at byte %d", item);
            continue;
        }
        hi = lo;
        if (P->p + 1 < P->end && *P->p == '-' && P->p[1] != ']') { /* a range; a '-' before ']' is literal */
            P->p++;
            if (*P->p == '\\') {
                P->p++;
                if (escape(P, 1, &hi, &cls)) return P->e->code;
                if (cls) return pm_errf(P->e, PM_EINVAL, "a range to a class escape at byte %d", item);
            } else if (utf8(P, &hi))
                return P->e->code;
            if (hi < lo) return pm_errf(P->e, PM_EINVAL, "a bad character range at byte %d (its end comes before its start)", item);
        }
        if (set_add(s, lo, hi)) return oom(P);
    }
    if (P->icase && case_close(s)) return oom(P); /* before the negation: [^a] takes neither a nor A */
    if (neg && set_negate(s)) return oom(P);
    set_normalize(s);
    return n;
}

/* A decimal count at P->p (at most PM_REGEX_MAX_REPEAT + 1, to report); -1 when none. */
static int count(parser *P) {
    int v = -1;
    while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (*P->p++ - '0');
        if (v > PM_REGEX_MAX_REPEAT) v = PM_REGEX_MAX_REPEAT + 1;
    }
    return v;
}

/* A quantifier at P->p into min / max: 1 when one stands there, 0 when none (a '{' that makes no
 * count is left for a literal, as Python does). */
static int quantifier(parser *P, int *min, int *max) {
    if (P->p == P->end) return 0;
    switch (*P->p) {
    case '*': *min = 0, *max = -1, P->p++; return 1;
    case '+': *min = 1, *max = -1, P->p++; return 1;
    case '?': *min = 0, *max = 1, P->p++; return 1;
    case '{': break;
    default: return 0;
    }
    const unsigned char *save = P->p++;
    int lo = count(P), hi = lo;
    if (P->p < P->end && *P->p == ',') {
        P->p++;
        hi = count(P);
        if (lo < 0) lo = 0;
    } else if (lo < 0)
        hi = -2; /* "{}" or "{x": no count */
    if (hi == -2 || P->p == P->end || *P->p != '}') {
        P->p = save;
        return 0;
    }
    P->p++;
    *min = lo;
    *max = hi;
    return 1;
}

/* Inline flags after "(?" (P->p at the '?'): i (ASCII letters either case) and s (`.` takes line
 * ends too) on, or off after '-'; m changes nothing here (anchors stand only at the pattern's ends).
 * "(?flags:" leaves P->p inside the group with its flags set (0: parse it as a group); "(?flags)"
 * at the pattern's very start sets them for the whole of it (1: nothing to parse). Python's rules:
 * a flag not both on and off, at least one after '-', global flags only at the start (and not in
 * ECMAScript, which has only the scoped form). */
static int inline_flags(parser *P, int start) {
    int on = 1, seen = 0, icase = P->icase, dotall = P->dotall;
    for (P->p++; P->p < P->end && *P->p != ':' && *P->p != ')'; P->p++) {
        int c = *P->p;
        if (c == '-' && on) {
            on = 0;
            continue;
        }
        if (c != 'i' && c != 's' && c != 'm')
            return pm_errf(P->e, strchr("axuL", c) ? PM_EUNSUPPORTED : PM_EINVAL,
                           "the inline flag '%c' at byte %d is not supported (only i, s and m)", c, at(P));
        int bit = c == 'i' ? 1 : c == 's' ? 2 : 4;
        if (seen & (bit << (on ? 3 : 0)))
            return pm_errf(P->e, PM_EINVAL, "the inline flag '%c' at byte %d is turned both on and off", c, at(P));
        seen |= bit << (on ? 0 : 3);
        if (c == 'i') icase = on;
        if (c == 's') dotall = on;
    }
    if (P->p == P->end) return pm_errf(P->e, PM_EINVAL, "the flags group at byte %d is never closed", start);
    if (!on && !(seen >> 3)) return pm_errf(P->e, PM_EINVAL, "the flags group at byte %d turns nothing off after '-'", start);
    P->icase = icase, P->dotall = dotall;
    if (*P->p++ == ':') return 0;
    if (start != (int)(P->top - P->s) || P->ecma || !on)
        return pm_errf(P->e, PM_EINVAL, "the global flags at byte %d must stand at the pattern's start%s", start,
                       P->ecma ? " (and ECMAScript has only the scoped form, (?i:...))" : !on ? " and turn flags on" : "");
    P->top = P->p;
    return 1;
}

/* An atom and its quantifier. */
static int parse_repeat(parser *P) {
    int start = at(P), a = -1;
    if (P->p == P->end) return node(P, RX_EMPTY, -1, -1);
    unsigned c = *P->p;
    int qmin, qmax;
    if (c == '*' || c == '+' || c == '?') return pm_errf(P->e, PM_EINVAL, "nothing to repeat at byte %d", start);
    if (c == '{') {
        if (quantifier(P, &qmin, &qmax)) return pm_errf(P->e, PM_EINVAL, "nothing to repeat at byte %d", start);
        P->p++;
        a = literal(P, '{');
    } else if (c == '(') {
        int icase = P->icase, dotall = P->dotall; /* a scoped group's flags end with it */
        P->p++;
        if (P->p < P->end && *P->p == '?') {
            const unsigned char *q = P->p + 1;
            if (q < P->end && *q == ':') P->p += 2;
            else if (q < P->end && (*q == '<' || (*q == 'P' && q + 1 < P->end && q[1] == '<')) &&
                     !(*q == '<' && q + 1 < P->end && (q[1] == '=' || q[1] == '!'))) { /* a named group: its name skipped */
                const unsigned char *g = memchr(q, '>', (size_t)(P->end - q));
                if (!g) return pm_errf(P->e, PM_EINVAL, "the group name at byte %d is never closed", start);
                P->p = g + 1;
            } else if (q < P->end && (*q == '=' || *q == '!' || *q == '<'))
                return pm_errf(P->e, PM_EUNSUPPORTED, "lookaround (the group at byte %d) is not supported", start);
            else if (q < P->end && *q && strchr("imsaxuL-", *q)) {
                int global = inline_flags(P, start);
                if (global != 0) return global < 0 ? P->e->code : node(P, RX_EMPTY, -1, -1);
            } else
                return pm_errf(P->e, PM_EUNSUPPORTED,
                               "the group construct at byte %d (a named back-reference, a comment, a conditional...) is not supported",
                               start);
        }
        if (++P->depth > MAX_DEPTH) return pm_errf(P->e, PM_EINVAL, "groups nest more than %d deep at byte %d", MAX_DEPTH, start);
        a = parse_alt(P);
        P->icase = icase, P->dotall = dotall;
        P->depth--;
        if (a < 0) return a;
        if (P->p == P->end || *P->p != ')') return pm_errf(P->e, PM_EINVAL, "the group opened at byte %d is never closed", start);
        P->p++;
    } else if (c == '[') {
        P->p++;
        a = parse_class(P);
    } else if (c == '.') {
        rx_set *s;
        P->p++;
        a = set_node(P, &s); /* any character but a line end: \n (ECMAScript: \r, U+2028, U+2029 too); flag s: any */
        if (a >= 0 && P->dotall && set_add(s, 0, MAX_CP)) return oom(P);
        if (a >= 0 && !P->dotall &&
            (set_add(s, '\n', '\n') || (P->ecma && (set_add(s, '\r', '\r') || set_add(s, 0x2028, 0x2029))) || set_negate(s)))
            return oom(P);
    } else if (c == '^' || c == '$') {
        int edge = c == '^' ? P->p == P->top : P->p + 1 == P->end;
        if (!edge)
            return pm_errf(P->e, PM_EUNSUPPORTED,
                           "the anchor '%c' at byte %d is not supported there: the whole output matches the pattern, so anchors "
                           "may stand only at its very start (^) or end ($)",
                           c, start);
        P->p++;
        *(c == '^' ? &P->t->anchor_start : &P->t->anchor_end) = 1;
        return node(P, RX_EMPTY, -1, -1); /* and no quantifier: one would repeat nothing */
    } else if (c == '\\') {
        P->p++;
        if (P->p < P->end && (*P->p == 'A' || *P->p == 'Z')) {
            int edge = *P->p == 'A' ? start == (int)(P->top - P->s) : P->p + 1 == P->end;
            if (!edge)
                return pm_errf(P->e, PM_EUNSUPPORTED, "the anchor \\%c at byte %d is not supported there (only at the pattern's %s)",
                               *P->p, start, *P->p == 'A' ? "start" : "end");
            *(*P->p == 'A' ? &P->t->anchor_start : &P->t->anchor_end) = 1;
            P->p++;
            return node(P, RX_EMPTY, -1, -1);
        }
        uint32_t cp;
        int cls;
        if (escape(P, 0, &cp, &cls)) return P->e->code;
        if (cls) {
            rx_set *s;
            a = set_node(P, &s);
            if (a >= 0 && set_class(s, cls, P->ecma)) return oom(P);
            if (a >= 0) set_normalize(s);
        } else
            a = literal(P, cp);
    } else {
        uint32_t cp;
        if (utf8(P, &cp)) return P->e->code;
        a = literal(P, cp);
    }
    if (a < 0) return a;
    int q = at(P);
    if (!quantifier(P, &qmin, &qmax)) return a;
    if (qmin > PM_REGEX_MAX_REPEAT || qmax > PM_REGEX_MAX_REPEAT)
        return pm_errf(P->e, PM_EUNSUPPORTED, "the count at byte %d is above %d", q, PM_REGEX_MAX_REPEAT);
    if (qmax >= 0 && qmax < qmin) return pm_errf(P->e, PM_EINVAL, "the count at byte %d has its maximum below its minimum", q);
    if (P->p < P->end && *P->p == '?') P->p++; /* lazy: the same whole matches */
    else if (P->p < P->end && *P->p == '+')
        return pm_errf(P->e, PM_EUNSUPPORTED, "a possessive quantifier (at byte %d) is not supported", q);
    int m1, m2;
    const unsigned char *save = P->p;
    if (quantifier(P, &m1, &m2)) return pm_errf(P->e, PM_EINVAL, "multiple repeat at byte %d", (int)(save - P->s));
    int r = node(P, RX_REP, a, -1);
    if (r >= 0) P->t->nodes[r].min = qmin, P->t->nodes[r].max = qmax;
    return r;
}

static int parse_cat(parser *P) {
    int left = -1;
    while (P->p < P->end && *P->p != '|' && *P->p != ')') {
        int r = parse_repeat(P);
        if (r < 0) return r;
        left = left < 0 ? r : node(P, RX_CAT, left, r);
        if (left < 0) return left;
    }
    return left < 0 ? node(P, RX_EMPTY, -1, -1) : left;
}

static int parse_alt(parser *P) {
    int left = parse_cat(P);
    while (left >= 0 && P->p < P->end && *P->p == '|') {
        if (!P->depth) P->t->top_alt = 1;
        P->p++;
        int r = parse_cat(P);
        if (r < 0) return r;
        left = node(P, RX_ALT, left, r);
    }
    return left;
}

int rx_parse(const char *pattern, size_t len, int flags, rx_tree *t, pm_err *e) {
    if (len > PM_REGEX_MAX_PATTERN) return pm_errf(e, PM_EINVAL, "the pattern is longer than %d bytes", PM_REGEX_MAX_PATTERN);
    parser P = {(const unsigned char *)pattern, (const unsigned char *)pattern, (const unsigned char *)pattern + len, t, 0,
                !!(flags & PM_REGEX_ECMA), e, 0, 0, (const unsigned char *)pattern};
    int root = parse_alt(&P);
    if (root < 0) return e->code ? e->code : pm_errf(e, PM_EINVAL, "the pattern could not be read");
    if (P.p != P.end) return pm_errf(e, PM_EINVAL, "unbalanced parenthesis at byte %d", at(&P));
    for (int i = 0; (flags & PM_REGEX_JSON_TEXT) && i < t->n_sets; i++) /* what a JSON string writes only as \u */
        if (set_remove(&t->sets[i], 0x00, 0x07) || set_remove(&t->sets[i], 0x0B, 0x0B) || set_remove(&t->sets[i], 0x0E, 0x1F))
            return pm_errf(e, PM_ENOMEM, "out of memory for the regular expression");
    t->root = root;
    return PM_OK;
}
