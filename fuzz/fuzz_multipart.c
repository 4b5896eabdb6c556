/* fuzz_multipart.c — libFuzzer harness for multipart/form-data uploads (POST
 * /v1/audio/transcriptions and /translations): srv_multipart_boundary on a Content-Type value,
 * srv_multipart_parse on the body, then srv_audio_parse of the parts (both routes).
 *
 * Input layout: the Content-Type header value up to the first '\n', then the body (the corpus script
 * writes seeds in this layout; without a '\n' the whole input is the body and the Content-Type is
 * "multipart/form-data; boundary=X"). The body is copied into a buffer of exactly its size so
 * ASan sees any read past it. Properties: every part is a view inside the body, has a non-empty
 * name, NUL-terminated name/filename/content_type; srv_multipart_find finds the first part of
 * each name; an accepted audio request has a file inside the body and a prompt. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/server/audio_form.h"
#include "../tools/server/multipart.h"
#include "fuzz_util.h"

#define MAX_PARTS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size < 512 ? size : 512);
    char ct[520];
    const uint8_t *body_src = data;
    size_t bn = size;
    if (nl) {
        size_t cl = (size_t)(nl - data);
        memcpy(ct, data, cl);
        ct[cl] = 0;
        body_src = nl + 1;
        bn = size - cl - 1;
    } else {
        strcpy(ct, "multipart/form-data; boundary=X");
    }
    char boundary[SRV_MP_MAX_BOUNDARY + 1], err[512];
    err[0] = 0;
    if (srv_multipart_boundary(ct, boundary, sizeof boundary, err, sizeof err)) {
        FUZZ_CHECK(err[0]);
        return 0;
    }
    size_t bl = strlen(boundary);
    FUZZ_CHECK(bl >= 1 && bl <= SRV_MP_MAX_BOUNDARY);
    uint8_t *body = malloc(bn ? bn : 1);
    memcpy(body, body_src, bn);
    srv_part parts[MAX_PARTS];
    int n = -1;
    err[0] = 0;
    if (srv_multipart_parse(body, bn, boundary, parts, MAX_PARTS, &n, err, sizeof err) == 0) {
        FUZZ_CHECK(n >= 0 && n <= MAX_PARTS);
        for (int i = 0; i < n; i++) {
            const srv_part *p = &parts[i];
            FUZZ_CHECK(p->data >= body && p->data + p->len <= body + bn);
            FUZZ_CHECK(p->name[0] && memchr(p->name, 0, sizeof p->name));
            FUZZ_CHECK(memchr(p->filename, 0, sizeof p->filename) && memchr(p->content_type, 0, sizeof p->content_type));
            FUZZ_CHECK(srv_multipart_find(parts, n, p->name) <= p);
        }
        for (int tr = 0; tr <= 1; tr++) {
            srv_audio_req r;
            srv_error e;
            memset(&r, 0, sizeof r);
            memset(&e, 0, sizeof e);
            char ign[24]; /* the form's fields nothing reads: each named once, the list cut to its room */
            int n_ign = srv_audio_ignored(parts, n, ign, sizeof ign);
            FUZZ_CHECK(n_ign >= 0 && n_ign <= n && strlen(ign) < sizeof ign && (n_ign > 0) == (ign[0] != 0));
            if (srv_audio_parse(parts, n, tr, &r, &e) == 0) {
                FUZZ_CHECK(r.file != NULL && r.file >= body && r.file + r.file_len <= body + bn);
                FUZZ_CHECK(r.prompt != NULL && r.translate == tr);
                FUZZ_CHECK(memchr(r.language, 0, sizeof r.language) && memchr(r.filename, 0, sizeof r.filename));
            } else {
                FUZZ_CHECK(e.http >= 400 && e.msg[0]);
            }
            srv_audio_req_free(&r);
        }
    } else {
        FUZZ_CHECK(err[0]);
    }
    free(body);
    return 0;
}
