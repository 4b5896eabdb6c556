/* grammar.c — an output held to a compiled grammar (grammar.h): parse threads over shared stacks,
 * fed a byte at a time, and a step's mask walked over the vocabulary's byte trie.
 *
 * A thread is a terminal DFA's state and the stack to go on with once the terminal is matched
 * (cont: a node {pos, parent}, 0 the empty stack: the root is then complete). Nodes are
 * hash-consed, so equal stacks are one id and threads dedupe by (terminal, state, cont). A parent
 * is always older than its node, which lets a state keep only the nodes its threads reach (in
 * order) after each token, and a mask drop the ones its trial walks made. */
#include "engine/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_internal.h"
#include "tok/tokenizer.h"

enum { DD_SIZE = 2 * PM_GRAMMAR_MAX_THREADS, WORK_LIMIT = 1 << 22 };

typedef struct g_node {
    int32_t pos, parent;
} g_node;

typedef struct g_thread {
    int32_t term, dfa, cont;
} g_thread;

struct pm_grammar_state {
    const pm_grammar *g;
    g_node *nodes;         /* [0] unused: id 0 is the empty stack */
    int n_nodes, cap_nodes;
    int32_t *hash;         /* node ids by (pos, parent); 0 empty */
    uint32_t hcap;
    g_thread *buf;         /* sets of threads: the current one first, [0, n_cur) */
    int n_buf, cap_buf, n_cur;
    int complete;          /* the root is complete where the output stands */
    uint32_t *dd_gen;      /* the set being built: which buf entries it holds, by hash */
    int32_t *dd_idx;
    uint32_t gen;
    uint32_t *ex_gen;      /* the set being built: the (rule, continuation) pairs it expanded, by hash */
    int32_t *ex_key;       /* pairs (rule, cont) */
    uint32_t ex_cap, ex_n, ex_at; /* ex_n: the pairs of set ex_at */
    int base;              /* where the set being built begins in buf */
    long work;
    pm_err *e;
};

/* ------------------------------------------------------------------ stacks */

static uint32_t hash2(int32_t a, int32_t b) {
    uint64_t x = (uint64_t)(uint32_t)a * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)b * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(x ^ x >> 29);
}

static int rehash(pm_grammar_state *st, uint32_t cap) {
    int32_t *h = calloc(cap, sizeof *h);
    if (!h) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse stacks");
    for (int id = 1; id < st->n_nodes; id++) {
        uint32_t i = hash2(st->nodes[id].pos, st->nodes[id].parent) & (cap - 1);
        while (h[i]) i = (i + 1) & (cap - 1);
        h[i] = id;
    }
    free(st->hash);
    st->hash = h;
    st->hcap = cap;
    return PM_OK;
}

/* The node {pos, parent}, made if new; < 0 on a limit. */
static int32_t intern(pm_grammar_state *st, int32_t pos, int32_t parent) {
    uint32_t i = hash2(pos, parent) & (st->hcap - 1);
    for (int32_t id; (id = st->hash[i]); i = (i + 1) & (st->hcap - 1))
        if (st->nodes[id].pos == pos && st->nodes[id].parent == parent) return id;
    if (st->n_nodes >= PM_GRAMMAR_MAX_NODES)
        return pm_errf(st->e, PM_ELIMIT, "grammar: the parse stacks outgrew %d nodes", PM_GRAMMAR_MAX_NODES);
    if (st->n_nodes == st->cap_nodes) {
        int c = st->cap_nodes * 2;
        g_node *n = realloc(st->nodes, sizeof *n * (size_t)c);
        if (!n) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse stacks");
        st->nodes = n;
        st->cap_nodes = c;
    }
    int32_t id = st->n_nodes++;
    st->nodes[id] = (g_node){pos, parent};
    st->hash[i] = id;
    if ((uint32_t)st->n_nodes * 2 > st->hcap && rehash(st, st->hcap * 2)) return st->e->code;
    return id;
}

/* ------------------------------------------------------------------ thread sets */

static void set_begin(pm_grammar_state *st) {
    st->base = st->n_buf;
    if (++st->gen == 0) { /* wrapped: forget every stamp */
        memset(st->dd_gen, 0, sizeof *st->dd_gen * DD_SIZE);
        memset(st->ex_gen, 0, sizeof *st->ex_gen * st->ex_cap);
        st->gen = 1;
    }
}

