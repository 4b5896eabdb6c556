/* sf_lib.h — libsndfile opened on first use (util/dynlib.h) instead of linked: it and its codecs'
 * libraries (FLAC, Vorbis, Vorbis-enc, Ogg, Opus, mpg123, LAME: 8 of the binary's 24) loaded at
 * every start of every process, ~4-5 ms of dynamic loading (twice for the CLI, which re-executes
 * itself once to set GOMP_SPINCOUNT), though only audio needs them. A text or image run, the
 * server before its first clip and a program linking libphi4mm never load it. */
#ifndef PM_AUDIO_SF_LIB_H
#define PM_AUDIO_SF_LIB_H

#include <sndfile.h>

#include "util/err.h"

/* The functions wave.c and `phi4mm mkmedia` call. */
#define PM_SF_FUNCS(X)                                                                                                     \
    X(sf_open)                                                                                                             \
    X(sf_open_virtual)                                                                                                     \
    X(sf_readf_double)                                                                                                     \
    X(sf_write_short)                                                                                                      \
    X(sf_error)                                                                                                            \
    X(sf_error_number)                                                                                                     \
    X(sf_strerror)                                                                                                         \
    X(sf_close)

typedef struct pm_sf {
#define PM_SF_MEMBER(fn) __typeof__(&fn) fn;
    PM_SF_FUNCS(PM_SF_MEMBER)
#undef PM_SF_MEMBER
} pm_sf;

/* The functions, libsndfile opened by the first call of the process (thread-safe). NULL with e set
 * (PM_EUNSUPPORTED, naming `what` and the library) when it or a function is missing. */
const pm_sf *pm_sf_lib(const char *what, pm_err *e);

#endif
