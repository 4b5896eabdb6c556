/* regex.c — the tree of regex_parse.c into a byte-level DFA (regex.h): code-point sets become the
 * alternatives of their UTF-8 byte sequences, the tree a Thompson automaton over byte ranges
 * (compiled back to front: each node knows the state it leads to), and the subset construction
 * runs over the byte classes the ranges induce. Last, every state that cannot reach a match is
 * folded into the dead state 0, so that "not dead" means "can still become a whole match": the
 * mask never lets a step into a corner the answer cannot leave. */
#include "engine/regex.h"

#include <stdlib.h>
#include <string.h>

#include "engine/regex_internal.h"
#include "tok/utf8.h"
#include "util/hash.h"

enum { S_RANGE, S_SPLIT, S_MATCH };

typedef struct nfa_state {
    uint8_t kind, lo, hi; /* RANGE: bytes lo..hi lead to out */
    int32_t out, out1;    /* SPLIT: both */
} nfa_state;

typedef struct nfa {
    nfa_state *s;
    int n, cap;
    pm_err *e;
} nfa;

struct pm_regex {
    int n_states, n_classes;
    uint8_t cls[256];   /* byte -> class */
    int32_t *next;      /* [n_states * n_classes]; row 0, the dead state, all 0 */
    uint8_t *accept;    /* [n_states] */
    uint8_t *final;     /* accepting, and every byte leads to 0 */
    size_t work;        /* automaton states visited to build it (pm_regex_work) */
};

/* ---- the automaton over byte ranges ---- */

static int add(nfa *A, int kind, int lo, int hi, int out, int out1) {
    if (A->n == PM_REGEX_MAX_NFA)
        return pm_errf(A->e, PM_EUNSUPPORTED, "the pattern is too large (its automaton outgrows %d states; lower its counts)",
                       PM_REGEX_MAX_NFA);
    if (A->n == A->cap) {
        int cap = A->cap ? 2 * A->cap : 256;
        nfa_state *s = realloc(A->s, sizeof *s * (size_t)cap);
        if (!s) return pm_errf(A->e, PM_ENOMEM, "out of memory for the regular expression's automaton");
        A->s = s;
        A->cap = cap;
    }
    A->s[A->n] = (nfa_state){(uint8_t)kind, (uint8_t)lo, (uint8_t)hi, out, out1};
    return A->n++;
}

static int alt(nfa *A, int x, int y) { return x < 0 ? x : y < 0 ? y : add(A, S_SPLIT, 0, 0, x, y); }

/* The byte-range states one set has made, for reuse: built back to front, the sequences of a set
 * share their tails (every multi-byte character ends in [80-BF] -> next), which keeps the DFA of
 * `.{0,n}` at a few states per position instead of one per tail. */
typedef struct tail_entry {
    uint8_t lo, hi;
    int32_t out, id;
} tail_entry;
typedef struct tail_cache {
    tail_entry e[256];
    int n;
} tail_cache;

static int range_state(nfa *A, tail_cache *tc, int lo, int hi, int out) {
    for (int i = 0; i < tc->n; i++)
        if (tc->e[i].lo == lo && tc->e[i].hi == hi && tc->e[i].out == out) return tc->e[i].id;
    int id = add(A, S_RANGE, lo, hi, out, -1);
    if (id >= 0 && tc->n < 256) tc->e[tc->n++] = (tail_entry){(uint8_t)lo, (uint8_t)hi, out, id};
    return id;
}

/* The code points lo..hi as alternatives of byte-range sequences leading to next, joined into
 * *start (-1 while none): split until each piece has one encoded length, no surrogate, and bytes
 * that vary independently (lo's and hi's continuation bytes at their extremes), then one range per
 * byte; a sequence's first byte always gets a state of its own (the alternatives' heads). */
