/* json_schema.c — see json_schema.h. The nodes live in the schema's allocations; a schema object
 * compiles to one node (memoised, so that a recursive $ref closes a cycle instead of recursing). */
#include "json_schema.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/regex.h"

/* The nodes every schema shares: any value, and the concrete ones an any value becomes. */
static const pm_json_node any_node = {.kind = PM_JN_ANY};
static const pm_json_node any_object = {.kind = PM_JN_OBJECT, .extra = &any_node};
static const pm_json_node any_array = {.kind = PM_JN_ARRAY, .items = &any_node, .max_items = -1};
static const pm_json_node any_string = {.kind = PM_JN_STRING, .max_len = -1};
static const pm_json_node any_number = {.kind = PM_JN_NUMBER};
static const pm_json_node any_integer = {.kind = PM_JN_INTEGER};
static const pm_json_node any_bool = {.kind = PM_JN_BOOL};
static const pm_json_node any_null = {.kind = PM_JN_NULL};

const pm_json_node *pm_json_any(void) { return &any_node; }
const pm_json_node *pm_json_any_object(void) { return &any_object; }

int pm_json_class(unsigned c) {
    switch (c) {
    case '{': return PM_JC_OBJECT;
    case '[': return PM_JC_ARRAY;
    case '"': return PM_JC_STRING;
    case 't': case 'f': return PM_JC_BOOL;
    case 'n': return PM_JC_NULL;
    default: return c == '-' || (c >= '0' && c <= '9') ? PM_JC_NUMBER : -1;
    }
}

const pm_json_node *pm_json_resolve(const pm_json_node *n, unsigned c) {
    static const pm_json_node *const any_by_class[PM_JC_COUNT] = {&any_object, &any_array, &any_string, &any_number, &any_bool, &any_null};
    int cls = pm_json_class(c);
    if (cls < 0) return NULL;
    while (n && n->kind == PM_JN_UNION) n = n->alt[cls];
    if (!n || n->kind == PM_JN_ENUM) return n;
    if (n->kind == PM_JN_ANY) return any_by_class[cls];
    static const int class_of_kind[] = {[PM_JN_OBJECT] = PM_JC_OBJECT, [PM_JN_ARRAY] = PM_JC_ARRAY, [PM_JN_STRING] = PM_JC_STRING,
                                        [PM_JN_NUMBER] = PM_JC_NUMBER, [PM_JN_INTEGER] = PM_JC_NUMBER, [PM_JN_BOOL] = PM_JC_BOOL,
                                        [PM_JN_NULL] = PM_JC_NULL};
    return class_of_kind[n->kind] == cls ? n : NULL;
}

enum { MAX_NODES = 4096, MAX_PATH = 256, MAX_DEPTH = 128 };
/* many patterns, each within the regex engine's own limit, are still one request's compile (~0.4 s) */
#define PATTERN_WORK ((size_t)2 * PM_REGEX_MAX_WORK)

struct pm_json_schema {
    const pm_json_node *root;
    pm_regex **patterns; /* the strings' compiled patterns */
    int n_patterns;
    size_t pattern_work; /* their DFA builds together (pm_regex_work), against PATTERN_WORK */
    json_t *doc;
    void **allocs;       /* everything the nodes point to */
    int n_allocs, cap_allocs;
    size_t alloc_bytes;  /* their sizes together */
    json_t **memo_key;   /* schema objects compiled so far and their nodes */
    const pm_json_node **memo_node;
    int n_memo;
    int depth;           /* compile's recursion */
    pm_err *e;
};

static void *alloc(pm_json_schema *s, size_t n) {
    if (s->n_allocs == s->cap_allocs) {
        int cap = s->cap_allocs ? 2 * s->cap_allocs : 64;
        void **a = realloc(s->allocs, sizeof *a * (size_t)cap);
        if (!a) return pm_errf(s->e, PM_ENOMEM, "out of memory compiling a JSON schema"), NULL;
        s->allocs = a;
        s->cap_allocs = cap;
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) return pm_errf(s->e, PM_ENOMEM, "out of memory compiling a JSON schema"), NULL;
    s->alloc_bytes += n;
    return s->allocs[s->n_allocs++] = p;
}

static const pm_json_node *compile(pm_json_schema *s, json_t *v, const char *path);

static int pattern_room(pm_json_schema *s) {
    pm_regex **grown = realloc(s->patterns, sizeof *grown * (size_t)(s->n_patterns + 1));
    if (!grown) return pm_errf(s->e, PM_ENOMEM, "out of memory compiling a JSON schema");
    s->patterns = grown;
    return PM_OK;
}

/* The string formats held (JSON Schema's, RFC 3339 and the like), each as the part of it every
 * common validator takes: dates of years 0001-9999 and real days (no February 29), times with an
 * offset and at most 6 fraction digits (Python's datetime), an e-mail address of dot-separated
 * atoms and a domain with a letters-only top level, labels of at most 63 characters. Other
 * formats (uri-reference, iri, ...) stay annotations. */
