/* instance.h — a server started in this process: `phi4mm serve` runs one until a signal, `phi4mm
 * run-batch` one on a loopback port of its own while it sends it a file's requests. */
#ifndef PM_SRV_INSTANCE_H
#define PM_SRV_INSTANCE_H

#include "http.h"
#include "server.h"

typedef struct srv_instance {
    srv_ctx *ctx;
    srv_http *http;
    int port;           /* the bound port */
} srv_instance;

/* Parses serve's options (argv[0] is the command's name), then starts in serve's order: the HTTP
 * listener, the model, the inference thread; the model endpoints serve once it returns 0. SIGINT,
 * SIGTERM and SIGPIPE are blocked in the calling thread and every thread it starts. Returns 0, or
 * the command's exit status with the message on stderr (*help: --help was asked, nothing started).
 * srv_instance_stop in every case. */
int srv_instance_start(int argc, char **argv, srv_instance *out, int *help);

/* Stops accepting connections, stops the scheduler (queued requests get 503, live ones end), lets
 * the last responses go out, stops the HTTP daemon and frees everything. */
void srv_instance_stop(srv_instance *in);

#endif
