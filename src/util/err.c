/* err.c — error recording; see err.h for the convention. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>

int pm_errf(pm_err *e, int code, const char *fmt, ...) {
    if (!e || e->code) return e && e->code ? e->code : code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

int pm_err_ctx(pm_err *e, const char *fmt, ...) {
    if (!e) return PM_ESTATE;
    if (!e->code) return PM_ESTATE;
    char prefix[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t pl = strlen(prefix);
    if (pl >= sizeof e->msg) pl = sizeof e->msg - 1;
    memcpy(e->msg, prefix, pl);
    size_t rest = sizeof e->msg - 1 - pl, ol = strlen(old);
    if (ol > rest) ol = rest;
    memcpy(e->msg + pl, old, ol);
    e->msg[pl + ol] = 0;
    return e->code;
}

void pm_err_clear(pm_err *e) {
    if (!e) return;
    e->code = 0;
    e->msg[0] = 0;
}

int pm_err_stopped(pm_err *e, const char *what) {
    if (!e->code && e->stop && e->stop(e->stop_user)) pm_errf(e, PM_ECANCELED, "stopped during %s: the request was cancelled", what);
    return e->code;
}

void pm_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "phi4mm: internal invariant failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

void *pm_malloc(size_t n, pm_err *e) {
    void *p = malloc(n ? n : 1);
    if (!p) pm_errf(e, PM_ENOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void *pm_calloc(size_t count, size_t size, pm_err *e) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) pm_errf(e, PM_ENOMEM, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *pm_alloc_huge(size_t n) {
    const size_t huge = (size_t)2 << 20;
    if (n > SIZE_MAX - huge) return NULL;
    void *p = aligned_alloc(huge, (n + huge - 1) & ~(huge - 1));
    if (p && n >= huge) madvise(p, n & ~(huge - 1), MADV_HUGEPAGE); /* advice only */
    return p;
}

size_t pm_mul_size(size_t a, size_t b) {
    if (a && b > SIZE_MAX / a) return 0;
    return a * b;
}
