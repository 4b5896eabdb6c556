/* bpe.c — byte-pair merging of one pre-tokenized piece, three ways with identical results.
 *
 * Semantics (HF tokenizers' BPE::merge_word): start from one symbol per byte (the id of its byte-level character);
 * repeatedly merge the adjacent pair with the lowest merge rank, the leftmost one among equal ranks, until no
 * adjacent pair is a merge.
 *   - short pieces (<= SMALL bytes, almost all of real text): arrays with the rank of each adjacent pair cached;
 *     each merge rescans the small array for the minimum and refreshes two neighbours.
 *   - long pieces (up to megabytes of one character class): a doubly linked list of symbols and a binary min-heap
 *     of candidate pairs keyed (rank, left position). A merge bumps the version of both symbols, so stale heap
 *     entries are recognised and dropped when popped: O(n log n) overall.
 *   - naive (the benchmark baseline): after every merge, look every adjacent pair up again. O(n^2) lookups. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

enum { SMALL = 48 };

typedef struct hent {
    int32_t rank, pos, right, id;
    uint32_t vl, vr;
} hent;

int pm_ids_push(pm_ids *v, int32_t x, pm_err *e) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) return pm_errf(e, PM_ENOMEM, "out of memory for %zu token ids", cap);
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return PM_OK;
}

void pm_bpe_work_free(pm_bpe_work *w) {
    free(w->sym);
    free(w->prev);
    free(w->next);
    free(w->ver);
    free(w->heap);
    memset(w, 0, sizeof *w);
}

static int work_reserve(pm_bpe_work *w, size_t n, int heap, pm_err *e) {
    if (n > w->cap) {
        size_t cap = n < 256 ? 256 : n;
        free(w->sym);
        free(w->prev);
        free(w->next);
        free(w->ver);
        w->sym = malloc(cap * sizeof *w->sym);
        w->prev = malloc(cap * sizeof *w->prev);
        w->next = malloc(cap * sizeof *w->next);
        w->ver = malloc(cap * sizeof *w->ver);
        w->cap = (w->sym && w->prev && w->next && w->ver) ? cap : 0;
        if (!w->cap) return pm_errf(e, PM_ENOMEM, "out of memory for a %zu-byte BPE piece", n);
    }
    if (heap && n > w->hcap) {
        free(w->heap);
        w->hcap = n;
        w->heap = malloc(w->hcap * sizeof(hent));
        if (!w->heap) {
            w->hcap = 0;
            return pm_errf(e, PM_ENOMEM, "out of memory for a %zu-byte BPE piece", n);
        }
    }
    return PM_OK;
}

/* Makes room for one more heap entry (stale entries can push the count past n; at most 3n in all). */
static int heap_room(pm_bpe_work *w, size_t hn, pm_err *e) {
    if (hn < w->hcap) return PM_OK;
    size_t cap = w->hcap * 2;
    void *p = realloc(w->heap, cap * sizeof(hent));
    if (!p) return pm_errf(e, PM_ENOMEM, "out of memory for the BPE heap (%zu entries)", cap);
    w->heap = p;
    w->hcap = cap;
    return PM_OK;
}

static inline int hless(const hent *a, const hent *b) { return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos); }

