/* curl_lib.h — libcurl opened on first use (dlopen) instead of linked: it and the libraries it
 * needs (TLS, HTTP/2, SSH, LDAP, Kerberos, IDN, ...: 20 of the binary's 54) took ~10 ms of
 * dynamic loading at every start of every command, twice for the CLI (which re-executes itself
 * once to set GOMP_SPINCOUNT), for two features only: `serve --allow-media-hosts` (remote media
 * URLs, media_fetch.c) and `run-batch` (run_batch.c). A server that fetches nothing never loads
 * it. The members are the functions without their `curl_` prefix (cu->easy_setopt(...)): curl.h
 * makes curl_easy_setopt and curl_easy_getinfo type-checking macros under GCC, which a member of
 * the same name would expand. */
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

/* The functions, libcurl opened by the first call of the process (thread-safe) and its global state
 * initialised (curl_global_init, which is not thread-safe itself: call before starting threads that
 * use it). NULL with why (a sentence naming the library, and what is missing) when it cannot be. */
const srv_curl *srv_curl_open(char *why, size_t why_len);

#endif