#define FMT_YEAR "([1-9][0-9]{3}|0([1-9][0-9]{2}|0([1-9][0-9]|0[1-9])))"
#define FMT_DATE FMT_YEAR "-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
#define FMT_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define FMT_LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define FMT_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
/* IPv6: eight groups, or fewer around one "::" (no embedded IPv4, no zone) */
#define FMT_H16 "[0-9a-fA-F]{1,4}"
#define FMT_IPV6 "((" FMT_H16 ":){7}" FMT_H16 "|(" FMT_H16 ":){1,7}:|(" FMT_H16 ":){1,6}:" FMT_H16 "|(" FMT_H16 ":){1,5}(:" FMT_H16 "){1,2}|" \
                 "(" FMT_H16 ":){1,4}(:" FMT_H16 "){1,3}|(" FMT_H16 ":){1,3}(:" FMT_H16 "){1,4}|(" FMT_H16 ":){1,2}(:" FMT_H16 "){1,5}|" \
                 FMT_H16 ":(:" FMT_H16 "){1,6}|:((:" FMT_H16 "){1,7}|:))"
/* a URI: http(s) only, a host name with a dot and a letters-only top level or an IPv4 address, a
 * port, then path, query and fragment of RFC 3986's characters (a percent sign only as %XX) */
#define FMT_PCHAR "(%[0-9A-Fa-f]{2}|[A-Za-z0-9._~!$&'()*+,;=:@-])"
#define FMT_URI "https?://((" FMT_LABEL "\\.)+[A-Za-z]{2,63}|(" FMT_OCTET "\\.){3}" FMT_OCTET ")(:[0-9]{1,5})?(/" FMT_PCHAR "*)*" \
                "(\\?(" FMT_PCHAR "|[/?])*)?(#(" FMT_PCHAR "|[/?])*)?"
/* ISO 8601 durations: P, then years / months / days (or weeks), then T and hours / minutes /
 * seconds, at least one part in all and one after a T */
#define FMT_N "[0-9]+"
#define FMT_SECS FMT_N "(\\.[0-9]+)?S"
#define FMT_DPART "(" FMT_N "Y(" FMT_N "M)?(" FMT_N "D)?|" FMT_N "M(" FMT_N "D)?|" FMT_N "D|" FMT_N "W)"
#define FMT_TPART "T(" FMT_N "H(" FMT_N "M)?(" FMT_SECS ")?|" FMT_N "M(" FMT_SECS ")?|" FMT_SECS ")"
static const char *format_pattern(const char *format) {
    static const char *const formats[][2] = {
        {"date", "^" FMT_DATE "$"},
        {"time", "^" FMT_TIME "$"},
        {"date-time", "^" FMT_DATE "T" FMT_TIME "$"},
        {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
        {"ipv4", "^(" FMT_OCTET "\\.){3}" FMT_OCTET "$"},
        {"hostname", "^" FMT_LABEL "(\\." FMT_LABEL ")*$"},
        {"email", "^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@(" FMT_LABEL "\\.)+[A-Za-z]{2,63}$"},
        {"duration", "^P(" FMT_DPART "(" FMT_TPART ")?|" FMT_TPART ")$"},
        {"uri", "^" FMT_URI "$"},
        {"ipv6", "^" FMT_IPV6 "$"},
    };
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(format, formats[i][0])) return formats[i][1];
    return NULL;
}

/* A string's pattern (ECMAScript's, matched anywhere unless anchored: PM_REGEX_SEARCH) and its
 * format's (format_pattern; NULL: none), over what JSON mode lets a string hold (PM_REGEX_JSON_TEXT;
 * json_mode.c writes no \u escape in it), and its lengths (intersected in), so that every state of
 * it can still end within them. */
static int compile_pattern(pm_json_schema *s, json_t *pat, const char *format, pm_json_node *t, const char *path) {
    if (pat && !json_is_string(pat)) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: pattern must be a string", path);
    if (pattern_room(s)) return s->e->code;
    pm_regex *rx = NULL, *len = NULL, *both = NULL;
    pm_err pe = {0};
    const int flags = PM_REGEX_SEARCH | PM_REGEX_ECMA | PM_REGEX_JSON_TEXT;
    if (pat && pm_regex_compile_flags(json_string_value(pat), json_string_length(pat), flags, &rx, &pe))
        return pm_errf(s->e, pe.code, "JSON schema at %s: pattern: %s", path, pe.msg);
    const char *fp = format ? format_pattern(format) : NULL;
    if (fp) {
        pm_regex *fx = NULL;
        int rc = pm_regex_compile_flags(fp, strlen(fp), flags, &fx, &pe);
        if (!rc && rx) { /* both the pattern and the format */
            rc = pm_regex_intersect(rx, fx, &both, &pe);
            pm_regex_free(fx);
            fx = both;
            both = NULL;
        }
        pm_regex_free(rx);
        rx = fx;
        if (rc) {
            pm_regex_free(rx);
            return pm_errf(s->e, pe.code, "JSON schema at %s: format '%s'%s: %s", path, format, pat ? " beside its pattern" : "",
                           strstr(pe.msg, "no text") ? "no string is both" : pe.msg);
        }
    }
    if ((s->pattern_work += pm_regex_work(rx)) > PATTERN_WORK) {
        pm_regex_free(rx);
        return pm_errf(s->e, PM_EUNSUPPORTED, "JSON schema at %s: its patterns' automata take too long to build together (fewer or simpler "
                                              "patterns)", path);
    }
    if (t->min_len > 0 || t->max_len >= 0) { /* the lengths in the automaton too, or a string could run out of room for its match */
        char lp[64];
        if (t->min_len > PM_REGEX_MAX_REPEAT || t->max_len > PM_REGEX_MAX_REPEAT) {
            pm_regex_free(rx);
            return pm_errf(s->e, PM_EUNSUPPORTED, "JSON schema at %s: pattern beside a minLength / maxLength above %d is not supported", path,
                           PM_REGEX_MAX_REPEAT);
        }
        if (t->max_len >= 0) snprintf(lp, sizeof lp, "^[\\s\\S]{%d,%d}$", t->min_len, t->max_len);
        else snprintf(lp, sizeof lp, "^[\\s\\S]{%d,}$", t->min_len);
        int rc = pm_regex_compile_flags(lp, strlen(lp), flags, &len, &pe);
        if (!rc) rc = pm_regex_intersect(rx, len, &both, &pe);
        pm_regex_free(rx);
        pm_regex_free(len);
        if (rc)
            return pm_errf(s->e, pe.code, "JSON schema at %s: pattern with minLength %d / maxLength %d: %s", path, t->min_len, t->max_len,
                           strstr(pe.msg, "no text") ? "no string of the pattern has such a length" : pe.msg);
        rx = both;
    }
    s->patterns[s->n_patterns++] = rx;
    t->pattern = rx;
    return PM_OK;
}

