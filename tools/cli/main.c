/* main.c — `phi4mm <command> [options]`: dispatches to the subcommands in cmd_*.c. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audio/wave.h"
#include "commands.h"
#include "phi4mm.h"

/* Weak references let the binary link while a subcommand's file is still being written; a
 * missing one reports itself instead of crashing. */
#pragma weak pm_cmd_generate
#pragma weak pm_cmd_transcribe
#pragma weak pm_cmd_chat
#pragma weak pm_cmd_info
#pragma weak pm_cmd_tokenize
#pragma weak pm_cmd_synth
#pragma weak pm_cmd_parity
#pragma weak pm_cmd_tokcheck
#pragma weak pm_cmd_serve
#pragma weak pm_cmd_run_batch
#pragma weak pm_cmd_bench
#pragma weak pm_cmd_mkmedia
#pragma weak pm_cmd_q8check
#pragma weak pm_cmd_perplexity

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static void usage(const command *cmds, int n) {
    fprintf(stderr, "usage: phi4mm <command> [options]\n\ncommands:\n");
    for (int i = 0; i < n; i++)
        if (cmds[i].fn) fprintf(stderr, "  %-11s %s\n", cmds[i].name, cmds[i].help);
    fprintf(stderr, "\nRun `phi4mm <command> --help` for the options of one command; `phi4mm --version` for the version.\n");
}

/* libgomp reads its wait settings before main(), so the binary sets one and re-executes itself once.
 * How long an idle worker spins before it sleeps on a futex decides two costs: libgomp's default
 * (300000 spins, ~10 ms) stalls everything when cores are shared (measured: decode and the Conformer
 * 2x slower with a busy neighbour); sleeping at once (OMP_WAIT_POLICY=passive, this binary's default
 * until session 5) pays a futex wake-up at each of the hundreds of parallel regions per forward: the
 * Conformer on a 10 s clip took 0.48 s passive against 0.38-0.45 s with 1000 spins (tens of
 * microseconds) on an idle Zen 5, and the same within noise with a CPU hog beside it (decode,
 * prefill and the Conformer alike). An explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT is respected. */
static void default_short_spin(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", "1000", 1)) return;
    execv("/proc/self/exe", argv); /* on failure we simply run with libgomp's defaults */
}

/* The forwards allocate their scratch per call (the Conformer's work buffers, the GEMM's packed
 * activations, a prefill chunk's rows: 0.5-32 MB each). glibc gave each back to the kernel at
 * free() (munmap above its mmap threshold, a heap trim above its trim threshold), so every call
 * faulted the pages in again, and every unmap cost a TLB shootdown of the other cores: 8,400
 * faults per pass of a 10 s clip's Conformer. Kept in the heap instead (served from it up to
 * 32 MB, at most 64 MB left untrimmed), measured in one run pair on the full-size synthetic
 * checkpoint (2 cores): the 10 s clip's Conformer 0.71 -> 0.81 of the compute peak (0.43 -> 0.35 s
 * per pass in a loop of its own), the 30 s clip 0.81 -> 0.84, SigLIP 448x448 0.81 -> 0.88,
 * 1344x896 0.78 -> 0.89, a 512-token prefill 0.84 -> 0.90; RSS after decode and peak RSS the same
 * (9.28 and 11.08 GB). MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ in the environment win. */
static void keep_scratch_in_heap(void) {
    if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 32 << 20);
    if (!getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

int main(int argc, char **argv) {
    default_short_spin(argv);
    keep_scratch_in_heap();
    pm_wave_quiet(); /* a damaged upload is one error line of ours, not the decoder's log as well */
    const command cmds[] = {
        {"generate", pm_cmd_generate, "generate text from a prompt with optional --audio/--image inputs"},
        {"transcribe", pm_cmd_transcribe, "speech recognition with the official ASR prompt"},
        {"chat", pm_cmd_chat, "a conversation on stdin, each turn past the history (prompt cache)"},
        {"serve", pm_cmd_serve, "OpenAI-compatible HTTP server"},
        {"run-batch", pm_cmd_run_batch, "answer an OpenAI Batch file of requests (JSONL), a result line each"},
        {"info", pm_cmd_info, "print a checkpoint's summary"},
        {"tokenize", pm_cmd_tokenize, "count (and list) a prompt's tokens, media included, without running the model"},
        {"parity", pm_cmd_parity, "compare every stage with a reference fixture set"},
        {"tokcheck", pm_cmd_tokcheck, "run tokenizer test vectors"},
        {"synth", pm_cmd_synth, "write a random-weight checkpoint in the official layout"},
        {"bench", pm_cmd_bench, "benchmark against this machine's measured limits"},
        {"mkmedia", pm_cmd_mkmedia, "write a demo tone (WAV) and test pattern (PNG)"},
        {"perplexity", pm_cmd_perplexity, "perplexity of a text in sliding windows (and how far --weights q8 moves it)"},
        {"q8check", pm_cmd_q8check, "greedy agreement of --weights q8 with bf16 on synthetic prompts"},
    };
    int n = (int)(sizeof cmds / sizeof cmds[0]);
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        printf("phi4mm %s\n", pm_version());
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(cmds, n);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < n; i++) {
        if (strcmp(argv[1], cmds[i].name)) continue;
        if (!cmds[i].fn) {
            fprintf(stderr, "phi4mm: command '%s' is not part of this build\n", argv[1]);
            return 2;
        }
        return cmds[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "phi4mm: unknown command '%s'\n", argv[1]);
    usage(cmds, n);
    return 2;
}
