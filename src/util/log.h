/* log.h — diagnostics go through a callback chosen by the embedder (default: stderr). */
#ifndef PM_LOG_H
#define PM_LOG_H
#include "err.h"

typedef enum { PM_LOG_DEBUG = 0, PM_LOG_INFO = 1, PM_LOG_WARN = 2, PM_LOG_ERROR = 3 } pm_log_level;
typedef void (*pm_log_fn)(pm_log_level level, const char *msg, void *user);

typedef struct pm_logger {
    pm_log_fn fn;   /* NULL: messages at level >= min_level go to stderr */
    void *user;
    pm_log_level min_level;
} pm_logger;

void pm_logf(const pm_logger *lg, pm_log_level level, const char *fmt, ...) PM_PRINTF(3, 4);

#endif
