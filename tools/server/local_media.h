/* local_media.h — the one place the server opens a file named by a request: only when the operator
 * passed --allow-media-dir DIR, and only when the file's real path (symlinks resolved) lies inside
 * DIR's real path. Everything else a request names (http(s) URLs, other paths) is refused. */
#ifndef PM_SRV_LOCAL_MEDIA_H
#define PM_SRV_LOCAL_MEDIA_H

#include <stddef.h>
#include <stdint.h>

/* Reads the regular file `path` (absolute, or a file:// URL) if its realpath is inside media_dir.
 * At most max_bytes are accepted. Returns 0 with a malloc'd buffer, or -1 with a message that
 * does not reveal whether a path outside the directory exists. */
int srv_read_local_media(const char *media_dir, const char *path, size_t max_bytes, uint8_t **out, size_t *len, char *err,
                         size_t errlen);

#endif
