/* parity.c — the checks of `phi4mm parity` (see parity.h). */
#include "parity.h"

#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/npy.h"

int pm_parity_want(const pm_parity *p, const char *case_name, const char *stage) {
    if (!p->stage_glob) return 1;
    char full[512];
    snprintf(full, sizeof full, "%s/%s", case_name, stage);
    return !fnmatch(p->stage_glob, stage, 0) || !fnmatch(p->stage_glob, full, 0);
}

void pm_parity_mark_seen(pm_parity *p, const char *ref_rel) {
    for (int i = 0; i < p->n_seen; i++)
        if (!strcmp(p->seen[i], ref_rel)) return;
    if (p->n_seen == p->cap_seen) {
        p->cap_seen = p->cap_seen ? 2 * p->cap_seen : 64;
        p->seen = realloc(p->seen, sizeof(char *) * (size_t)p->cap_seen);
    }
    p->seen[p->n_seen++] = strdup(ref_rel);
}

int pm_parity_has(const pm_parity *p, const char *ref_rel) {
    char path[2048];
    snprintf(path, sizeof path, "%s/ref/%s", p->dir, ref_rel);
    return access(path, R_OK) == 0;
}

static void line(pm_parity *p, int ok, const char *case_name, const char *stage, const char *detail) {
    if (ok) p->passed++;
    else p->failed++;
    printf("%s %s/%s %s\n", ok ? "PASS" : "FAIL", case_name, stage, detail);
    fflush(stdout);
}

void pm_parity_report(pm_parity *p, const char *case_name, const char *stage, int ok, const char *fmt, ...) {
    if (!pm_parity_want(p, case_name, stage)) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    line(p, ok, case_name, stage, buf);
}

void pm_parity_fail(pm_parity *p, const char *case_name, const char *stage, const char *fmt, ...) {
    if (!pm_parity_want(p, case_name, stage)) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char d[1100];
    snprintf(d, sizeof d, "not computed: %s", buf);
    line(p, 0, case_name, stage, d);
}

static int load_ref(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, pm_npy *a) {
    char path[2048];
    snprintf(path, sizeof path, "%s/ref/%s", p->dir, ref_rel);
    pm_parity_mark_seen(p, ref_rel);
    pm_err e = {0};
    if (pm_npy_load(a, path, &e)) {
        line(p, 0, case_name, stage, e.msg);
        return -1;
    }
    return 0;
}

static int shape_ok(pm_parity *p, const char *case_name, const char *stage, const pm_npy *a, size_t numel, const int64_t *shape, int ndim) {
    char d[256];
    if (a->numel != numel) {
        snprintf(d, sizeof d, "element count %zu, reference has %zu", numel, a->numel);
        line(p, 0, case_name, stage, d);
        return 0;
    }
    if (shape) {
        int ok = ndim == a->ndim;
        for (int i = 0; ok && i < ndim; i++) ok = shape[i] == a->shape[i];
        if (!ok) {
            size_t o = (size_t)snprintf(d, sizeof d, "shape [");
            for (int i = 0; i < ndim && o < sizeof d; i++) o += (size_t)snprintf(d + o, sizeof d - o, i ? ",%lld" : "%lld", (long long)shape[i]);
            o += (size_t)snprintf(d + o, sizeof d - o, "] vs reference [");
            for (int i = 0; i < a->ndim && o < sizeof d; i++) o += (size_t)snprintf(d + o, sizeof d - o, i ? ",%lld" : "%lld", (long long)a->shape[i]);
            if (o < sizeof d) snprintf(d + o, sizeof d - o, "]");
            line(p, 0, case_name, stage, d);
            return 0;
        }
    }
    return 1;
}

/* One stage's reference, loaded and held against what was computed: 1 = compare (free *a after);
 * 0 = nothing to compare (the stage is filtered out, or its FAIL line is printed). */
static int open_ref(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, int computed, size_t numel,
                    const int64_t *shape, int ndim, pm_npy *a) {
    if (!pm_parity_want(p, case_name, stage)) {
        pm_parity_mark_seen(p, ref_rel);
        return 0;
    }
    if (load_ref(p, case_name, stage, ref_rel, a)) return 0;
    if (computed && shape_ok(p, case_name, stage, a, numel, shape, ndim)) return 1;
    if (!computed) line(p, 0, case_name, stage, "not computed");
    pm_npy_free(a);
    return 0;
}

void pm_parity_check_f32(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, const float *got, size_t numel,
                         const int64_t *shape, int ndim, double tol_abs, double tol_rel_max) {
    pm_npy a;
    if (!open_ref(p, case_name, stage, ref_rel, got != NULL, numel, shape, ndim, &a)) return;
    double md = 0, mr = 0;
    size_t at = 0;
    for (size_t i = 0; i < numel; i++) {
        double r = pm_npy_get(&a, i), d = fabs((double)got[i] - r);
        if (isnan(d)) d = INFINITY;
        if (d > md) { md = d; at = i; }
        if (fabs(r) > mr) mr = fabs(r);
    }
    double tol = tol_abs + tol_rel_max * mr;
    char d[256];
    snprintf(d, sizeof d, "max_abs=%.3e tol=%.3e (max|ref|=%.3g%s)", md, tol, mr, md > tol ? ", worst at flat index" : "");
    if (md > tol) snprintf(d + strlen(d), sizeof d - strlen(d), " %zu: got %.6g ref %.6g", at, (double)got[at], pm_npy_get(&a, at));
    line(p, md <= tol, case_name, stage, d);
    pm_npy_free(&a);
}

void pm_parity_check_f64(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, const double *got, size_t n,
                         double tol_abs) {
    pm_npy a;
    if (!open_ref(p, case_name, stage, ref_rel, got != NULL, n, NULL, 0, &a)) return;
    double md = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - pm_npy_get(&a, i));
        if (isnan(d) || d > md) md = isnan(d) ? INFINITY : d;
    }
    char d[160];
    snprintf(d, sizeof d, "max_abs=%.3e tol=%.3e", md, tol_abs);
    line(p, md <= tol_abs, case_name, stage, d);
    pm_npy_free(&a);
}

void pm_parity_check_i64(pm_parity *p, const char *case_name, const char *stage, const char *ref_rel, const int64_t *got, size_t n) {
    pm_npy a;
    if (!open_ref(p, case_name, stage, ref_rel, got != NULL, n, NULL, 0, &a)) return;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if ((double)got[i] != pm_npy_get(&a, i)) {
            if (!bad) first = i;
            bad++;
        }
    char d[200];
    if (bad) snprintf(d, sizeof d, "%zu of %zu differ (first at %zu: got %lld ref %lld)", bad, n, first, (long long)got[first],
                      (long long)pm_npy_get(&a, first));
    else snprintf(d, sizeof d, "exact (%zu values)", n);
    line(p, !bad, case_name, stage, d);
    pm_npy_free(&a);
}
