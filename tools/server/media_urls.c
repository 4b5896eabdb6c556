/* media_urls.c — see media_urls.h. */
#include "media_urls.h"

#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A host name as the rules hold it: lower case, brackets of an IPv6 literal and a trailing dot
 * dropped. Returns 0, or -1 when it does not fit or holds a character no host has. */
static int normalize_host(const char *s, size_t n, char *out, size_t cap) {
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') s++, n -= 2;
    if (n && s[n - 1] == '.') n--;
    if (!n || n >= cap) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!(isalnum(ch) || ch == '-' || ch == '.' || ch == ':' || ch == '_')) return -1;
        out[i] = (char)tolower(ch);
    }
    out[n] = 0;
    return 0;
}

int srv_media_hosts_parse(const char *list, srv_media_hosts *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    size_t cap = 1;
    for (const char *p = list; *p; p++) cap += *p == ',';
    out->rules = calloc(cap, sizeof *out->rules);
    if (!out->rules) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n && isspace((unsigned char)*p)) p++, n--;
        while (n && isspace((unsigned char)p[n - 1])) n--;
        srv_host_rule *r = &out->rules[out->n];
        if (n == 1 && *p == '*') r->any = 1;
        else {
            if (n > 2 && p[0] == '*' && p[1] == '.') r->subdomains = 1, p += 2, n -= 2;
            if (normalize_host(p, n, r->host, sizeof r->host) || strchr(r->host, '*')) {
                snprintf(err, errlen, "--allow-media-hosts: '%.*s' is not a host name, '*.name' or '*'", (int)(n > 80 ? 80 : n), p);
                srv_media_hosts_free(out);
                return -1;
            }
        }
        out->n++;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

void srv_media_hosts_free(srv_media_hosts *h) {
    free(h->rules);
    memset(h, 0, sizeof *h);
}

int srv_media_host_allowed(const srv_media_hosts *h, const char *host) {
    char name[256];
    if (!h || !host || normalize_host(host, strlen(host), name, sizeof name)) return SRV_HOST_REFUSED;
    int best = SRV_HOST_REFUSED;
    size_t nl = strlen(name);
    for (int i = 0; i < h->n; i++) {
        const srv_host_rule *r = &h->rules[i];
        if (!r->any && !r->subdomains && !strcmp(r->host, name)) return SRV_HOST_EXACT;
        size_t rl = strlen(r->host);
        if (r->any || (r->subdomains && nl > rl + 1 && name[nl - rl - 1] == '.' && !strcmp(name + nl - rl, r->host))) best = SRV_HOST_PUBLIC;
    }
    return best;
}

static int v4_internal(uint32_t a) { /* host order */
    static const struct { uint32_t net; int bits; } nets[] = {
        {0x00000000u, 8},  {0x0a000000u, 8},  {0x64400000u, 10}, {0x7f000000u, 8},  {0xa9fe0000u, 16},
        {0xac100000u, 12}, {0xc0000000u, 24}, {0xc0000200u, 24}, {0xc0a80000u, 16}, {0xc6120000u, 15},
        {0xc6336400u, 24}, {0xcb007100u, 24}, {0xe0000000u, 4},  {0xf0000000u, 4},
    };
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++)
        if ((a >> (32 - nets[i].bits)) == (nets[i].net >> (32 - nets[i].bits))) return 1;
    return 0;
}

int srv_addr_internal(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) {
        const unsigned char *b = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
        return v4_internal((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]);
    }
    if (sa->sa_family != AF_INET6) return 1;
    const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (!memcmp(b, mapped, 12) || !memcmp(b, nat64, 12))
        return v4_internal((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15]);
    static const unsigned char zero[16];
    if (!memcmp(b, zero, 15) && b[15] <= 1) return 1;      /* :: and ::1 */
    if ((b[0] & 0xfe) == 0xfc) return 1;                    /* fc00::/7 unique local */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return 1;    /* fe80::/10 link-local */
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return 1;    /* fec0::/10 site-local (deprecated) */
    if (b[0] == 0xff) return 1;                             /* multicast */
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) return 1; /* 2001:db8::/32 documentation */
    if (b[0] == 0x01 && !memcmp(b + 1, zero, 7)) return 1;  /* 100::/64 discard */
    return (b[0] & 0xe0) != 0x20;                           /* outside 2000::/3, global unicast */
}

int srv_is_remote_url(const char *url) { return !strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8); }

const srv_fetched *srv_fetch_find(const srv_fetch_table *t, const char *url) {
    for (int i = 0; t && i < t->n; i++)
        if (!strcmp(t->items[i].url, url)) return &t->items[i];
    return NULL;
}

static int add_url(srv_fetch_table *t, const char *url, int max) {
    if (srv_fetch_find(t, url) || t->n >= max) return 0;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 4;
        srv_fetched *it = realloc(t->items, sizeof *it * (size_t)cap);
        if (!it) return -1;
        t->items = it;
        t->cap = cap;
    }
    srv_fetched *it = &t->items[t->n];
    memset(it, 0, sizeof *it);
    if (!(it->url = strdup(url))) return -1;
    t->n++;
    return 0;
}

int srv_fetch_collect(srv_fetch_table *t, const json_t *chat, int max) {
    size_t i, j;
    const json_t *m, *p;
    json_array_foreach(json_object_get(chat, "messages"), i, m) {
        json_array_foreach(json_object_get(m, "content"), j, p) {
            const char *type = json_string_value(json_object_get(p, "type"));
            if (!type || (strcmp(type, "image_url") && strcmp(type, "audio_url"))) continue;
            const json_t *iu = json_object_get(p, type);
            const char *u = json_string_value(json_is_object(iu) ? json_object_get(iu, "url") : iu);
            if (u && srv_is_remote_url(u) && add_url(t, u, max)) return -1;
        }
    }
    return t->n;
}

void srv_fetch_table_free(srv_fetch_table *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->items[i].url);
        free(t->items[i].data);
    }
    free(t->items);
    memset(t, 0, sizeof *t);
}