static int utf8_ranges(nfa *A, tail_cache *tc, uint32_t lo, uint32_t hi, int next, int *start) {
    static const uint32_t last_of_len[3] = {0x7F, 0x7FF, 0xFFFF};
    if (lo > hi) return 0;
    for (int k = 0; k < 3; k++)
        if (lo <= last_of_len[k] && hi > last_of_len[k])
            return utf8_ranges(A, tc, lo, last_of_len[k], next, start) < 0 ? A->e->code : utf8_ranges(A, tc, last_of_len[k] + 1, hi, next, start);
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800 && utf8_ranges(A, tc, lo, 0xD7FF, next, start) < 0) return A->e->code;
        return hi > 0xDFFF ? utf8_ranges(A, tc, 0xE000, hi, next, start) : 0;
    }
    uint8_t a[4], b[4];
    int n = (int)pm_utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return utf8_ranges(A, tc, lo, lo | m, next, start) < 0 ? A->e->code : utf8_ranges(A, tc, (lo | m) + 1, hi, next, start);
            if ((hi & m) != m)
                return utf8_ranges(A, tc, lo, (hi & ~m) - 1, next, start) < 0 ? A->e->code : utf8_ranges(A, tc, hi & ~m, hi, next, start);
        }
    }
    pm_utf8_encode(hi, b);
    int s = next;
    for (int i = n - 1; i >= 0 && s >= 0; i--) s = i ? range_state(A, tc, a[i], b[i], s) : add(A, S_RANGE, a[i], b[i], s, -1);
    if (s < 0) return s;
    *start = *start < 0 ? s : alt(A, *start, s);
    return *start < 0 ? *start : 0;
}

/* Node k of t, leading to next: its first state. */
static int compile(nfa *A, const rx_tree *t, int k, int next) {
    const rx_node *nd = &t->nodes[k];
    switch (nd->kind) {
    case RX_EMPTY: return next;
    case RX_CAT: { /* the parser builds both left-deep: their spines walked in a loop, not a recursion per item */
        int s = next;
        for (; nd->kind == RX_CAT && s >= 0; nd = &t->nodes[nd->a]) s = compile(A, t, nd->b, s);
        return s < 0 ? s : compile(A, t, (int)(nd - t->nodes), s);
    }
    case RX_ALT: {
        int s = -1;
        for (; nd->kind == RX_ALT; nd = &t->nodes[nd->a]) {
            int b = compile(A, t, nd->b, next);
            if (b < 0) return b;
            s = s < 0 ? b : alt(A, s, b);
            if (s < 0) return s;
        }
        int a = compile(A, t, (int)(nd - t->nodes), next);
        return a < 0 ? a : s < 0 ? a : alt(A, s, a);
    }
    case RX_SET: {
        const rx_set *s = &t->sets[nd->set];
        int start = -1;
        tail_cache tc;
        tc.n = 0;
        for (int i = 0; i < s->n; i++)
            if (utf8_ranges(A, &tc, s->r[i].lo, s->r[i].hi, next, &start) < 0) return A->e->code;
        if (start < 0) return add(A, S_RANGE, 1, 0, next, -1); /* an empty set: a range no byte is in */
        return start;
    }
    }
    /* RX_REP: the optional copies first (each may stop before the next), then the mandatory ones */
    int s = next;
    if (nd->max < 0) { /* a loop: a split whose first branch is the child, which leads back to it */
        int loop = add(A, S_SPLIT, 0, 0, -1, next);
        if (loop < 0) return loop;
        int body = compile(A, t, nd->a, loop);
        if (body < 0) return body;
        A->s[loop].out = body;
        s = loop;
    } else
        for (int i = nd->min; i < nd->max && s >= 0; i++) {
            int body = compile(A, t, nd->a, s);
            s = body < 0 ? body : alt(A, body, next);
        }
    for (int i = 0; i < nd->min && s >= 0; i++) s = compile(A, t, nd->a, s);
    return s;
}

/* ---- determinizing ---- */