/* A number's or an integer's bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum: numbers;
 * draft 4's boolean exclusives modify the plain ones; the tighter of two on a side) as the DFA of the
 * values between them, which JSON mode runs over the digits as it writes them: an integer's in JSON's
 * form (pm_regex_of_int_range), a number's without an exponent (pm_regex_number_range). */
static int compile_bounds(pm_json_schema *s, json_t *v, pm_json_node *t, int integer, const char *path) {
    static const char *const keys[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    double lo = 0, hi = 0;
    int has_lo = 0, has_hi = 0, lo_x = 0, hi_x = 0;
    int excl_min = json_is_true(json_object_get(v, "exclusiveMinimum")), excl_max = json_is_true(json_object_get(v, "exclusiveMaximum"));
    for (int i = 0; i < 4; i++) {
        json_t *x = json_object_get(v, keys[i]);
        if (!x || (json_is_boolean(x) && (i & 1))) continue;
        if (!json_is_number(x)) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: %s must be a number", path, keys[i]);
        double d = json_number_value(x);
        if (!(d >= -1e18 && d <= 1e18))
            return pm_errf(s->e, PM_EUNSUPPORTED, "JSON schema at %s: %s beyond +/-10^18 is not supported", path, keys[i]);
        int exclusive = (i & 1) || (i == 0 && excl_min) || (i == 2 && excl_max);
        if (i < 2 && (!has_lo || d > lo || (d == lo && exclusive))) lo = d, lo_x = exclusive, has_lo = 1;
        if (i >= 2 && (!has_hi || d < hi || (d == hi && exclusive))) hi = d, hi_x = exclusive, has_hi = 1;
    }
    json_t *mult = json_object_get(v, "multipleOf");
    if (mult && !(json_is_number(mult) && json_number_value(mult) > 0))
        return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: multipleOf must be a number above 0", path);
    pm_err pe = {0};
    pm_regex *rx = NULL, *mx = NULL;
    if (pattern_room(s)) return s->e->code;
    if (!has_lo && !has_hi) { /* multipleOf alone */
    } else if (integer) { /* the integers x >= lo (x > lo), x <= hi (x < hi) */
        long long a = lo_x ? (long long)floor(lo) + 1 : (long long)ceil(lo), b = hi_x ? (long long)ceil(hi) - 1 : (long long)floor(hi);
        char *text = pm_regex_of_int_range(a, has_lo, b, has_hi, &pe);
        if (text) pm_regex_compile(text, strlen(text), &rx, &pe);
        free(text);
    } else {
        pm_regex_number_range(lo, has_lo, lo_x, hi, has_hi, hi_x, &rx, &pe);
    }
    if ((has_lo || has_hi) && !rx)
        return pm_errf(s->e, pe.code, "JSON schema at %s: %s bounds: %s", path, integer ? "integer" : "number", pe.msg);
    if (mult) { /* the multiples, within the bounds when there are some */
        if (!pm_regex_multiples(json_number_value(mult), integer, &mx, &pe) && rx) {
            pm_regex *both = NULL;
            pm_regex_intersect(rx, mx, &both, &pe);
            if (!both && pe.code == PM_EINVAL) /* the product matches nothing */
                snprintf(pe.msg, sizeof pe.msg, "no multiple of %.17g lies within the bounds", json_number_value(mult));
            pm_regex_free(mx);
            mx = both;
        }
        pm_regex_free(rx);
        rx = mx;
        if (!rx) return pm_errf(s->e, pe.code, "JSON schema at %s: multipleOf: %s", path, pe.msg);
    }
    if ((s->pattern_work += pm_regex_work(rx)) > PATTERN_WORK) {
        pm_regex_free(rx);
        return pm_errf(s->e, PM_EUNSUPPORTED, "JSON schema at %s: its patterns' automata take too long to build together", path);
    }
    s->patterns[s->n_patterns++] = rx;
    t->pattern = rx;
    return PM_OK;
}

/* A type (or a list of them) with one of integer and number: the bounds hold for its numbers. */
static int bounds_typed(json_t *type) {
    if (json_is_string(type)) return !strcmp(json_string_value(type), "integer") || !strcmp(json_string_value(type), "number");
    int integer = 0, number = 0;
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) {
        integer |= json_is_string(t) && !strcmp(json_string_value(t), "integer");
        number |= json_is_string(t) && !strcmp(json_string_value(t), "number");
    }
    return integer != number;
}

