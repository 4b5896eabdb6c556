/* fuzz_json_schema.c — libFuzzer harness for JSON mode: the schema compiler (request input on the
 * server's HTTP thread) and the recognizer the mask runs on every step.
 *
 * The input is a schema and a document separated by the first NUL byte; with no NUL the whole
 * input is a document for JSON mode's any object. Contracts:
 *   - the compiler either gives a schema or an error message, never both or neither;
 *   - a document the recognizer takes whole is JSON (jansson parses it, unless a number lies past a
 *     double's range, jansson's limit and not JSON's; for JSON mode, an object);
 *   - the recognizer decides byte by byte: feeding the document in two pieces anywhere gives the
 *     same verdict as feeding it whole. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/json_mode.h"
#include "engine/json_schema.h"
#include "fuzz_util.h"

static int verdict(const pm_json_node *root, const char *doc, size_t n, size_t cut) {
    pm_json_state s;
    pm_json_init(&s, root);
    if (cut > n) cut = n;
    if (pm_json_feed(&s, doc, cut) || pm_json_feed(&s, doc + cut, n - cut)) return 0;
    return pm_json_done(&s) ? 2 : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = (const char *)data;
    const char *nul = memchr(in, 0, size);
    pm_json_schema *sch = NULL;
    const pm_json_node *root = pm_json_any_object();
    const char *doc = in;
    size_t n = size;
    if (nul) {
        char *text = malloc((size_t)(nul - in) + 1);
        if (!text) return 0;
        memcpy(text, in, (size_t)(nul - in));
        text[nul - in] = 0;
        pm_err e = {0};
        int rc = pm_json_schema_compile(text, &sch, &e);
        free(text);
        FUZZ_CHECK(rc ? !sch && e.msg[0] : sch && pm_json_schema_root(sch));
        if (rc) return 0;
        root = pm_json_schema_root(sch);
        doc = nul + 1;
        n = size - (size_t)(nul - in) - 1;
    }
    int whole = verdict(root, doc, n, n);
    FUZZ_CHECK(verdict(root, doc, n, n / 2) == whole);
    FUZZ_CHECK(verdict(root, doc, n, n ? (size_t)data[0] % n : 0) == whole);
    if (whole == 2) {
        json_error_t je;
        json_t *v = json_loadb(doc, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        /* jansson's own limit, not JSON's: a number past a double's range */
        int range = !v && (strstr(je.text, "overflow") || strstr(je.text, "too big"));
        if (!v && !range) fprintf(stderr, "jansson: %s at %d\n", je.text, je.position);
        FUZZ_CHECK(v != NULL || range);
        FUZZ_CHECK(!v || sch || json_is_object(v));
        json_decref(v);
    }
    pm_json_schema_free(sch);
    return 0;
}