static void hpush(hent *h, size_t *n, hent x) {
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!hless(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static hent hpop(hent *h, size_t *n) {
    hent top = h[0], x = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = x;
    return top;
}

static int bpe_small(const pm_tokenizer *t, const uint8_t *p, size_t n, pm_ids *out, pm_err *e) {
    int32_t sym[SMALL], rank[SMALL], mid[SMALL];
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[p[i]];
    size_t m = n;
    for (size_t i = 0; i + 1 < m; i++) {
        const pm_merge_ent *me = pm_merge_find(t, sym[i], sym[i + 1]);
        rank[i] = me ? me->rank : INT32_MAX;
        mid[i] = me ? me->id : -1;
    }
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = mid[best];
        /* drop symbol best+1 and pair best+1 */
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        if (m - best > 2) {
            memmove(rank + best + 1, rank + best + 2, (m - best - 3) * sizeof *rank);
            memmove(mid + best + 1, mid + best + 2, (m - best - 3) * sizeof *mid);
        }
        m--;
        for (size_t i = best ? best - 1 : 0; i <= best && i + 1 < m; i++) {
            const pm_merge_ent *me = pm_merge_find(t, sym[i], sym[i + 1]);
            rank[i] = me ? me->rank : INT32_MAX;
            mid[i] = me ? me->id : -1;
        }
    }
    for (size_t i = 0; i < m; i++) {
        int rc = pm_ids_push(out, sym[i], e);
        if (rc) return rc;
    }
    return PM_OK;
}

static int bpe_heap(const pm_tokenizer *t, const uint8_t *p, size_t n, pm_bpe_work *w, pm_ids *out, pm_err *e) {
    int rc = work_reserve(w, n, 1, e);
    if (rc) return rc;
    int32_t *sym = w->sym, *prev = w->prev, *next = w->next;
    uint32_t *ver = w->ver;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i] = t->byte_id[p[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        ver[i] = 0;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const pm_merge_ent *me = pm_merge_find(t, sym[i], sym[i + 1]);
        if (me) hpush(w->heap, &hn, (hent){me->rank, (int32_t)i, (int32_t)i + 1, me->id, 0, 0});
    }
    while (hn) {
        hent x = hpop(w->heap, &hn);
        if (ver[x.pos] != x.vl || ver[x.right] != x.vr) continue; /* stale: one side changed */
        int32_t l = x.pos, r = x.right;
        sym[l] = x.id;
        ver[l]++;
        ver[r] = UINT32_MAX; /* dead: never matches a recorded version again (0..n merges) */
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        if (prev[l] >= 0) {
            int32_t a = prev[l];
            const pm_merge_ent *me = pm_merge_find(t, sym[a], sym[l]);
            if (me && !(rc = heap_room(w, hn, e))) hpush(w->heap, &hn, (hent){me->rank, a, l, me->id, ver[a], ver[l]});
            if (rc) return rc;
        }
        if (next[l] >= 0) {
            int32_t b = next[l];
            const pm_merge_ent *me = pm_merge_find(t, sym[l], sym[b]);
            if (me && !(rc = heap_room(w, hn, e))) hpush(w->heap, &hn, (hent){me->rank, l, b, me->id, ver[l], ver[b]});
            if (rc) return rc;
        }
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if ((rc = pm_ids_push(out, sym[i], e))) return rc;
    return PM_OK;
}

/* ignore_merges: a piece that is a whole vocabulary token is emitted as is (HF option; off for Phi-4). */
static int whole_token(const pm_tokenizer *t, const uint8_t *p, size_t n, pm_ids *out, pm_err *e, int *done) {
    *done = 0;
    if (!t->ignore_merges) return PM_OK;
    int32_t id = pm_tok_lookup_bytes(t, p, n);
    if (id < 0) return PM_OK;
    *done = 1;
    return pm_ids_push(out, id, e);
}

int pm_bpe_piece(const pm_tokenizer *t, const uint8_t *p, size_t n, pm_bpe_work *w, pm_ids *out, pm_err *e) {
    if (!n) return PM_OK;
    if (n == 1) return pm_ids_push(out, t->byte_id[p[0]], e);
    int done, rc = whole_token(t, p, n, out, e, &done);
    if (rc || done) return rc;
    return n <= SMALL ? bpe_small(t, p, n, out, e) : bpe_heap(t, p, n, w, out, e);
}

int pm_bpe_piece_naive(const pm_tokenizer *t, const uint8_t *p, size_t n, pm_bpe_work *w, pm_ids *out, pm_err *e) {
    if (!n) return PM_OK;
    int done, rc = whole_token(t, p, n, out, e, &done);
    if (rc || done) return rc;
    if ((rc = work_reserve(w, n, 0, e))) return rc;
    int32_t *sym = w->sym;
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[p[i]];
    for (;;) {
        size_t best = SIZE_MAX;
        int32_t best_rank = INT32_MAX, best_id = -1;
        for (size_t i = 0; i + 1 < m; i++) {
            const pm_merge_ent *me = pm_merge_find(t, sym[i], sym[i + 1]);
            if (me && me->rank < best_rank) {
                best_rank = me->rank;
                best_id = me->id;
                best = i;
            }
        }
        if (best == SIZE_MAX) break;
        sym[best] = best_id;
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        m--;
    }
    for (size_t i = 0; i < m; i++)
        if ((rc = pm_ids_push(out, sym[i], e))) return rc;
    return PM_OK;
}
