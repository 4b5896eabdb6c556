/* grammar_lark.c — Lark's grammar notation (which vLLM's guided_grammar takes besides GBNF, and
 * OpenAI's grammars for custom tools are written in) read into the tree grammar_parse.c lowers
 * (grammar_tree.h).
 *
 * Rules are `name: ...` (lower case; the tree-shaping marks ?name, !name, _name and aliases `-> x`
 * change nothing here), terminals `NAME: ...` (upper case; they name terminals only); items are
 * "literals" (flag i: either case), /patterns/ (Python's re as regex.h reads it; flags i, s, and m
 * and u which change nothing here), "a".."z" ranges, names, ( groups ), [ optional ], and one of
 * ? * + ~n ~n..m after an item. `%import common.NAME [-> ALIAS]` and `%import common (A, B)` take
 * Lark's common terminals (below); `%ignore` items may stand before every terminal of a rule and at
 * the end. `//` and `#` comment to the end of the line; a definition goes on past its line with a
 * line that begins with `|`. The whole output is a `start`.
 *
 * The answer is held to the grammar's language read character by character, as Lark's Earley parser
 * with lexer='dynamic_complete' reads it; Lark's standard lexer, which takes the longest token
 * first, may read some of those answers differently (two names with no space between them).
 * Each /pattern/ is a group of its own: `T: /x|yz/ "-"` is (x|yz)-, where Lark 1.1.5 joins the
 * pieces of a terminal as they are written (x|yz-). Refused, naming the byte: templates (name{x}),
 * %declare, %override, %extend, imports from other than `common`, patterns with the flags l or x or
 * with anchors, more than one operator on an item. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_tree.h"
#include "engine/regex_internal.h"

/* Lark's common.lark, its terminals' languages: those built on lazy patterns and look-behind
 * (ESCAPED_STRING, C_COMMENT) written as the tokens the standard lexer takes (a string ends at its
 * first unescaped quote, a comment at its first star-slash). */
static const char common_lark[] =
    "DIGIT: \"0\"..\"9\"\n"
    "HEXDIGIT: \"a\"..\"f\" | \"A\"..\"F\" | DIGIT\n"
    "INT: DIGIT+\n"
    "SIGNED_INT: [\"+\" | \"-\"] INT\n"
    "DECIMAL: INT \".\" INT? | \".\" INT\n"
    "_EXP: (\"e\" | \"E\") SIGNED_INT\n"
    "FLOAT: INT _EXP | DECIMAL _EXP?\n"
    "SIGNED_FLOAT: [\"+\" | \"-\"] FLOAT\n"
    "NUMBER: FLOAT | INT\n"
    "SIGNED_NUMBER: [\"+\" | \"-\"] NUMBER\n"
    "ESCAPED_STRING: /\"(?:[^\"\\\\\\n]|\\\\.)*\"/\n"
    "LCASE_LETTER: \"a\"..\"z\"\n"
    "UCASE_LETTER: \"A\"..\"Z\"\n"
    "LETTER: UCASE_LETTER | LCASE_LETTER\n"
    "WORD: LETTER+\n"
    "CNAME: (\"_\" | LETTER) (\"_\" | LETTER | DIGIT)*\n"
    "WS_INLINE: (\" \" | /\\t/)+\n"
    "WS: /[ \\t\\f\\r\\n]/+\n"
    "CR: /\\r/\n"
    "LF: /\\n/\n"
    "NEWLINE: (CR? LF)+\n"
    "SH_COMMENT: /#[^\\n]*/\n"
    "CPP_COMMENT: /\\/\\/[^\\n]*/\n"
    "C_COMMENT: /\\/\\*(?:[^*]|\\*+[^*\\/])*\\*+\\//\n"
    "SQL_COMMENT: /--[^\\n]*/\n";

enum { MAX_NAME = 128 };

