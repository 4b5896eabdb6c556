/* cmd_bench.c — `phi4mm bench -m DIR [--json FILE]`: the engine against this machine's own limits,
 * measured in the same run. Order: machine limits (read bandwidth, compute peak) -> page-cache warm-up
 * of the shards -> model load (time, RSS) -> decode at each batch size -> prefill at each prompt
 * length -> audio encoders and a transcription's time to first token -> image encoders ->
 * tokenizer. Each result is one table row (stdout) and one JSON object (--json). No thresholds:
 * the ratios are for people and for comparing runs. */
#include <malloc.h>
#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli_util.h"
#include "commands.h"
#include "nn/kernels.h"

double bench_now(void) { return cli_now(); }

void bench_progress(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[bench] ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void bench_rss(size_t *rss, size_t *anon, size_t *file, size_t *hwm) {
    *rss = *anon = *file = *hwm = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        size_t v;
        if (sscanf(line, "VmRSS: %zu", &v) == 1) *rss = v << 10;
        else if (sscanf(line, "RssAnon: %zu", &v) == 1) *anon = v << 10;
        else if (sscanf(line, "RssFile: %zu", &v) == 1) *file = v << 10;
        else if (sscanf(line, "VmHWM: %zu", &v) == 1) *hwm = v << 10;
    }
    fclose(f);
}

void bench_row(bench_ctx *b, const char *section, const char *name, double value, const char *unit, double bound, double ratio,
               json_t *extra, const char *note_fmt, ...) {
    char note[512] = "";
    if (note_fmt) {
        va_list ap;
        va_start(ap, note_fmt);
        vsnprintf(note, sizeof note, note_fmt, ap);
        va_end(ap);
    }
    json_t *row = json_pack("{s:s, s:s, s:f, s:s, s:s}", "section", section, "name", name, "value", value, "unit", unit, "note", note);
    if (bound >= 0) json_object_set_new(row, "bound", json_real(bound));
    if (ratio >= 0) json_object_set_new(row, "ratio", json_real(ratio));
    if (extra) {
        json_object_update(row, extra);
        json_decref(extra);
    }
    json_array_append_new(json_object_get(b->root, "rows"), row);
    char bs[32] = "", rs[32] = "";
    if (bound >= 0) snprintf(bs, sizeof bs, "%.3g", bound);
    if (ratio >= 0) snprintf(rs, sizeof rs, "%.2f", ratio);
    printf("%-10s %-30s %10.3f %-7s %10s %6s  %s\n", section, name, value, unit, bs, rs, note);
    fflush(stdout);
}

/* The kernel settings that moved the decode rows on the machines measured (README "Huge pages",
 * bench/README.md): the transparent-huge-page mode (the word in brackets of its sysfs file; "?"
 * where absent) and how many DAMON monitors run (each samples page tables every few hundred ms). */
static void thp_mode(char *out, size_t n) {
    snprintf(out, n, "?");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128];
    if (!f) return;
    if (fgets(line, sizeof line, f)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b) snprintf(out, n, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(f);
}

static int damon_monitors_on(void) {
    int on = 0;
    for (int i = 0; i < 64; i++) {
        char path[96], st[16] = "";
        snprintf(path, sizeof path, "/sys/kernel/mm/damon/admin/kdamonds/%d/state", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fgets(st, sizeof st, f) && !strncmp(st, "on", 2)) on++;
        fclose(f);
    }
    return on;
}

static int parse_list(const char *s, int *out, int max, long lo, long hi) {
    int n = 0;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s);
    for (char *tok = strtok(tmp, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        if (n >= max || cli_int(tok, lo, hi, &v)) return -1;
        out[n++] = (int)v;
    }
    return n;
}

