/* engine_internal.h — test and tooling hooks into live sequences (not part of the public API). */
#ifndef PM_ENGINE_INTERNAL_H
#define PM_ENGINE_INTERNAL_H

#include "phi4mm.h"

/* The logits the sequence last sampled from (NULL when the sequence is not live), with its RoPE
 * factor choice and how many positions its cache holds. */
const float *pm_engine_last_logits(const pm_engine *eng, int64_t seq_id, int *rope_long, int *kv_len);
/* The adapter a live sequence runs with (-1 when not live). */
int pm_engine_seq_adapter(const pm_engine *eng, int64_t seq_id);

/* Test-only fault injection (see pm_fault in prepare.h). */
void pm_engine_set_fault(pm_engine *eng, int fault);

#endif
