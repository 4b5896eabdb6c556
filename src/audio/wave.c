/* wave.c — audio decoding through libsndfile (files and in-memory payloads).
 *
 * Design: one decode loop (decode_open_stream) serves both entry points; the in-memory path plugs a
 * read-only SF_VIRTUAL_IO over the caller's buffer. Frames are read in fixed chunks until libsndfile
 * reports the end, so formats whose frame count is only an estimate (MP3, Ogg) and WAVs whose header
 * claims more data than the file holds both yield exactly the decodable samples. Validation (no
 * samples, non-finite samples, too low a rate) happens here so every caller gets the same errors. */
#include "audio/wave.h"

#include <errno.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Samples (frames x channels) per sf_readf_double call: the scratch buffer stays 128 KiB whatever
 * channel count a header claims (libsndfile accepts up to 1024). */
#define WAVE_CHUNK 16384

/* Asks the gate for delta more bytes (delta < 0: gives back). PM_OK, or PM_EBUSY / PM_ELIMIT
 * (with e set) when the gate refuses. */
static int gate_adjust(const pm_media_gate *gate, int64_t delta, int64_t *taken, const char *what, pm_err *e) {
    if (!gate || !delta) return PM_OK;
    int r = gate->adjust(gate->user, delta);
    if (delta < 0 || r == 0) {
        *taken += delta;
        return PM_OK;
    }
    if (r == 1) return pm_errf(e, PM_EBUSY, "%s: no memory is free for decoded media right now (%.1f MB taken)", what, (double)*taken / 1e6);
    return pm_errf(e, PM_ELIMIT, "%s: decoded audio would take more than the memory allowed for decoded media (%.1f MB so far)", what,
                   (double)(*taken + delta) / 1e6);
}

/* Reads every frame of an opened stream, averages channels, validates. Closes sf. With
 * max_seconds > 0, stops with PM_ELIMIT as soon as the decoded length exceeds it, so a small
 * compressed payload (a FLAC of silence decodes ~3000x larger) cannot fill memory first; the
 * buffer never grows past that length either. With a gate, every growth of the sample buffer is
 * asked for first and the final buffer is trimmed to the samples (phi4mm.h). */
static int decode_open_stream(SNDFILE *sf, const SF_INFO *info, const char *what, double max_seconds, const pm_media_gate *gate,
                              pm_wave *out, pm_err *e) {
    int ch = info->channels;
    if (ch < 1) {
        sf_close(sf);
        return pm_errf(e, PM_EFORMAT, "%s: audio has %d channels", what, ch);
    }
    if (info->samplerate < PM_WAVE_MIN_RATE) {
        sf_close(sf);
        return pm_errf(e, PM_EINVAL, "%s: sample rate %d Hz is below the supported minimum of %d Hz", what, info->samplerate,
                       PM_WAVE_MIN_RATE);
    }
    sf_count_t frames = WAVE_CHUNK / ch > 0 ? WAVE_CHUNK / ch : 1;
    double *buf = pm_malloc(sizeof(double) * (size_t)frames * (size_t)ch, e);
    if (!buf) {
        sf_close(sf);
        return pm_err_ctx(e, "%s: ", what);
    }
    size_t cap = 0, n = 0;
    size_t most = max_seconds > 0 ? (size_t)(max_seconds * info->samplerate) + 1 : (size_t)-1; /* samples the limit allows */
    double *mono = NULL;
    int64_t taken = 0; /* bytes the gate granted */
    int rc = PM_OK;
    for (;;) {
        sf_count_t got = sf_readf_double(sf, buf, frames);
        if (got <= 0) break;
        if (max_seconds > 0 && (double)(n + (size_t)got) / info->samplerate > max_seconds) {
            rc = pm_errf(e, PM_ELIMIT, "%s: audio runs over the limit of %.4f s per request (decoding stopped at %.4f s)", what,
                         max_seconds, (double)(n + (size_t)got) / info->samplerate);
            break;
        }
        if (n + (size_t)got > cap) {
            size_t ncap = cap ? cap * 2 : (size_t)WAVE_CHUNK * 4;
            while (ncap < n + (size_t)got) ncap *= 2;
            if (ncap > most && most >= n + (size_t)got) ncap = most;
            if ((rc = gate_adjust(gate, (int64_t)((ncap - cap) * sizeof(double)), &taken, what, e))) break;
            double *p = realloc(mono, sizeof(double) * ncap);
            if (!p) {
                rc = pm_errf(e, PM_ENOMEM, "%s: out of memory decoding %zu samples", what, ncap);
                break;
            }
            mono = p;
            cap = ncap;
        }
        for (sf_count_t i = 0; i < got; i++) {
            const double *f = buf + (size_t)i * (size_t)ch;
            double v;
            if (ch == 1) {
                v = f[0];
            } else {
                double s = 0.0;
                for (int c = 0; c < ch; c++) s += f[c];
                v = s / (double)ch;
            }
            mono[n + (size_t)i] = v;
        }
        n += (size_t)got;
    }
    int serr = sf_error(sf);
    if (rc == PM_OK && serr != SF_ERR_NO_ERROR)
        rc = pm_errf(e, PM_EFORMAT, "%s: decoding failed after %zu samples: %s", what, n, sf_error_number(serr));
    sf_close(sf);
    free(buf);
    if (rc == PM_OK && n == 0) rc = pm_errf(e, PM_EINVAL, "%s: the audio has no samples", what);
    for (size_t i = 0; rc == PM_OK && i < n; i++)
        if (!isfinite(mono[i]))
            rc = pm_errf(e, PM_EINVAL, "%s: sample %zu is %s (audio must be finite)", what, i, isnan(mono[i]) ? "NaN" : "infinite");
    if (rc != PM_OK) {
        free(mono);
        gate_adjust(gate, -taken, &taken, what, e);
        return rc;
    }
    if (gate && cap > n) { /* trim to the samples and give the rest back */
        double *p = realloc(mono, sizeof(double) * n);
        if (p) {
            mono = p;
            gate_adjust(gate, -(int64_t)((cap - n) * sizeof(double)), &taken, what, e);
        }
    }
    out->samples = mono;
    out->n = n;
    out->sample_rate = info->samplerate;
    return PM_OK;
}

