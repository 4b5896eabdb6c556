/* av_lib.h — libavformat / libavcodec / libavutil, opened on first use (util/dynlib.h) instead of linked:
 * together they pull ~135 shared libraries (every codec's) into each process, ~90 ms of dynamic
 * loading at every start of the CLI and the server (twice for the CLI, which re-executes itself once
 * to set GOMP_SPINCOUNT), for the MP4 / M4A and WebM / Matroska audio only (wave_av.c). The sonames
 * follow the major versions of the headers built against, so the ABI is the one compiled for. */
#ifndef PM_AUDIO_AV_LIB_H
#define PM_AUDIO_AV_LIB_H

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>

#include "util/err.h"

/* The functions wave_av.c calls: X(library, function). */
#define PM_AV_FUNCS(X)                                                                                                     \
    X(avutil, av_strerror)                                                                                                 \
    X(avutil, av_log_set_level)                                                                                            \
    X(avutil, av_malloc)                                                                                                   \
    X(avutil, av_free)                                                                                                     \
    X(avutil, av_freep)                                                                                                    \
    X(avutil, av_dict_set)                                                                                                 \
    X(avutil, av_dict_free)                                                                                                \
    X(avutil, av_frame_alloc)                                                                                              \
    X(avutil, av_frame_free)                                                                                               \
    X(avutil, av_frame_unref)                                                                                              \
    X(avutil, av_sample_fmt_is_planar)                                                                                     \
    X(avutil, av_get_packed_sample_fmt)                                                                                    \
    X(avcodec, av_packet_alloc)                                                                                            \
    X(avcodec, av_packet_free)                                                                                             \
    X(avcodec, av_packet_unref)                                                                                            \
    X(avcodec, avcodec_alloc_context3)                                                                                     \
    X(avcodec, avcodec_free_context)                                                                                       \
    X(avcodec, avcodec_parameters_to_context)                                                                              \
    X(avcodec, avcodec_open2)                                                                                              \
    X(avcodec, avcodec_send_packet)                                                                                        \
    X(avcodec, avcodec_receive_frame)                                                                                      \
    X(avformat, avformat_alloc_context)                                                                                    \
    X(avformat, avformat_open_input)                                                                                       \
    X(avformat, avformat_find_stream_info)                                                                                 \
    X(avformat, avformat_close_input)                                                                                      \
    X(avformat, av_find_best_stream)                                                                                       \
    X(avformat, av_read_frame)                                                                                             \
    X(avformat, avio_alloc_context)                                                                                        \
    X(avformat, avio_context_free)

typedef struct pm_av {
#define PM_AV_MEMBER(lib, fn) __typeof__(&fn) fn;
    PM_AV_FUNCS(PM_AV_MEMBER)
#undef PM_AV_MEMBER
} pm_av;

/* The functions, the libraries opened by the first call of the process (thread-safe). NULL with e
 * set (PM_EUNSUPPORTED, naming `what` and the library) when a library or a function is missing. */
const pm_av *pm_av_lib(const char *what, pm_err *e);

/* Silences libav's own log, now if the libraries are open, else when they open (pm_wave_quiet). */
void pm_av_quiet(void);

#endif
