/* mhd_lib.h — libmicrohttpd opened by the server when it starts (dlopen) instead of linked: it
 * and GnuTLS with what GnuTLS needs (p11-kit, nettle, hogweed, gmp, tasn1, idn2, unistring, ffi)
 * were 10 of the binary's 34 libraries and ~7 ms of dynamic loading at every start of every
 * command, twice for the CLI (which re-executes itself once to set GOMP_SPINCOUNT), though only
 * `serve` and `run-batch` listen. The HTTP code reaches the functions through ctx->mhd. */
#ifndef PM_SRV_MHD_LIB_H
#define PM_SRV_MHD_LIB_H

#include <microhttpd.h>
#include <stddef.h>

/* The functions the server calls: X(name without MHD_). */
#define SRV_MHD_FUNCS(X)                                                                                                   \
    X(start_daemon)                                                                                                        \
    X(quiesce_daemon)                                                                                                      \
    X(stop_daemon)                                                                                                         \
    X(get_daemon_info)                                                                                                     \
    X(is_feature_supported)                                                                                                \
    X(get_connection_info)                                                                                                 \
    X(lookup_connection_value)                                                                                             \
    X(get_connection_values)                                                                                               \
    X(suspend_connection)                                                                                                  \
    X(resume_connection)                                                                                                   \
    X(create_response_from_buffer)                                                                                         \
    X(create_response_from_callback)                                                                                       \
    X(add_response_header)                                                                                                 \
    X(queue_response)                                                                                                      \
    X(destroy_response)

typedef struct srv_mhd {
#define SRV_MHD_MEMBER(fn) __typeof__(&MHD_##fn) fn;
    SRV_MHD_FUNCS(SRV_MHD_MEMBER)
#undef SRV_MHD_MEMBER
} srv_mhd;

/* The functions, libmicrohttpd opened by the first call of the process (thread-safe). NULL with
 * why (a sentence naming the library, and what is missing) when it cannot be. */
const srv_mhd *srv_mhd_open(char *why, size_t why_len);

#endif
