/* media_fetch.h — a request's remote media URLs (image_url, audio_url) fetched with libcurl, off
 * the HTTP threads.
 *
 * A libmicrohttpd worker serves many connections (streams included), so a transfer that waits on
 * a slow host must not run on it: the route parks its connection, a thread of the fetch pool
 * (one a request fetching at once, kept for the next) fetches the URLs one after the other,
 * within one deadline for them all (--media-fetch-timeout), and resumes the connection, whose
 * route then runs again from the start and finds them in the table.
 *
 * Each transfer: http and https only (redirects included, each hop's host judged against
 * --allow-media-hosts by curl's own URL parser, at most 5 hops), no proxy from the environment, no
 * cookies, no credentials (a URL's user:password@ is dropped), at most the request's media cap of
 * bytes (--max-body), charged to the request-memory budget as they arrive, and a wildcard-admitted
 * host refused at an internal address when the socket is opened (so a DNS answer cannot steer it
 * inside). A failed one becomes
 * a 400 `invalid_image_url` (`invalid_audio_url`) naming the URL's place in the request and why. */
#ifndef PM_SRV_MEDIA_FETCH_H
#define PM_SRV_MEDIA_FETCH_H

#include <jansson.h>

#include "chat_parse.h"
#include "http.h"

/* libcurl opened with its global state (call before any thread starts: its init is not
 * thread-safe; curl_lib.h) and the pool of fetching threads (ctx->fetch_pool); -1 with why (e.g.
 * libcurl missing) when it cannot be. Stop joins them (after the HTTP side has stopped: no fetch
 * is under way then). */
int srv_fetch_start(srv_ctx *ctx, char *why, size_t why_len);
void srv_fetch_stop(srv_ctx *ctx);

/* For a route about to parse `chat` (a chat request's JSON: messages[...]) with lim:
 *   0  nothing to fetch (no remote media URL, or no --allow-media-hosts), or fetched already
 *      (lim->fetched then points at the table): go on;
 *   1  a fetch started and the connection is parked: return MHD_YES; the route runs again once
 *      it is resumed;
 *  -1  e is set (503 when too many fetches are under way, 500 out of memory). */
int srv_fetch_media(srv_ctx *ctx, struct MHD_Connection *c, srv_conn *sc, const json_t *chat, srv_parse_limits *lim, srv_error *e);
/* Frees the connection's table and gives its bytes back to the budget (the parse has copied what
 * it took); also called when the connection ends. */
void srv_fetch_release(srv_ctx *ctx, srv_conn *sc);

#endif