typedef struct builder {
    const nfa *A;
    uint32_t *mark, gen;   /* [A->n]: visited in the closure being taken */
    int32_t *stack;
    int32_t *pool;         /* the DFA states' NFA sets, side by side */
    size_t pool_n, pool_cap;
    size_t *set_at;        /* [DFA state]: its set in pool */
    int32_t *set_len;
    int32_t *slots;        /* open addressing: DFA state + 1, 0 empty */
    int n_slots;
    int n, cap;            /* DFA states */
    size_t work;           /* NFA states visited so far (PM_REGEX_MAX_WORK) */
    pm_err *e;
} builder;

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The closure of the stacked NFA states (through splits) appended to pool as a sorted set of
 * RANGE and MATCH states; returns its length. */
static int closure(builder *B, int depth) {
    size_t base = B->pool_n;
    while (depth > 0) {
        int32_t q = B->stack[--depth];
        if (q < 0 || B->mark[q] == B->gen) continue;
        B->mark[q] = B->gen;
        const nfa_state *st = &B->A->s[q];
        if (st->kind == S_SPLIT) {
            B->stack[depth++] = st->out;
            B->stack[depth++] = st->out1;
            continue;
        }
        if (B->pool_n == B->pool_cap) {
            size_t cap = B->pool_cap ? 2 * B->pool_cap : 4096;
            int32_t *p = realloc(B->pool, sizeof *p * cap);
            if (!p) return pm_errf(B->e, PM_ENOMEM, "out of memory for the regular expression's DFA");
            B->pool = p;
            B->pool_cap = cap;
        }
        B->pool[B->pool_n++] = q;
    }
    B->work += B->pool_n - base;
    int len = (int)(B->pool_n - base);
    qsort(B->pool + base, (size_t)len, sizeof(int32_t), cmp_i32);
    return len;
}

static uint64_t set_hash(const int32_t *s, int n) { return pm_hash_bytes(s, sizeof(int32_t) * (size_t)n); }

/* The DFA state of the set just closed at the end of the pool (the pool gives it back when the
 * state exists already); a new one when none, -1 past the limits (e set). */
static int intern(builder *B, int len) {
    const int32_t *s = B->pool + B->pool_n - len;
    if (!len) return 0; /* the dead state */
    uint64_t h = set_hash(s, len);
    int mask = B->n_slots - 1, j = (int)(h & (uint64_t)mask);
    for (; B->slots[j]; j = (j + 1) & mask) {
        int d = B->slots[j] - 1;
        if (B->set_len[d] == len && !memcmp(B->pool + B->set_at[d], s, sizeof(int32_t) * (size_t)len)) {
            B->pool_n -= (size_t)len;
            return d;
        }
    }
    if (B->n == PM_REGEX_MAX_DFA)
        return pm_errf(B->e, PM_EUNSUPPORTED, "the pattern is too large (its DFA outgrows %d states)", PM_REGEX_MAX_DFA);
    if (B->n == B->cap) {
        int cap = 2 * B->cap;
        size_t *at = realloc(B->set_at, sizeof *at * (size_t)cap);
        if (at) B->set_at = at;
        int32_t *ln = realloc(B->set_len, sizeof *ln * (size_t)cap);
        if (ln) B->set_len = ln;
        if (!at || !ln) return pm_errf(B->e, PM_ENOMEM, "out of memory for the regular expression's DFA");
        B->cap = cap;
    }
    int d = B->n++;
    B->set_at[d] = B->pool_n - (size_t)len;
    B->set_len[d] = len;
    B->slots[j] = d + 1;
    if (2 * B->n > B->n_slots) { /* keep the table at most half full */
        int ns = 2 * B->n_slots;
        int32_t *sl = calloc((size_t)ns, sizeof *sl);
        if (!sl) return pm_errf(B->e, PM_ENOMEM, "out of memory for the regular expression's DFA");
        for (int i = 0; i < B->n_slots; i++)
            if (B->slots[i]) {
                int q = B->slots[i] - 1, k = (int)(set_hash(B->pool + B->set_at[q], B->set_len[q]) & (uint64_t)(ns - 1));
                while (sl[k]) k = (k + 1) & (ns - 1);
                sl[k] = B->slots[i];
            }
        free(B->slots);
        B->slots = sl;
        B->n_slots = ns;
    }
    return d;
}

