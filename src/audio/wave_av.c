/* wave_av.c — MP4 / M4A (AAC, ALAC, ...) and WebM / Matroska (Opus, Vorbis, FLAC, PCM, ...) audio
 * through libavformat + libavcodec: the containers phones and browsers record in, which libsndfile
 * (wave.c) does not read. The official extractor reads audio with soundfile (libsndfile), so for
 * these there is no reference beyond the decoder's own samples: each as the decoder gives it,
 * integers normalised as libsndfile normalises them (int16 / 32768, int32 / 2^31, unsigned 8-bit
 * (x - 128) / 128), float as is, channels averaged in the sink (wave_internal.h). A lossless stream
 * (ALAC, FLAC, PCM) so gives the very samples of the WAV it was made from.
 *
 * The payload is untrusted: only the two demuxers are allowed (format_whitelist), no protocol (so no
 * demuxer can open a referenced file or URL), audio decoders only (codec_whitelist, for the stream
 * probe too), one thread; the duration cap and
 * the memory gate apply frame by frame as with libsndfile. A damaged packet ends the decode with an
 * error (never a silently shortened clip). */
#include "audio/wave_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/av_lib.h"

/* The demuxers wave_av_sniff admits ("mov,mp4,m4a,3gp,3g2,mj2" and "matroska,webm"). */
#define AV_FORMATS "mov,matroska"
/* The decoders that may run (the probe included: a video track's decoder never opens). */
#define AV_DECODERS                                                                                                          \
    "aac,aac_fixed,aac_latm,alac,opus,libopus,vorbis,libvorbis,flac,mp3,mp3float,mp2,mp2float,ac3,ac3_fixed,eac3,"       \
    "pcm_s16le,pcm_s16be,pcm_s24le,pcm_s24be,pcm_s32le,pcm_s32be,pcm_f32le,pcm_f32be,pcm_f64le,pcm_f64be,pcm_u8,pcm_s8,"  \
    "pcm_alaw,pcm_mulaw"
#define AV_IO_BUFFER 32768

int wave_av_sniff(const void *data, size_t len) {
    const unsigned char *p = data;
    if (len >= 12 && !memcmp(p + 4, "ftyp", 4)) return 1;             /* ISO BMFF */
    return len >= 4 && p[0] == 0x1A && p[1] == 0x45 && p[2] == 0xDF && p[3] == 0xA3; /* EBML */
}

/* An EBML variable-length integer at p (at most end - p bytes): its length in *n (0: none), its value
 * in *v (UINT64_MAX for "unknown", all value bits set). */
static void ebml_vint(const unsigned char *p, const unsigned char *end, int *n, uint64_t *v) {
    *n = 0;
    if (p >= end || !*p) return;
    int len = 1;
    while (!(*p & (0x80 >> (len - 1)))) len++;
    if (end - p < len) return;
    uint64_t x = *p & (0xFFu >> len), all = 0xFFu >> len;
    for (int i = 1; i < len; i++) x = x << 8 | p[i], all = all << 8 | 0xFF;
    *n = len;
    *v = x == all ? UINT64_MAX : x;
}

/* A Matroska / WebM payload shorter than its Segment's declared size has lost its end, which the
 * demuxer would read as a shorter clip: refused here. A live-written file (MediaRecorder) declares
 * an unknown size, and passes. */
static int ebml_truncated(const unsigned char *p, size_t len, uint64_t *declared) {
    const unsigned char *end = p + len, *q = p + 4; /* past the EBML header's ID */
    int n;
    uint64_t v;
    ebml_vint(q, end, &n, &v);
    if (!n || v == UINT64_MAX || v > (uint64_t)(end - q - n)) return 0; /* the demuxer names that */
    q += n + v;
    if (end - q < 4 || memcmp(q, "\x18\x53\x80\x67", 4)) return 0; /* no Segment next */
    q += 4;
    ebml_vint(q, end, &n, &v);
    if (!n || v == UINT64_MAX) return 0;
    *declared = (uint64_t)(q + n - p) + v;
    return *declared > len;
}

typedef struct av_mem {
    const unsigned char *data;
    int64_t len, pos;
} av_mem;

static int mem_read(void *user, uint8_t *buf, int size) {
    av_mem *m = user;
    int64_t k = m->len - m->pos;
    if (k <= 0) return AVERROR_EOF;
    if (k > size) k = size;
    memcpy(buf, m->data + m->pos, (size_t)k);
    m->pos += k;
    return (int)k;
}

static int64_t mem_seek(void *user, int64_t off, int whence) {
    av_mem *m = user;
    if (whence & AVSEEK_SIZE) return m->len;
    int64_t base = (whence & ~AVSEEK_FORCE) == SEEK_CUR ? m->pos : (whence & ~AVSEEK_FORCE) == SEEK_END ? m->len : 0;
    if (base + off < 0 || base + off > m->len) return AVERROR(EINVAL);
    return m->pos = base + off;
}

