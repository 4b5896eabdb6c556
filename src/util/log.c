/* log.c — see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

void pm_logf(const pm_logger *lg, pm_log_level level, const char *fmt, ...) {
    pm_log_level min = lg ? lg->min_level : PM_LOG_INFO;
    if (level < min) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (lg && lg->fn) {
        lg->fn(level, buf, lg->user);
        return;
    }
    static const char *names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "phi4mm: %s: %s\n", names[level & 3], buf);
}

const char *pm_version(void) { return PM_VERSION; }

const char *pm_status_name(int status) {
    switch (status) {
    case PM_OK: return "ok";
    case PM_EINVAL: return "invalid_input";
    case PM_EIO: return "io_error";
    case PM_EFORMAT: return "malformed";
    case PM_ENOMEM: return "out_of_memory";
    case PM_EUNSUPPORTED: return "unsupported";
    case PM_ELIMIT: return "limit_exceeded";
    case PM_ESTATE: return "bad_state";
    case PM_ECANCELED: return "cancelled";
    case PM_EBUSY: return "busy";
    case PM_ECONTEXT: return "context_length_exceeded";
    case PM_EPLACEHOLDER: return "placeholder_mismatch";
    default: return "unknown_error";
    }
}
