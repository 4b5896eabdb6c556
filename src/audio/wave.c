/* wave.c — audio decoding through libsndfile (files and in-memory payloads; opened on first use,
 * sf_lib.h); MP4 / M4A / WebM /
 * Matroska, which libsndfile does not read, go to libavformat instead (wave_av.c).
 *
 * Design: one decode loop (decode_open_stream) serves both entry points; the in-memory path plugs a
 * read-only SF_VIRTUAL_IO over the caller's buffer. Frames are read in fixed chunks until libsndfile
 * reports the end, so formats whose frame count is only an estimate (MP3, Ogg) and WAVs whose header
 * claims more data than the file holds both yield exactly the decodable samples. Validation (no
 * samples, non-finite samples, too low a rate, the duration cap, the memory gate) happens here, in
 * the sink both decoders fill (wave_internal.h), so every caller gets the same errors. */
#include "audio/wave.h"
#include "audio/sf_lib.h"
#include "audio/wave_internal.h"

#include <errno.h>
#include <math.h>
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

/* With max_seconds > 0 the buffer stops with PM_ELIMIT as soon as the decoded length exceeds it,
 * so a small compressed payload (a FLAC of silence decodes ~3000x larger) cannot fill memory
 * first; it never grows past that length either. With a gate, every growth is asked for first. */
int wave_sink_put(wave_sink *s, const double *f, size_t got, int ch, pm_err *e) {
    size_t n = s->n;
    if (s->max_seconds > 0 && (double)(n + got) / s->rate > s->max_seconds)
        return pm_errf(e, PM_ELIMIT, "%s: audio runs over the limit of %.4f s per request (decoding stopped at %.4f s)", s->what,
                       s->max_seconds, (double)(n + got) / s->rate);
    if (n + got > s->cap) {
        size_t most = s->max_seconds > 0 ? (size_t)(s->max_seconds * s->rate) + 1 : (size_t)-1; /* samples the limit allows */
        size_t ncap = s->cap ? s->cap * 2 : (size_t)WAVE_CHUNK * 4;
        while (ncap < n + got) ncap *= 2;
        if (ncap > most && most >= n + got) ncap = most;
        int rc = gate_adjust(s->gate, (int64_t)((ncap - s->cap) * sizeof(double)), &s->taken, s->what, e);
        if (rc) return rc;
        double *p = realloc(s->mono, sizeof(double) * ncap);
        if (!p) return pm_errf(e, PM_ENOMEM, "%s: out of memory decoding %zu samples", s->what, ncap);
        s->mono = p;
        s->cap = ncap;
    }
    for (size_t i = 0; i < got; i++) {
        const double *fr = f + i * (size_t)ch;
        double v;
        if (ch == 1) {
            v = fr[0];
        } else {
            double sum = 0.0;
            for (int c = 0; c < ch; c++) sum += fr[c];
            v = sum / (double)ch;
        }
        s->mono[n + i] = v;
    }
    s->n = n + got;
    return PM_OK;
}

int wave_sink_finish(wave_sink *s, int rc, pm_wave *out, pm_err *e) {
    if (rc == PM_OK && s->n == 0) rc = pm_errf(e, PM_EINVAL, "%s: the audio has no samples", s->what);
    for (size_t i = 0; rc == PM_OK && i < s->n; i++)
        if (!isfinite(s->mono[i]))
            rc = pm_errf(e, PM_EINVAL, "%s: sample %zu is %s (audio must be finite)", s->what, i, isnan(s->mono[i]) ? "NaN" : "infinite");
    if (rc != PM_OK) {
        free(s->mono);
        s->mono = NULL;
        gate_adjust(s->gate, -s->taken, &s->taken, s->what, e);
        return rc;
    }
    if (s->gate && s->cap > s->n) { /* trim to the samples and give the rest back */
        double *p = realloc(s->mono, sizeof(double) * s->n);
        if (p) {
            s->mono = p;
            gate_adjust(s->gate, -(int64_t)((s->cap - s->n) * sizeof(double)), &s->taken, s->what, e);
        }
    }
    out->samples = s->mono;
    out->n = s->n;
    out->sample_rate = s->rate;
    s->mono = NULL;
    return PM_OK;
}

