/* err.h — the one error convention of phi4mm.
 *
 * Every fallible internal function returns int: PM_OK (0) or a negative PM_E* code from phi4mm.h,
 * and writes a human sentence into a caller-owned pm_err. The first failure wins: later calls to
 * pm_errf() on an already-set pm_err keep the original message (so the innermost, most precise cause
 * survives), while pm_err_ctx() prepends context ("config.json: ") as the error travels outward.
 * The library never calls exit() on bad input. PM_ASSERT is only for internal invariants. */
#ifndef PM_ERR_H
#define PM_ERR_H

#include <stddef.h>
#include "phi4mm.h"

typedef struct pm_err {
    int code;           /* 0 while no error has been recorded */
    char msg[1024];
    /* Optional: asked between the blocks of a long computation (a Conformer block, a SigLIP layer)
     * whether to give up: non-zero ends it with PM_ECANCELED (pm_err_stopped). */
    int (*stop)(void *user);
    void *stop_user;
} pm_err;

#if defined(__GNUC__)
#define PM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PM_PRINTF(a, b)
#endif

/* Records an error (if none is recorded yet) and returns code, so callers can `return pm_errf(...)`. */
int pm_errf(pm_err *e, int code, const char *fmt, ...) PM_PRINTF(3, 4);
/* Prepends context to a recorded error; returns e->code (or PM_ESTATE if none was recorded). */
int pm_err_ctx(pm_err *e, const char *fmt, ...) PM_PRINTF(2, 3);
void pm_err_clear(pm_err *e);
/* PM_ECANCELED (recorded, with `what` in the message) when e's stop hook asks to give up, else
 * e->code: a long loop calls it between blocks and leaves on non-zero. */
int pm_err_stopped(pm_err *e, const char *what);

void pm_assert_fail(const char *expr, const char *file, int line);
#define PM_ASSERT(x) ((x) ? (void)0 : pm_assert_fail(#x, __FILE__, __LINE__))

/* Checked allocation helpers: on failure record PM_ENOMEM in e and return NULL. */
void *pm_malloc(size_t n, pm_err *e);
void *pm_calloc(size_t count, size_t size, pm_err *e);
/* n bytes aligned to 2 MB, whose whole 2 MB pages are advised as transparent huge pages before
 * anything touches them (weights the engine makes itself and streams, the int8 copies of
 * `--weights q8`: one fault per 2 MB instead of per 4 KB, one TLB entry per 2 MB); the tail past
 * the last whole 2 MB stays on 4 KB pages, so nothing beyond n is resident. NULL when out of
 * memory; free(). */
void *pm_alloc_huge(size_t n);
/* Multiplies sizes, returns 0 on overflow (callers treat 0 as failure when operands are non-zero). */
size_t pm_mul_size(size_t a, size_t b);

#endif