/* 1 when the set being built has expanded rule with continuation cont already (expanding it again
 * adds nothing: the same threads, the same completions), else 0 and the pair noted: what ends a
 * cycle of calls that write nothing and push nothing (s ::= x s | "" with x able to be empty);
 * < 0 out of memory. */
static int expanded(pm_grammar_state *st, int32_t rule, int32_t cont) {
    if (st->ex_at != st->gen) st->ex_at = st->gen, st->ex_n = 0;
    if ((st->ex_n + 1) * 2 > st->ex_cap) { /* grown, this set's pairs kept */
        uint32_t cap = st->ex_cap * 2, *gen = calloc(cap, sizeof *gen);
        int32_t *key = malloc(sizeof *key * 2 * cap);
        if (!gen || !key) {
            free(gen);
            free(key);
            return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
        }
        for (uint32_t j = 0; j < st->ex_cap; j++) {
            if (st->ex_gen[j] != st->gen) continue;
            uint32_t i = hash2(st->ex_key[2 * j], st->ex_key[2 * j + 1]) & (cap - 1);
            while (gen[i] == st->gen) i = (i + 1) & (cap - 1);
            gen[i] = st->gen, key[2 * i] = st->ex_key[2 * j], key[2 * i + 1] = st->ex_key[2 * j + 1];
        }
        free(st->ex_gen);
        free(st->ex_key);
        st->ex_gen = gen, st->ex_key = key, st->ex_cap = cap;
    }
    uint32_t i = hash2(rule, cont) & (st->ex_cap - 1);
    for (; st->ex_gen[i] == st->gen; i = (i + 1) & (st->ex_cap - 1))
        if (st->ex_key[2 * i] == rule && st->ex_key[2 * i + 1] == cont) return 1;
    st->ex_gen[i] = st->gen, st->ex_key[2 * i] = rule, st->ex_key[2 * i + 1] = cont;
    st->ex_n++;
    return 0;
}

static int set_add(pm_grammar_state *st, int32_t term, int32_t dfa, int32_t cont) {
    uint32_t i = (hash2(term, dfa) ^ hash2(cont, 0x5bd1e995)) & (DD_SIZE - 1);
    for (; st->dd_gen[i] == st->gen; i = (i + 1) & (DD_SIZE - 1)) {
        const g_thread *t = &st->buf[st->dd_idx[i]];
        if (t->term == term && t->dfa == dfa && t->cont == cont) return PM_OK;
    }
    if (st->n_buf - st->base >= PM_GRAMMAR_MAX_THREADS)
        return pm_errf(st->e, PM_ELIMIT, "grammar: more than %d parse threads at one place (a very ambiguous grammar)", PM_GRAMMAR_MAX_THREADS);
    if (st->n_buf == st->cap_buf) {
        int c = st->cap_buf * 2;
        g_thread *b = realloc(st->buf, sizeof *b * (size_t)c);
        if (!b) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
        st->buf = b;
        st->cap_buf = c;
    }
    st->dd_gen[i] = st->gen;
    st->dd_idx[i] = st->n_buf;
    st->buf[st->n_buf++] = (g_thread){term, dfa, cont};
    return PM_OK;
}

/* The threads that start at elems[pos] with parent below it, into the set being built (the root
 * complete there: *complete). */
static int closure_at(pm_grammar_state *st, int32_t pos, int32_t parent, int *complete, int depth);

static int closure(pm_grammar_state *st, int32_t pos, int32_t parent, int *complete) { return closure_at(st, pos, parent, complete, 0); }