/* Reads every frame of an opened stream into s, then wave_sink_finish. Closes sf. */
static int decode_open_stream(const pm_sf *lib, SNDFILE *sf, const SF_INFO *info, wave_sink *s, pm_wave *out, pm_err *e) {
    int ch = info->channels;
    if (ch < 1) {
        lib->sf_close(sf);
        return pm_errf(e, PM_EFORMAT, "%s: audio has %d channels", s->what, ch);
    }
    if (info->samplerate < PM_WAVE_MIN_RATE) {
        lib->sf_close(sf);
        return pm_errf(e, PM_EINVAL, "%s: sample rate %d Hz is below the supported minimum of %d Hz", s->what, info->samplerate,
                       PM_WAVE_MIN_RATE);
    }
    s->rate = info->samplerate;
    sf_count_t frames = WAVE_CHUNK / ch > 0 ? WAVE_CHUNK / ch : 1;
    double *buf = pm_malloc(sizeof(double) * (size_t)frames * (size_t)ch, e);
    if (!buf) {
        lib->sf_close(sf);
        return pm_err_ctx(e, "%s: ", s->what);
    }
    int rc = PM_OK;
    for (;;) {
        sf_count_t got = lib->sf_readf_double(sf, buf, frames);
        if (got <= 0 || (rc = wave_sink_put(s, buf, (size_t)got, ch, e))) break;
    }
    int serr = lib->sf_error(sf);
    if (rc == PM_OK && serr != SF_ERR_NO_ERROR)
        rc = pm_errf(e, PM_EFORMAT, "%s: decoding failed after %zu samples: %s", s->what, s->n, lib->sf_error_number(serr));
    lib->sf_close(sf);
    free(buf);
    return wave_sink_finish(s, rc, out, e);
}

/* A container file (wave_av_sniff) read whole, for wave_av_decode. */
static int read_container_file(const char *path, FILE *f, long sz, pm_wave *out, pm_err *e) {
    unsigned char *data = pm_malloc((size_t)sz, e);
    if (!data) return pm_err_ctx(e, "%s: ", path);
    int rc = fseek(f, 0, SEEK_SET) == 0 && fread(data, 1, (size_t)sz, f) == (size_t)sz
                 ? PM_OK
                 : pm_errf(e, PM_EIO, "%s: cannot read audio file: %s", path, ferror(f) ? strerror(errno) : "short read");
    if (rc == PM_OK) {
        wave_sink s = {.what = path};
        rc = wave_av_decode(&s, data, (size_t)sz, out, e);
    }
    free(data);
    return rc;
}

int pm_wave_read_file(pm_wave *out, const char *path, pm_err *e) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return pm_errf(e, PM_EIO, "%s: cannot open audio file: %s", path, strerror(errno));
    unsigned char head[16];
    size_t nh = fread(head, 1, sizeof head, f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    if (sz > 0 && wave_av_sniff(head, nh)) {
        int rc = read_container_file(path, f, sz, out, e);
        fclose(f);
        return rc;
    }
    fclose(f);
    if (sz == 0) return pm_errf(e, PM_EINVAL, "%s: the audio file is empty (0 bytes)", path);
    const pm_sf *lib = pm_sf_lib(path, e);
    if (!lib) return e->code;
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = lib->sf_open(path, SFM_READ, &info);
    if (!sf)
        return pm_errf(e, PM_EFORMAT, "%s: not a readable audio file (unsupported format or damaged header): %s", path, lib->sf_strerror(NULL));
    wave_sink s = {.what = path};
    return decode_open_stream(lib, sf, &info, &s, out, e);
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
    wave_sink s = {.what = what, .max_seconds = max_seconds, .gate = gate};
    if (wave_av_sniff(data, len)) return wave_av_decode(&s, data, len, out, e);
    const pm_sf *lib = pm_sf_lib(what, e);
    if (!lib) return e->code;
    mem_io m = {.data = data, .len = (sf_count_t)len, .pos = 0};
    SF_VIRTUAL_IO vio = {.get_filelen = mem_len, .seek = mem_seek, .read = mem_read, .write = mem_write, .tell = mem_tell};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *sf = lib->sf_open_virtual(&vio, SFM_READ, &info, &m);
    if (!sf)
        return pm_errf(e, PM_EFORMAT, "%s: not a readable audio payload (unsupported format or damaged header): %s", what, lib->sf_strerror(NULL));
    return decode_open_stream(lib, sf, &info, &s, out, e);
}

void pm_wave_free(pm_wave *w) {
    if (!w) return;
    free(w->samples);
    w->samples = NULL;
    w->n = 0;
}
