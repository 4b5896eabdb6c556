/* media_urls.h — which remote media URLs (image_url, audio_url) a request may make the server fetch,
 * and the table of what was fetched for it. Pure: no network (the transfers are media_fetch.c's).
 *
 * The server fetches nothing by default. `--allow-media-hosts LIST` names the hosts it fetches
 * media URLs from (comma-separated): `images.example.com` that host, `*.example.com` its
 * subdomains, `*` any host. A host named exactly may resolve to any address (your own image
 * server on the internal network); a host admitted by a wildcard only to public ones, so that a
 * name a client controls cannot point the server at its loopback, private or link-local
 * neighbours (srv_addr_internal). Redirects are followed only to hosts the list admits. */
#ifndef PM_SRV_MEDIA_URLS_H
#define PM_SRV_MEDIA_URLS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct srv_host_rule {
    char host[256];     /* lower case, no trailing dot; "" with any */
    int subdomains;     /* "*.host": any name ending in ".host" (not host itself) */
    int any;            /* "*" */
} srv_host_rule;

typedef struct srv_media_hosts {
    srv_host_rule *rules;
    int n;
} srv_media_hosts;

/* Parses LIST. Returns 0, or -1 with a message (an empty entry, a malformed name). */
int srv_media_hosts_parse(const char *list, srv_media_hosts *out, char *err, size_t errlen);
void srv_media_hosts_free(srv_media_hosts *h);

enum { SRV_HOST_REFUSED = 0, SRV_HOST_EXACT = 1, SRV_HOST_PUBLIC = 2 };
/* How `host` (a URL's host as written: a name, an IPv4 literal or a bracketed IPv6 one; any case)
 * is admitted: SRV_HOST_EXACT (named in the list: any address), SRV_HOST_PUBLIC (by a wildcard:
 * public addresses only) or SRV_HOST_REFUSED. */
int srv_media_host_allowed(const srv_media_hosts *h, const char *host);

/* 1 when a wildcard-admitted host must not be reached at this address: unspecified, loopback,
 * private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10), link-local (169.254/16,
 * fe80::/10), benchmarking, multicast, reserved, and those inside IPv4-mapped / NAT64 IPv6 ones. */
int srv_addr_internal(const struct sockaddr *sa);

/* 1 when url is an http:// or https:// URL (any case). */
int srv_is_remote_url(const char *url);

/* One remote URL of a request and what came of fetching it: data, or a message. */
typedef struct srv_fetched {
    char *url;
    uint8_t *data;
    size_t len;
    char err[320];      /* "" when data holds the body */
} srv_fetched;

typedef struct srv_fetch_table {
    srv_fetched *items;
    int n, cap;
} srv_fetch_table;

/* Adds the http(s) URLs of the media parts in a chat request's messages (messages[i].content[j]
 * of type image_url or audio_url, its url a string or {url}) to t, each once, at most max entries
 * in all (past that the parse refuses the request for its media count anyway). The hosts are judged when they
 * are fetched, by the parser that fetches them (media_fetch.c). Returns the number of entries, or
 * -1 when out of memory. */
int srv_fetch_collect(srv_fetch_table *t, const json_t *chat, int max);
/* The entry of url, or NULL. */
const srv_fetched *srv_fetch_find(const srv_fetch_table *t, const char *url);
void srv_fetch_table_free(srv_fetch_table *t);

#endif
