/* cmd_info.c — `phi4mm info -m DIR`: load a checkpoint and print its summary. */
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "nn/kernels.h"

int pm_cmd_info(int argc, char **argv) {
    const char *dir = NULL;
    pm_load_options lo = {0};
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) {
            if (cli_weights("info", argv[++i], &lo)) return 1;
        }
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fprintf(stderr, "usage: phi4mm info -m MODEL_DIR [--weights bf16|q8]\n");
            return 0;
        } else return cli_fail("info", "unknown option '%s'", argv[i]);
    }
    if (!dir) return cli_fail("info", "missing -m MODEL_DIR");
    char err[1024];
    pm_model *m;
    if (pm_model_load_opts(&m, dir, &lo, err, sizeof err)) return cli_fail("info", "%s", err);
    pm_model_info in;
    pm_model_get_info(m, &in);
    printf("phi4mm          %s\n", pm_version());
    printf("checkpoint      %s\n", dir);
    printf("tensors         %d in %d shard(s), %.3f GB\n", in.n_tensors, in.n_shards, in.weight_bytes / 1e9);
    printf("decoder         %d layers, hidden %d, %d heads / %d kv heads (head %d), mlp %d, vocab %d\n", in.n_layers, in.hidden,
           in.n_heads, in.n_kv_heads, in.head_dim, in.intermediate, in.vocab);
    printf("context         %d (LongRoPE switch past %d)\n", in.max_position, in.original_max_position);
    double kv_pos = 2.0 * in.n_layers * in.n_kv_heads * in.head_dim * 4.0; /* fp32 K and V per position */
    printf("kv cache        %.4g KiB per position fp32, %.4g KiB bf16 (--kv-cache); the whole context %.4g / %.4g GiB\n", kv_pos / 1024,
           kv_pos / 2048, kv_pos * in.max_position / (1 << 30), kv_pos * in.max_position / 2 / (1 << 30));
    printf("adapters        speech LoRA r=%d, vision LoRA r=%d\n", in.speech_lora_r, in.vision_lora_r);
    printf("speech encoder  Conformer %d blocks, dim %d\n", in.audio_blocks, in.audio_dim);
    printf("vision encoder  SigLIP %d layers, dim %d\n", in.vision_layers, in.vision_dim);
    if (in.weights == PM_WEIGHTS_Q8) printf("weights         q8: %.3f GB of int8 decoder weights + scales\n", in.q8_bytes / 1e9);
    else printf("weights         bf16 (as stored)\n");
    printf("products        fp32; bf16 with --compute bf16: %s\n",
           pm_kern_have_avx512bf16() ? "available (AVX512-BF16)" : "not on this CPU (no AVX512-BF16 at the AVX-512 level)");
    printf("load time       %.3f s\n", in.load_seconds);
    pm_model_free(m);
    return 0;
}