static int closure_at(pm_grammar_state *st, int32_t pos, int32_t parent, int *complete, int depth) {
    const pm_grammar *g = st->g;
    if (++st->work > WORK_LIMIT)
        return pm_errf(st->e, PM_ELIMIT, "grammar: more than %d expansions for one byte (a very ambiguous grammar)", WORK_LIMIT);
    if (depth > PM_GRAMMAR_MAX_DEPTH) /* the C stack's bound: a pop through that many levels that can all be empty */
        return pm_errf(st->e, PM_ELIMIT, "grammar: more than %d levels of rules expand at one byte", PM_GRAMMAR_MAX_DEPTH);
    const g_elem *el = &g->elems[pos];
    if (el->kind == G_END) {
        if (!parent) {
            *complete = 1;
            return PM_OK;
        }
        g_node n = st->nodes[parent];
        return closure_at(st, n.pos, n.parent, complete, depth + 1);
    }
    /* what follows the element: a call in last position returns straight to the parent */
    int32_t next = g->elems[pos + 1].kind == G_END ? parent : intern(st, pos + 1, parent);
    if (next < 0) return st->e->code;
    if (el->kind == G_TERM) {
        const pm_regex *rx = g->terms[el->arg];
        int32_t s = g->term_start[el->arg];
        if (!pm_regex_final(rx, s) && set_add(st, el->arg, s, next)) return st->e->code;
        return pm_regex_accepts(rx, s) ? closure_at(st, pos + 1, parent, complete, depth + 1) : PM_OK;
    }
    int seen = expanded(st, el->arg, next);
    if (seen) return seen < 0 ? seen : PM_OK;
    for (int a = g->rule_alt[el->arg]; a < g->rule_alt[el->arg + 1]; a++)
        if (closure_at(st, g->alt_start[a], next, complete, depth + 1)) return st->e->code;
    return PM_OK;
}

/* The set [lo, hi) of buf after one more byte, into the set being built. */
static int step_byte(pm_grammar_state *st, int lo, int hi, unsigned char byte, int *complete) {
    const pm_grammar *g = st->g;
    char c = (char)byte;
    for (int i = lo; i < hi; i++) {
        g_thread th = st->buf[i];
        const pm_regex *rx = g->terms[th.term];
        int32_t s = pm_regex_feed(rx, th.dfa, &c, 1);
        if (!s) continue;
        if (!pm_regex_final(rx, s) && set_add(st, th.term, s, th.cont)) return st->e->code;
        if (!pm_regex_accepts(rx, s)) continue;
        if (!th.cont) *complete = 1;
        else if (closure(st, st->nodes[th.cont].pos, st->nodes[th.cont].parent, complete)) return st->e->code;
    }
    return PM_OK;
}

/* Keeps only the nodes the current threads reach, renumbered in order (a parent stays older). */
static int compact(pm_grammar_state *st) {
    int n = st->n_nodes;
    int32_t *map = calloc((size_t)n, sizeof *map);
    if (!map) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse stacks");
    for (int i = 0; i < st->n_cur; i++)
        for (int32_t id = st->buf[i].cont; id && !map[id]; id = st->nodes[id].parent) map[id] = -1;
    int k = 1;
    for (int id = 1; id < n; id++)
        if (map[id]) {
            st->nodes[k] = (g_node){st->nodes[id].pos, st->nodes[id].parent ? map[st->nodes[id].parent] : 0};
            map[id] = k++;
        }
    for (int i = 0; i < st->n_cur; i++) st->buf[i].cont = st->buf[i].cont ? map[st->buf[i].cont] : 0;
    free(map);
    st->n_nodes = k;
    uint32_t cap = 1024;
    while (cap < (uint32_t)k * 2) cap *= 2;
    return rehash(st, cap);
}

/* ------------------------------------------------------------------ states */

void pm_grammar_state_free(pm_grammar_state *st) {
    if (!st) return;
    free(st->nodes);
    free(st->hash);
    free(st->buf);
    free(st->dd_gen);
    free(st->dd_idx);
    free(st->ex_gen);
    free(st->ex_key);
    free(st);
}

