/* fuzz_util.h — helpers shared by the libFuzzer harnesses (header-only, static functions).
 *
 * Harnesses whose target reads files (the checkpoint loader, the tokenizer loader) write each input
 * into a private scratch directory made once per process under /dev/shm (tmpfs, so a write costs
 * microseconds) or $TMPDIR. The directory is removed at exit. A harness must never abort on a
 * *rejected* input: only ASan/UBSan reports and FUZZ_CHECK (a broken contract, e.g. a parser that
 * accepted something and handed back a pointer outside the input) count as findings. */
#ifndef PM_FUZZ_UTIL_H
#define PM_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Aborts with a message: the harness found a contract violation (libFuzzer records the input). */
#define FUZZ_CHECK(cond)                                                                                   \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);                \
            abort();                                                                                       \
        }                                                                                                  \
    } while (0)

/* A media-decoder gate (phi4mm.h: pm_media_gate) that counts what it grants within `budget`
 * bytes: the harnesses check that a refused or failed decode gave everything back and an accepted
 * one holds exactly its output's bytes. refuse: the answer past the budget (1 not now, 2 never). */
typedef struct fuzz_gate {
    int64_t taken, budget;
    int refuse;
} fuzz_gate;

static inline int fuzz_gate_adjust(void *user, int64_t delta) {
    fuzz_gate *g = user;
    if (delta > 0 && g->taken + delta > g->budget) return g->refuse;
    g->taken += delta;
    FUZZ_CHECK(g->taken >= 0);
    return 0;
}

/* The scratch directory's path (a per-process buffer; "" until fuzz_scratch() made it). */
static inline char *fuzz_scratch_path(void) {
    static char dir[256];
    return dir;
}

static inline void fuzz_scratch_cleanup(void) {
    const char *fuzz_scratch_dir = fuzz_scratch_path();
    if (!fuzz_scratch_dir[0]) return;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_scratch_dir);
    if (system(cmd)) { /* best effort */
    }
}

/* Creates (once) and returns the scratch directory. */
static inline const char *fuzz_scratch(void) {
    char *fuzz_scratch_dir = fuzz_scratch_path();
    if (fuzz_scratch_dir[0]) return fuzz_scratch_dir;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(fuzz_scratch_dir, 256, "%s/pm-fuzz-XXXXXX", base);
    if (!mkdtemp(fuzz_scratch_dir)) {
        perror("mkdtemp");
        abort();
    }
    atexit(fuzz_scratch_cleanup);
    return fuzz_scratch_dir;
}

/* mkdir that tolerates an existing directory; aborts on other failures. */
static inline void fuzz_mkdir(const char *path) {
    if (mkdir(path, 0700) != 0 && access(path, W_OK) != 0) {
        perror(path);
        abort();
    }
}

/* Writes data[0..n) to dir/name (replacing it); aborts on an I/O failure (not a finding of the target). */
static inline void fuzz_write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) {
        perror(path);
        abort();
    }
}

/* The fixture directory (phi4mm-tiny): $PHI4MM_FIXTURES/phi4mm-tiny, default ../shared/fixtures
 * relative to the working directory (make fuzz runs from the repository root). */
static inline const char *fuzz_fixture_dir(void) {
    static char dir[1024];
    const char *fx = getenv("PHI4MM_FIXTURES");
    snprintf(dir, sizeof dir, "%s/phi4mm-tiny", fx && *fx ? fx : "../shared/fixtures");
    return dir;
}

#endif
