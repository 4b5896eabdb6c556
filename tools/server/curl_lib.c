/* curl_lib.c — libcurl opened once per process and its functions resolved (curl_lib.h says why it
 * is not linked; util/dynlib.h opens it). */
#include "curl_lib.h"

#include <stdio.h>

#include "util/dynlib.h"

/* The soname of libcurl's ABI since 7.16 (2006), whatever the package's version (libcurl4 on Debian);
 * curl_fns is filled once by pm_dynlib_open, then only read. */
#define SRV_CURL_SYM(fn) {0, "curl_" #fn, offsetof(srv_curl, fn)},
PM_DYNLIB_ONE(curl, srv_curl, "libcurl.so.4", SRV_CURL_FUNCS(SRV_CURL_SYM));

const srv_curl *srv_curl_open(char *why, size_t why_len) {
    if (pm_dynlib_open(&curl_lib)) {
        snprintf(why, why_len, "libcurl is needed (Debian: libcurl4): %s", curl_lib.why);
        return NULL;
    }
    /* reference-counted by libcurl: each srv_curl_open is matched by a global_cleanup */
    if (curl_fns.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(why, why_len, "libcurl's global initialisation failed");
        return NULL;
    }
    return &curl_fns;
}