typedef struct lark {
    gp *P;
    int ignored;     /* the rule "(ignored)": %ignore's items, any number of them */
    int ignore_alt;  /* their alternation (a node) */
    int common_read; /* common_lark read into the tree, its names prefixed "common." */
    const char *prefix; /* the prefix of the names being defined and named ("common." or "") */
    int in_term;     /* reading a terminal's definition (or %ignore): names name terminals, no ignored items */
} lark;

static int is_word(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }
static int peek(const gp *P) { return P->p < P->len ? (unsigned char)P->s[P->p] : -1; }

/* Spaces, comments (// and #) and a backslash that ends a line; line ends too when newline_ok. */
static void skip_space(gp *P, int newline_ok) {
    while (P->p < P->len) {
        char c = P->s[P->p];
        if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) P->p++;
        else if (c == '\\' && P->p + 1 < P->len && P->s[P->p + 1] == '\n') P->p += 2;
        else if (c == '#' || (c == '/' && P->p + 1 < P->len && P->s[P->p + 1] == '/'))
            while (P->p < P->len && P->s[P->p] != '\n') P->p++;
        else break;
    }
}

/* A name at P->p (letters, digits, _) into buf with the prefix; its length, 0 when none. */
static size_t read_name(lark *L, char *buf) {
    gp *P = L->P;
    size_t s = P->p, pre = strlen(L->prefix);
    while (is_word(peek(P))) P->p++;
    size_t n = P->p - s;
    if (!n) return 0;
    if (pre + n >= MAX_NAME) return gp_fail(P, s, "a name longer than %d bytes", MAX_NAME - 1), 0;
    memcpy(buf, L->prefix, pre);
    memcpy(buf + pre, P->s + s, n);
    buf[pre + n] = 0;
    return pre + n;
}

/* A terminal's name: upper case after any leading underscores. */
static int is_terminal_name(const char *name) {
    const char *dot = strrchr(name, '.');
    for (name = dot ? dot + 1 : name; *name == '_'; name++) {}
    return *name >= 'A' && *name <= 'Z';
}

/* item in a rule: the ignored items may come before it (a token of the rule). */
static int token(lark *L, int item) {
    if (L->in_term) return item;
    int seq = gp_node(L->P, A_SEQ), ign = seq < 0 ? seq : gp_node(L->P, A_REF);
    if (ign < 0) return ign;
    L->P->nodes[ign].ref = L->ignored;
    L->P->nodes[seq].at = L->P->nodes[ign].at = L->P->nodes[item].at;
    return gp_push(L->P, seq, ign) || gp_push(L->P, seq, item) ? L->P->e->code : seq;
}

/* "..." after its quote (flag i after it), or a range "a".."z". */
static int literal(lark *L) {
    gp *P = L->P;
    size_t at = P->p++;
    int node = gp_node(P, A_LIT);
    if (node < 0) return node;
    P->nodes[node].at = at;
    while (peek(P) != '"') {
        uint32_t cp;
        if (peek(P) < 0 || peek(P) == '\n') return gp_fail(P, at, "unterminated literal");
        if (gp_char(P, &cp) || gp_push(P, node, (int32_t)cp)) return P->e->code;
    }
    P->p++;
    if (peek(P) == 'i' && !(P->p + 1 < P->len && is_word((unsigned char)P->s[P->p + 1]))) {
        P->nodes[node].flags |= A_ICASE;
        P->p++;
    }
    size_t back = P->p;
    skip_space(P, 0);
    if (!(P->len - P->p >= 2 && !memcmp(P->s + P->p, "..", 2))) {
        P->p = back;
        return node;
    }
    P->p += 2;
    skip_space(P, 0);
    if (peek(P) != '"') return gp_fail(P, P->p, "expected a literal after '..'");
    int hi = literal(L);
    if (hi < 0) return hi;
    const a_node *a = &P->nodes[node], *b = &P->nodes[hi];
    if (a->n != 1 || b->n != 1 || a->flags || b->flags) return gp_fail(P, at, "a range \"a\"..\"z\" is between two single characters");
    if (b->v[0] < a->v[0]) return gp_fail(P, at, "the range's end comes before its start");
    int cls = gp_node(P, A_CLASS);
    if (cls < 0 || gp_push(P, cls, P->nodes[node].v[0]) || gp_push(P, cls, P->nodes[hi].v[0])) return P->e->code;
    P->nodes[cls].at = at;
    return cls;
}

