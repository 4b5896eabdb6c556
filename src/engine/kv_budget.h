/* kv_budget.h — the KV cache an engine lets its live sequences reserve when its options leave the
 * choice to it (pm_engine_opts.kv_budget = 0). Every sequence reserves its worst case (prompt plus
 * max_tokens) at admission, so that a long prompt, or many requests at once, are refused or made
 * to wait instead of growing the process until the kernel's OOM killer ends it. */
#ifndef PM_ENGINE_KV_BUDGET_H
#define PM_ENGINE_KV_BUDGET_H

#include <stdint.h>

#include "engine/model.h"

/* pm_memory_limit() (phi4mm.h) less what the model keeps resident (its mapped weights, less the bf16 pages that int8
 * copies replaced, plus those copies) less a headroom of max(1 GiB, 1/8 of the limit) for the
 * rest (activations, media, the page cache of other processes); at least PM_KV_BUDGET_MIN. */
#define PM_KV_BUDGET_MIN ((int64_t)256 << 20)
int64_t pm_kv_budget_auto(const pm_model *m);

#endif