/* The keywords compile_bounds holds a number's digits to. */
static int is_bound(const char *k) {
    return !strcmp(k, "minimum") || !strcmp(k, "maximum") || !strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum") ||
           !strcmp(k, "multipleOf");
}

static int is_refused(const char *k) {
    static const char *const names[] = {"pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                                        "patternProperties", "propertyNames", "minProperties", "maxProperties", "uniqueItems",
                                        "contains", "minContains", "maxContains", "not", "if",
                                        "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
                                        "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(k, names[i])) return 1;
    return 0;
}

static pm_json_node *new_node(pm_json_schema *s, int kind) {
    if (s->n_allocs > 8 * MAX_NODES) {
        pm_errf(s->e, PM_ELIMIT, "JSON schema: more than %d nodes", MAX_NODES);
        return NULL;
    }
    pm_json_node *n = alloc(s, sizeof *n);
    if (n) {
        n->kind = kind;
        n->max_items = n->max_len = -1;
    }
    return n;
}

static int classes_of(const pm_json_node *n, int *cls, const char *path, pm_err *e) {
    memset(cls, 0, sizeof(int) * PM_JC_COUNT);
    switch (n->kind) {
    case PM_JN_ANY: for (int c = 0; c < PM_JC_COUNT; c++) cls[c] = 1; break;
    case PM_JN_OBJECT: cls[PM_JC_OBJECT] = 1; break;
    case PM_JN_ARRAY: cls[PM_JC_ARRAY] = 1; break;
    case PM_JN_STRING: cls[PM_JC_STRING] = 1; break;
    case PM_JN_NUMBER: case PM_JN_INTEGER: cls[PM_JC_NUMBER] = 1; break;
    case PM_JN_BOOL: cls[PM_JC_BOOL] = 1; break;
    case PM_JN_NULL: cls[PM_JC_NULL] = 1; break;
    case PM_JN_ENUM:
        for (int i = 0; i < n->n_lits; i++) {
            int c = pm_json_class((unsigned char)n->lit[i][0]);
            if (c >= 0) cls[c] = 1;
        }
        break;
    default: { /* UNION */
        int any = 0;
        for (int c = 0; c < PM_JC_COUNT; c++) any |= cls[c] = n->alt[c] != NULL;
        if (!any) return pm_errf(e, PM_EINVAL, "JSON schema at %s: a union refers to itself before it is complete (a recursive anyOf)", path);
    }
    }
    return PM_OK;
}

/* Objects o[m] whose first listed property is the same required key with a const / enum value, the
 * values all different (a discriminated union: {"type": "a", ...} | {"type": "b", ...}), as one
 * object: that property's value, the union of theirs, picks the object the rest follows
 * (pm_json_node.variant). NULL without an error when they are not such objects. */
static const pm_json_node *discriminated(pm_json_schema *s, const pm_json_node **o, int m) {
    int n_lits = 0;
    for (int i = 0; i < m; i++) {
        const pm_json_node *b = o[i];
        /* (an object still being compiled, reached again through a $ref, has no first property yet) */
        if (b->kind != PM_JN_OBJECT || b->n_props < 1 || !b->prop[0] || !b->key[0] || !b->required[0] || b->prop[0]->kind != PM_JN_ENUM ||
            b->key_len[0] != o[0]->key_len[0] ||
            memcmp(b->key[0], o[0]->key[0], b->key_len[0]))
            return NULL;
        n_lits += b->prop[0]->n_lits;
    }
    if (n_lits > PM_JSON_MAX_ENUM) return NULL;
    pm_json_node *d = new_node(s, PM_JN_OBJECT), *en = new_node(s, PM_JN_ENUM);
    if (!d || !en) return NULL;
    d->n_props = 1;
    d->key = alloc(s, sizeof *d->key);
    d->key_len = alloc(s, sizeof *d->key_len);
    d->prop = alloc(s, sizeof *d->prop);
    d->required = alloc(s, 1);
    d->variant = alloc(s, sizeof *d->variant * (size_t)n_lits);
    en->lit = alloc(s, sizeof *en->lit * (size_t)n_lits);
    en->lit_len = alloc(s, sizeof *en->lit_len * (size_t)n_lits);
    if (s->e->code) return NULL;
    d->key[0] = o[0]->key[0];
    d->key_len[0] = o[0]->key_len[0];
    d->prop[0] = en;
    d->required[0] = 1;
    for (int i = 0; i < m; i++)
        for (int k = 0; k < o[i]->prop[0]->n_lits; k++) {
            const char *lit = o[i]->prop[0]->lit[k];
            uint32_t len = o[i]->prop[0]->lit_len[k];
            for (int j = 0; j < en->n_lits; j++)
                if (en->lit_len[j] == len && !memcmp(en->lit[j], lit, len)) return NULL; /* two branches share a value */
            en->lit[en->n_lits] = lit;
            en->lit_len[en->n_lits] = len;
            d->variant[en->n_lits++] = o[i];
        }
    return d;
}

/* The union of branches b[n]: the first byte of a value must pick one, or, among objects, the
 * value of their first property (discriminated). */
static const pm_json_node *make_union(pm_json_schema *s, const pm_json_node **b, int n, const char *path) {
    static const char *const cname[] = {"object", "array", "string", "number", "boolean", "null"};
    if (n == 1) return b[0];
    pm_json_node *u = new_node(s, PM_JN_UNION);
    const pm_json_node *objs[PM_JSON_MAX_ENUM];
    int n_objs = 0;
    if (!u) return NULL;
    for (int i = 0; i < n; i++) {
        int cls[PM_JC_COUNT];
        if (classes_of(b[i], cls, path, s->e)) return NULL;
        if (b[i]->kind == PM_JN_OBJECT) {
            if (n_objs == PM_JSON_MAX_ENUM)
                return pm_errf(s->e, PM_ELIMIT, "JSON schema at %s: more than %d object branches", path, PM_JSON_MAX_ENUM), NULL;
            objs[n_objs++] = b[i];
        }
        for (int c = 0; c < PM_JC_COUNT; c++) {
            if (!cls[c]) continue;
            if (u->alt[c] && !(c == PM_JC_OBJECT && b[i]->kind == PM_JN_OBJECT && u->alt[c]->kind == PM_JN_OBJECT)) {
                pm_errf(s->e, PM_EINVAL,
                        "JSON schema at %s: two branches both admit %s %s; the branches of anyOf / oneOf / a type list must start "
                        "differently (object, array, string, number, boolean, null), or be objects whose first property is "
                        "the same required key with different const / enum values",
                        path, c == PM_JC_OBJECT ? "an" : "a", cname[c]);
                return NULL;
            }
            u->alt[c] = b[i];
        }
    }
    if (n_objs > 1) {
        const pm_json_node *d = discriminated(s, objs, n_objs);
        if (!d) {
            if (!s->e->code)
                pm_errf(s->e, PM_EINVAL,
                        "JSON schema at %s: two branches both admit an object; object branches must list first the same required "
                        "property with const / enum values that tell them apart",
                        path);
            return NULL;
        }
        u->alt[PM_JC_OBJECT] = d;
    }
    return u;
}

static int get_count(pm_json_schema *s, json_t *v, const char *key, int *out, const char *path) {
    json_t *x = json_object_get(v, key);
    if (!x) return PM_OK;
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1 << 30))
        return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: %s must be a non-negative integer", path, key);
    *out = (int)json_integer_value(x);
    return PM_OK;
}