static int av_fail(const pm_av *av, pm_err *e, int code, const char *what, const char *doing, int averr) {
    char why[AV_ERROR_MAX_STRING_SIZE] = "";
    av->av_strerror(averr, why, sizeof why);
    return pm_errf(e, code, "%s: %s: %s", what, doing, why);
}

/* A decoder's or demuxer's refusal part-way: where it stopped. */
static int av_fail_at(const pm_av *av, pm_err *e, const wave_sink *s, int averr) {
    if (!s->n) return av_fail(av, e, PM_EFORMAT, s->what, "not a decodable audio stream", averr);
    char doing[96];
    snprintf(doing, sizeof doing, "decoding failed after %.2f s (the payload is damaged or truncated)", (double)s->n / s->rate);
    return av_fail(av, e, PM_EFORMAT, s->what, doing, averr);
}

void pm_wave_quiet(void) { pm_av_quiet(); }

/* A decoded frame's samples as interleaved doubles in buf (frames x ch), normalised as libsndfile
 * normalises integers. PM_EUNSUPPORTED for a sample format no audio decoder here produces. */
static int frame_samples(const pm_av *av, const AVFrame *f, int ch, double *buf, const char *what, pm_err *e) {
    int planar = av->av_sample_fmt_is_planar(f->format), packed = av->av_get_packed_sample_fmt(f->format);
    for (int c = 0; c < ch; c++) {
        const uint8_t *plane = f->extended_data[planar ? c : 0];
        for (int i = 0; i < f->nb_samples; i++) {
            size_t k = planar ? (size_t)i : (size_t)i * (size_t)ch + (size_t)c;
            double v;
            switch (packed) {
            case AV_SAMPLE_FMT_U8: v = ((double)plane[k] - 128.0) / 128.0; break;
            case AV_SAMPLE_FMT_S16: v = ((const int16_t *)plane)[k] / 32768.0; break;
            case AV_SAMPLE_FMT_S32: v = ((const int32_t *)plane)[k] / 2147483648.0; break;
            case AV_SAMPLE_FMT_S64: v = (double)((const int64_t *)plane)[k] / 9223372036854775808.0; break;
            case AV_SAMPLE_FMT_FLT: v = ((const float *)plane)[k]; break;
            case AV_SAMPLE_FMT_DBL: v = ((const double *)plane)[k]; break;
            default:
                return pm_errf(e, PM_EUNSUPPORTED, "%s: the decoder gave samples in an unsupported format (%d)", what, f->format);
            }
            buf[(size_t)i * (size_t)ch + (size_t)c] = v;
        }
    }
    return PM_OK;
}

/* Every frame the decoder has ready into the sink (AVERROR(EAGAIN) / AVERROR_EOF end it). */
static int drain(const pm_av *av, AVCodecContext *dec, AVFrame *f, wave_sink *s, int *ch, double **buf, size_t *buf_cap, pm_err *e) {
    for (;;) {
        int r = av->avcodec_receive_frame(dec, f);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return PM_OK;
        if (r < 0) return av_fail_at(av, e, s, r);
        int fch = f->ch_layout.nb_channels, rc = PM_OK;
        if (fch < 1 || f->sample_rate <= 0) rc = pm_errf(e, PM_EFORMAT, "%s: a frame of %d channels at %d Hz", s->what, fch, f->sample_rate);
        else if (!s->rate && f->sample_rate < PM_WAVE_MIN_RATE)
            rc = pm_errf(e, PM_EINVAL, "%s: sample rate %d Hz is below the supported minimum of %d Hz", s->what, f->sample_rate,
                         PM_WAVE_MIN_RATE);
        else if ((s->rate && f->sample_rate != s->rate) || (*ch && fch != *ch))
            rc = pm_errf(e, PM_EFORMAT, "%s: the stream changes from %d Hz x %d channels to %d Hz x %d after %zu samples", s->what, s->rate,
                         *ch, f->sample_rate, fch, s->n);
        size_t need = (size_t)f->nb_samples * (size_t)fch;
        if (!rc && need > *buf_cap) {
            double *p = realloc(*buf, need * sizeof(double));
            if (!p) rc = pm_errf(e, PM_ENOMEM, "%s: out of memory decoding a frame of %d samples", s->what, f->nb_samples);
            else *buf = p, *buf_cap = need;
        }
        if (!rc) {
            s->rate = f->sample_rate;
            *ch = fch;
            if (f->nb_samples > 0 && !(rc = frame_samples(av, f, fch, *buf, s->what, e))) rc = wave_sink_put(s, *buf, (size_t)f->nb_samples, fch, e);
        }
        av->av_frame_unref(f);
        if (rc) return rc;
    }
}

