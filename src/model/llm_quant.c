/* llm_quant.c — pm_llm_quantize (llm.h): the decoder's base weights as block-scaled int8. */
#include "llm.h"
#include "nn/quant.h"

#include <stdlib.h>

int pm_llm_quantize(pm_llm *m, const pm_weights *w, size_t *q8_bytes, pm_err *e) {
    if (q8_bytes) *q8_bytes = 0;
    if (m->q8) return pm_errf(e, PM_ESTATE, "decoder weights are already quantized");
    int cap = 4 * m->c.n_layers + 1;
    m->q8 = pm_calloc((size_t)cap, sizeof *m->q8, e);
    if (!m->q8) return e->code;
    const pm_tensor ***slot = pm_malloc(sizeof *slot * (size_t)cap, e);
    if (!slot) return e->code;
    int n = 0;
    for (int l = 0; l < m->c.n_layers; l++) {
        pm_llm_layer *L = &m->layers[l];
        slot[n++] = &L->qkv.W;
        slot[n++] = &L->o.W;
        slot[n++] = &L->gate_up.W;
        slot[n++] = &L->down.W;
    }
    slot[n++] = &m->lm_head;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        const pm_tensor *src = *slot[i];
        if (!pm_q8_supported(src)) continue;
        pm_tensor *dst = &m->q8[m->n_q8];
        if (pm_q8_quantize(dst, src, e)) break; /* pm_llm_free releases what was made */
        m->n_q8++;
        *slot[i] = dst;
        bytes += dst->nbytes;
        /* Also for the lm_head: its bf16 rows are the input embedding table too, but a lookup
         * faults back only the rows it reads. */
        pm_weights_release(w, src);
    }
    free(slot);
    if (q8_bytes) *q8_bytes = bytes;
    return e->code;
}
