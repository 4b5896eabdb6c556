/* parity.h — the comparison side of `phi4mm parity`: each check loads one reference .npy of the
 * fixture set, compares it with what the engine computed and prints one line
 *     PASS|FAIL case/stage max_abs=... tol=...
 * Every check counts; a stage that cannot be computed is reported with pm_parity_fail().
 * Stage runners (parity_*.c) call these; cmd_parity.c owns the loop over cases. */
#ifndef PM_PARITY_H
#define PM_PARITY_H

#include <stddef.h>
#include <stdint.h>

typedef struct pm_parity {
    const char *dir;        /* fixture set root: has tiny_model/, inputs/, ref/ */
    const char *stage_glob; /* only stages matching this glob (fnmatch) are checked; NULL = all */
    int passed, failed;
    int verbose;
    /* Reference files (relative to ref/) that some check has read, to find the unchecked ones. */
    char **seen;
    int n_seen, cap_seen;
} pm_parity;

/* 1 if `stage` passes the --stage-filter glob. */
int pm_parity_want(const pm_parity *p, const char *case_name, const char *stage);

/* Compares got (numel floats, row-major) with ref/<ref_rel>. tol = tol_abs + tol_rel_max * max|ref|.
 * The element count must match the reference's; shape is compared when `shape` is non-NULL. */
void pm_parity_check_f32(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, const float *got,
                         size_t numel, const int64_t *shape, int ndim, double tol_abs, double tol_rel_max);
/* Exact integer comparison (ids, sizes, masks as 0/1). */
void pm_parity_check_i64(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, const int64_t *got, size_t n);
/* Float64 reference compared with double data (resampled waveforms). */
void pm_parity_check_f64(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, const double *got, size_t n,
                         double tol_abs);
/* Records a check on values the caller compared itself. */
void pm_parity_report(pm_parity *p, const char *case_name, const char *stage, int ok, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Records a failure for a stage that could not be computed (with the reason). */
void pm_parity_fail(pm_parity *p, const char *case_name, const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* 1 if ref/<ref_rel> exists. */
int pm_parity_has(const pm_parity *p, const char *ref_rel);
/* Marks a reference file as covered without comparing it (e.g. inputs consumed, not outputs). */
void pm_parity_mark_seen(pm_parity *p, const char *ref_rel);

/* Stage runners. Each reads what it needs from p->dir and reports through the checks above. */
void pm_parity_run_features(pm_parity *p);  /* pseudo-case "features": everything in ref/audio/ */

#endif
