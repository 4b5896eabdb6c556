/* synth_presets.h — the small JSON files of a synthetic checkpoint, embedded in the binary.
 *
 * `phi4mm synth` must work with nothing but the binary (no ../shared, no download), so the files
 * that describe a checkpoint are compiled in, byte for byte: the `full` preset's config.json is the
 * real Phi-4-multimodal-instruct config (shared/spec/real_config.json), the `tiny` preset's is the
 * tiny fixture's (shared/fixtures/phi4mm-tiny/tiny_model/config.json, with the
 * `_oracle_siglip_vision_config` block that carries its SigLIP dims); preprocessor_config.json is the
 * real one, generation_config.json (eos [200020, 199999]) and tokenizer_config.json are the
 * fixture's. Tests compare them with the shared files. */
#ifndef PM_SYNTH_PRESETS_H
#define PM_SYNTH_PRESETS_H

typedef enum pm_synth_file {
    PM_SYNTH_FILE_CONFIG = 0,        /* config.json */
    PM_SYNTH_FILE_PREPROCESSOR,      /* preprocessor_config.json */
    PM_SYNTH_FILE_GENERATION,        /* generation_config.json */
    PM_SYNTH_FILE_TOKENIZER_CONFIG   /* tokenizer_config.json */
} pm_synth_file;

/* Returns 1 when `preset` names a known preset ("tiny" or "full"). */
int pm_synth_preset_known(const char *preset);

/* Returns a malloc'd copy of file `which` of `preset` (the caller frees it), or NULL for an unknown
 * preset or out of memory. */
char *pm_synth_preset_text(const char *preset, pm_synth_file which);

/* The file name `which` is written under ("config.json", ...). */
const char *pm_synth_file_name(pm_synth_file which);

#endif
