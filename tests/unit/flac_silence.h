/* flac_silence.h — a FLAC of digital silence, in memory, written by libsndfile: the classic
 * decompression bomb (~12 bytes per 4096 samples decode to 32 KB of doubles). For the tests of the
 * audio decoder's limits (test_regress_wave.c, test_media_gate.c). */
#ifndef PM_TEST_FLAC_SILENCE_H
#define PM_TEST_FLAC_SILENCE_H

#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* `seconds` of 16 kHz mono silence; *len bytes, malloc'd. Fails the running cmocka test on error. */
static uint8_t *flac_silence(int seconds, size_t *len) {
    char path[] = "/tmp/pm-flac-silence-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    SF_INFO info = {.samplerate = 16000, .channels = 1, .format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16};
    SNDFILE *s = sf_open(path, SFM_WRITE, &info);
    assert_non_null(s);
    static short zero[16000];
    for (int i = 0; i < seconds; i++) assert_int_equal(sf_write_short(s, zero, 16000), 16000);
    sf_close(s);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    uint8_t *b = malloc(*len);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    unlink(path);
    return b;
}

#endif
