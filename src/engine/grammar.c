/* grammar.c — an output held to a compiled grammar (grammar.h): parse threads over shared stacks,
 * fed a byte at a time, and a step's mask walked over the vocabulary's byte trie.
 *
 * A thread is a terminal DFA's state and the stack to go on with once the terminal is matched
 * (cont: a node {pos, parent}, 0 the empty stack: the root is then complete). Nodes are
 * hash-consed, so equal stacks are one id and threads dedupe by (terminal, state, cont). A parent
 * is always older than its node, which lets a state keep only the nodes its threads reach (in
 * order) after each token, and a mask drop the ones its trial walks made.
 *
 * Two caches keep a mask from redoing work (both give the walk's answer, only sooner; tests compare
 * them with the plain walk, pm_grammar_set_plain):
 * - a stack's closure (the threads that start once a terminal before it is matched) is the same
 *   wherever in the trie it is reached, so it is made once per node per mask or feed (memo); in a
 *   mask's walk it enters a set as one reference thread (G_REF), whose threads after each byte are
 *   stepped once per (node, byte) (after_of): after a name in a Lark grammar with %ignore, the
 *   closure's few threads that a letter kills are not stepped again at every trie node;
 * - a thread's fate over a token depends on its stack only where its terminal may end before a byte
 *   that may begin what follows it (the first bytes of its stack's closure): elsewhere the
 *   terminal's DFA alone decides. So each (terminal, state, those bytes) a thread stands in gets,
 *   once per parse state, the tokens that DFA reads whole without such a place on the way (kept for
 *   sure) and the trie nodes of those places; a mask ORs its threads' sure tokens and walks the
 *   trie only down to those nodes, and below them as before. Inside a JSON string or free text that
 *   leaves the few tokens that close it to the walk; after a name in a Lark grammar of sums, whose
 *   letters never end it where spaces, operators and brackets follow, the tokens that hold one of
 *   those after a letter (0.16 ms a mask over 200k tokens, 5.3 ms when the classes stopped at the
 *   first place the name's DFA accepts). A class reads of its state only which strings as long as
 *   a token keep the DFA alive and where it accepts, so a new state that no such string tells apart
 *   from a recent class's (pm_regex_same_within) shares that class: a count's states, one a
 *   character ([^"]{0,1000}), until the count's end is within a token's reach (3.4 -> 0.13 ms a
 *   mask along an answer). */
#include "engine/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "engine/grammar_internal.h"
#include "tok/tokenizer.h"
#include "util/bits.h"

enum { DD_SIZE = 2 * PM_GRAMMAR_MAX_THREADS, WORK_LIMIT = 1 << 22, CLASS_SLOTS = 512, FOLLOW_THREADS = 64, G_REF = -1 };
/* A new class first looks among the CLASS_RECENT classes made last for one of the same terminal and
 * follow whose DFA state no token tells apart from its own (a count's states), within SAME_STEPS
 * DFA steps (~0.1 ms; a class made afresh walks the whole trie, ~3 ms over 200k tokens). */
enum { CLASS_RECENT = 8, SAME_STEPS = 1 << 17 };

typedef struct g_node {
    int32_t pos, parent;
} g_node;

typedef struct g_thread {
    int32_t term, dfa, cont;
} g_thread;

/* What dedupes the thread set being built: its threads, and the (rule, continuation) pairs it
 * expanded, stamped with the set's generation. */
typedef struct g_setb {
    uint32_t *dd_gen; /* buf entries it holds, by hash */
    int32_t *dd_idx;
    uint32_t gen;
    uint32_t *ex_gen; /* pairs (rule, cont), by hash */
    int32_t *ex_key;
    uint32_t ex_cap, ex_n, ex_at; /* ex_n: the pairs of set ex_at */
    int base;                     /* where the set begins in buf */
} g_setb;

/* A stack's closure made once (key: its node; 0 an empty slot): threads[off, off + n). */
typedef struct g_memo {
    int32_t cont, complete;
    uint32_t off, n;
} g_memo;

/* A memoised closure after one more byte (key: its node, 0 an empty slot, and the byte): the
 * threads aft_th[off, off + n), and whether the root completes. */
typedef struct g_after {
    int32_t cont, byte, complete;
    uint32_t off, n;
} g_after;

/* A thread's tokens read by its terminal alone from state dfa, follow the bytes that may begin what
 * follows the terminal (term < 0: an empty slot). */
typedef struct g_class {
    int32_t term, dfa;
    uint64_t follow[4];
    uint64_t *sure;     /* [words] token ids the terminal's DFA reads whole, never ending before a
                           byte that may begin what follows it: kept */
    uint32_t *first;    /* trie nodes (ascending) whose byte may follow the terminal's match: the walk's */
    uint32_t n_first;
    uint32_t stamp;     /* the last mask that took it */
    int alias;          /* sure and first are another slot's (cleared with it) */
} g_class;

struct pm_grammar_state {
    const pm_grammar *g;
    g_node *nodes;         /* [0] unused: id 0 is the empty stack */
    int n_nodes, cap_nodes;
    int32_t *hash;         /* node ids by (pos, parent); 0 empty */
    uint32_t hcap;
    g_thread *buf;         /* sets of threads: the current one first, [0, n_cur) */
    int n_buf, cap_buf, n_cur;
    int complete;          /* the root is complete where the output stands */
    g_setb sb[3], *sets;   /* the set being built (sb[1]: a closure being memoised, sb[2]: one stepped) */
    g_memo *memo;          /* closures by stack node, valid while the node ids are */
    uint32_t memo_cap, memo_n;
    g_thread *memo_th;
    uint32_t memo_th_n, memo_th_cap;
    int refs;              /* a mask's walk: closures enter its sets as one reference thread each */
    g_after *aft;          /* closures after a byte, by (node, byte) */
    uint32_t aft_cap, aft_n;
    g_thread *aft_th;
    uint32_t aft_th_n, aft_th_cap;
    const struct pm_grammar_vocab *cls_gv; /* the trie the classes index */
    g_class *cls;          /* [CLASS_SLOTS] */
    uint32_t n_cls, cls_stamp;
    uint32_t recent[CLASS_RECENT], n_recent; /* the slots of the classes made last, the latest at n_recent - 1 (mod) */
    uint64_t *same;        /* pm_regex_same_within's scratch */
    size_t cls_bytes;
    uint64_t *sure;        /* a mask's union of its threads' sure tokens */
    uint32_t *first, n_first, cap_first; /* and of their first nodes */
    int cls_skip;          /* masks to walk whole: the last one's set alone outgrew the class cache */
    int plain;             /* no caches: the walk alone (tests) */
    long work;
    long mask_steps;       /* threads the mask being made has stepped (PM_GRAMMAR_MAX_MASK_STEPS) */
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
    g_setb *sb = st->sets;
    sb->base = st->n_buf;
    if (++sb->gen == 0) { /* wrapped: forget every stamp */
        memset(sb->dd_gen, 0, sizeof *sb->dd_gen * DD_SIZE);
        memset(sb->ex_gen, 0, sizeof *sb->ex_gen * sb->ex_cap);
        sb->gen = 1;
    }
}

static void setb_free(g_setb *sb) {
    free(sb->dd_gen);
    free(sb->dd_idx);
    free(sb->ex_gen);
    free(sb->ex_key);
    memset(sb, 0, sizeof *sb);
}

/* A set builder's tables (sb[1] and sb[2] made when first needed). */
static int setb_init(g_setb *sb) {
    sb->dd_gen = calloc(DD_SIZE, sizeof *sb->dd_gen);
    sb->dd_idx = malloc(sizeof *sb->dd_idx * DD_SIZE);
    sb->ex_cap = 256;
    sb->ex_gen = calloc(sb->ex_cap, sizeof *sb->ex_gen);
    sb->ex_key = malloc(sizeof *sb->ex_key * 2 * sb->ex_cap);
    if (sb->dd_gen && sb->dd_idx && sb->ex_gen && sb->ex_key) return PM_OK;
    setb_free(sb);
    return PM_ENOMEM;
}

/* 1 when the set being built has expanded rule with continuation cont already (expanding it again
 * adds nothing: the same threads, the same completions), else 0 and the pair noted: what ends a
 * cycle of calls that write nothing and push nothing (s ::= x s | "" with x able to be empty);
 * < 0 out of memory. */
static int expanded(pm_grammar_state *st, int32_t rule, int32_t cont) {
    g_setb *sb = st->sets;
    if (sb->ex_at != sb->gen) sb->ex_at = sb->gen, sb->ex_n = 0;
    if ((sb->ex_n + 1) * 2 > sb->ex_cap) { /* grown, this set's pairs kept */
        uint32_t cap = sb->ex_cap * 2, *gen = calloc(cap, sizeof *gen);
        int32_t *key = malloc(sizeof *key * 2 * cap);
        if (!gen || !key) {
            free(gen);
            free(key);
            return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
        }
        for (uint32_t j = 0; j < sb->ex_cap; j++) {
            if (sb->ex_gen[j] != sb->gen) continue;
            uint32_t i = hash2(sb->ex_key[2 * j], sb->ex_key[2 * j + 1]) & (cap - 1);
            while (gen[i] == sb->gen) i = (i + 1) & (cap - 1);
            gen[i] = sb->gen, key[2 * i] = sb->ex_key[2 * j], key[2 * i + 1] = sb->ex_key[2 * j + 1];
        }
        free(sb->ex_gen);
        free(sb->ex_key);
        sb->ex_gen = gen, sb->ex_key = key, sb->ex_cap = cap;
    }
    uint32_t i = hash2(rule, cont) & (sb->ex_cap - 1);
    for (; sb->ex_gen[i] == sb->gen; i = (i + 1) & (sb->ex_cap - 1))
        if (sb->ex_key[2 * i] == rule && sb->ex_key[2 * i + 1] == cont) return 1;
    sb->ex_gen[i] = sb->gen, sb->ex_key[2 * i] = rule, sb->ex_key[2 * i + 1] = cont;
    sb->ex_n++;
    return 0;
}

