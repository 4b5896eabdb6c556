/* cmd_synth.c — `phi4mm synth --preset tiny|full --out DIR [--seed S] [--force]`: write a
 * random-weight checkpoint in the official layout (see src/model/synth_writer.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "model/synth_writer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: phi4mm synth --preset tiny|full --out DIR [--seed S] [--force] [--threads 1|2] [--shards N]\n"
            "\n"
            "Writes a random-weight checkpoint in the exact layout of microsoft/Phi-4-multimodal-instruct\n"
            "(config.json, preprocessor_config.json, generation_config.json, tokenizer.json,\n"
            "tokenizer_config.json, bf16 model-0000N-of-0000M.safetensors + model.safetensors.index.json).\n"
            "  --preset tiny   the test fixture's dims: 269 tensors, 27 MB, 2 shards\n"
            "  --preset full   the real dims: 2047 tensors, 11.1 GB, 5 shards (for benchmarks)\n"
            "  --seed S        PRNG seed (default 0); the same seed gives the same bytes\n"
            "  --force         overwrite a non-empty DIR that is not an earlier synth output\n"
            "  --threads N     1: generate and write in turn; 2 (default): overlap them\n"
            "  --shards N      number of safetensors shards (default: tiny 2, full 5)\n"
            "Random weights produce meaningless text; the tokenizer is a small English BPE with the\n"
            "real special tokens.\n");
}

typedef struct progress_state {
    int tty;
    int last_pct;
    double t0;
} progress_state;

static void on_progress(void *ud, uint64_t done, uint64_t total) {
    progress_state *p = ud;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct == p->last_pct || !p->tty) return;
    p->last_pct = pct;
    double dt = cli_now() - p->t0;
    fprintf(stderr, "\rphi4mm synth: %3d%%  %.2f / %.2f GB  %.0f MB/s ", pct, done / 1e9, total / 1e9,
            dt > 0 ? done / 1e6 / dt : 0.0);
}

int pm_cmd_synth(int argc, char **argv) {
    pm_synth_opts o = {.threads = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--preset") && has) o.preset = argv[++i];
        else if ((!strcmp(a, "--out") || !strcmp(a, "-o")) && has) o.out_dir = argv[++i];
        else if (!strcmp(a, "--seed") && has) {
            const char *s = argv[++i];
            char *end;
            errno = 0;
            unsigned long long v = strtoull(s, &end, 0);
            if (errno || end == s || *end || *s == '-') return cli_fail("synth", "--seed '%s' is not a non-negative integer", s);
            o.seed = v;
        } else if (!strcmp(a, "--threads") && has) {
            long t;
            if (cli_int(argv[++i], 1, 2, &t)) return cli_fail("synth", "--threads must be 1 or 2");
            o.threads = (int)t;
        } else if (!strcmp(a, "--shards") && has) {
            long t;
            if (cli_int(argv[++i], 1, 99999, &t)) return cli_fail("synth", "--shards must be between 1 and 99999");
            o.n_shards = (int)t;
        } else if (!strcmp(a, "--force")) o.force = 1;
        else if (a[0] == '-' && !has && (!strcmp(a, "--preset") || !strcmp(a, "--out") || !strcmp(a, "--seed")))
            return cli_fail("synth", "option %s needs a value", a);
        else return cli_fail("synth", "unknown option '%s' (see phi4mm synth --help)", a);
    }
    if (!o.preset) return cli_fail("synth", "missing --preset tiny|full");
    if (!o.out_dir) return cli_fail("synth", "missing --out DIR");

    progress_state ps = {.tty = isatty(2), .last_pct = -1, .t0 = cli_now()};
    o.progress = on_progress;
    o.progress_ud = &ps;
    pm_synth_result r;
    pm_err e = {0};
    if (pm_synth_write(&o, &r, &e)) {
        if (ps.tty && ps.last_pct >= 0) fputc('\n', stderr);
        return cli_fail("synth", "%s", e.msg);
    }
    double dt = cli_now() - ps.t0;
    if (ps.tty && ps.last_pct >= 0) fputc('\n', stderr);
    printf("phi4mm synth: wrote preset %s (seed %llu) to %s: %d tensors, %.3f GB in %d shard(s), tokenizer with %d "
           "tokens + 14 special, %.1f s\n",
           o.preset, (unsigned long long)o.seed, o.out_dir, r.n_tensors, r.total_bytes / 1e9, r.n_shards, r.n_vocab_tokens,
           dt);
    printf("phi4mm synth: random weights; text generated from this checkpoint is meaningless.\n");
    return 0;
}