/* /pattern/flags after its slash: checked alone here, so that an error names its own byte. */
static int pattern(lark *L) {
    gp *P = L->P;
    size_t at = P->p++;
    int node = gp_node(P, A_RX);
    if (node < 0) return node;
    P->nodes[node].at = at;
    sbuf b = {0};
    for (;;) {
        int c = peek(P);
        if (c < 0 || c == '\n') {
            free(b.s);
            return gp_fail(P, at, "unterminated pattern");
        }
        P->p++;
        if (c == '/') break;
        if (c == '\\' && peek(P) == '/') { /* \/ is a slash */
            gp_sb_put(&b, "/", 1);
            P->p++;
        } else if (c == '\\' && peek(P) >= 0 && peek(P) != '\n') {
            gp_sb_put(&b, P->s + P->p - 1, 2);
            P->p++;
        } else
            gp_sb_put(&b, P->s + P->p - 1, 1);
    }
    P->nodes[node].rx = b.s ? b.s : calloc(1, 1);
    P->nodes[node].rx_len = b.n;
    if (b.oom || !P->nodes[node].rx) return gp_oom(P);
    for (; is_word(peek(P)); P->p++) {
        int f = peek(P);
        if (f == 'i') P->nodes[node].flags |= A_ICASE;
        else if (f == 's') P->nodes[node].flags |= A_DOTALL;
        else if (f != 'm' && f != 'u') return gp_fail(P, P->p, "the pattern flag '%c' is not supported (i, s, m, u are)", f);
    }
    rx_tree t = {0};
    pm_err pe = {0};
    int rc = rx_parse(P->nodes[node].rx, b.n, 0, &t, &pe), anchored = t.anchor_start || t.anchor_end;
    rx_tree_free(&t);
    if (rc == PM_ENOMEM) return gp_oom(P);
    if (rc) return pm_errf(P->e, rc, "grammar: the pattern at byte %zu: %s", at, pe.msg);
    if (anchored) return pm_errf(P->e, PM_EUNSUPPORTED, "grammar: the pattern at byte %zu has an anchor (^ or $): a terminal is matched where it stands", at);
    return node;
}

static int expansions(lark *L, int nested, int depth);

/* A name: a rule or a terminal (in a terminal's definition, a terminal only). */
static int name_item(lark *L) {
    gp *P = L->P;
    size_t at = P->p;
    char name[MAX_NAME];
    size_t n = read_name(L, name);
    if (!n) return P->e->code ? P->e->code : gp_fail(P, at, "expected a name");
    if (peek(P) == '{') return pm_errf(P->e, PM_EUNSUPPORTED, "grammar: templates (%s{...} at byte %zu) are not read", name, at);
    if (L->in_term && !is_terminal_name(name))
        return gp_fail(P, at, "a terminal names rule '%s' (terminals are made of literals, patterns and terminals)", name);
    int r = gp_rule(P, name, n, at), node = r < 0 ? r : gp_node(P, A_REF);
    if (node < 0) return P->e->code;
    P->nodes[node].ref = r;
    P->nodes[node].at = at;
    return is_terminal_name(name) ? token(L, node) : node;
}