pm_grammar_state *pm_grammar_start(const pm_grammar *g, pm_err *e) {
    pm_grammar_state *st = calloc(1, sizeof *st);
    if (!st) {
        pm_errf(e, PM_ENOMEM, "grammar: out of memory");
        return NULL;
    }
    st->g = g;
    st->e = e;
    st->cap_nodes = 256;
    st->n_nodes = 1;
    st->cap_buf = 256;
    st->nodes = malloc(sizeof *st->nodes * (size_t)st->cap_nodes);
    st->buf = malloc(sizeof *st->buf * (size_t)st->cap_buf);
    st->dd_gen = calloc(DD_SIZE, sizeof *st->dd_gen);
    st->dd_idx = malloc(sizeof *st->dd_idx * DD_SIZE);
    st->ex_cap = 256;
    st->ex_gen = calloc(st->ex_cap, sizeof *st->ex_gen);
    st->ex_key = malloc(sizeof *st->ex_key * 2 * st->ex_cap);
    if (!st->nodes || !st->buf || !st->dd_gen || !st->dd_idx || !st->ex_gen || !st->ex_key || rehash(st, 1024)) {
        pm_errf(e, PM_ENOMEM, "grammar: out of memory");
        pm_grammar_state_free(st);
        return NULL;
    }
    set_begin(st);
    int rc = 0;
    st->work = 0;
    for (int a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1] && !rc; a++) rc = closure(st, g->alt_start[a], 0, &st->complete);
    st->n_cur = st->n_buf;
    if (rc || compact(st)) {
        pm_grammar_state_free(st);
        return NULL;
    }
    return st;
}

int pm_grammar_feed(pm_grammar_state *st, const char *bytes, size_t n, pm_err *e) {
    st->e = e;
    for (size_t k = 0; k < n && (st->n_cur || st->complete); k++) {
        int complete = 0;
        st->work = 0; /* the expansion limit is per byte, as the mask's */
        st->n_buf = st->n_cur;
        set_begin(st);
        if (step_byte(st, 0, st->n_cur, (unsigned char)bytes[k], &complete)) return e->code;
        int m = st->n_buf - st->n_cur;
        memmove(st->buf, st->buf + st->n_cur, sizeof *st->buf * (size_t)m);
        st->n_cur = st->n_buf = m;
        st->complete = complete;
    }
    if (n && compact(st)) return e->code;
    return st->n_cur || st->complete;
}

int pm_grammar_accepts(const pm_grammar_state *st) { return st->complete; }
int pm_grammar_final(const pm_grammar_state *st) { return st->complete && !st->n_cur; }

int pm_grammar_fullmatch(const pm_grammar *g, const char *s, size_t n, pm_err *e) {
    pm_grammar_state *st = pm_grammar_start(g, e);
    if (!st) return e->code;
    int rc = pm_grammar_feed(st, s, n, e);
    if (rc >= 0) rc = pm_grammar_accepts(st);
    pm_grammar_state_free(st);
    return rc;
}

/* ------------------------------------------------------------------ the vocabulary's trie */

typedef struct gv_node {
    uint32_t child, n_child; /* children: nodes[child, child + n_child), by byte */
    uint32_t tok, n_tok;     /* tokens that end here: ids[tok, tok + n_tok) */
    uint8_t byte;
} gv_node;

struct pm_grammar_vocab {
    int vocab;
    gv_node *nodes;
    uint32_t n_nodes;
    int32_t *ids; /* usable tokens sorted by their bytes */
};

void pm_grammar_vocab_free(pm_grammar_vocab *gv) {
    if (!gv) return;
    free(gv->nodes);
    free(gv->ids);
    free(gv);
}

typedef struct gv_build {
    const char *const *tok;
    const size_t *len;
    pm_grammar_vocab *gv;
} gv_build;

static int cmp_tok(const void *a, const void *b, void *arg) {
    const gv_build *B = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = B->len[x], ly = B->len[y];
    int c = memcmp(B->tok[x], B->tok[y], lx < ly ? lx : ly);
    return c ? c : lx < ly ? -1 : lx > ly ? 1 : x - y;
}

/* Node u holds the sorted tokens [lo, hi), which share their first d bytes. */
static void build_node(const gv_build *B, uint32_t u, uint32_t lo, uint32_t hi, size_t d) {
    pm_grammar_vocab *gv = B->gv;
    uint32_t i = lo;
    while (i < hi && B->len[gv->ids[i]] == d) i++;
    gv->nodes[u].tok = lo;
    gv->nodes[u].n_tok = i - lo;
    uint32_t groups = 0;
    for (uint32_t j = i; j < hi; j++)
        if (j == i || B->tok[gv->ids[j]][d] != B->tok[gv->ids[j - 1]][d]) groups++;
    gv->nodes[u].child = gv->n_nodes;
    gv->nodes[u].n_child = groups;
    uint32_t c = gv->n_nodes;
    gv->n_nodes += groups;
    for (uint32_t j = i; j < hi; c++) {
        uint32_t k = j;
        unsigned char b = (unsigned char)B->tok[gv->ids[j]][d];
        while (k < hi && (unsigned char)B->tok[gv->ids[k]][d] == b) k++;
        gv->nodes[c].byte = b;
        build_node(B, c, j, k, d + 1);
        j = k;
    }
}

