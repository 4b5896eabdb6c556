/* av_lib.c — opens libavutil, libavcodec and libavformat once per process and resolves the
 * functions wave_av.c calls (av_lib.h says why they are not linked). */
#include "audio/av_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <libavutil/macros.h>

#define SONAME(lib, MAJOR) "lib" #lib ".so." AV_STRINGIFY(MAJOR)

/* Written once, under the pthread_once below, then only read; `quiet` by pm_av_quiet. */
static struct {
    pthread_once_t once;
    pm_av fns;
    _Atomic int ok, quiet;
    char why[256];
} av_state = {PTHREAD_ONCE_INIT, {0}, 0, 0, ""};

enum { avutil, avcodec, avformat }; /* the libraries, in the order opened (each needs the ones before) */

static void av_open(void) {
    const char *names[3] = {SONAME(avutil, LIBAVUTIL_VERSION_MAJOR), SONAME(avcodec, LIBAVCODEC_VERSION_MAJOR),
                            SONAME(avformat, LIBAVFORMAT_VERSION_MAJOR)};
    void *h[3];
    for (int i = 0; i < 3; i++) {
        if (!(h[i] = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) {
            const char *why = dlerror();
            snprintf(av_state.why, sizeof av_state.why, "%s cannot be opened (%s)", names[i], why ? why : "not found");
            return; /* those opened stay open: a process tries once */
        }
    }
    void *p;
#define PM_AV_RESOLVE(lib, fn)                                                                                             \
    if (!(p = dlsym(h[lib], #fn))) {                                                                                       \
        snprintf(av_state.why, sizeof av_state.why, "%s has no %s", names[lib], #fn);                                      \
        return;                                                                                                            \
    }                                                                                                                      \
    memcpy(&av_state.fns.fn, &p, sizeof p); /* POSIX: dlsym's data pointer holds the function's address */
    PM_AV_FUNCS(PM_AV_RESOLVE)
#undef PM_AV_RESOLVE
    av_state.ok = 1; /* then quiet read: with pm_av_quiet's opposite order one of the two sees the other's flag */
    if (av_state.quiet) av_state.fns.av_log_set_level(AV_LOG_QUIET);
}

void pm_av_quiet(void) {
    av_state.quiet = 1;
    if (av_state.ok) av_state.fns.av_log_set_level(AV_LOG_QUIET); /* already open (else av_open sets it) */
}

const pm_av *pm_av_lib(const char *what, pm_err *e) {
    pthread_once(&av_state.once, av_open);
    if (av_state.ok) return &av_state.fns;
    pm_errf(e, PM_EUNSUPPORTED, "%s: MP4 / M4A and WebM / Matroska audio need FFmpeg's libraries (Debian: libavformat%d): %s", what,
            LIBAVFORMAT_VERSION_MAJOR, av_state.why);
    return NULL;
}