/* An atom and its operator. */
static int item(lark *L, int nested, int depth) {
    gp *P = L->P;
    size_t at = P->p;
    int c = peek(P), node;
    if (c == '(' || c == '[') {
        if (depth >= MAX_DEPTH) return gp_fail(P, at, "groups nested deeper than %d", MAX_DEPTH);
        P->p++;
        skip_space(P, 1);
        if ((node = expansions(L, 1, depth + 1)) < 0) return node;
        skip_space(P, 1);
        if (peek(P) != (c == '(' ? ')' : ']')) return gp_fail(P, P->p, "expected '%c' closing the group at byte %zu", c == '(' ? ')' : ']', at);
        P->p++;
        if (c == '[') { /* optional */
            int rep = gp_node(P, A_REP);
            if (rep < 0 || gp_push(P, rep, node)) return P->e->code;
            P->nodes[rep].min = 0, P->nodes[rep].max = 1, P->nodes[rep].at = at;
            node = rep;
        }
    } else if (c == '"') {
        if ((node = literal(L)) < 0) return node;
        node = token(L, node);
    } else if (c == '/') {
        if ((node = pattern(L)) < 0) return node;
        node = token(L, node);
    } else if (is_word(c)) {
        node = name_item(L);
    } else
        return gp_fail(P, at, c < 0 ? "expected an item, found the end" : "unexpected '%c'", c);
    if (node < 0) return node;
    skip_space(P, nested);
    c = peek(P);
    size_t op = P->p;
    int min, max;
    if (c == '*' || c == '+' || c == '?') {
        P->p++;
        min = c == '+', max = c == '?' ? 1 : -1;
    } else if (c == '~') {
        P->p++;
        skip_space(P, nested);
        long a = -1, b;
        for (; peek(P) >= '0' && peek(P) <= '9' && a <= PM_GRAMMAR_MAX_REPEAT; P->p++) a = (a < 0 ? 0 : a * 10) + (peek(P) - '0');
        if (a < 0) return gp_fail(P, op, "expected a count after '~'");
        b = a;
        skip_space(P, nested);
        if (P->len - P->p >= 2 && !memcmp(P->s + P->p, "..", 2)) {
            P->p += 2;
            skip_space(P, nested);
            for (b = -1; peek(P) >= '0' && peek(P) <= '9' && b <= PM_GRAMMAR_MAX_REPEAT; P->p++) b = (b < 0 ? 0 : b * 10) + (peek(P) - '0');
            if (b < 0) return gp_fail(P, op, "expected a count after '..'");
        }
        if (a > PM_GRAMMAR_MAX_REPEAT || b > PM_GRAMMAR_MAX_REPEAT) return gp_fail(P, op, "a count above %d", PM_GRAMMAR_MAX_REPEAT);
        if (b < a) return gp_fail(P, op, "~%ld..%ld: the larger count second", a, b);
        min = (int)a, max = (int)b;
    } else
        return node;
    int rep = gp_node(P, A_REP);
    if (rep < 0 || gp_push(P, rep, node)) return P->e->code;
    P->nodes[rep].min = min, P->nodes[rep].max = max, P->nodes[rep].at = op;
    skip_space(P, nested);
    c = peek(P);
    if (c == '*' || c == '+' || c == '?' || c == '~')
        return gp_fail(P, P->p, "a second operator on one item (Lark takes one: group it, (x+)?)");
    return rep;
}

/* Items up to '|', a closing bracket, the end, or (outside groups) the end of the line; an alias
 * (-> name) after them is skipped. */
static int expansion(lark *L, int nested, int depth) {
    gp *P = L->P;
    int seq = gp_node(P, A_SEQ);
    if (seq < 0) return seq;
    for (;;) {
        skip_space(P, nested);
        int c = peek(P);
        if (c < 0 || c == '|' || c == ')' || c == ']' || c == '\n' || c == '\r') return seq;
        if (c == '-' && P->p + 1 < P->len && P->s[P->p + 1] == '>') {
            P->p += 2;
            skip_space(P, 0);
            char name[MAX_NAME];
            if (!read_name(L, name)) return P->e->code ? P->e->code : gp_fail(P, P->p, "expected an alias's name after '->'");
            continue;
        }
        int it = item(L, nested, depth);
        if (it < 0 || gp_push(P, seq, it)) return P->e->code;
    }
}

static int expansions(lark *L, int nested, int depth) {
    gp *P = L->P;
    int alt = gp_node(P, A_ALT);
    if (alt < 0) return alt;
    for (;;) {
        int seq = expansion(L, nested, depth);
        if (seq < 0 || gp_push(P, alt, seq)) return P->e->code;
        if (!gp_next_alternative(P, nested, skip_space)) return alt;
    }
}