static int set_add(pm_grammar_state *st, int32_t term, int32_t dfa, int32_t cont) {
    g_setb *sb = st->sets;
    uint32_t i = (hash2(term, dfa) ^ hash2(cont, 0x5bd1e995)) & (DD_SIZE - 1);
    for (; sb->dd_gen[i] == sb->gen; i = (i + 1) & (DD_SIZE - 1)) {
        const g_thread *t = &st->buf[sb->dd_idx[i]];
        if (t->term == term && t->dfa == dfa && t->cont == cont) return PM_OK;
    }
    if (st->n_buf - sb->base >= PM_GRAMMAR_MAX_THREADS)
        return pm_errf(st->e, PM_ELIMIT, "grammar: more than %d parse threads at one place (a very ambiguous grammar)", PM_GRAMMAR_MAX_THREADS);
    if (st->n_buf == st->cap_buf) {
        int c = st->cap_buf * 2;
        g_thread *b = realloc(st->buf, sizeof *b * (size_t)c);
        if (!b) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
        st->buf = b;
        st->cap_buf = c;
    }
    sb->dd_gen[i] = sb->gen;
    sb->dd_idx[i] = st->n_buf;
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

/* ------------------------------------------------------------------ closures made once */

enum { MEMO_SLOTS_MAX = 1 << 16, MEMO_THREADS_MAX = 1 << 18 };

static void after_clear(pm_grammar_state *st);

static void memo_clear(pm_grammar_state *st) {
    if (st->memo_n) memset(st->memo, 0, sizeof *st->memo * st->memo_cap);
    st->memo_n = st->memo_th_n = 0;
    after_clear(st);
}

static g_memo *memo_slot(pm_grammar_state *st, int32_t cont) {
    uint32_t i = hash2(cont, 0x27d4eb2f) & (st->memo_cap - 1);
    while (st->memo[i].cont && st->memo[i].cont != cont) i = (i + 1) & (st->memo_cap - 1);
    return &st->memo[i];
}

/* An array of threads (*cap of them, a power of two) grown to hold need. */
static int thread_room(pm_grammar_state *st, g_thread **arr, uint32_t *cap, uint32_t need) {
    if (need <= *cap) return PM_OK;
    uint32_t c = *cap;
    while (c < need) c *= 2;
    g_thread *t = realloc(*arr, sizeof *t * c);
    if (!t) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
    *arr = t, *cap = c;
    return PM_OK;
}

/* Room for one more closure of m threads; 0 when the memo is full (the closure is then made in
 * place), < 0 out of memory. */
static int memo_room(pm_grammar_state *st, uint32_t m) {
    if ((st->memo_n + 1) * 2 > st->memo_cap) {
        if (st->memo_cap >= MEMO_SLOTS_MAX) return 0;
        g_memo *old = st->memo;
        uint32_t old_cap = st->memo_cap;
        if (!(st->memo = calloc(2 * (size_t)old_cap, sizeof *st->memo))) {
            st->memo = old;
            return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
        }
        st->memo_cap = 2 * old_cap;
        for (uint32_t j = 0; j < old_cap; j++)
            if (old[j].cont) *memo_slot(st, old[j].cont) = old[j];
        free(old);
    }
    if (st->memo_th_n + m > MEMO_THREADS_MAX) return 0;
    return thread_room(st, &st->memo_th, &st->memo_th_cap, st->memo_th_n + m) ? st->e->code : 1;
}

/* The memoised closure of stack node cont (> 0), made (in a set of its own, sb[1]) if new: *out is
 * NULL when the memo is full. Valid while the node ids hold. */
static int memo_of(pm_grammar_state *st, int32_t cont, const g_memo **out) {
    g_memo *m = memo_slot(st, cont);
    *out = NULL;
    if (!m->cont) {
        g_node n = st->nodes[cont];
        g_setb *outer = st->sets;
        int at = st->n_buf, c = 0;
        if (!st->sb[1].dd_gen && setb_init(&st->sb[1])) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
        st->sets = &st->sb[1];
        set_begin(st);
        int rc = closure(st, n.pos, n.parent, &c);
        st->sets = outer;
        uint32_t k = (uint32_t)(st->n_buf - at);
        if (!rc && (rc = memo_room(st, k)) > 0) {
            memcpy(st->memo_th + st->memo_th_n, st->buf + at, sizeof *st->buf * k);
            *memo_slot(st, cont) = (g_memo){cont, c, st->memo_th_n, k};
            st->memo_th_n += k;
            st->memo_n++;
            rc = 0;
        }
        st->n_buf = at;
        if (rc < 0) return rc;
        m = memo_slot(st, cont); /* the table may have grown */
    }
    *out = m->cont ? m : NULL;
    return PM_OK;
}

/* The closure of stack node cont (> 0), into the set being built: made once while the node ids
 * hold, then added from the memo. */
static int closure_of(pm_grammar_state *st, int32_t cont, int *complete) {
    g_node n = st->nodes[cont];
    if (st->plain) return closure(st, n.pos, n.parent, complete);
    const g_memo *m;
    if (memo_of(st, cont, &m)) return st->e->code;
    if (!m) return closure(st, n.pos, n.parent, complete); /* the memo is full */
    if (m->complete) *complete = 1;
    if (st->refs && m->n) return set_add(st, G_REF, 0, cont); /* stepped by after_of */
    for (uint32_t k = 0; k < m->n; k++) {
        const g_thread *t = &st->memo_th[m->off + k];
        if (set_add(st, t->term, t->dfa, t->cont)) return st->e->code;
    }
    return PM_OK;
}

static int step_byte(pm_grammar_state *st, int lo, int hi, unsigned char byte, int *complete);

static g_after *after_slot(pm_grammar_state *st, int32_t cont, int byte) {
    uint32_t i = hash2(cont, byte) & (st->aft_cap - 1);
    while (st->aft[i].cont && (st->aft[i].cont != cont || st->aft[i].byte != byte)) i = (i + 1) & (st->aft_cap - 1);
    return &st->aft[i];
}

static void after_clear(pm_grammar_state *st) {
    if (st->aft_n) memset(st->aft, 0, sizeof *st->aft * st->aft_cap);
    st->aft_n = st->aft_th_n = 0;
}

/* Stores the threads buf[from, to) as cont's closure after byte; full: the table begins again (its
 * entries are copied into sets as they are read, none held). */
static int after_store(pm_grammar_state *st, int32_t cont, int byte, int from, int to, int complete) {
    uint32_t k = (uint32_t)(to - from);
    if ((st->aft_n + 1) * 2 > st->aft_cap || st->aft_th_n + k > st->aft_th_cap) {
        if (st->aft_th_n + k > MEMO_THREADS_MAX / 4 || st->aft_cap >= MEMO_SLOTS_MAX) after_clear(st);
        if ((st->aft_n + 1) * 2 > st->aft_cap) { /* grown: the entries are remade as they are needed */
            g_after *a = calloc(2 * (size_t)st->aft_cap, sizeof *a);
            if (!a) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
            free(st->aft);
            st->aft = a, st->aft_cap *= 2, st->aft_n = st->aft_th_n = 0;
        }
        if (thread_room(st, &st->aft_th, &st->aft_th_cap, st->aft_th_n + k)) return st->e->code;
    }
    memcpy(st->aft_th + st->aft_th_n, st->buf + from, sizeof *st->buf * k);
    *after_slot(st, cont, byte) = (g_after){cont, byte, complete, st->aft_th_n, k};
    st->aft_th_n += k;
    st->aft_n++;
    return PM_OK;
}

/* A reference thread (G_REF) after byte: its closure's threads stepped (in a set of their own,
 * sb[2]) once per (node, byte) while the node ids hold, then added from there. */
static int after_of(pm_grammar_state *st, int32_t cont, unsigned char byte, int *complete) {
    g_after *a = after_slot(st, cont, byte);
    if (!a->cont) {
        const g_memo *m = memo_slot(st, cont); /* made when the reference was */
        int at = st->n_buf, n = (int)m->n, c = 0;
        while (st->cap_buf < at + n) {
            g_thread *b = realloc(st->buf, sizeof *b * (size_t)st->cap_buf * 2);
            if (!b) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
            st->buf = b, st->cap_buf *= 2;
        }
        if (!st->sb[2].dd_gen && setb_init(&st->sb[2])) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the parse threads");
        memcpy(st->buf + at, st->memo_th + m->off, sizeof *st->buf * (size_t)n);
        st->n_buf = at + n;
        g_setb *outer = st->sets;
        st->sets = &st->sb[2];
        set_begin(st);
        int rc = step_byte(st, at, at + n, byte, &c);
        st->sets = outer;
        if (!rc) rc = after_store(st, cont, byte, at + n, st->n_buf, c);
        st->n_buf = at;
        if (rc) return rc;
        a = after_slot(st, cont, byte);
    }
    if (a->complete) *complete = 1;
    for (uint32_t k = 0; k < a->n; k++) {
        const g_thread *t = &st->aft_th[a->off + k];
        if (set_add(st, t->term, t->dfa, t->cont)) return st->e->code;
    }
    return PM_OK;
}

/* The set [lo, hi) of buf after one more byte, into the set being built. */
static int step_byte(pm_grammar_state *st, int lo, int hi, unsigned char byte, int *complete) {
    const pm_grammar *g = st->g;
    for (int i = lo; i < hi; i++) {
        g_thread th = st->buf[i];
        if (th.term == G_REF) {
            if (after_of(st, th.cont, byte, complete)) return st->e->code;
            continue;
        }
        const pm_regex_dfa *d = &g->dfa[th.term];
        int32_t s = pm_regex_dfa_step(d, th.dfa, byte);
        if (!s) continue;
        if (!d->final[s] && set_add(st, th.term, s, th.cont)) return st->e->code;
        if (!d->accept[s]) continue;
        if (!th.cont) *complete = 1;
        else if (closure_of(st, th.cont, complete)) return st->e->code;
    }
    return PM_OK;
}

/* Keeps only the nodes the current threads reach, renumbered in order (a parent stays older). */
static int compact(pm_grammar_state *st) {
    memo_clear(st); /* its node ids change */
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

static void classes_clear(pm_grammar_state *st);

void pm_grammar_state_free(pm_grammar_state *st) {
    if (!st) return;
    if (st->cls) classes_clear(st);
    free(st->cls);
    free(st->same);
    free(st->sure);
    free(st->first);
    free(st->memo);
    free(st->memo_th);
    free(st->aft);
    free(st->aft_th);
    free(st->nodes);
    free(st->hash);
    free(st->buf);
    for (int i = 0; i < 3; i++) setb_free(&st->sb[i]);
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
    st->sets = &st->sb[0];
    st->memo_cap = 256;
    st->memo = calloc(st->memo_cap, sizeof *st->memo);
    st->memo_th_cap = 1024;
    st->memo_th = malloc(sizeof *st->memo_th * st->memo_th_cap);
    st->aft_cap = 256;
    st->aft = calloc(st->aft_cap, sizeof *st->aft);
    st->aft_th_cap = 1024;
    st->aft_th = malloc(sizeof *st->aft_th * st->aft_th_cap);
    if (!st->nodes || !st->buf || setb_init(&st->sb[0]) || !st->memo || !st->memo_th ||
        !st->aft || !st->aft_th || rehash(st, 1024)) {
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

void pm_grammar_set_plain(pm_grammar_state *st, int plain) { st->plain = plain; }

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

/* Nodes in preorder: node u's subtree is [u, u + size), its first child u + 1, the next sibling
 * of child c is c + c's size; so a sorted list of nodes splits along the subtrees. */
typedef struct gv_node {
    uint32_t size;       /* nodes in its subtree, itself included */
    uint32_t tok, n_tok; /* tokens that end here: ids[tok, tok + n_tok) */
    uint8_t byte;
} gv_node;

struct pm_grammar_vocab {
    int vocab;
    gv_node *nodes;
    uint32_t n_nodes;
    int32_t *ids; /* usable tokens sorted by their bytes */
    int max_len;  /* the longest token's bytes */
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

/* The node for the sorted tokens [lo, hi), which share their first d bytes (the last one byte),
 * and its subtree after it. */
static void build_node(const gv_build *B, uint32_t lo, uint32_t hi, size_t d, uint8_t byte) {
    pm_grammar_vocab *gv = B->gv;
    uint32_t u = gv->n_nodes++, i = lo;
    while (i < hi && B->len[gv->ids[i]] == d) i++;
    gv->nodes[u] = (gv_node){.tok = lo, .n_tok = i - lo, .byte = byte};
    for (uint32_t j = i; j < hi;) {
        uint32_t k = j;
        unsigned char b = (unsigned char)B->tok[gv->ids[j]][d];
        while (k < hi && (unsigned char)B->tok[gv->ids[k]][d] == b) k++;
        build_node(B, j, k, d + 1, b);
        j = k;
    }
    gv->nodes[u].size = gv->n_nodes - u;
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
        if (tokens[v] && len[v]) {
            gv->ids[n++] = v;
            if ((int)len[v] > gv->max_len) gv->max_len = (int)len[v];
        }
    gv_build B = {tokens, len, gv};
    qsort_r(gv->ids, (size_t)n, sizeof *gv->ids, cmp_tok, &B);
    build_node(&B, 0, (uint32_t)n, 0, 0);
    return gv;
}

pm_grammar_vocab *pm_grammar_vocab_new(const pm_tokenizer *tok, int vocab) {
    const char **t;
    size_t *len;
    if (pm_tok_plain_bytes(tok, vocab, &t, &len)) return NULL;
    pm_grammar_vocab *out = pm_grammar_vocab_from(t, len, vocab);
    free(t);
    free(len);
    return out;
}

/* ------------------------------------------------------------------ what may follow a terminal */

/* The bytes that may begin what follows a terminal matched with stack cont (its closure's terminals'
 * first bytes; none for 0, the root then complete) into follow: 1, 0 when the memo is full, < 0 an
 * error. */
static int follow_of(pm_grammar_state *st, int32_t cont, uint64_t follow[4]) {
    memset(follow, 0, 4 * sizeof *follow);
    if (!cont) return 1;
    const g_memo *m;
    if (memo_of(st, cont, &m)) return st->e->code;
    if (!m) return 0;
    for (uint32_t k = 0; k < m->n; k++) { /* a closure's threads stand at their terminals' starts */
        const uint64_t *f = st->g->term_first[st->memo_th[m->off + k].term];
        for (int w = 0; w < 4; w++) follow[w] |= f[w];
    }
    return 1;
}

/* ------------------------------------------------------------------ token classes */

static void classes_clear(pm_grammar_state *st) {
    for (uint32_t i = 0; i < CLASS_SLOTS; i++) {
        if (st->cls[i].term >= 0 && !st->cls[i].alias) free(st->cls[i].sure), free(st->cls[i].first);
        st->cls[i] = (g_class){.term = -1};
    }
    st->n_cls = 0;
    st->n_recent = 0;
    st->cls_bytes = 0;
}

/* A class made lately for term and follow whose DFA state no string as long as a token tells apart
 * from dfa, in either liveness or acceptance, which is all class_walk reads of it: its tokens are
 * dfa's. NULL when none is found within the budget (or out of memory). */
static const g_class *class_alike(pm_grammar_state *st, const pm_grammar_vocab *gv, int32_t term, int32_t dfa, const uint64_t follow[4]) {
    if (!st->same && !(st->same = calloc(PM_REGEX_SAME_SCRATCH, sizeof *st->same))) return NULL;
    int steps = SAME_STEPS;
    uint32_t n = st->n_recent < CLASS_RECENT ? st->n_recent : CLASS_RECENT;
    for (uint32_t k = 1; k <= n && steps > 0; k++) {
        const g_class *c = &st->cls[st->recent[(st->n_recent - k) % CLASS_RECENT]];
        if (c->term == term && !memcmp(c->follow, follow, sizeof c->follow) &&
            pm_regex_same_within(&st->g->dfa[term], dfa, c->dfa, gv->max_len, 1, st->same, &steps))
            return c;
    }
    return NULL;
}

typedef struct class_build {
    const pm_regex_dfa *d;
    const uint64_t *follow;
    const gv_node *nodes;
    const int32_t *ids;
    g_class *k;
    uint32_t cap;
    int oom;
} class_build;

/* The tokens below trie node u, the terminal's DFA in state s there. A token that ends where the DFA
 * lives is kept whether the terminal has matched or not (its stack's closure is never empty but
 * where the root completes). */
static void class_walk(class_build *B, uint32_t u, int32_t s) {
    const gv_node *nodes = B->nodes;
    int may_end = B->d->accept[s];
    for (uint32_t c = u + 1, end = u + nodes[u].size; c < end; c += nodes[c].size) {
        unsigned char b = nodes[c].byte;
        int32_t s1 = pm_regex_dfa_step(B->d, s, b);
        if (may_end && (B->follow[b >> 6] >> (b & 63) & 1)) { /* what follows may go on from here */
            g_class *k = B->k;
            if (k->n_first == B->cap) {
                uint32_t *f = realloc(k->first, sizeof *f * (B->cap *= 2));
                if (!f) {
                    B->oom = 1;
                    return;
                }
                k->first = f;
            }
            k->first[k->n_first++] = c;
            continue;
        }
        if (!s1) continue;
        for (uint32_t t = 0; t < nodes[c].n_tok; t++) {
            uint32_t v = (uint32_t)B->ids[nodes[c].tok + t];
            B->k->sure[v >> 6] |= (uint64_t)1 << (v & 63);
        }
        if (nodes[c].size > 1) class_walk(B, c, s1);
    }
}

/* The class of a thread in terminal term's state dfa, follow the bytes that may begin what follows
 * the terminal, made if new; NULL when the cache is full (or out of memory): the mask then walks the
 * whole trie. */
static g_class *class_of(pm_grammar_state *st, const pm_grammar_vocab *gv, int32_t term, int32_t dfa, const uint64_t follow[4]) {
    uint64_t fx = follow[0] ^ follow[1] * 3 ^ follow[2] * 5 ^ follow[3] * 7;
    uint32_t i = (hash2(term, dfa) ^ hash2((int32_t)fx, (int32_t)(fx >> 32))) & (CLASS_SLOTS - 1);
    for (; st->cls[i].term >= 0; i = (i + 1) & (CLASS_SLOTS - 1))
        if (st->cls[i].term == term && st->cls[i].dfa == dfa && !memcmp(st->cls[i].follow, follow, sizeof st->cls[i].follow)) return &st->cls[i];
    size_t words = ((size_t)gv->vocab + 63) / 64;
    if ((st->n_cls + 1) * 2 > CLASS_SLOTS) return NULL;
    g_class *k = &st->cls[i];
    const g_class *same = class_alike(st, gv, term, dfa, follow);
    if (same) { /* its tokens, shared */
        *k = (g_class){term, dfa, {follow[0], follow[1], follow[2], follow[3]}, same->sure, same->first, same->n_first, 0, 1};
        st->n_cls++;
        st->recent[st->n_recent++ % CLASS_RECENT] = i;
        return k;
    }
    if (st->cls_bytes + words * 8 > PM_GRAMMAR_CLASS_BYTES) return NULL;
    class_build B = {&st->g->dfa[term], follow, gv->nodes, gv->ids, k, 64, 0};
    *k = (g_class){term, dfa, {follow[0], follow[1], follow[2], follow[3]}, calloc(words, sizeof *k->sure), malloc(sizeof *k->first * B.cap), 0, 0, 0};
    if (k->sure && k->first) class_walk(&B, 0, dfa);
    if (!k->sure || !k->first || B.oom || st->cls_bytes + words * 8 + (size_t)k->n_first * 4 > PM_GRAMMAR_CLASS_BYTES) {
        free(k->sure);
        free(k->first);
        *k = (g_class){.term = -1};
        return NULL;
    }
    uint32_t *f = realloc(k->first, sizeof *f * (k->n_first ? k->n_first : 1)); /* what the budget counts */
    if (f) k->first = f;
    st->n_cls++;
    st->cls_bytes += words * 8 + (size_t)k->n_first * 4;
    st->recent[st->n_recent++ % CLASS_RECENT] = i;
    return k;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The current threads' classes: the union of their sure tokens into allow, of their first nodes
 * into st->first (ascending, none inside another's subtree). 0 when a class could not be had (the
 * cache is cleared for the next mask), < 0 out of memory. */
static int classify(pm_grammar_state *st, const pm_grammar_vocab *gv, uint8_t *allow) {
    size_t words = ((size_t)gv->vocab + 63) / 64;
    if (!st->cls) { /* the table's slots marked empty before anything else can fail: the state's free reads them */
        if (!(st->cls = malloc(sizeof *st->cls * CLASS_SLOTS))) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the mask's classes");
        for (uint32_t i = 0; i < CLASS_SLOTS; i++) st->cls[i] = (g_class){.term = -1};
        st->cls_gv = gv;
    }
    if (!st->sure && !(st->sure = malloc(sizeof *st->sure * words)))
        return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the mask's classes");
    if (st->cls_gv != gv) return 0; /* another vocabulary than the classes index */
    if (st->cls_skip) return st->cls_skip--, 0;
    memset(st->sure, 0, sizeof *st->sure * words);
    st->n_first = 0;
    uint32_t stamp = ++st->cls_stamp, sets = 0, had = st->n_cls;
    for (int i = 0; i < st->n_cur; i++) {
        /* what may follow each thread's terminal costs its stack's closure: past FOLLOW_THREADS
         * threads (an ambiguous grammar, each with a stack of its own) any byte may, as if unknown */
        uint64_t follow[4] = {~0ull, ~0ull, ~0ull, ~0ull};
        int rc = st->n_cur > FOLLOW_THREADS ? 1 : follow_of(st, st->buf[i].cont, follow); /* may move buf */
        if (rc <= 0) return rc; /* 0: the memo is full, the walk alone */
        g_class *k = class_of(st, gv, st->buf[i].term, st->buf[i].dfa, follow);
        if (!k) { /* full: made afresh by the next mask, or by the 64th next if this one's alone fill it */
            classes_clear(st);
            if (!had) st->cls_skip = 64;
            return 0;
        }
        if (k->stamp == stamp) continue;
        k->stamp = stamp;
        sets++;
        for (size_t w = 0; w < words; w++) st->sure[w] |= k->sure[w];
        if (!k->n_first) continue;
        if (st->n_first + k->n_first > st->cap_first) {
            uint32_t c = st->cap_first ? st->cap_first : 1024;
            while (c < st->n_first + k->n_first) c *= 2;
            uint32_t *f = realloc(st->first, sizeof *f * c);
            if (!f) return pm_errf(st->e, PM_ENOMEM, "grammar: out of memory for the mask's classes");
            st->first = f, st->cap_first = c;
        }
        memcpy(st->first + st->n_first, k->first, sizeof *k->first * k->n_first);
        st->n_first += k->n_first;
    }
    if (sets > 1 && st->n_first > 1) { /* sorted, and only the outermost of nested nodes: below it the walk takes all */
        qsort(st->first, st->n_first, sizeof *st->first, cmp_u32);
        uint32_t n = 0;
        for (uint32_t j = 0; j < st->n_first; j++)
            if (!n || st->first[j] >= st->first[n - 1] + gv->nodes[st->first[n - 1]].size) st->first[n++] = st->first[j];
        st->n_first = n;
    }
    pm_bits_expand(st->sure, (size_t)gv->vocab, allow);
    return 1;
}

/* ------------------------------------------------------------------ the mask */

/* The threads [lo, hi) after trie node c's byte, as the new set [*base, *end) of buf; c's tokens
 * kept where some thread lives on or the root is complete. */
static int enter(pm_grammar_state *st, const pm_grammar_vocab *gv, uint32_t c, int lo, int hi, uint8_t *allow, int *base, int *end) {
    const gv_node *n = &gv->nodes[c];
    int complete = 0;
    if ((st->mask_steps += hi - lo) > PM_GRAMMAR_MAX_MASK_STEPS)
        return pm_errf(st->e, PM_ELIMIT, "grammar: a step's mask would step more than %d parse threads (a very ambiguous grammar)",
                       PM_GRAMMAR_MAX_MASK_STEPS);
    *base = st->n_buf;
    set_begin(st);
    st->work = 0;
    if (step_byte(st, lo, hi, n->byte, &complete)) return st->e->code;
    *end = st->n_buf;
    if (*end > *base || complete)
        for (uint32_t t = 0; t < n->n_tok; t++) allow[gv->ids[n->tok + t]] = 1;
    return PM_OK;
}

/* The tokens below trie node u, the threads [lo, hi) having read u's bytes. */
static int walk(pm_grammar_state *st, const pm_grammar_vocab *gv, uint32_t u, int lo, int hi, uint8_t *allow) {
    const gv_node *nodes = gv->nodes;
    for (uint32_t c = u + 1, end_u = u + nodes[u].size; c < end_u; c += nodes[c].size) {
        int base, end;
        if (enter(st, gv, c, lo, hi, allow, &base, &end)) return st->e->code;
        if (end > base && nodes[c].size > 1 && walk(st, gv, c, base, end, allow)) return st->e->code;
        st->n_buf = base;
    }
    return PM_OK;
}

/* The same down to first[0, nf) only (ascending nodes inside u's subtree, none inside another's),
 * and below them all: the tokens elsewhere are the classes' (no thread accepts on their way). */
static int walk_to(pm_grammar_state *st, const pm_grammar_vocab *gv, uint32_t u, int lo, int hi, const uint32_t *first, uint32_t nf,
                   uint8_t *allow) {
    const gv_node *nodes = gv->nodes;
    uint32_t c = u + 1;
    for (uint32_t r = 0; r < nf;) {
        while (c + nodes[c].size <= first[r]) c += nodes[c].size; /* the child that holds first[r] */
        uint32_t next = c + nodes[c].size, r2 = r + 1;
        while (r2 < nf && first[r2] < next) r2++;
        int base, end;
        if (enter(st, gv, c, lo, hi, allow, &base, &end)) return st->e->code;
        if (end > base && nodes[c].size > 1) {
            int rc = first[r] == c ? walk(st, gv, c, base, end, allow) : walk_to(st, gv, c, base, end, first + r, r2 - r, allow);
            if (rc) return rc;
        }
        st->n_buf = base;
        r = r2;
        c = next;
    }
    return PM_OK;
}

int pm_grammar_mask(pm_grammar_state *st, const pm_grammar_vocab *gv, const int32_t *eos, int n_eos, float *logits, uint8_t *allow,
                    pm_err *e) {
    int vocab = gv->vocab;
    st->e = e;
    int mark = st->n_nodes, rc = PM_OK;
    st->mask_steps = 0;
    st->n_buf = st->n_cur;
    if (!st->n_cur) memset(allow, 0, (size_t)vocab);
    else {
        int classes = st->plain ? 0 : classify(st, gv, allow);
        if (classes < 0) return classes;
        if (!classes) memset(allow, 0, (size_t)vocab);
        st->refs = !st->plain;
        rc = classes ? walk_to(st, gv, 0, 0, st->n_cur, st->first, st->n_first, allow) : walk(st, gv, 0, 0, st->n_cur, allow);
        st->refs = 0;
    }
    st->n_buf = st->n_cur;
    memo_clear(st); /* it names the trial walks' nodes */
    if (st->n_nodes > mark) { /* forget the trial walks' nodes */
        st->n_nodes = mark;
        if (rehash(st, st->hcap) && !rc) rc = e->code;
    }
    if (rc) return rc;
    for (int i = 0; i < n_eos; i++) /* the end: only where the root is complete */
        if (eos[i] >= 0 && eos[i] < vocab) allow[eos[i]] = (uint8_t)st->complete;
    pm_mask_logits(allow, logits, (size_t)vocab);
    return PM_OK;
}