/* The byte classes: bytes that no range's edge separates share one. Returns how many. */
static int byte_classes(const nfa *A, uint8_t *cls, uint8_t *rep) {
    uint8_t edge[257] = {0};
    for (int i = 0; i < A->n; i++)
        if (A->s[i].kind == S_RANGE && A->s[i].lo <= A->s[i].hi) edge[A->s[i].lo] = edge[A->s[i].hi + 1] = 1;
    int c = -1;
    for (int b = 0; b < 256; b++) {
        if (b == 0 || edge[b]) rep[++c] = (uint8_t)b;
        cls[b] = (uint8_t)c;
    }
    return c + 1;
}

/* Folds every state that cannot reach an accepting one into 0 (a backward search over the
 * transitions, reversed into lists). */
static int prune(pm_regex *rx, pm_err *e) {
    int n = rx->n_states, C = rx->n_classes, rc = 0;
    size_t edges = (size_t)n * C;
    int32_t *cnt = calloc((size_t)n + 1, sizeof *cnt), *from = malloc(sizeof *from * (edges ? edges : 1)), *queue = malloc(sizeof *queue * (size_t)n);
    uint8_t *live = calloc((size_t)n, 1);
    if (!cnt || !from || !queue || !live) {
        rc = pm_errf(e, PM_ENOMEM, "out of memory for the regular expression's DFA");
        goto done;
    }
    for (size_t i = 0; i < edges; i++) cnt[rx->next[i] + 1]++;
    for (int d = 0; d < n; d++) cnt[d + 1] += cnt[d];
    for (size_t i = 0; i < edges; i++) from[cnt[rx->next[i]]++] = (int32_t)(i / (size_t)C);
    for (int d = n; d > 0; d--) cnt[d] = cnt[d - 1]; /* back to the starts */
    cnt[0] = 0;
    int qn = 0;
    for (int d = 1; d < n; d++)
        if (rx->accept[d]) live[d] = 1, queue[qn++] = d;
    for (int qi = 0; qi < qn; qi++)
        for (int k = cnt[queue[qi]]; k < cnt[queue[qi] + 1]; k++)
            if (!live[from[k]]) live[from[k]] = 1, queue[qn++] = from[k];
    live[0] = 0;
    for (size_t i = 0; i < edges; i++)
        if (!live[rx->next[i]]) rx->next[i] = 0;
    for (int d = 0; d < n; d++) {
        int any = 0;
        for (int c = 0; c < C && !any; c++) any = rx->next[(size_t)d * C + c] != 0;
        rx->final[d] = rx->accept[d] && !any;
    }
    if (!live[1]) rc = pm_errf(e, PM_EINVAL, "the pattern matches no text at all");
done:
    free(cnt);
    free(from);
    free(queue);
    free(live);
    return rc;
}

