/* av_lib.c — libavutil, libavcodec and libavformat opened once per process, the functions wave_av.c
 * calls resolved (av_lib.h says why they are not linked; util/dynlib.h opens them). */
#include "audio/av_lib.h"

#include <stddef.h>

#include <libavutil/macros.h>

#include "util/dynlib.h"

#define SONAME(lib, MAJOR) "lib" #lib ".so." AV_STRINGIFY(MAJOR)

enum { avutil, avcodec, avformat }; /* the libraries, in the order opened (each needs the ones before) */

static const char *const av_sonames[] = {SONAME(avutil, LIBAVUTIL_VERSION_MAJOR), SONAME(avcodec, LIBAVCODEC_VERSION_MAJOR),
                                         SONAME(avformat, LIBAVFORMAT_VERSION_MAJOR)};
static const pm_dynsym av_syms[] = {
#define PM_AV_SYM(lib, fn) {lib, #fn, offsetof(pm_av, fn)},
    PM_AV_FUNCS(PM_AV_SYM)
#undef PM_AV_SYM
};

/* Filled once by pm_dynlib_open, then only read; av_quiet by pm_av_quiet. */
static pm_av av_fns;
static pm_dynlib av_libs = {av_sonames, 3, av_syms, sizeof av_syms / sizeof av_syms[0], &av_fns, PTHREAD_MUTEX_INITIALIZER, 0, 0, ""};
static _Atomic int av_quiet;

void pm_av_quiet(void) {
    av_quiet = 1; /* then the open flag: with pm_av_lib's opposite order one of the two sees the other's */
    if (av_libs.ok) av_fns.av_log_set_level(AV_LOG_QUIET);
}

const pm_av *pm_av_lib(const char *what, pm_err *e) {
    if (pm_dynlib_open(&av_libs)) {
        pm_errf(e, PM_EUNSUPPORTED, "%s: MP4 / M4A and WebM / Matroska audio need FFmpeg's libraries (Debian: libavformat%d): %s",
                what, LIBAVFORMAT_VERSION_MAJOR, av_libs.why);
        return NULL;
    }
    if (av_quiet) av_fns.av_log_set_level(AV_LOG_QUIET); /* idempotent; see pm_av_quiet */
    return &av_fns;
}
