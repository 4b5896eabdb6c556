/* phi4mm.h — public C API of the phi4mm inference engine for Phi-4-multimodal-instruct.
 *
 * Conventions: every fallible call returns PM_OK (0) or a negative PM_E* status and fills a
 * caller-provided message buffer; handles are opaque; nothing here calls exit(). The mode
 * (adapter, audio-projection branch) and the media of a request belong to its sequence, never
 * to the process: sequences of different modes may run in the same batch. */
#ifndef PHI4MM_H
#define PHI4MM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (negative = failure). */
enum {
    PM_OK = 0,
    PM_EINVAL = -1,       /* bad argument or bad user input (prompt, placeholder count, media) */
    PM_EIO = -2,          /* a file could not be opened, read or mapped */
    PM_EFORMAT = -3,      /* a file or payload is malformed (safetensors, JSON, WAV, PNG, ...) */
    PM_ENOMEM = -4,       /* allocation failed */
    PM_EUNSUPPORTED = -5, /* valid but not supported (dtype, model type, format) */
    PM_ELIMIT = -6,       /* over a configured cap (duration, pixels, clips, tokens, body size) */
    PM_ESTATE = -7,       /* API misuse or internal state error */
    PM_ECANCELED = -8,    /* the request was cancelled */
    PM_EBUSY = -9         /* no capacity right now (queue full) */
};

/* Input modes, numbered as the official code numbers them. */
typedef enum pm_mode {
    PM_MODE_LANGUAGE = 0,
    PM_MODE_VISION = 1,
    PM_MODE_SPEECH = 2,
    PM_MODE_VISION_SPEECH = 3
} pm_mode;

/* Which LoRA adapter a sequence uses: chosen from its mode, fixed for its whole life. */
typedef enum pm_adapter { PM_ADAPTER_NONE = 0, PM_ADAPTER_SPEECH = 1, PM_ADAPTER_VISION = 2 } pm_adapter;

const char *pm_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif
