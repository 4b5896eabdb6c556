/* grammar_left.c — left recursion rewritten, so that a parse can go left to right (grammar.h):
 * the same language, before the tree is checked and lowered (gp_finish).
 *
 * Direct: a rule's alternatives that begin with a call of the rule itself (`expr ::= expr "+"
 * term | term`) become the others followed by a repeat of what follows those calls (`expr ::= term
 * ("+" term)*`).
 *
 * Through other rules (`a ::= b "x" | "y"`, `b ::= a "z" | "w"`): the rules whose beginnings call
 * one another in a cycle (a strongly connected component of the "may begin with" graph) are taken
 * in the order written; in each, an alternative that begins with a call of an earlier rule of the
 * cycle is replaced by that rule's alternatives followed by the rest, as is one that begins with a
 * group (its alternatives distributed) or a repeat (x{m,n} rest: rest when m = 0, and x x{m-1,n-1}
 * rest), until every alternative begins with something else; the direct form above then ends the
 * rule's own recursion (b ::= (w | y z) (x z)*). What is still left recursive after that (a cycle
 * through a rule that may be empty, one without an alternative to begin with) is refused by the
 * checks. */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar_tree.h"

/* The rewrite's bounds (a grammar is compiled on a server thread: no stalling it): alternatives one
 * rule may expand into, and items the sequences it makes may hold in all (a cycle through a long
 * chain of rules makes ever longer ones: 16,000 rules took 4 s and 1.1 GB before this bound).
 * Past either the grammar is refused, naming the rule. */
enum { MAX_EXPANDED = 4096, MAX_REWRITE_ITEMS = 1 << 20 };

/* Whether alternative alt (a sequence, as the readers make them) begins with a call of rule r. */
static int begins_with(const gp *P, int alt, int r) {
    const a_node *A = &P->nodes[alt];
    return A->kind == A_SEQ && A->n && P->nodes[A->v[0]].kind == A_REF && P->nodes[A->v[0]].ref == r;
}

static int unleft_direct(gp *P, int r) {
    int body = P->rules[r].body;
    if (body < 0 || P->nodes[body].kind != A_ALT) return PM_OK;
    int n = P->nodes[body].n, rec = 0;
    for (int i = 0; i < n; i++) rec += begins_with(P, P->nodes[body].v[i], r);
    if (!rec || rec == n) return PM_OK; /* none, or nothing to begin with: the checks say so */
    int base = gp_node(P, A_ALT), tails = gp_node(P, A_ALT), rep = gp_node(P, A_REP), seq = gp_node(P, A_SEQ), top = gp_node(P, A_ALT);
    if (top < 0) return P->e->code;
    for (int i = 0; i < n; i++) {
        int a = P->nodes[body].v[i];
        if (!begins_with(P, a, r)) {
            if (gp_push(P, base, a)) return P->e->code;
            continue;
        }
        int tail = gp_node(P, A_SEQ);
        if (tail < 0) return tail;
        P->nodes[tail].at = P->nodes[a].at;
        for (int k = 1; k < P->nodes[a].n; k++)
            if (gp_push(P, tail, P->nodes[a].v[k])) return P->e->code;
        if (gp_push(P, tails, tail)) return P->e->code;
    }
    P->nodes[rep].min = 0, P->nodes[rep].max = -1;
    if (gp_push(P, rep, tails) || gp_push(P, seq, base) || gp_push(P, seq, rep) || gp_push(P, top, seq)) return P->e->code;
    for (int k = 0; k < 5; k++) P->nodes[top - k].at = P->nodes[body].at;
    P->rules[r].body = top;
    return PM_OK;
}

/* ------------------------------------------------------------------ the cycles */

/* The "may begin with" graph (each rule's edges from[r] .. from[r + 1] in to[]) and its components
 * (t); self[r]: r may begin with a call of itself. */
typedef struct lc {
    gp_scc t;
    int *from, *to, n_to, cap_to;
    uint8_t *self;
} lc;

/* The calls a node of rule r may begin with, appended to C->to: through groups, sequences' first
 * items and what may be left out before them, and repeats. 0, or -1 out of memory. */
static int lc_node(const gp *P, int r, int node, lc *C) {
    const a_node *N = &P->nodes[node];
    switch (N->kind) {
    case A_REF:
        if (N->ref == r) C->self[r] = 1;
        if (gp_grow((void **)&C->to, &C->cap_to, C->n_to, sizeof *C->to)) return -1;
        C->to[C->n_to++] = N->ref;
        return 0;
    case A_ALT:
        for (int i = 0; i < N->n; i++)
            if (lc_node(P, r, N->v[i], C)) return -1;
        return 0;
    case A_SEQ:
        for (int i = 0; i < N->n; i++) {
            if (lc_node(P, r, N->v[i], C)) return -1;
            const a_node *it = &P->nodes[N->v[i]];
            if (!(it->kind == A_REP && it->min == 0)) break; /* what may be left out: the next item may begin */
        }
        return 0;
    case A_REP: return lc_node(P, r, N->v[0], C);
    default: return 0;
    }
}