/* A property name as it appears between the quotes of a key, escaped as a compact writer would. */
static int encode_key(pm_json_schema *s, const char *name, pm_json_node *o, int i) {
    json_t *str = json_string(name);
    char *js = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    if (!js) return pm_errf(s->e, PM_ENOMEM, "out of memory compiling a JSON schema");
    size_t n = strlen(js);
    char *k = alloc(s, n);
    if (k) {
        memcpy(k, js + 1, n - 2); /* without the quotes */
        o->key[i] = k;
        o->key_len[i] = (uint32_t)(n - 2);
    }
    free(js);
    return s->e->code;
}

static const pm_json_node *compile_object(pm_json_schema *s, json_t *v, pm_json_node *o, const char *path) {
    char sub[MAX_PATH];
    json_t *props = json_object_get(v, "properties"), *req = json_object_get(v, "required"), *ap = json_object_get(v, "additionalProperties");
    if (props && !json_is_object(props)) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: properties must be an object", path), NULL;
    if (req && !json_is_array(req)) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: required must be an array", path), NULL;
    size_t n = props ? json_object_size(props) : 0;
    if (n > PM_JSON_MAX_PROPS)
        return pm_errf(s->e, PM_ELIMIT, "JSON schema at %s: %zu properties, at most %d", path, n, PM_JSON_MAX_PROPS), NULL;
    o->n_props = (int)n;
    o->key = alloc(s, sizeof *o->key * n);
    o->key_len = alloc(s, sizeof *o->key_len * n);
    o->prop = alloc(s, sizeof *o->prop * n);
    o->required = alloc(s, n);
    if (s->e->code) return NULL;
    const char *name;
    json_t *pv;
    int i = 0;
    json_object_foreach(props, name, pv) { /* in the order written */
        if (encode_key(s, name, o, i)) return NULL;
        snprintf(sub, sizeof sub, "%s/properties/%s", path, name);
        if (!(o->prop[i] = compile(s, pv, sub))) return NULL;
        i++;
    }
    size_t k;
    json_t *r;
    json_array_foreach(req, k, r) {
        if (!json_is_string(r)) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: required[%zu] must be a string", path, k), NULL;
        int found = -1, j = 0;
        json_object_foreach(props, name, pv) {
            if (!strcmp(name, json_string_value(r))) found = j;
            j++;
        }
        if (found < 0)
            return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: required property '%.60s' is not among its properties", path,
                           json_string_value(r)), NULL;
        o->required[found] = 1;
    }
    if (!ap || json_is_true(ap)) o->extra = &any_node;
    else if (json_is_false(ap)) o->extra = NULL;
    else {
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        if (!(o->extra = compile(s, ap, sub))) return NULL;
    }
    return o;
}