pm_grammar_vocab *pm_grammar_vocab_from(const char *const *tokens, const size_t *len, int vocab) {
    pm_grammar_vocab *gv = calloc(1, sizeof *gv);
    if (!gv) return NULL;
    gv->vocab = vocab;
    size_t total = 1;
    int n = 0;
    for (int v = 0; v < vocab; v++)
        if (tokens[v] && len[v]) total += len[v], n++;
    gv->ids = malloc(sizeof *gv->ids * (size_t)(n ? n : 1));
    gv->nodes = calloc(total, sizeof *gv->nodes);
    if (!gv->ids || !gv->nodes || total > UINT32_MAX) {
        pm_grammar_vocab_free(gv);
        return NULL;
    }
    n = 0;
    for (int v = 0; v < vocab; v++)
        if (tokens[v] && len[v]) gv->ids[n++] = v;
    gv_build B = {tokens, len, gv};
    qsort_r(gv->ids, (size_t)n, sizeof *gv->ids, cmp_tok, &B);
    gv->n_nodes = 1;
    build_node(&B, 0, 0, (uint32_t)n, 0);
    return gv;
}

pm_grammar_vocab *pm_grammar_vocab_new(const pm_tokenizer *tok, int vocab) {
    const char **t = calloc((size_t)vocab, sizeof *t);
    size_t *len = calloc((size_t)vocab, sizeof *len);
    pm_grammar_vocab *gv = NULL;
    if (t && len) {
        for (int v = 0; v < vocab; v++)
            if (!pm_tok_is_special(tok, v)) t[v] = pm_tok_token_bytes(tok, v, &len[v]);
        gv = pm_grammar_vocab_from(t, len, vocab);
    }
    free(t);
    free(len);
    return gv;
}

/* ------------------------------------------------------------------ the mask */

/* The tokens below trie node u, the threads [lo, hi) having read u's bytes. */
static int walk(pm_grammar_state *st, const pm_grammar_vocab *gv, const gv_node *u, int lo, int hi, uint8_t *allow) {
    for (uint32_t k = 0; k < u->n_child; k++) {
        const gv_node *c = &gv->nodes[u->child + k];
        int complete = 0;
        int base = st->n_buf;
        set_begin(st);
        st->work = 0;
        if (step_byte(st, lo, hi, c->byte, &complete)) return st->e->code;
        int end = st->n_buf;
        if (end > base || complete)
            for (uint32_t t = 0; t < c->n_tok; t++) allow[gv->ids[c->tok + t]] = 1;
        if (end > base && c->n_child && walk(st, gv, c, base, end, allow)) return st->e->code;
        st->n_buf = base;
    }
    return PM_OK;
}

int pm_grammar_mask(pm_grammar_state *st, const pm_grammar_vocab *gv, const int32_t *eos, int n_eos, float *logits, uint8_t *allow,
                    pm_err *e) {
    int vocab = gv->vocab;
    st->e = e;
    memset(allow, 0, (size_t)vocab);
    int mark = st->n_nodes;
    st->n_buf = st->n_cur;
    int rc = st->n_cur ? walk(st, gv, &gv->nodes[0], 0, st->n_cur, allow) : PM_OK;
    st->n_buf = st->n_cur;
    if (st->n_nodes > mark) { /* forget the trial walks' nodes */
        st->n_nodes = mark;
        if (rehash(st, st->hcap) && !rc) rc = e->code;
    }
    if (rc) return rc;
    for (int i = 0; i < n_eos; i++) /* the end: only where the root is complete */
        if (eos[i] >= 0 && eos[i] < vocab) allow[eos[i]] = (uint8_t)st->complete;
    for (int v = 0; v < vocab; v++)
        if (!allow[v]) logits[v] = -INFINITY;
    return PM_OK;
}
