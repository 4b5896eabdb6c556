/* sf_lib.c — libsndfile opened once per process and its functions resolved (sf_lib.h says why it
 * is not linked; util/dynlib.h opens it). */
#include "audio/sf_lib.h"

#include <stddef.h>

#include "util/dynlib.h"

/* The soname of the ABI compiled against (libsndfile.so.1 since 1.0 of 2002); sf_fns is filled
 * once by pm_dynlib_open, then only read. */
#define PM_SF_SYM(fn) {0, #fn, offsetof(pm_sf, fn)},
PM_DYNLIB_ONE(sf, pm_sf, "libsndfile.so.1", PM_SF_FUNCS(PM_SF_SYM));

const pm_sf *pm_sf_lib(const char *what, pm_err *e) {
    if (pm_dynlib_open(&sf_lib)) {
        pm_errf(e, PM_EUNSUPPORTED, "%s: audio needs libsndfile (Debian: libsndfile1): %s", what, sf_lib.why);
        return NULL;
    }
    return &sf_fns;
}