static int determinize(const nfa *A, int start, pm_regex *rx, pm_err *e) {
    uint8_t rep[256];
    int C = rx->n_classes = byte_classes(A, rx->cls, rep), rc = PM_OK;
    builder B = {A, calloc((size_t)A->n, sizeof(uint32_t)), 0, malloc(sizeof(int32_t) * (3 * (size_t)A->n + 2)), NULL, 0, 0,
                 malloc(sizeof(size_t) * 64), malloc(sizeof(int32_t) * 64), calloc(256, sizeof(int32_t)), 256, 1, 64, 0, e};
    size_t cap_next = 0;
    if (!B.mark || !B.stack || !B.set_at || !B.set_len || !B.slots) {
        rc = pm_errf(e, PM_ENOMEM, "out of memory for the regular expression's DFA");
        goto done;
    }
    B.set_at[0] = 0, B.set_len[0] = 0; /* state 0: the dead one, the empty set */
    B.gen++;
    B.stack[0] = start;
    int len = closure(&B, 1);
    if (len < 0 || intern(&B, len) < 0) goto fail;
    for (int d = 1; d < B.n; d++) {
        if ((size_t)B.n * C > PM_REGEX_MAX_TABLE) {
            rc = pm_errf(e, PM_EUNSUPPORTED, "the pattern is too large (its DFA outgrows %d transitions)", PM_REGEX_MAX_TABLE);
            goto done;
        }
        if ((size_t)B.n * C > cap_next) {
            size_t cap = cap_next ? 2 * cap_next : (size_t)64 * C;
            while (cap < (size_t)B.n * C) cap *= 2;
            int32_t *nx = realloc(rx->next, sizeof *nx * cap);
            uint8_t *ac = realloc(rx->accept, cap / C + 1);
            if (nx) rx->next = nx;
            if (ac) rx->accept = ac;
            if (!nx || !ac) {
                rc = pm_errf(e, PM_ENOMEM, "out of memory for the regular expression's DFA");
                goto done;
            }
            cap_next = cap;
        }
        B.work += (size_t)B.set_len[d] * C; /* the scans below */
        if (B.work > PM_REGEX_MAX_WORK) {
            rc = pm_errf(e, PM_EUNSUPPORTED, "the pattern is too large (its DFA takes too long to build: lower its counts)");
            goto done;
        }
        for (int c = 0; c < C; c++) {
            int depth = 0;
            B.gen++;
            for (int k = 0; k < B.set_len[d]; k++) {
                const nfa_state *st = &A->s[B.pool[B.set_at[d] + (size_t)k]];
                if (st->kind == S_RANGE && st->lo <= rep[c] && rep[c] <= st->hi) B.stack[depth++] = st->out;
            }
            int n = closure(&B, depth);
            int t = n < 0 ? n : intern(&B, n);
            if (t < 0) goto fail;
            rx->next[(size_t)d * C + c] = t;
        }
        int acc = 0;
        for (int k = 0; k < B.set_len[d] && !acc; k++) acc = A->s[B.pool[B.set_at[d] + (size_t)k]].kind == S_MATCH;
        rx->accept[d] = (uint8_t)acc;
    }
    rx->n_states = B.n;
    rx->work = B.work;
    if (!rx->next) { /* only the dead state and the start, which matches nothing: cannot be, but keep the table whole */
        rc = pm_errf(e, PM_EINVAL, "the pattern matches no text at all");
        goto done;
    }
    for (int c = 0; c < C; c++) rx->next[c] = 0;
    rx->accept[0] = 0;
    if (!(rx->final = calloc((size_t)B.n, 1))) {
        rc = pm_errf(e, PM_ENOMEM, "out of memory for the regular expression's DFA");
        goto done;
    }
    rc = prune(rx, e);
    goto done;
fail:
    rc = e->code;
done:
    free(B.mark);
    free(B.stack);
    free(B.pool);
    free(B.set_at);
    free(B.set_len);
    free(B.slots);
    return rc;
}

/* Any bytes, then next (a search's free ends: the text around a match is checked elsewhere). */
static int any_bytes(nfa *A, int next) {
    int loop = next < 0 ? next : add(A, S_SPLIT, 0, 0, -1, next), byte = loop < 0 ? loop : add(A, S_RANGE, 0, 255, loop, -1);
    if (byte < 0) return byte;
    A->s[loop].out = byte;
    return loop;
}

int pm_regex_compile_flags(const char *pattern, size_t len, int flags, pm_regex **out, pm_err *e) {
    *out = NULL;
    rx_tree t = {0};
    nfa A = {NULL, 0, 0, e};
    pm_regex *rx = calloc(1, sizeof *rx);
    int rc = rx ? rx_parse(pattern, len, flags, &t, e) : pm_errf(e, PM_ENOMEM, "out of memory for the regular expression");
    int search = flags & PM_REGEX_SEARCH;
    if (!rc && search && t.top_alt && (t.anchor_start || t.anchor_end))
        rc = pm_errf(e, PM_EUNSUPPORTED, "an anchor beside an alternation outside every group is not supported (group the alternatives: "
                                         "^(?:a|b)$)");
    if (!rc) {
        int match = add(&A, S_MATCH, 0, 0, -1, -1);
        if (search && !t.anchor_end) match = any_bytes(&A, match);
        int start = match < 0 ? match : compile(&A, &t, t.root, match);
        if (search && !t.anchor_start && start >= 0) start = any_bytes(&A, start);
        rc = start < 0 ? e->code : determinize(&A, start, rx, e);
    }
    rx_tree_free(&t);
    free(A.s);
    if (rc) {
        pm_regex_free(rx);
        return rc;
    }
    *out = rx;
    return PM_OK;
}

