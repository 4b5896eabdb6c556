/* synth_writer.h — writes a random-weight checkpoint in the exact official layout.
 *
 * A synthetic checkpoint is what `phi4mm synth` produces: the directory layout of
 * microsoft/Phi-4-multimodal-instruct (config.json, preprocessor_config.json,
 * generation_config.json, tokenizer.json, tokenizer_config.json, sharded bf16
 * model-0000N-of-0000M.safetensors + model.safetensors.index.json) with every tensor that
 * config.json implies (pm_ckpt_layout) filled by a seeded PRNG. Preset `tiny` uses the fixture's
 * dims (27 MB, 2 shards), `full` the real dims (11.1 GB, 5 shards).
 *
 * Values are chosen so that a forward pass is numerically sane: weights N(0, std 1/sqrt(fan_in))
 * clamped to [0.005, 0.5], LoRA B ten times smaller, norm weights 1 ± 0.05, biases N(0, 0.02),
 * log-mel mean/invstd near real statistics (mean ~18, invstd ~0.33, always positive), HD separators
 * and the pooling probe std 0.5. Token-embedding rows of ids the synthetic tokenizer prints as ASCII
 * have std 4/sqrt(H), all others (unused ids, special tokens) 200 times less, so the tied lm_head
 * mostly picks printable tokens and eos stays unlikely (demo runs produce -n tokens).
 *
 * Weights are generated and written as a stream (a few MB buffers, a writer thread; never the whole
 * model in memory). Files are written under temporary names and renamed when everything is on disk.
 * A non-empty directory is only overwritten when it holds a previous synth output (marker file
 * `.phi4mm-synth`) or when `force` is set. Each tensor's values depend only on the seed and its
 * name, so shards and thread counts do not change them. */
#ifndef PM_SYNTH_WRITER_H
#define PM_SYNTH_WRITER_H

#include <stdint.h>

#include "util/err.h"

typedef struct pm_synth_opts {
    const char *preset;   /* "tiny" or "full" */
    const char *out_dir;  /* created when missing (parents too) */
    uint64_t seed;
    int force;            /* overwrite a non-empty directory that is not a synth output */
    int threads;          /* 1: generate and write in turn; 2 (default when 0): a writer thread */
    int n_shards;         /* 0: preset default (tiny 2, full ~2.5 GB each) */
    /* Optional progress callback, called after each written buffer. */
    void (*progress)(void *ud, uint64_t bytes_done, uint64_t bytes_total);
    void *progress_ud;
} pm_synth_opts;

typedef struct pm_synth_result {
    int n_tensors;
    int n_shards;
    int n_vocab_tokens;     /* ordinary tokens of the synthetic tokenizer */
    uint64_t total_bytes;   /* tensor bytes (index metadata.total_size) */
} pm_synth_result;

/* Writes the checkpoint. On error nothing is left under a final name that was not there before
 * (temporary files are removed) and e names the file and the problem. */
int pm_synth_write(const pm_synth_opts *o, pm_synth_result *res, pm_err *e);

/* The bf16 value of element `i` of tensor `name` for seed `seed`, as pm_synth_write generates it.
 * Needs the tensor's layout entry because its init depends on the shape. For tests. */
typedef struct pm_ckpt_entry pm_ckpt_entry;
int pm_synth_values(const pm_ckpt_entry *en, int64_t hidden, int n_vocab_tokens, uint64_t seed, uint16_t *out,
                    int64_t count);

#endif