static void usage(void) {
    fprintf(stderr,
            "usage: phi4mm bench -m MODEL_DIR [options]\n"
            "  --json FILE          also write every result as JSON\n"
            "  --threads N          OpenMP/BLAS threads (default: OMP_NUM_THREADS or all cores)\n"
            "  --batches LIST       decode batch sizes (default 1,4,8,16)\n"
            "  --decode-steps N     timed decode steps per batch size (default 6)\n"
            "  --ctx N              cached positions per sequence during decode (default 512)\n"
            "  --long-ctx N         cached positions of one more batch-1 decode row (default 4096; 0: none)\n"
            "  --prefill LIST       prompt lengths (default 128,512,2048)\n"
            "  --prefill-chunk N    rows per forward during prefill (default 512, as pm_engine)\n"
            "  --audio LIST         clip lengths in seconds (default 10,30)\n"
            "  --tokenizer FILE     tokenizer.json for the tokenizer row (default: the model's)\n"
            "  --skip-audio, --skip-image, --skip-tok, --skip-ttft, --skip-llm, --skip-q8, --skip-kernels, --skip-compute,\n"
            "  --skip-overlap       (skips the rows of a live stream beside an image request and a LongRoPE recompute)\n"
            "  --skip-prefix        (skips the row of a conversation's next turn with the prompt cache)\n"
            "  --skip-draft         (skips the rows of decode with prompt-lookup drafts against without)\n"
            "  --prompt-threads N   that row's prompt thread takes N threads (default: half, as serve's auto)\n"
            "  --mlock              lock the checkpoint in memory (the decode rows then cannot read the disk)\n"
            "  --keep-cache         warm the page cache without first evicting the checkpoint's unmapped pages (by\n"
            "                       default they are dropped and read again in 2 MB pages, as a cold start reads them)\n"
            "  --quick              prefill 128,512; batches 1,8; 3 decode steps; long context 1024; audio 10 s; no TTFT;\n"
            "                       every row held to the limits measured at the start (not re-measured beside it)\n");
}