int pm_regex_compile(const char *pattern, size_t len, pm_regex **out, pm_err *e) { return pm_regex_compile_flags(pattern, len, 0, out, e); }

size_t pm_regex_work(const pm_regex *rx) { return rx->work; }

/* Room in the product's arrays (its pairs, transitions, accepting flags) for n states; PM_ENOMEM. */
static int product_room(pm_regex *rx, int64_t **key, int *cap, int n) {
    if (n <= *cap) return PM_OK;
    int nc = *cap ? 2 * *cap : 256;
    while (nc < n) nc *= 2;
    int64_t *k = realloc(*key, sizeof *k * (size_t)nc);
    if (k) *key = k;
    int32_t *nx = realloc(rx->next, sizeof *nx * (size_t)nc * rx->n_classes);
    if (nx) rx->next = nx;
    uint8_t *ac = realloc(rx->accept, (size_t)nc);
    if (ac) rx->accept = ac;
    if (!k || !nx || !ac) return PM_ENOMEM;
    *cap = nc;
    return PM_OK;
}

/* The product automaton: a state per pair of states the same bytes reach in a and b (breadth
 * first from both starts), accepting where both accept; the byte classes are the pairs of theirs. */
int pm_regex_intersect(const pm_regex *a, const pm_regex *b, pm_regex **out, pm_err *e) {
    *out = NULL;
    pm_regex *rx = calloc(1, sizeof *rx);
    uint8_t pair_cls[256][2], rep[256];
    int C = 0, rc = PM_OK, n = 2, cap = 0, n_slots = 1024;
    int64_t *key = NULL; /* a state's pair as (sa << 32 | sb) */
    for (int x = 0; x < 256; x++) { /* the classes: the distinct pairs of a's and b's */
        int c = 0;
        while (c < C && !(pair_cls[c][0] == a->cls[x] && pair_cls[c][1] == b->cls[x])) c++;
        if (c == C) pair_cls[C][0] = a->cls[x], pair_cls[C][1] = b->cls[x], rep[C++] = (uint8_t)x;
        if (rx) rx->cls[x] = (uint8_t)c;
    }
    int64_t *slot_key = calloc((size_t)n_slots, sizeof *slot_key); /* open addressing: key + 1, 0 empty */
    int32_t *slot_id = calloc((size_t)n_slots, sizeof *slot_id);
    if (!rx || !slot_key || !slot_id) goto oom;
    rx->n_classes = C;
    for (int d = 1; d < n; d++) { /* state 0 the dead one; 1 the pair of starts */
        if (d == 1 && (rc = product_room(rx, &key, &cap, n))) goto done;
        if (d == 1) key[1] = (int64_t)1 << 32 | 1;
        int32_t sa = (int32_t)(key[d] >> 32), sb = (int32_t)(key[d] & 0xffffffff);
        rx->accept[d] = (uint8_t)(a->accept[sa] && b->accept[sb]);
        for (int c = 0; c < C; c++) {
            int32_t ta = a->next[(size_t)sa * a->n_classes + a->cls[rep[c]]], tb = b->next[(size_t)sb * b->n_classes + b->cls[rep[c]]];
            int32_t t = 0;
            if (ta && tb) {
                int64_t k = (int64_t)ta << 32 | tb;
                int j = (int)((uint64_t)k * 0x9E3779B97F4A7C15ull >> 40) & (n_slots - 1);
                while (slot_key[j] && slot_key[j] != k + 1) j = (j + 1) & (n_slots - 1);
                if (!slot_key[j]) { /* a new pair */
                    if (n >= PM_REGEX_MAX_DFA || (size_t)(n + 1) * C > PM_REGEX_MAX_TABLE) {
                        rc = pm_errf(e, PM_EUNSUPPORTED, "the pattern is too large (its DFA outgrows %d states)", PM_REGEX_MAX_DFA);
                        goto done;
                    }
                    if ((rc = product_room(rx, &key, &cap, n + 1))) goto done; /* the new pair's row and key */
                    slot_key[j] = k + 1;
                    slot_id[j] = n;
                    key[n++] = k;
                    if (2 * n > n_slots) { /* at most half full */
                        int ns = 2 * n_slots;
                        int64_t *sk = calloc((size_t)ns, sizeof *sk);
                        int32_t *si = calloc((size_t)ns, sizeof *si);
                        if (!sk || !si) {
                            free(sk);
                            free(si);
                            goto oom;
                        }
                        for (int i = 0; i < n_slots; i++)
                            if (slot_key[i]) {
                                int q = (int)((uint64_t)(slot_key[i] - 1) * 0x9E3779B97F4A7C15ull >> 40) & (ns - 1);
                                while (sk[q]) q = (q + 1) & (ns - 1);
                                sk[q] = slot_key[i], si[q] = slot_id[i];
                            }
                        free(slot_key);
                        free(slot_id);
                        slot_key = sk, slot_id = si, n_slots = ns;
                    }
                    t = n - 1;
                } else
                    t = slot_id[j];
            }
            rx->next[(size_t)d * C + c] = t;
        }
    }
    rx->n_states = n;
    for (int c = 0; c < C; c++) rx->next[c] = 0;
    rx->accept[0] = 0;
    if (!(rx->final = calloc((size_t)n, 1))) goto oom;
    rc = prune(rx, e);
    goto done;
oom:
    rc = PM_ENOMEM;
done:
    if (rc == PM_ENOMEM) pm_errf(e, PM_ENOMEM, "out of memory for the regular expression's DFA");
    free(key);
    free(slot_key);
    free(slot_id);
    if (rc) pm_regex_free(rx);
    else *out = rx;
    return rc;
}