int wave_av_decode(wave_sink *s, const void *data, size_t len, pm_wave *out, pm_err *e) {
    memset(out, 0, sizeof *out);
    uint64_t declared = 0;
    if (len >= 4 && ((const unsigned char *)data)[0] == 0x1A && ebml_truncated(data, len, &declared))
        return pm_errf(e, PM_EFORMAT, "%s: truncated: the payload holds %zu of the %llu bytes its Matroska / WebM segment declares", s->what,
                       len, (unsigned long long)declared);
    const pm_av *av = pm_av_lib(s->what, e);
    if (!av) return wave_sink_finish(s, e->code, out, e);
    av_mem m = {data, (int64_t)len, 0};
    AVFormatContext *fmt = av->avformat_alloc_context();
    unsigned char *iobuf = av->av_malloc(AV_IO_BUFFER);
    AVIOContext *io = iobuf ? av->avio_alloc_context(iobuf, AV_IO_BUFFER, 0, &m, mem_read, NULL, mem_seek) : NULL;
    AVCodecContext *dec = NULL;
    AVPacket *pkt = av->av_packet_alloc();
    AVFrame *f = av->av_frame_alloc();
    AVDictionary *opts = NULL;
    double *buf = NULL;
    size_t buf_cap = 0;
    int rc = PM_OK, ch = 0, r;
    if (!fmt || !io || !pkt || !f) {
        if (!io) av->av_free(iobuf);
        rc = pm_errf(e, PM_ENOMEM, "%s: out of memory opening the container", s->what);
        goto done;
    }
    fmt->pb = io;
    fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    av->av_dict_set(&opts, "format_whitelist", AV_FORMATS, 0);
    av->av_dict_set(&opts, "protocol_whitelist", "none", 0); /* nothing a demuxer could open besides the payload */
    av->av_dict_set(&opts, "codec_whitelist", AV_DECODERS, 0);
    r = av->avformat_open_input(&fmt, NULL, NULL, &opts);     /* frees fmt on failure */
    av->av_dict_free(&opts);
    if (r < 0) {
        rc = av_fail(av, e, PM_EFORMAT, s->what, "not a readable MP4 / M4A or WebM / Matroska audio payload", r);
        goto done;
    }
    if ((r = av->avformat_find_stream_info(fmt, NULL)) < 0) {
        rc = av_fail(av, e, PM_EFORMAT, s->what, "not a readable MP4 / M4A or WebM / Matroska audio payload", r);
        goto done;
    }
    const AVCodec *codec = NULL;
    int idx = av->av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
    if (idx < 0) {
        rc = idx == AVERROR_DECODER_NOT_FOUND ? av_fail(av, e, PM_EUNSUPPORTED, s->what, "the audio stream's codec has no decoder here", idx)
                                              : pm_errf(e, PM_EFORMAT, "%s: the container holds no audio stream", s->what);
        goto done;
    }
    for (unsigned i = 0; i < fmt->nb_streams; i++) /* demux the one stream only */
        fmt->streams[i]->discard = (int)i == idx ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    if (!(dec = av->avcodec_alloc_context3(codec)) || av->avcodec_parameters_to_context(dec, fmt->streams[idx]->codecpar) < 0) {
        rc = pm_errf(e, PM_ENOMEM, "%s: out of memory opening the decoder", s->what);
        goto done;
    }
    dec->pkt_timebase = fmt->streams[idx]->time_base;
    dec->thread_count = 1;
    av->av_dict_set(&opts, "codec_whitelist", AV_DECODERS, 0);
    r = av->avcodec_open2(dec, codec, &opts);
    av->av_dict_free(&opts);
    if (r < 0) {
        rc = av_fail(av, e, PM_EFORMAT, s->what, "cannot open the audio decoder", r);
        goto done;
    }
    while (!rc) {
        r = av->av_read_frame(fmt, pkt);
        if (r == AVERROR_EOF) break;
        if (r < 0) {
            rc = av_fail_at(av, e, s, r);
            break;
        }
        if (pkt->stream_index == idx) {
            r = av->avcodec_send_packet(dec, pkt);
            if (r < 0 && r != AVERROR(EAGAIN)) rc = av_fail_at(av, e, s, r);
            if (!rc) rc = drain(av, dec, f, s, &ch, &buf, &buf_cap, e);
        }
        av->av_packet_unref(pkt);
    }
    if (!rc && (r = av->avcodec_send_packet(dec, NULL)) >= 0) rc = drain(av, dec, f, s, &ch, &buf, &buf_cap, e); /* the delayed frames */
done:
    free(buf);
    av->av_frame_free(&f);
    av->av_packet_free(&pkt);
    av->avcodec_free_context(&dec);
    av->avformat_close_input(&fmt); /* a custom IO stays ours */
    if (io) av->av_freep(&io->buffer);
    av->avio_context_free(&io);
    return wave_sink_finish(s, rc, out, e);
}
