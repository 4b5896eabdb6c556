/* curl_lib.h — libcurl opened on first use (dlopen) instead of linked: it and the libraries it
 * needs (TLS, HTTP/2, SSH, LDAP, Kerberos, IDN, ...: 20 of the binary's 54) took ~10 ms of
 * dynamic loading at every start of every command, twice for the CLI (which re-executes itself
 * once to set GOMP_SPINCOUNT), for two features only: `serve --allow-media-hosts` (remote media
 * URLs, media_fetch.c) and `run-batch` (run_batch.c). A server that fetches nothing never loads
 * it. The members are the functions without their `curl_` prefix (cu->easy_setopt(...)): curl.h
 * makes curl_easy_setopt and curl_easy_getinfo type-checking macros under GCC, which a member of
 * the same name would expand; the typed srv_setopt_* and srv_getinfo_* below check instead. */
#ifndef PM_SRV_CURL_LIB_H
#define PM_SRV_CURL_LIB_H

#include <curl/curl.h>
#include <stddef.h>

/* The functions media_fetch.c and run_batch.c call: X(name without curl_). */
#define SRV_CURL_FUNCS(X)                                                                                                  \
    X(global_init)                                                                                                         \
    X(global_cleanup)                                                                                                      \
    X(easy_init)                                                                                                           \
    X(easy_reset)                                                                                                          \
    X(easy_cleanup)                                                                                                        \
    X(easy_setopt)                                                                                                         \
    X(easy_getinfo)                                                                                                        \
    X(easy_perform)                                                                                                        \
    X(easy_strerror)                                                                                                       \
    X(free)                                                                                                                \
    X(url)                                                                                                                 \
    X(url_set)                                                                                                             \
    X(url_get)                                                                                                             \
    X(url_cleanup)                                                                                                         \
    X(slist_append)                                                                                                        \
    X(slist_free_all)                                                                                                      \
    X(multi_init)                                                                                                          \
    X(multi_cleanup)                                                                                                       \
    X(multi_add_handle)                                                                                                    \
    X(multi_remove_handle)                                                                                                 \
    X(multi_perform)                                                                                                       \
    X(multi_poll)                                                                                                          \
    X(multi_info_read)

typedef struct srv_curl {
#define SRV_CURL_MEMBER(fn) __typeof__(&curl_##fn) fn;
    SRV_CURL_FUNCS(SRV_CURL_MEMBER)
#undef SRV_CURL_MEMBER
} srv_curl;

/* Typed setters and getters in place of curl.h's GCC type checks, which a member call escapes:
 * each takes the value type its class of options needs (a long, a curl_off_t, a string, a data
 * pointer, a callback of the option's type), and the option's class, the range its number lies
 * in, is checked at compile time (a negative array size otherwise). Strings and data pointers
 * share a range: the string setter takes const char *, the pointer setter void *. */
#define SRV_CURL_IN(o, lo, hi) ((void)sizeof(char[(o) >= (lo) && (o) < (hi) ? 1 : -1]))
#define SRV_CURL_SETTER(name, type)                                                                                        \
    static inline CURLcode srv_curl_set_##name(const srv_curl *cu, CURL *h, CURLoption o, type v) {                       \
        return cu->easy_setopt(h, o, v);                                                                                   \
    }
SRV_CURL_SETTER(long, long)
SRV_CURL_SETTER(off, curl_off_t)
SRV_CURL_SETTER(str, const char *)
SRV_CURL_SETTER(ptr, void *)
SRV_CURL_SETTER(write, curl_write_callback)
SRV_CURL_SETTER(opensocket, curl_opensocket_callback)
SRV_CURL_SETTER(xferinfo, curl_xferinfo_callback)
#undef SRV_CURL_SETTER
#define srv_setopt_long(cu, h, o, v) (SRV_CURL_IN(o, CURLOPTTYPE_LONG, CURLOPTTYPE_OBJECTPOINT), srv_curl_set_long(cu, h, o, v))
#define srv_setopt_off(cu, h, o, v) (SRV_CURL_IN(o, CURLOPTTYPE_OFF_T, CURLOPTTYPE_BLOB), srv_curl_set_off(cu, h, o, v))
#define srv_setopt_str(cu, h, o, v) (SRV_CURL_IN(o, CURLOPTTYPE_OBJECTPOINT, CURLOPTTYPE_FUNCTIONPOINT), srv_curl_set_str(cu, h, o, v))
#define srv_setopt_ptr(cu, h, o, v) (SRV_CURL_IN(o, CURLOPTTYPE_OBJECTPOINT, CURLOPTTYPE_FUNCTIONPOINT), srv_curl_set_ptr(cu, h, o, v))
#define srv_setopt_fn(cu, h, o, kind, f) (SRV_CURL_IN(o, CURLOPTTYPE_FUNCTIONPOINT, CURLOPTTYPE_OFF_T), srv_curl_set_##kind(cu, h, o, f))
static inline CURLcode srv_curl_get_long(const srv_curl *cu, CURL *h, CURLINFO i, long *v) { return cu->easy_getinfo(h, i, v); }
static inline CURLcode srv_curl_get_str(const srv_curl *cu, CURL *h, CURLINFO i, char **v) { return cu->easy_getinfo(h, i, v); }
#define srv_getinfo_long(cu, h, i, v) (SRV_CURL_IN((i) & CURLINFO_TYPEMASK, CURLINFO_LONG, CURLINFO_LONG + 1), srv_curl_get_long(cu, h, i, v))
#define srv_getinfo_str(cu, h, i, v) (SRV_CURL_IN((i) & CURLINFO_TYPEMASK, CURLINFO_STRING, CURLINFO_STRING + 1), srv_curl_get_str(cu, h, i, v))

/* The functions, libcurl opened by the first call of the process (thread-safe) and its global state
 * initialised (curl_global_init, which is not thread-safe itself: call before starting threads that
 * use it). NULL with why (a sentence naming the library, and what is missing) when it cannot be. */
const srv_curl *srv_curl_open(char *why, size_t why_len);

#endif
