/* dynlib.h — a set of shared libraries opened on first use (dlopen) instead of linked, for the
 * optional features whose libraries would otherwise load, with all they depend on, at every start
 * of every process: FFmpeg's for MP4 / WebM audio (audio/av_lib.h), libcurl for remote media and
 * run-batch (tools/server/curl_lib.h), libmicrohttpd for serve and run-batch (tools/server/mhd_lib.h),
 * libsndfile for every other audio file (audio/sf_lib.h).
 *
 * The user fills a table of function pointers: one pm_dynsym per function, naming the library
 * that holds it (an index into sonames) and the member's offset in the table. The first
 * pm_dynlib_open of the process opens the libraries in order (each may need the ones before) and
 * fills the table; every later call returns that outcome. */
#ifndef PM_UTIL_DYNLIB_H
#define PM_UTIL_DYNLIB_H

#include <pthread.h>
#include <stddef.h>

typedef struct pm_dynsym {
    int lib;          /* index into pm_dynlib.sonames */
    const char *name; /* the symbol */
    size_t offset;    /* where its address goes in the table (offsetof) */
} pm_dynsym;

typedef struct pm_dynlib {
    const char *const *sonames; /* e.g. "libcurl.so.4": the ABI compiled against */
    int nlibs;
    const pm_dynsym *syms;
    int nsyms;
    void *table;
    /* below: state, zero-initialised but for the mutex (PTHREAD_MUTEX_INITIALIZER) */
    pthread_mutex_t mu;
    int tried;
    _Atomic int ok; /* set once the table is whole; read without the mutex */
    char why[256];  /* when not ok: which library could not be opened or lacks which function */
} pm_dynlib;

/* 0 when every library opened and every function resolved (the table is filled), else -1 and
 * d->why says what is missing. Thread-safe; a process tries once (what opened stays open). */
int pm_dynlib_open(pm_dynlib *d);

/* One library's file-scope table `static type name##_fns` and its `static pm_dynlib name##_lib`,
 * the pm_dynsym entries (library 0) given after the soname. */
#define PM_DYNLIB_ONE(name, type, soname, ...)                                                                            \
    static const char *const name##_sonames[] = {soname};                                                                \
    static const pm_dynsym name##_syms[] = {__VA_ARGS__};                                                                \
    static type name##_fns;                                                                                              \
    static pm_dynlib name##_lib = {name##_sonames, 1, name##_syms, sizeof name##_syms / sizeof name##_syms[0], &name##_fns, \
                                   PTHREAD_MUTEX_INITIALIZER, 0, 0, ""}

#endif