int pm_regex_of_table(int n_states, int n_classes, const uint8_t cls[256], const int32_t *next, const uint8_t *accept, pm_regex **out,
                      pm_err *e) {
    *out = NULL;
    if (n_states > PM_REGEX_MAX_DFA || (size_t)n_states * n_classes > PM_REGEX_MAX_TABLE)
        return pm_errf(e, PM_EUNSUPPORTED, "the pattern is too large (its DFA outgrows %d states)", PM_REGEX_MAX_DFA);
    pm_regex *rx = calloc(1, sizeof *rx);
    size_t cells = (size_t)n_states * n_classes;
    if (!rx || !(rx->next = malloc(sizeof *rx->next * cells)) || !(rx->accept = malloc((size_t)n_states)) ||
        !(rx->final = calloc((size_t)n_states, 1))) {
        pm_regex_free(rx);
        return pm_errf(e, PM_ENOMEM, "out of memory for the regular expression's DFA");
    }
    rx->n_states = n_states, rx->n_classes = n_classes, rx->work = (size_t)n_states;
    memcpy(rx->cls, cls, 256);
    memcpy(rx->next, next, sizeof *rx->next * cells);
    memcpy(rx->accept, accept, (size_t)n_states);
    for (int c = 0; c < n_classes; c++) rx->next[c] = 0; /* the dead state stays dead */
    rx->accept[0] = 0;
    if (prune(rx, e)) {
        pm_regex_free(rx);
        return e->code;
    }
    *out = rx;
    return PM_OK;
}

void pm_regex_free(pm_regex *rx) {
    if (!rx) return;
    free(rx->next);
    free(rx->accept);
    free(rx->final);
    free(rx);
}

int32_t pm_regex_start(const pm_regex *rx) { return 1; }

int32_t pm_regex_feed(const pm_regex *rx, int32_t st, const char *bytes, size_t n) {
    const unsigned char *b = (const unsigned char *)bytes;
    for (size_t i = 0; i < n && st; i++) st = rx->next[(size_t)st * rx->n_classes + rx->cls[b[i]]];
    return st;
}

