/* conformer_pack.c — GEMM-ready copies of the Conformer's matrices, made by the second forward.
 *
 * The blocked GEMM packs every weight it touches into slivers on every call; for the encoder's
 * products (125 rows for a 10 s clip, 375 for 30 s) that pack, reading 128 weight rows at a time
 * from DRAM, was ~15 % of the forward. Packed once (pm_kern_gemm_pack, bf16, as many bytes as the
 * weight) the GEMM reads the slivers in place: same bits, -5 to -13 % on 10-30 s clips (Zen 5).
 * Made on the second use, not at load: a process that never hears audio never holds them, and one
 * that encodes a single clip (a CLI transcription) does not pay for them either. Making them
 * touches 0.9 GB of fresh memory (0.2-0.3 s in a long process, seconds in a fresh one on this VM,
 * where first touches are slow) and saves 6-12 % of the GEMMs' time at 125-375 rows, so it pays
 * off after a few passes. Zen 5, 10 s clip: a first pass without the copies took 0.46-0.49 s, one
 * that made them 0.65-0.78 s, the passes after 0.38-0.45 s; `phi4mm transcribe` of one clip took
 * 5.1-5.8 s against 7.4-8.8 s when the first pass made them. Each copy takes its original's place
 * in the resident set (pm_weights_release: nothing reads the original once W->gemm_pack is set,
 * since pm_linear then always takes the GEMM). Where the CPU has no AVX-512 tile nothing is packed
 * and the weights are read as before. The subsampling's output projection (2 % of the weights,
 * part of the const model struct) keeps its per-call pack. */
#include "conformer_internal.h"

#include <pthread.h>
#include <stdlib.h>

#include "nn/kernels.h"

struct pm_cf_packs {
    pthread_mutex_t lock; /* one forward makes the copies, concurrent ones wait for them */
    int uses, done;       /* forwards so far; the copies exist */
    const pm_weights *w;  /* whose pages the originals are */
};

/* The matrices that get a copy (v may be NULL: count only). */
static int matrices(const pm_conformer *m, pm_tensor **v) {
    int n = 0;
    for (int i = 0; i < m->c.num_blocks; i++) {
        pm_cf_block *b = &m->blocks[i];
        pm_tensor *t[] = {&b->ff_in.w1, &b->ff_in.w2, &b->ff_out.w1, &b->ff_out.w2, &b->wq, &b->wk,
                          &b->wv,       &b->wo,       &b->glu_w,     &b->pw_w,      &b->ext_w};
        for (size_t j = 0; j < sizeof t / sizeof t[0]; j++, n++)
            if (v) v[n] = t[j];
    }
    for (int s = 0; s < m->n_stages - 1; s++, n++)
        if (v) v[n] = &m->stages[s].pw_w;
    return n;
}

/* malloc'd list of those matrices (NULL when out of memory), their count in *n. */
static pm_tensor **matrix_list(const pm_conformer *m, int *n) {
    *n = matrices(m, NULL);
    pm_tensor **v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    if (v) matrices(m, v);
    return v;
}

int pm_cf_packs_new(pm_conformer *m, const pm_weights *w, pm_err *e) {
    pm_cf_packs *p = pm_calloc(1, sizeof *p, e);
    if (!p) return e->code;
    if (pthread_mutex_init(&p->lock, NULL)) {
        free(p);
        return pm_errf(e, PM_ENOMEM, "speech encoder: cannot create a mutex");
    }
    p->w = w;
    m->packs = p;
    return PM_OK;
}

void pm_cf_packs_ensure(const pm_conformer *m) {
    pm_cf_packs *p = m->packs;
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    /* a forward while the AVX-512 tile is not in use (capped by a test or the bench) neither counts
     * nor gives up: the copies exist only for that tile */
    if (!p->done && pm_kern_have_avx512() && ++p->uses >= 2) {
        int n;
        pm_tensor **v = matrix_list(m, &n);
        if (v) {
            for (int i = 0; i < n; i++) {
                uint16_t *pk = pm_kern_gemm_pack(v[i]);
                if (!pk) break; /* no AVX-512 tile, or out of memory: the rest keep the per-call pack */
                v[i]->gemm_pack = pk;
                pm_weights_release(p->w, v[i]);
            }
            free(v);
        }
        p->done = 1;
    }
    pthread_mutex_unlock(&p->lock);
}

void pm_cf_packs_free(pm_conformer *m) {
    pm_cf_packs *p = m->packs;
    if (!p) return;
    if (m->blocks) {
        int n;
        pm_tensor **v = matrix_list(m, &n);
        if (v)
            for (int i = 0; i < n; i++) {
                free((void *)v[i]->gemm_pack);
                v[i]->gemm_pack = NULL;
            }
        free(v);
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
    m->packs = NULL;
}