/* The line ends here (or the text does). */
static int line_end(gp *P, const char *what) {
    skip_space(P, 0);
    int c = peek(P);
    if (c < 0 || c == '\n' || c == '\r') return PM_OK;
    return gp_fail(P, P->p, c == ')' || c == ']' ? "'%c' without its opening bracket" : "unexpected '%c' after %s", c, what);
}

static int definition(lark *L) {
    gp *P = L->P;
    size_t at = P->p;
    while (peek(P) == '?' || peek(P) == '!') P->p++;
    char name[MAX_NAME];
    size_t n = read_name(L, name);
    if (!n) return P->e->code ? P->e->code : gp_fail(P, at, "expected a rule or terminal name");
    if (peek(P) == '{') return pm_errf(P->e, PM_EUNSUPPORTED, "grammar: templates (%s{...} at byte %zu) are not read", name, at);
    if (peek(P) == '.') { /* a priority: the lexer's and the parser's choice, no change in the language */
        P->p++;
        if (peek(P) == '-' || peek(P) == '+') P->p++;
        if (!(peek(P) >= '0' && peek(P) <= '9')) return gp_fail(P, P->p, "expected a priority after '%s.'", name);
        while (peek(P) >= '0' && peek(P) <= '9') P->p++;
    }
    skip_space(P, 0);
    if (peek(P) != ':') return gp_fail(P, P->p, "expected ':' after '%s'", name);
    P->p++;
    int r = gp_rule(P, name, n, at);
    if (r < 0) return r;
    if (P->rules[r].body >= 0) return gp_fail(P, at, "'%s' is defined twice (first at byte %zu)", name, P->rules[r].def_at);
    L->in_term = is_terminal_name(name);
    skip_space(P, 0);
    int body = expansions(L, 0, 0);
    L->in_term = 0;
    if (body < 0) return body;
    P->rules[r].body = body;
    P->rules[r].def_at = at;
    return line_end(P, "the definition");
}

static int read_text(lark *L);

/* %import common.NAME [-> ALIAS] and %import common (NAME, ...): NAME (or ALIAS) defined as
 * common's NAME. */
static int import(lark *L) {
    gp *P = L->P;
    size_t at = P->p;
    skip_space(P, 0);
    if (!(P->len - P->p > 6 && !memcmp(P->s + P->p, "common", 6) && strchr(". \t(", P->s[P->p + 6]) && P->s[P->p + 6]))
        return pm_errf(P->e, PM_EUNSUPPORTED, "grammar: %%import at byte %zu: only Lark's `common` terminals can be imported", at);
    P->p += 6;
    if (!L->common_read) { /* once, its names under "common." */
        const char *s = P->s;
        size_t len = P->len, p = P->p;
        P->s = common_lark, P->len = sizeof common_lark - 1, P->p = 0;
        L->prefix = "common.";
        int rc = read_text(L);
        L->prefix = "";
        P->s = s, P->len = len, P->p = p;
        if (rc) return rc;
        L->common_read = 1;
    }
    int many = 0;
    skip_space(P, 0);
    if (peek(P) == '.') P->p++;
    else if (peek(P) == '(') P->p++, many = 1;
    else return gp_fail(P, P->p, "expected '.' or '(' after %%import common");
    for (;;) {
        skip_space(P, 0);
        char name[MAX_NAME], full[MAX_NAME + 8];
        size_t nat = P->p, n = read_name(L, name);
        if (!n) return P->e->code ? P->e->code : gp_fail(P, nat, "expected a name to import");
        snprintf(full, sizeof full, "common.%s", name);
        int from = gp_rule(P, full, strlen(full), nat);
        if (from < 0) return from;
        if (P->rules[from].body < 0) return gp_fail(P, nat, "Lark's common terminals have no '%s'", name);
        skip_space(P, 0);
        if (!many && P->len - P->p >= 2 && !memcmp(P->s + P->p, "->", 2)) {
            P->p += 2;
            skip_space(P, 0);
            nat = P->p;
            if (!(n = read_name(L, name))) return P->e->code ? P->e->code : gp_fail(P, nat, "expected a name after '->'");
        }
        int r = gp_rule(P, name, n, nat);
        if (r < 0) return r;
        if (P->rules[r].body >= 0) return gp_fail(P, nat, "'%s' is defined twice (first at byte %zu)", name, P->rules[r].def_at);
        int seq = gp_node(P, A_SEQ), ref = seq < 0 ? seq : gp_node(P, A_REF), alt = ref < 0 ? ref : gp_node(P, A_ALT);
        if (alt < 0 || gp_push(P, seq, ref) || gp_push(P, alt, seq)) return P->e->code;
        P->nodes[ref].ref = from;
        P->rules[r].body = alt;
        P->rules[r].def_at = nat;
        skip_space(P, 0);
        if (!many) return line_end(P, "the import");
        if (peek(P) == ')') {
            P->p++;
            return line_end(P, "the import");
        }
        if (peek(P) != ',') return gp_fail(P, P->p, "expected ',' or ')' in the import list");
        P->p++;
    }
}

