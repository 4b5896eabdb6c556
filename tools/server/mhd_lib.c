/* mhd_lib.c — libmicrohttpd opened once per process and its functions resolved (mhd_lib.h says
 * why it is not linked; util/dynlib.h opens it). */
#include "mhd_lib.h"

#include <stdio.h>

#include "util/dynlib.h"

/* The soname of the ABI compiled against (Debian: libmicrohttpd12, since 0.9.x of 2014); mhd_fns is
 * filled once by pm_dynlib_open, then only read. */
#define SRV_MHD_SYM(fn) {0, "MHD_" #fn, offsetof(srv_mhd, fn)},
PM_DYNLIB_ONE(mhd, srv_mhd, "libmicrohttpd.so.12", SRV_MHD_FUNCS(SRV_MHD_SYM));

const srv_mhd *srv_mhd_open(char *why, size_t why_len) {
    if (pm_dynlib_open(&mhd_lib)) {
        snprintf(why, why_len, "libmicrohttpd is needed (Debian: libmicrohttpd12): %s", mhd_lib.why);
        return NULL;
    }
    return &mhd_fns;
}