int pm_cmd_bench(int argc, char **argv) {
    bench_ctx b;
    memset(&b, 0, sizeof b);
    bench_opts *o = &b.o;
    o->decode_steps = 6;
    o->decode_ctx = 512;
    o->long_ctx = 4096;
    o->prefill_chunk = 512;
    o->n_batches = parse_list("1,4,8,16", o->batches, 8, 1, 64);
    o->n_prefill = parse_list("128,512,2048", o->prefill, 8, 1, 131072);
    o->n_audio = parse_list("10,30", o->audio_secs, 4, 1, 1800);
    int skip_llm = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        int more = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) o->model_dir = argv[++i];
        else if (!strcmp(a, "--json") && more) o->json_path = argv[++i];
        else if (!strcmp(a, "--tokenizer") && more) o->tokenizer_path = argv[++i];
        else if (!strcmp(a, "--threads") && more) {
            if (cli_int(argv[++i], 1, 1024, &v)) return cli_fail("bench", "--threads wants a positive integer");
            o->threads = (int)v;
        } else if (!strcmp(a, "--decode-steps") && more) {
            if (cli_int(argv[++i], 1, 100000, &v)) return cli_fail("bench", "--decode-steps wants a positive integer");
            o->decode_steps = (int)v;
        } else if (!strcmp(a, "--ctx") && more) {
            if (cli_int(argv[++i], 0, 131072, &v)) return cli_fail("bench", "--ctx wants an integer in [0, 131072]");
            o->decode_ctx = (int)v;
        } else if (!strcmp(a, "--long-ctx") && more) {
            if (cli_int(argv[++i], 0, 131072, &v)) return cli_fail("bench", "--long-ctx wants an integer in [0, 131072]");
            o->long_ctx = (int)v;
        } else if (!strcmp(a, "--prompt-threads") && more) {
            if (cli_int(argv[++i], 1, 1024, &v)) return cli_fail("bench", "--prompt-threads wants a positive integer");
            o->prompt_threads = (int)v;
        } else if (!strcmp(a, "--prefill-chunk") && more) {
            if (cli_int(argv[++i], 1, 131072, &v)) return cli_fail("bench", "--prefill-chunk wants a positive integer");
            o->prefill_chunk = (int)v;
        } else if (!strcmp(a, "--batches") && more) {
            if ((o->n_batches = parse_list(argv[++i], o->batches, 8, 1, 64)) < 0) return cli_fail("bench", "bad --batches list");
        } else if (!strcmp(a, "--prefill") && more) {
            if ((o->n_prefill = parse_list(argv[++i], o->prefill, 8, 1, 131072)) < 0) return cli_fail("bench", "bad --prefill list");
        } else if (!strcmp(a, "--audio") && more) {
            if ((o->n_audio = parse_list(argv[++i], o->audio_secs, 4, 1, 1800)) < 0) return cli_fail("bench", "bad --audio list");
        } else if (!strcmp(a, "--skip-audio")) o->skip_audio = 1;
        else if (!strcmp(a, "--skip-image")) o->skip_image = 1;
        else if (!strcmp(a, "--skip-tok")) o->skip_tok = 1;
        else if (!strcmp(a, "--skip-q8")) o->skip_q8 = 1;
        else if (!strcmp(a, "--skip-kernels")) o->skip_kernels = 1;
        else if (!strcmp(a, "--skip-compute")) o->skip_compute = 1;
        else if (!strcmp(a, "--skip-ttft")) o->skip_ttft = 1;
        else if (!strcmp(a, "--skip-overlap")) o->skip_overlap = 1;
        else if (!strcmp(a, "--skip-prefix")) o->skip_prefix = 1;
        else if (!strcmp(a, "--skip-draft")) o->skip_draft = 1;
        else if (!strcmp(a, "--mlock")) o->mlock = 1;
        else if (!strcmp(a, "--keep-cache")) o->keep_cache = 1;
        else if (!strcmp(a, "--skip-llm")) skip_llm = 1;
        else if (!strcmp(a, "--quick")) {
            o->n_prefill = parse_list("128,512", o->prefill, 8, 1, 131072);
            o->n_batches = parse_list("1,8", o->batches, 8, 1, 64);
            o->n_audio = parse_list("10", o->audio_secs, 4, 1, 1800);
            o->decode_steps = 3;
            o->long_ctx = 1024;
            o->skip_ttft = 1;
            o->quick = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else return cli_fail("bench", "unknown option '%s' (see --help)", a);
    }
    if (!o->model_dir) {
        usage();
        return cli_fail("bench", "missing -m MODEL_DIR");
    }
    if (o->threads) {
        omp_set_num_threads(o->threads);
        openblas_set_num_threads(o->threads);
    }
    /* A directory without a checkpoint fails now, not after a minute of machine measurements. */
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", o->model_dir);
    if (access(cfg, R_OK))
        return cli_fail("bench", "%s: %s (the checkpoint directory must hold the official config.json)", cfg, strerror(errno));
    int nt = omp_get_max_threads();
    b.root = json_pack("{s:o, s:[]}", "machine", json_object(), "rows");
    json_t *mach = json_object_get(b.root, "machine");
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_object_set_new(mach, "host", json_string(host));
    json_object_set_new(mach, "date", json_string(when));
    json_object_set_new(mach, "threads", json_integer(nt));
    json_object_set_new(mach, "avx2", json_boolean(pm_kern_have_avx2()));
    json_object_set_new(mach, "kernels", json_string(pm_kern_level_name(pm_kern_level_in_use())));
    json_object_set_new(mach, "blas", json_string(openblas_get_config()));
    const char *coretype = getenv("OPENBLAS_CORETYPE"); /* forces OpenBLAS's kernels, whatever the CPU */
    if (coretype) json_object_set_new(mach, "openblas_coretype_env", json_string(coretype));
    json_object_set_new(mach, "model_dir", json_string(o->model_dir));
    const char *wp = getenv("OMP_WAIT_POLICY"), *sc = getenv("GOMP_SPINCOUNT");
    json_object_set_new(mach, "omp_wait_policy", json_string(wp ? wp : "(default)"));
    json_object_set_new(mach, "gomp_spincount", json_string(sc ? sc : "(default)"));
    double la0 = 0;
    FILE *lf0 = fopen("/proc/loadavg", "r");
    if (lf0) {
        if (fscanf(lf0, "%lf", &la0) != 1) la0 = 0;
        fclose(lf0);
    }
    json_object_set_new(mach, "loadavg_start", json_real(la0));
    char thp[32];
    thp_mode(thp, sizeof thp);
    int damon = damon_monitors_on();
    json_object_set_new(mach, "thp", json_string(thp));
    json_object_set_new(mach, "damon_monitors_on", json_integer(damon));

    printf("phi4mm bench — %s, %d threads, kernels %s, OMP_WAIT_POLICY %s, GOMP_SPINCOUNT %s, %s%s%s, THP %s, DAMON monitors on: %d, load "
           "average %.2f\n",
           host, nt, pm_kern_level_name(pm_kern_level_in_use()), wp ? wp : "(default)", sc ? sc : "(default)", openblas_get_config(),
           coretype ? ", OPENBLAS_CORETYPE from the environment: " : "", coretype ? coretype : "", thp, damon, la0);
    printf("%-10s %-30s %10s %-7s %10s %6s  %s\n", "section", "measurement", "value", "unit", "bound", "ratio", "notes");
    bench_progress("machine limits");
    b.bw_gbs = bench_read_bandwidth((size_t)512 << 20, 7);
    bench_row(&b, "machine", "read bandwidth", b.bw_gbs, "GB/s", -1, -1, NULL, "STREAM-style sum of 512 MB, %d threads x 4 streams, best of 7",
              nt);
    double sg = bench_sgemm_peak(2048, 5), eg = bench_engine_gemm_peak(2048, 5);
    bench_row(&b, "machine", "sgemm peak", sg, "GFLOP/s", -1, -1, NULL, "2048^3 NT cblas_sgemm, %d threads, best of 5", nt);
    bench_row(&b, "machine", "engine GEMM peak", eg, "GFLOP/s", -1, -1, NULL, "2048^3 bf16 weights, pm_kern_gemm_bf16 at %s, best of 5",
              pm_kern_level_name(pm_kern_level_in_use()));
    b.peak_gflops = sg > eg ? sg : eg;
    bench_row(&b, "machine", "compute peak", b.peak_gflops, "GFLOP/s", -1, -1, NULL,
              "the larger of the two: the bound of every compute-bound row (a BLAS slower than the engine is no limit)");
    double fp = bench_fma_peak(5);
    if (fp > 0)
        bench_row(&b, "machine", "FMA peak (registers only)", fp, "GFLOP/s", -1, -1, NULL,
                  "fp32 FMAs on %s registers, no loads, %d threads, best of 5: the silicon's ceiling, for scale (compute peak = %.2f of it)",
                  pm_kern_level_in_use() == PM_KERN_AVX512 ? "zmm" : "ymm", nt, b.peak_gflops / fp);
    json_object_set_new(mach, "read_bw_gbs", json_real(b.bw_gbs));
    json_object_set_new(mach, "sgemm_gflops", json_real(sg));
    json_object_set_new(mach, "engine_gemm_gflops", json_real(eg));
    json_object_set_new(mach, "compute_peak_gflops", json_real(b.peak_gflops));
    json_object_set_new(mach, "fma_peak_gflops", json_real(fp));
    b.bw_best = b.bw_gbs;
    b.peak_best = b.peak_gflops;
    /* The compute peaks' operands (2048^2 matrices, under the 32 MB above which glibc maps blocks of
     * their own) went back to a heap that the phi4mm binary keeps (main.c: trim threshold 64 MB):
     * ~60 MB of the bench's own that the memory rows would count as the engine's. */
    malloc_trim(0);

    /* Load twice: the first load maps the shards (whose pages we then read through), the second is timed on a warm cache. */
    char err[1024];
    bench_progress("loading %s", o->model_dir);
    pm_model *m0;
    if (pm_model_load(&m0, o->model_dir, err, sizeof err)) {
        json_decref(b.root);
        return cli_fail("bench", "%s", err);
    }
    b.m = m0;
    /* The warm-up reads every shard as the engine's own mapping would on a cold cache: in 2 MB folios
     * (pm_file_recache). Unless --keep-cache, it first drops what the cache holds of them in
     * whatever folios an earlier writer or reader left (`phi4mm synth`, a download, a copy), so that
     * every run measures that same state. */
    size_t wb = 0, whb = 0;
    pm_err we = {0};
    double tw = bench_now();
    if (pm_weights_recache(m0->w, !o->keep_cache, &wb, &whb, &we)) {
        pm_model_free(m0);
        json_decref(b.root);
        return cli_fail("bench", "%s", we.msg);
    }
    tw = bench_now() - tw;
    double gb = wb / 1e9, hgb = whb / 1e9;
    bench_row(&b, "load", "page-cache warm-up", gb / tw, "GB/s", -1, -1, json_pack("{s:b, s:f, s:f}", "evicted_first", !o->keep_cache, "gb", gb, "huge_gb", hgb),
              "%s %.2f GB of shards in %.2f s through a MADV_HUGEPAGE mapping: %.2f GB of it in 2 MB pages", o->keep_cache ? "read" : "evicted and re-read",
              gb, tw, hgb);
    if (o->keep_cache && hgb < 0.9 * gb) /* a copy, a download or a plain read leaves 4 KB folios (19 % of a step's pages after a cat here) */
        bench_progress("note: only %.2f of %.2f GB of the checkpoint are cached in 2 MB pages (read by something other than "
                       "this warm-up): the decode rows will read slower than a cold start would; run without --keep-cache",
                       hgb, gb);
    pm_model_free(m0);
    size_t r0, a0, f0, h0;
    bench_rss(&r0, &a0, &f0, &h0);
    double t0 = bench_now();
    pm_load_options lo = {.mlock = o->mlock}; /* locked: the load reads every page in */
    if (pm_model_load_opts(&b.m, o->model_dir, &lo, err, sizeof err)) {
        json_decref(b.root);
        return cli_fail("bench", "%s", err);
    }
    double tl = bench_now() - t0;
    pm_model_info info;
    pm_model_get_info(b.m, &info);
    size_t rss, anon, file, hwm;
    bench_rss(&rss, &anon, &file, &hwm);
    bench_row(&b, "load", "load time (warm cache)", tl, "s", 2.0, tl / 2.0,
              json_pack("{s:f, s:i, s:i}", "weight_gb", info.weight_bytes / 1e9, "tensors", info.n_tensors, "shards", info.n_shards),
              "%d tensors in %d shards, %.2f GB; ratio vs the 2 s target", info.n_tensors, info.n_shards, info.weight_bytes / 1e9);
    bench_row(&b, "load", "RSS after load", rss / 1e9, "GB", -1, -1,
              json_pack("{s:f, s:f}", "rss_anon_gb", anon / 1e9, "rss_file_gb", file / 1e9),
              "anon %.3f GB (fp32 copies of norms/biases/tables, tokenizer) + file-backed %.3f GB", anon / 1e9, file / 1e9);

    int rc = 0;
    if (!skip_llm) rc = bench_llm(&b);
    if (!rc && !skip_llm && !o->skip_q8) rc = bench_q8(&b);
    if (!rc && !skip_llm && !o->skip_kernels) rc = bench_kernels(&b);
    if (!rc && !skip_llm && !o->skip_compute) rc = bench_compute(&b);
    if (!rc && !o->skip_audio) rc = bench_audio(&b);
    if (!rc && !o->skip_image) rc = bench_image(&b);
    if (!rc && !o->skip_image && !o->skip_overlap) rc = bench_overlap(&b);
    if (!rc && !skip_llm && !o->skip_overlap) rc = bench_longrope(&b);
    if (!rc && !skip_llm && !o->skip_prefix) rc = bench_prefix(&b);
    if (!rc && !skip_llm && !o->skip_draft) rc = bench_draft(&b);
    if (!rc && !o->skip_tok) rc = bench_tok(&b);
    bench_rss(&rss, &anon, &file, &hwm);
    bench_row(&b, "memory", "peak RSS", hwm / 1e9, "GB", -1, -1, NULL, "VmHWM over the whole run");
    bench_row(&b, "machine", "read bandwidth (best of run)", b.bw_best, "GB/s", -1, -1, NULL,
              "max over every re-measurement; a large gap to the first row means other load on the machine");
    bench_row(&b, "machine", "compute peak (best of run)", b.peak_best, "GFLOP/s", -1, -1, NULL, "max over every re-measurement");
    json_object_set_new(mach, "read_bw_gbs_best", json_real(b.bw_best));
    json_object_set_new(mach, "compute_peak_gflops_best", json_real(b.peak_best));
    double la[3] = {0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = la[1] = la[2] = 0;
        fclose(lf);
    }
    json_object_set_new(mach, "loadavg_end", json_pack("[f, f, f]", la[0], la[1], la[2]));
    if (o->json_path) {
        if (json_dump_file(b.root, o->json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)))
            fprintf(stderr, "phi4mm bench: cannot write %s\n", o->json_path);
        else bench_progress("wrote %s", o->json_path);
    }
    json_decref(b.root);
    pm_model_free(b.m);
    return rc ? 1 : 0;
}
