/* local_media.c — see local_media.h. The file is opened through its resolved path with
 * O_NOFOLLOW, then fstat'ed, so what is read is the regular file whose path was checked. */
#include "local_media.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int srv_read_local_media(const char *media_dir, const char *path, size_t max_bytes, uint8_t **out, size_t *len, char *err,
                         size_t errlen) {
    *out = NULL;
    *len = 0;
    if (!media_dir) {
        snprintf(err, errlen, "local file paths are refused (the server was not started with --allow-media-dir)");
        return -1;
    }
    if (!strncmp(path, "file://", 7)) path += 7;
    if (path[0] != '/') {
        snprintf(err, errlen, "local media paths must be absolute (or file:///absolute/path)");
        return -1;
    }
    char dir[PATH_MAX], real[PATH_MAX];
    if (!realpath(media_dir, dir)) {
        snprintf(err, errlen, "the media directory is not accessible");
        return -1;
    }
    size_t dl = strlen(dir);
    int inside = realpath(path, real) && !strncmp(real, dir, dl) && (real[dl] == '/' || (dl == 1 && dir[0] == '/'));
    if (!inside) {
        snprintf(err, errlen, "local media path is not a file inside the allowed media directory");
        return -1;
    }
    int fd = open(real, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        snprintf(err, errlen, "local media path is not a file inside the allowed media directory");
        return -1;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        snprintf(err, errlen, "local media file is larger than %zu bytes", max_bytes);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        snprintf(err, errlen, "out of memory reading a local media file");
        return -1;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        snprintf(err, errlen, "could not read the local media file");
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}