void pm_regex_dfa_of(const pm_regex *rx, pm_regex_dfa *d) { *d = (pm_regex_dfa){rx->next, rx->cls, rx->accept, rx->final, rx->n_classes}; }

/* The slot of key in same_within's set: where it is, or the empty one its probe reached. */
static size_t same_slot(const uint64_t *set, size_t slots, uint64_t key) {
    size_t h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 40) & (slots - 1);
    while (set[h] && set[h] != key) h = (h + 1) & (slots - 1);
    return h;
}

static int same_walk(const pm_regex_dfa *d, int depth, int accepting, uint64_t *queue, uint64_t *set, size_t slots, int *n_out, int *steps) {
    int n = 1, level_end = 1, same = 1;
    for (int i = 0, at = 0; i < n && same; i++) {
        if (i == level_end) at++, level_end = n; /* the pairs from here on are met after at + 1 bytes */
        if (at == depth) break;
        if ((*steps -= 2 * d->n_classes) < 0) {
            same = 0;
            break;
        }
        const int32_t *ra = d->next + (size_t)(queue[i] >> 32) * d->n_classes, *rb = d->next + (size_t)(uint32_t)queue[i] * d->n_classes;
        for (int c = 0; c < d->n_classes && same; c++) {
            int32_t x = ra[c], y = rb[c];
            if ((x == 0) != (y == 0) || (accepting && d->accept[x] != d->accept[y])) same = 0;
            else if (x != y) {
                uint64_t key = (uint64_t)(uint32_t)x << 32 | (uint32_t)y;
                size_t h = same_slot(set, slots, key);
                if (set[h]) continue; /* met already, at no greater depth */
                if (n == PM_REGEX_SAME_PAIRS) same = 0;
                else set[h] = key, queue[n++] = key;
            }
        }
    }
    *n_out = n;
    return same;
}

int pm_regex_same_within(const pm_regex_dfa *d, int32_t a, int32_t b, int depth, int accepting, uint64_t *scratch, int *steps) {
    const size_t slots = PM_REGEX_SAME_SCRATCH - PM_REGEX_SAME_PAIRS; /* the set, twice the pairs' room */
    uint64_t *queue = scratch, *set = scratch + PM_REGEX_SAME_PAIRS;
    if (accepting && d->accept[a] != d->accept[b]) return 0;
    queue[0] = (uint64_t)(uint32_t)a << 32 | (uint32_t)b; /* not in the set: 0 there is an empty slot, and a pair's states are live */
    int n = 0, same = same_walk(d, depth, accepting, queue, set, slots, &n, steps);
    for (int i = n - 1; i >= 1; i--) set[same_slot(set, slots, queue[i])] = 0; /* the set left empty: latest first, so each is found */
    return same;
}

int pm_regex_accepts(const pm_regex *rx, int32_t st) { return rx->accept[st]; }
int pm_regex_final(const pm_regex *rx, int32_t st) { return rx->final[st]; }
int pm_regex_states(const pm_regex *rx) { return rx->n_states; }
size_t pm_regex_bytes(const pm_regex *rx) {
    return sizeof *rx + (size_t)rx->n_states * ((size_t)rx->n_classes * sizeof *rx->next + 2);
}

int pm_regex_fullmatch(const pm_regex *rx, const char *s, size_t n) { return pm_regex_accepts(rx, pm_regex_feed(rx, 1, s, n)); }

char *pm_regex_of_choices(const char *const *choices, int n, pm_err *e) {
    size_t len = 3;
    for (int i = 0; i < n; i++) len += 2 * strlen(choices[i]) + 1;
    char *p = malloc(len), *o = p;
    if (!p) {
        pm_errf(e, PM_ENOMEM, "out of memory for the choices' pattern");
        return NULL;
    }
    *o++ = '(';
    for (int i = 0; i < n; i++) {
        if (i) *o++ = '|';
        for (const char *c = choices[i]; *c; c++) {
            if (strchr("\\.^$|?*+()[]{}", *c)) *o++ = '\\';
            *o++ = *c;
        }
    }
    *o++ = ')';
    *o = 0;
    return p;
}
