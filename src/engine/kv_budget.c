/* kv_budget.c — see kv_budget.h. */
#include "kv_budget.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int64_t pm_memory_limit(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    int64_t lim = pages > 0 && size > 0 ? (int64_t)pages * size : 0;
    /* cgroup v2: "max" or a byte count; a container's limit is what the OOM killer enforces */
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        char buf[64] = "";
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            long long v = strtoll(buf, &end, 10);
            if (end != buf && v > 0 && (lim == 0 || v < lim)) lim = v;
        }
        fclose(f);
    }
    return lim;
}

int64_t pm_kv_budget_auto(const pm_model *m) {
    int64_t lim = pm_memory_limit();
    if (lim <= 0) return PM_KV_BUDGET_MIN;
    int64_t resident = (int64_t)pm_weights_total_bytes(m->w) + (int64_t)m->q8_bytes;
    for (int i = 0; i < m->llm.n_q8; i++) resident -= m->llm.q8[i].numel * 2; /* the bf16 pages released */
    int64_t headroom = lim / 8 > ((int64_t)1 << 30) ? lim / 8 : (int64_t)1 << 30;
    int64_t b = lim - resident - headroom;
    return b > PM_KV_BUDGET_MIN ? b : PM_KV_BUDGET_MIN;
}
