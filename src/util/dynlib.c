/* dynlib.c — opens a pm_dynlib's libraries once per process and fills its table (dynlib.h). */
#include "util/dynlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void dynlib_load(pm_dynlib *d) {
    void *h[8];
    if (d->nlibs > (int)(sizeof h / sizeof h[0])) {
        snprintf(d->why, sizeof d->why, "too many libraries (%d)", d->nlibs);
        return;
    }
    for (int i = 0; i < d->nlibs; i++) {
        if (!(h[i] = dlopen(d->sonames[i], RTLD_NOW | RTLD_LOCAL))) {
            const char *why = dlerror();
            snprintf(d->why, sizeof d->why, "%s cannot be opened (%s)", d->sonames[i], why ? why : "not found");
            return;
        }
    }
    for (int i = 0; i < d->nsyms; i++) {
        const pm_dynsym *s = &d->syms[i];
        void *p = dlsym(h[s->lib], s->name);
        if (!p) {
            snprintf(d->why, sizeof d->why, "%s has no %s", d->sonames[s->lib], s->name);
            return;
        }
        memcpy((char *)d->table + s->offset, &p, sizeof p); /* POSIX: dlsym's pointer holds the function's address */
    }
    d->ok = 1;
}

int pm_dynlib_open(pm_dynlib *d) {
    if (d->ok) return 0;
    pthread_mutex_lock(&d->mu);
    if (!d->tried) {
        d->tried = 1;
        dynlib_load(d);
    }
    pthread_mutex_unlock(&d->mu);
    return d->ok ? 0 : -1;
}