int pm_wave_read_file(pm_wave *out, const char *path, pm_err *e) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return pm_errf(e, PM_EIO, "%s: cannot open audio file: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fclose(f);
    if (sz == 0) return pm_errf(e, PM_EINVAL, "%s: the audio file is empty (0 bytes)", path);
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open(path, SFM_READ, &info);
    if (!sf) return pm_errf(e, PM_EFORMAT, "%s: not a readable audio file (unsupported format or damaged header): %s", path, sf_strerror(NULL));
    return decode_open_stream(sf, &info, path, 0, NULL, out, e);
}

/* Read-only virtual file over a memory buffer. */
typedef struct mem_io {
    const unsigned char *data;
    sf_count_t len, pos;
} mem_io;

static sf_count_t mem_len(void *user) { return ((mem_io *)user)->len; }

static sf_count_t mem_seek(sf_count_t off, int whence, void *user) {
    mem_io *m = user;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->len;
    sf_count_t p = base + off;
    if (p < 0) return -1;
    m->pos = p > m->len ? m->len : p;
    return m->pos;
}

static sf_count_t mem_read(void *ptr, sf_count_t count, void *user) {
    mem_io *m = user;
    if (count <= 0 || m->pos >= m->len) return 0;
    sf_count_t k = m->len - m->pos;
    if (k > count) k = count;
    memcpy(ptr, m->data + m->pos, (size_t)k);
    m->pos += k;
    return k;
}

static sf_count_t mem_write(const void *ptr, sf_count_t count, void *user) {
    (void)ptr;
    (void)count;
    (void)user;
    return 0;
}

static sf_count_t mem_tell(void *user) { return ((mem_io *)user)->pos; }

int pm_wave_read_memory(pm_wave *out, const void *data, size_t len, const char *what, pm_err *e) {
    return pm_wave_read_memory_max(out, data, len, what, 0, e);
}

int pm_wave_read_memory_max(pm_wave *out, const void *data, size_t len, const char *what, double max_seconds, pm_err *e) {
    return pm_wave_read_memory_gated(out, data, len, what, max_seconds, NULL, e);
}

int pm_wave_read_memory_gated(pm_wave *out, const void *data, size_t len, const char *what, double max_seconds, const pm_media_gate *gate,
                              pm_err *e) {
    memset(out, 0, sizeof *out);
    if (!what) what = "audio";
    if (!data || len == 0) return pm_errf(e, PM_EINVAL, "%s: the audio payload is empty (0 bytes)", what);
    mem_io m = {.data = data, .len = (sf_count_t)len, .pos = 0};
    SF_VIRTUAL_IO vio = {.get_filelen = mem_len, .seek = mem_seek, .read = mem_read, .write = mem_write, .tell = mem_tell};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &info, &m);
    if (!sf) return pm_errf(e, PM_EFORMAT, "%s: not a readable audio payload (unsupported format or damaged header): %s", what, sf_strerror(NULL));
    return decode_open_stream(sf, &info, what, max_seconds, gate, out, e);
}

void pm_wave_free(pm_wave *w) {
    if (!w) return;
    free(w->samples);
    w->samples = NULL;
    w->n = 0;
}