/* ------------------------------------------------------------------ the rewrite */

/* Whether rule j (rewritten before) still begins with a call of itself (no alternative to begin
 * with): substituting it would not end; the checks refuse it. */
static int still_left(const gp *P, int j) {
    int jb = P->rules[j].body;
    if (P->nodes[jb].kind != A_ALT) return begins_with(P, jb, j);
    for (int i = 0; i < P->nodes[jb].n; i++)
        if (begins_with(P, P->nodes[jb].v[i], j)) return 1;
    return 0;
}

/* Whether node may begin with a call of a rule of r's component (the walk of lc_node). */
static int reaches(const gp *P, int node, const lc *C, int r) {
    const a_node *N = &P->nodes[node];
    switch (N->kind) {
    case A_REF: return C->t.comp[N->ref] == C->t.comp[r];
    case A_ALT:
        for (int i = 0; i < N->n; i++)
            if (reaches(P, N->v[i], C, r)) return 1;
        return 0;
    case A_SEQ:
        for (int i = 0; i < N->n; i++) {
            if (reaches(P, N->v[i], C, r)) return 1;
            if (!(P->nodes[N->v[i]].kind == A_REP && P->nodes[N->v[i]].min == 0)) return 0;
        }
        return 0;
    case A_REP: return reaches(P, N->v[0], C, r);
    default: return 0;
    }
}

/* The alternatives one rule's rewrite has made: a stack still to look at, and a set of the item
 * lists seen (a repeat of an item that may be empty would make the same alternative again). */
typedef struct expansion {
    int *work, nw, cw;
    int *seen, n_seen; /* open addressing over SEQ nodes, -1 empty; SEEN_SLOTS of them */
    long *items;       /* items of the sequences made so far, all rules together */
} expansion;
enum { SEEN_SLOTS = 16 * MAX_EXPANDED };

static uint32_t items_hash(const a_node *N) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < N->n; i++) h = (h ^ (uint32_t)N->v[i]) * 16777619u;
    return h;
}

/* Sequence s pushed on the stack unless an alternative with the same items was: 0, or an error
 * (rule r's rewrite refused past SEEN_SLOTS / 2 of them). */
static int too_big(gp *P, int r) {
    return pm_errf(P->e, PM_EUNSUPPORTED,
                   "grammar: left recursion through rule '%s': rewriting it takes more than %d alternatives or %d items",
                   P->rules[r].name, MAX_EXPANDED, MAX_REWRITE_ITEMS);
}

static int push_new(gp *P, int r, expansion *X, int s) {
    if (s < 0) return P->e->code;
    if (++X->n_seen > SEEN_SLOTS / 2 || (*X->items += P->nodes[s].n) > MAX_REWRITE_ITEMS) return too_big(P, r);
    const a_node *S = &P->nodes[s];
    for (uint32_t k = items_hash(S) & (SEEN_SLOTS - 1);; k = (k + 1) & (SEEN_SLOTS - 1)) {
        int o = X->seen[k];
        if (o < 0) {
            X->seen[k] = s;
            break;
        }
        if (P->nodes[o].n == S->n && (!S->n || !memcmp(P->nodes[o].v, S->v, sizeof *S->v * (size_t)S->n))) return PM_OK; /* (v is NULL when n is 0) */
    }
    if (gp_grow((void **)&X->work, &X->cw, X->nw, sizeof *X->work)) return gp_oom(P);
    X->work[X->nw++] = s;
    return PM_OK;
}

/* A new sequence: the items of `lead` (those of a sequence, else lead itself; none when lead < 0),
 * then `mid` when >= 0, then alternative a's items from `from` on (a < 0: none). */
static int joined(gp *P, int lead, int mid, int a, int from, size_t at) {
    int s = gp_node(P, A_SEQ);
    if (s < 0) return s;
    P->nodes[s].at = at;
    if (lead >= 0 && P->nodes[lead].kind == A_SEQ) {
        for (int k = 0; k < P->nodes[lead].n; k++)
            if (gp_push(P, s, P->nodes[lead].v[k])) return P->e->code;
    } else if (lead >= 0 && gp_push(P, s, lead))
        return P->e->code;
    if (mid >= 0 && gp_push(P, s, mid)) return P->e->code;
    for (int k = from; a >= 0 && k < P->nodes[a].n; k++)
        if (gp_push(P, s, P->nodes[a].v[k])) return P->e->code;
    return s;
}

/* One alternative a (a sequence, or a bare item) of rule r looked at: replaced (pushed back as
 * the alternatives it becomes) or kept (appended to out). */
