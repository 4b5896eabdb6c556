/* prepare.h — from a request to the decoder's input: placeholder validation and rewriting,
 * tokenization, audio features -> Conformer -> projection (branch by mode), images -> dynamic HD ->
 * SigLIP -> HD merge -> projection, expansion of each placeholder to its media's token count, and
 * the merged embedding rows (media rows REPLACE the placeholder rows). */
#ifndef PM_PREPARE_H
#define PM_PREPARE_H

#include "engine/media_cache.h"
#include "engine/model.h"
#include "model/conformer.h"
#include "vision/hd.h"
#include "vision/image_embed.h"

/* Deliberate faults, injected only by tests (parity --inject-fault) to prove that the checks
 * catch each classic mistake. PM_FAULT_NONE in all normal use. */
typedef enum pm_fault {
    PM_FAULT_NONE = 0,
    PM_FAULT_NO_ADAPTER,   /* run media requests without their LoRA adapter */
    PM_FAULT_WRONG_PROJ,   /* use the other audio-projection branch */
    PM_FAULT_ADD_EMBEDS,   /* add media rows to the placeholder embeddings instead of replacing them */
    PM_FAULT_LEAK_ADAPTER  /* batch-wide adapter: every row uses the first sequence's adapter */
} pm_fault;

/* Parses a fault name ("no-adapter", "wrong-proj", "add-embeds", "leak-adapter"); -1 if unknown. */
int pm_fault_parse(const char *name);

typedef struct pm_prepared {
    pm_mode mode;
    pm_adapter adapter;
    int32_t *ids;      /* [n] expanded prompt ids */
    int n;
    float *embeds;     /* [n, hidden] merged input embeddings */
    double audio_seconds;
    char salt[PM_MAX_CACHE_SALT + 1]; /* pm_request.cache_salt ("" none): the prompt cache's scope */
} pm_prepared;

/* Optional captures for the parity tool. Set the pointers you want (conf/vit trace members as
 * their headers say); arrays below are malloc'd by the callee when their `want_` flag is set. */
typedef struct pm_prep_trace {
    pm_fault fault;            /* test-only fault injection */
    int want_audio;            /* fill the audio fields below */
    float *logmel;             /* [n_audios, t_max, 80] zero-padded batch */
    int t_max;
    int *audio_sizes;          /* [n_audios] audio_embed_size per clip */
    int t_enc;                 /* encoder frames T' of the batch */
    pm_conformer_trace *conf;  /* caller-configured */
    float *proj_speech;        /* [n_audios, T', hidden] (both branches, for parity) */
    float *proj_vision;
    int want_image;            /* fill the image fields below (first image) */
    pm_hd_image hd;            /* first image's preprocessed crops (callee fills, caller pm_hd_free) */
    pm_vit_trace *vit;         /* caller-configured */
    float *img_tokens;         /* [n_img_tokens, hidden] projected rows of the first image */
    int n_img_tokens;
} pm_prep_trace;

/* What a request will put into the decoder, known before any encoder runs: every check that needs
 * no encoder (limits, each clip's rate and length, each image's geometry, placeholder counts,
 * the context limit) and the expanded prompt ids, media items counted from their sizes alone. */
typedef struct pm_plan {
    int32_t *ids;        /* [n] expanded prompt ids */
    size_t n;
    int *audio_tokens;   /* per clip */
    int *image_tokens;   /* per image */
    double audio_seconds;
} pm_plan;

int pm_prepare_plan(const pm_model *m, const pm_request *req, const pm_limits *lim, pm_plan *out, pm_err *e);
/* Runs the encoders (their token counts must match the plan's) and merges; takes plan->ids. With
 * mc (and no trace), media it holds skip their encoders and new ones are kept in it. */
int pm_prepare_finish(const pm_model *m, const pm_request *req, pm_plan *plan, pm_prepared *out, pm_prep_trace *trace,
                      pm_media_cache *mc, pm_err *e);
void pm_plan_free(pm_plan *p);
/* Both in one. */
int pm_prepare(const pm_model *m, const pm_request *req, const pm_limits *lim, pm_prepared *out, pm_prep_trace *trace, pm_err *e);
void pm_prepared_free(pm_prepared *p);
void pm_prep_trace_free(pm_prep_trace *t);

#endif
