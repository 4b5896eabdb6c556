/* seed_audio.c — writes small audio seeds for fuzz_wave in every container/codec the system
 * libsndfile can write (WAV PCM 8/16/24/32/float/double/u-law/A-law/IMA/MS ADPCM/GSM, AIFF, AU,
 * CAF, W64, RF64, FLAC, Ogg Vorbis, Ogg Opus, MP3), mono and stereo, 8 to 48 kHz, a fraction of
 * a second each. Built and run by fuzz/make_corpus.sh: `seed_audio OUT_DIR`. A format the
 * library cannot write is skipped silently. Not part of the engine. */
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct fmt {
    const char *name;
    int format, rate, channels;
    double seconds;
} fmt;

static const fmt FORMATS[] = {
    {"pcm16_16k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, 0.25},
    {"pcm16_8k_stereo.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 8000, 2, 0.3},
    {"u8_11k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 11025, 1, 0.2},
    {"pcm24_48k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 48000, 1, 0.1},
    {"pcm32_22k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 22050, 1, 0.1},
    {"float_16k.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, 0.1},
    {"double_16k.wav", SF_FORMAT_WAV | SF_FORMAT_DOUBLE, 16000, 1, 0.05},
    {"ulaw_8k.wav", SF_FORMAT_WAV | SF_FORMAT_ULAW, 8000, 1, 0.2},
    {"alaw_8k.wav", SF_FORMAT_WAV | SF_FORMAT_ALAW, 8000, 1, 0.2},
    {"ima_16k.wav", SF_FORMAT_WAV | SF_FORMAT_IMA_ADPCM, 16000, 1, 0.2},
    {"msadpcm_16k.wav", SF_FORMAT_WAV | SF_FORMAT_MS_ADPCM, 16000, 1, 0.2},
    {"gsm_8k.wav", SF_FORMAT_WAV | SF_FORMAT_GSM610, 8000, 1, 0.2},
    {"pcm16_3ch_16k.wav", SF_FORMAT_WAVEX | SF_FORMAT_PCM_16, 16000, 3, 0.1},
    {"pcm16_16k.aiff", SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 16000, 1, 0.1},
    {"float_16k.au", SF_FORMAT_AU | SF_FORMAT_FLOAT, 16000, 1, 0.1},
    {"pcm16_16k.caf", SF_FORMAT_CAF | SF_FORMAT_PCM_16, 16000, 1, 0.1},
    {"pcm16_16k.w64", SF_FORMAT_W64 | SF_FORMAT_PCM_16, 16000, 1, 0.1},
    {"pcm16_16k.rf64", SF_FORMAT_RF64 | SF_FORMAT_PCM_16, 16000, 1, 0.1},
    {"pcm16_16k.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, 0.3},
    {"pcm24_48k_stereo.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 48000, 2, 0.1},
    {"vorbis_16k.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1, 0.3},
    {"opus_16k.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS, 16000, 1, 0.3},
#ifdef SF_FORMAT_MPEG
    {"mp3_16k.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 16000, 1, 0.3},
#endif
};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: seed_audio OUT_DIR\n");
        return 2;
    }
    int written = 0;
    for (size_t k = 0; k < sizeof FORMATS / sizeof FORMATS[0]; k++) {
        const fmt *f = &FORMATS[k];
        SF_INFO info = {.samplerate = f->rate, .channels = f->channels, .format = f->format};
        if (!sf_format_check(&info)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], f->name);
        SNDFILE *s = sf_open(path, SFM_WRITE, &info);
        if (!s) continue;
        int n = (int)(f->seconds * f->rate);
        double *buf = malloc(sizeof(double) * (size_t)n * (size_t)f->channels);
        for (int i = 0; i < n; i++)
            for (int c = 0; c < f->channels; c++)
                buf[(size_t)i * f->channels + c] = 0.3 * sin(2 * M_PI * (220.0 + 110 * c) * i / f->rate) * (1.0 - (double)i / n);
        sf_writef_double(s, buf, n);
        sf_close(s);
        free(buf);
        written++;
    }
    printf("%d\n", written);
    return 0;
}