/* An array: its items' schema, a tuple's positions first (prefixItems; or items as a list, with
 * additionalItems for the rest: the older spelling), false for no more items than those. */
static const pm_json_node *compile_array(pm_json_schema *s, json_t *v, pm_json_node *a, const char *path) {
    char sub[MAX_PATH];
    json_t *items = json_object_get(v, "items"), *prefix = json_object_get(v, "prefixItems");
    const char *prefix_key = "prefixItems", *rest_key = "items";
    if (json_is_array(items)) { /* the older tuple: items a list, additionalItems the rest */
        if (prefix) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: items as a list beside prefixItems", path), NULL;
        prefix = items, prefix_key = "items";
        items = json_object_get(v, "additionalItems"), rest_key = "additionalItems";
    } else if (json_object_get(v, "additionalItems"))
        return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: additionalItems goes with items as a list", path), NULL;
    if (prefix && (!json_is_array(prefix) || json_array_size(prefix) > PM_JSON_MAX_PROPS))
        return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: %s must be a list of at most %d schemas", path, prefix_key, PM_JSON_MAX_PROPS), NULL;
    a->n_prefix = prefix ? (int)json_array_size(prefix) : 0;
    if (a->n_prefix && !(a->prefix = alloc(s, sizeof *a->prefix * (size_t)a->n_prefix))) return NULL;
    for (int i = 0; i < a->n_prefix; i++) {
        snprintf(sub, sizeof sub, "%s/%s/%d", path, prefix_key, i);
        if (!(a->prefix[i] = compile(s, json_array_get(prefix, (size_t)i), sub))) return NULL;
    }
    snprintf(sub, sizeof sub, "%s/%s", path, rest_key);
    int closed = json_is_false(items); /* no items past the tuple's */
    a->items = items && !closed ? compile(s, items, sub) : &any_node;
    if (!a->items || get_count(s, v, "minItems", &a->min_items, path) || get_count(s, v, "maxItems", &a->max_items, path)) return NULL;
    if (closed && (a->max_items < 0 || a->max_items > a->n_prefix)) a->max_items = a->n_prefix;
    if (a->max_items >= 0 && a->max_items < a->min_items)
        return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: maxItems below minItems", path), NULL;
    return a;
}

/* One type of a schema object (v's other keywords for that type). */
static const pm_json_node *typed(pm_json_schema *s, json_t *v, const char *type, pm_json_node *into, const char *path) {
    if (!strcmp(type, "object")) {
        pm_json_node *o = into ? into : new_node(s, PM_JN_OBJECT);
        if (o) o->kind = PM_JN_OBJECT;
        return o ? compile_object(s, v, o, path) : NULL;
    }
    if (!strcmp(type, "array")) {
        pm_json_node *a = into ? into : new_node(s, PM_JN_ARRAY);
        if (a) a->kind = PM_JN_ARRAY;
        return a ? compile_array(s, v, a, path) : NULL;
    }
    if (!strcmp(type, "string")) {
        json_t *pat = json_object_get(v, "pattern"), *fmt = json_object_get(v, "format");
        const char *format = json_is_string(fmt) && format_pattern(json_string_value(fmt)) ? json_string_value(fmt) : NULL;
        if (!json_object_get(v, "minLength") && !json_object_get(v, "maxLength") && !pat && !format) return &any_string;
        pm_json_node *t = new_node(s, PM_JN_STRING);
        if (!t || get_count(s, v, "minLength", &t->min_len, path) || get_count(s, v, "maxLength", &t->max_len, path)) return NULL;
        if (t->max_len >= 0 && t->max_len < t->min_len)
            return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: maxLength below minLength", path), NULL;
        if ((pat || format) && compile_pattern(s, pat, format, t, path)) return NULL;
        return t;
    }
    if (!strcmp(type, "number") || !strcmp(type, "integer")) {
        int integer = type[0] == 'i', bounded = 0;
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) bounded |= is_bound(k);
        if (!bounded) return integer ? &any_integer : &any_number;
        pm_json_node *t = new_node(s, integer ? PM_JN_INTEGER : PM_JN_NUMBER);
        if (!t) return NULL;
        t->max_len = -1;
        return compile_bounds(s, v, t, integer, path) ? NULL : t;
    }
    if (!strcmp(type, "boolean")) return &any_bool;
    if (!strcmp(type, "null")) return &any_null;
    return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: unknown type '%.40s'", path, type), NULL;
}

/* A JSON pointer into the document ("#", "#/$defs/Name", ~0 and ~1 escapes). */
static json_t *resolve(pm_json_schema *s, const char *ref, const char *path) {
    if (ref[0] != '#') return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: $ref '%.80s' leaves the document", path, ref), NULL;
    json_t *at = s->doc;
    const char *p = ref + 1;
    while (*p == '/') {
        char tok[128];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && (p[1] == '0' || p[1] == '1')) c = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof tok) tok[n++] = c;
        }
        tok[n] = 0;
        at = json_is_object(at) ? json_object_get(at, tok) : NULL;
        if (!at) break;
    }
    if (!at || *p) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: $ref '%.80s' points nowhere", path, ref), NULL;
    return at;
}

static const pm_json_node *compile_union(pm_json_schema *s, json_t *list, const char *kw, const char *path) {
    char sub[MAX_PATH];
    size_t n = json_is_array(list) ? json_array_size(list) : 0;
    if (!n || n > PM_JC_COUNT + 1)
        return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: %s must list 1 to %d schemas", path, kw, PM_JC_COUNT), NULL;
    const pm_json_node *b[PM_JC_COUNT + 1];
    for (size_t i = 0; i < n; i++) {
        snprintf(sub, sizeof sub, "%s/%s/%zu", path, kw, i);
        if (!(b[i] = compile(s, json_array_get(list, i), sub))) return NULL;
    }
    return make_union(s, b, (int)n, path);
}

static const pm_json_node *compile_enum(pm_json_schema *s, json_t *v, const char *path) {
    json_t *en = json_object_get(v, "enum"), *cn = json_object_get(v, "const");
    size_t n = en ? (json_is_array(en) ? json_array_size(en) : 0) : 1;
    if (!n || n > PM_JSON_MAX_ENUM) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: enum must list 1 to %d values", path, PM_JSON_MAX_ENUM), NULL;
    pm_json_node *e = new_node(s, PM_JN_ENUM);
    if (!e || !(e->lit = alloc(s, sizeof *e->lit * n)) || !(e->lit_len = alloc(s, sizeof *e->lit_len * n))) return NULL;
    for (size_t i = 0; i < n; i++) {
        char *js = json_dumps(en ? json_array_get(en, i) : cn, JSON_COMPACT | JSON_ENCODE_ANY);
        char *keep = js ? alloc(s, strlen(js) + 1) : NULL;
        if (keep) {
            strcpy(keep, js);
            e->lit[e->n_lits] = keep;
            e->lit_len[e->n_lits++] = (uint32_t)strlen(keep);
        }
        free(js);
        if (!keep) return pm_errf(s->e, PM_ENOMEM, "out of memory compiling a JSON schema"), NULL;
    }
    return e;
}

static const pm_json_node *compile_at(pm_json_schema *s, json_t *v, const char *path);

static int memo_add(pm_json_schema *s, json_t *v, const pm_json_node *n) {
    if (s->n_memo >= MAX_NODES) return pm_errf(s->e, PM_ELIMIT, "JSON schema: more than %d schema objects", MAX_NODES);
    json_t **mk = realloc(s->memo_key, sizeof *mk * (size_t)(s->n_memo + 1));
    if (mk) s->memo_key = mk;
    const pm_json_node **mn = realloc(s->memo_node, sizeof *mn * (size_t)(s->n_memo + 1));
    if (mn) s->memo_node = mn;
    if (!mk || !mn) return pm_errf(s->e, PM_ENOMEM, "out of memory compiling a JSON schema");
    s->memo_key[s->n_memo] = v;
    s->memo_node[s->n_memo++] = n;
    return PM_OK;
}

/* Cycles close at object and array nodes (memoised before their children); one that passes
 * through none of them would recurse without end, and a schema this deep is no use either. */
static const pm_json_node *compile(pm_json_schema *s, json_t *v, const char *path) {
    if (s->depth >= MAX_DEPTH)
        return pm_errf(s->e, PM_ELIMIT, "JSON schema at %s: nested deeper than %d (or a $ref cycle through no object or array)",
                       path, MAX_DEPTH), NULL;
    s->depth++;
    const pm_json_node *n = compile_at(s, v, path);
    s->depth--;
    return n;
}