static int directive(lark *L) {
    gp *P = L->P;
    size_t at = P->p++;
    size_t s = P->p;
    while (is_word(peek(P))) P->p++;
    size_t n = P->p - s;
    if (n == 6 && !memcmp(P->s + s, "import", 6)) return import(L);
    if (n == 6 && !memcmp(P->s + s, "ignore", 6)) {
        skip_space(P, 0);
        L->in_term = 1;
        int body = expansions(L, 0, 0);
        L->in_term = 0;
        if (body < 0 || gp_push(P, L->ignore_alt, body)) return P->e->code;
        return line_end(P, "%ignore's items");
    }
    if ((n == 7 && !memcmp(P->s + s, "declare", 7)) || (n == 8 && !memcmp(P->s + s, "override", 8)) || (n == 6 && !memcmp(P->s + s, "extend", 6)))
        return pm_errf(P->e, PM_EUNSUPPORTED, "grammar: %%%.*s at byte %zu is not read (a grammar of its own text only)", (int)n, P->s + s, at);
    return gp_fail(P, at, "unknown directive '%%%.*s'", (int)n, P->s + s);
}

static int read_text(lark *L) {
    gp *P = L->P;
    for (;;) {
        skip_space(P, 1);
        if (P->p >= P->len) return PM_OK;
        if (peek(P) == '%' ? directive(L) : definition(L)) return P->e->code;
    }
}

int gp_read_lark(gp *P) {
    lark L = {.P = P, .prefix = ""};
    L.ignored = gp_rule(P, "(ignored)", 9, 0);
    if (L.ignored < 0 || (L.ignore_alt = gp_node(P, A_ALT)) < 0 || read_text(&L)) return P->e->code;
    /* (ignored) ::= (%ignore's items)*, or nothing; (start) ::= start (ignored): what may end the text */
    int body = gp_node(P, A_REP), seq = gp_node(P, A_SEQ), alt = gp_node(P, A_ALT);
    if (alt < 0) return P->e->code;
    if (P->nodes[L.ignore_alt].n) {
        if (gp_push(P, body, L.ignore_alt)) return P->e->code;
        P->nodes[body].min = 0, P->nodes[body].max = -1;
    } else
        P->nodes[body].kind = A_SEQ;
    P->rules[L.ignored].body = body;
    int start = gp_rule(P, "start", 5, 0);
    if (start < 0) return start;
    if (P->rules[start].body < 0) return pm_errf(P->e, PM_EINVAL, "grammar: no rule 'start' (the whole output is a start)");
    int top = gp_rule(P, "(start)", 7, 0), a = top < 0 ? top : gp_node(P, A_REF), b = a < 0 ? a : gp_node(P, A_REF);
    if (b < 0) return P->e->code;
    P->nodes[a].ref = start, P->nodes[b].ref = L.ignored;
    if (gp_push(P, seq, a) || gp_push(P, seq, b) || gp_push(P, alt, seq)) return P->e->code;
    P->rules[top].body = alt;
    return PM_OK;
}