static int expand_one(gp *P, int r, const lc *C, expansion *X, int a, int out) {
    int first = -1, from = 1;
    size_t at = P->nodes[a].at;
    if (P->nodes[a].kind == A_SEQ && P->nodes[a].n) first = P->nodes[a].v[0];
    else if (P->nodes[a].kind != A_SEQ) first = a, from = 0, a = -1; /* a bare item: nothing after it */
    a_node F = first >= 0 ? P->nodes[first] : (a_node){.kind = A_LIT}; /* a copy: the node array grows below */
    if (F.kind == A_REF && F.ref < r && C->t.comp[F.ref] == C->t.comp[r] && P->rules[F.ref].body >= 0 && !still_left(P, F.ref)) {
        int jb = P->rules[F.ref].body, alt = P->nodes[jb].kind == A_ALT, k = alt ? P->nodes[jb].n : 1;
        for (int i = k - 1; i >= 0; i--)
            if (push_new(P, r, X, joined(P, alt ? P->nodes[jb].v[i] : jb, -1, a, from, at))) return P->e->code;
        return PM_OK;
    }
    if (first >= 0 && F.kind != A_REF && reaches(P, first, C, r)) {
        if (F.kind == A_ALT) { /* (p | q) rest: p rest | q rest */
            for (int i = F.n - 1; i >= 0; i--)
                if (push_new(P, r, X, joined(P, P->nodes[first].v[i], -1, a, from, at))) return P->e->code;
            return PM_OK;
        }
        if (F.kind == A_SEQ) return push_new(P, r, X, joined(P, first, -1, a, from, at));
        if (F.kind == A_REP) { /* x{m,n} rest: x x{m-1,n-1} rest, and rest when m = 0 (x* stays x*) */
            int more = -1; /* what is left of the repeat after one x */
            if (F.max < 0 && F.min == 0) more = first;
            else if (F.max != 1) {
                if ((more = gp_node(P, A_REP)) < 0 || gp_push(P, more, F.v[0])) return P->e->code;
                P->nodes[more].at = F.at;
                P->nodes[more].min = F.min > 0 ? F.min - 1 : 0, P->nodes[more].max = F.max < 0 ? -1 : F.max - 1;
            }
            if (push_new(P, r, X, joined(P, F.v[0], more, a, from, at))) return P->e->code;
            return F.min == 0 ? push_new(P, r, X, joined(P, -1, -1, a, from, at)) : PM_OK;
        }
    }
    int keep = a >= 0 ? a : joined(P, first, -1, -1, 0, at);
    return keep < 0 ? keep : gp_push(P, out, keep);
}

/* Rule r's alternatives until none begins with a call of an earlier rule of its component, nor
 * with a group, sequence or repeat that may (the file's comment); then its direct recursion. */
static int expand_rule(gp *P, int r, const lc *C, long *items) {
    int body = P->rules[r].body, out = gp_node(P, A_ALT), steps = 0;
    expansion X = {NULL, 0, 0, malloc(sizeof(int) * SEEN_SLOTS), 0, items};
    if (out < 0 || !X.seen) {
        free(X.seen);
        return P->e->code ? P->e->code : gp_oom(P);
    }
    memset(X.seen, 0xff, sizeof(int) * SEEN_SLOTS);
    P->nodes[out].at = P->nodes[body].at;
    int alt = P->nodes[body].kind == A_ALT, k = alt ? P->nodes[body].n : 1;
    for (int i = k - 1; i >= 0 && !P->e->code; i--) {
        int a = alt ? P->nodes[body].v[i] : body;
        if (P->nodes[a].kind == A_SEQ) push_new(P, r, &X, a); /* seen too: a rewrite may make it again */
        else if (gp_grow((void **)&X.work, &X.cw, X.nw, sizeof *X.work)) gp_oom(P);
        else X.work[X.nw++] = a;
    }
    while (X.nw && !P->e->code) {
        if (++steps > 4 * MAX_EXPANDED || P->nodes[out].n > MAX_EXPANDED) { /* (push_new bounds the pushes) */
            too_big(P, r);
            break;
        }
        expand_one(P, r, C, &X, X.work[--X.nw], out);
    }
    free(X.work), free(X.seen);
    if (P->e->code) return P->e->code;
    P->rules[r].body = out;
    return unleft_direct(P, r);
}

int gp_unleft(gp *P) {
    int n = P->n_rules;
    lc C = {{0}, calloc((size_t)n + 2, sizeof(int)), NULL, 0, 0, calloc((size_t)n + 1, 1)};
    int bad = !C.from || !C.self;
    for (int r = 0; r < n && !bad; r++) {
        C.from[r] = C.n_to;
        bad = P->rules[r].body >= 0 && lc_node(P, r, P->rules[r].body, &C);
    }
    if (!bad) C.from[n] = C.n_to;
    if (bad || gp_scc_run(&C.t, n, C.from, C.to)) gp_oom(P);
    long items = 0;
    for (int r = 0; r < n && !P->e->code; r++)
        if (P->rules[r].body >= 0 && (C.t.size[C.t.comp[r]] > 1 || C.self[r])) expand_rule(P, r, &C, &items);
    gp_scc_free(&C.t);
    free(C.from), free(C.to), free(C.self);
    return P->e->code;
}