static const pm_json_node *compile_at(pm_json_schema *s, json_t *v, const char *path) {
    if (json_is_true(v)) return &any_node;
    if (!json_is_object(v)) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: a schema must be an object or true", path), NULL;
    for (int i = 0; i < s->n_memo; i++)
        if (s->memo_key[i] == v) return s->memo_node[i];
    const char *k;
    json_t *x;
    json_t *ty = json_object_get(v, "type");
    int string_typed = json_is_string(ty) && !strcmp(json_string_value(ty), "string");
    int bounds_held = bounds_typed(ty) && !json_object_get(v, "enum") && !json_object_get(v, "const");
    json_object_foreach(v, k, x) if (is_refused(k) && !(string_typed && !strcmp(k, "pattern")) && !(bounds_held && is_bound(k)))
        return pm_errf(s->e, PM_EUNSUPPORTED, "JSON schema at %s: the keyword '%s' is not supported%s", path, k,
                       is_bound(k) ? " here (a number's or an integer's bounds and multipleOf are held, beside a type of one of them and no enum)"
                                   : " (JSON mode could not hold the answer to it)"), NULL;
    json_t *ref = json_object_get(v, "$ref"), *all = json_object_get(v, "allOf"), *type = json_object_get(v, "type");
    json_t *any = json_object_get(v, "anyOf") ? json_object_get(v, "anyOf") : json_object_get(v, "oneOf");
    if (json_object_get(v, "anyOf") && json_object_get(v, "oneOf"))
        return pm_errf(s->e, PM_EUNSUPPORTED, "JSON schema at %s: anyOf beside oneOf is not supported", path), NULL;
    if (all && (!json_is_array(all) || json_array_size(all) != 1))
        return pm_errf(s->e, PM_EUNSUPPORTED, "JSON schema at %s: allOf of more than one schema is not supported", path), NULL;
    int forms = !!ref + !!all + !!any + !!(json_object_get(v, "enum") || json_object_get(v, "const"));
    if (forms > 1 || (forms && type && !json_object_get(v, "enum") && !json_object_get(v, "const")))
        return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: $ref, allOf, anyOf / oneOf, enum / const and type combine only one at a time",
                       path), NULL;
    /* the node this object compiles to, memoised before its children (recursion) */
    const char *one = json_is_string(type) ? json_string_value(type) /* the one type it has, said or implied */
                      : type ? NULL
                      : json_object_get(v, "properties") || json_object_get(v, "required") || json_object_get(v, "additionalProperties") ? "object"
                      : json_object_get(v, "items") || json_object_get(v, "minItems") || json_object_get(v, "maxItems") ? "array"
                      : json_object_get(v, "minLength") || json_object_get(v, "maxLength") ? "string"
                      : NULL;
    pm_json_node *slot = NULL;
    if (!forms && one && (!strcmp(one, "object") || !strcmp(one, "array")) && !json_is_true(json_object_get(v, "nullable")) &&
        (!(slot = new_node(s, PM_JN_ANY)) || memo_add(s, v, slot)))
        return NULL;
    char sub[MAX_PATH];
    const pm_json_node *out = NULL;
    if (ref) {
        json_t *target = json_is_string(ref) ? resolve(s, json_string_value(ref), path) : NULL;
        if (!json_is_string(ref)) pm_errf(s->e, PM_EINVAL, "JSON schema at %s: $ref must be a string", path);
        out = target ? compile(s, target, json_string_value(ref)) : NULL;
    } else if (all) {
        snprintf(sub, sizeof sub, "%s/allOf/0", path);
        out = compile(s, json_array_get(all, 0), sub);
    } else if (any) out = compile_union(s, any, json_object_get(v, "anyOf") ? "anyOf" : "oneOf", path);
    else if (forms) out = compile_enum(s, v, path);
    else if (one) out = typed(s, v, one, slot, path);
    else if (json_is_array(type)) {
        const pm_json_node *b[PM_JC_COUNT + 2];
        size_t n = json_array_size(type), i;
        if (!n || n > PM_JC_COUNT + 1) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: type lists 1 to %d names", path, PM_JC_COUNT + 1), NULL;
        for (i = 0; i < n; i++) {
            json_t *t = json_array_get(type, i);
            if (!json_is_string(t)) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: type[%zu] must be a string", path, i), NULL;
            if (!(b[i] = typed(s, v, json_string_value(t), NULL, path))) return NULL;
        }
        out = make_union(s, b, (int)n, path);
    } else if (type) return pm_errf(s->e, PM_EINVAL, "JSON schema at %s: type must be a string or a list", path), NULL;
    else out = &any_node;
    if (out && json_is_true(json_object_get(v, "nullable")) && out->kind != PM_JN_NULL) {
        const pm_json_node *b[2] = {out, &any_null};
        out = make_union(s, b, 2, path);
    }
    if (out && !slot && memo_add(s, v, out)) return NULL; /* memoised after: it cannot recurse into itself */
    return out;
}

int pm_json_schema_compile(const char *text, pm_json_schema **out, pm_err *e) {
    *out = NULL;
    json_error_t je;
    pm_json_schema *s = calloc(1, sizeof *s);
    if (!s) return pm_errf(e, PM_ENOMEM, "out of memory compiling a JSON schema");
    s->e = e;
    s->doc = json_loads(text ? text : "", JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!s->doc) pm_errf(e, PM_EINVAL, "JSON schema: not JSON (%s, at %d:%d)", je.text, je.line, je.column);
    else s->root = compile(s, s->doc, "#");
    if (!s->root) {
        pm_json_schema_free(s);
        return e->code ? e->code : pm_errf(e, PM_EINVAL, "JSON schema: could not compile");
    }
    s->e = NULL;
    *out = s;
    return PM_OK;
}

const pm_json_node *pm_json_schema_root(const pm_json_schema *s) { return s->root; }

size_t pm_json_schema_bytes(const pm_json_schema *s) {
    size_t n = sizeof *s + s->alloc_bytes + sizeof *s->allocs * (size_t)s->cap_allocs;
    for (int i = 0; i < s->n_patterns; i++) n += pm_regex_bytes(s->patterns[i]);
    return n;
}

void pm_json_schema_free(pm_json_schema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_allocs; i++) free(s->allocs[i]);
    free(s->allocs);
    for (int i = 0; i < s->n_patterns; i++) pm_regex_free(s->patterns[i]);
    free(s->patterns);
    free(s->memo_key);
    free(s->memo_node);
    json_decref(s->doc);
    free(s);
}
