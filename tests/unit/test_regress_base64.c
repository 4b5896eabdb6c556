/* test_regress_base64.c — regression inputs found by fuzz/fuzz_base64.c (tools/server/base64.c and
 * dataurl.c are compiled in directly, as in test_server_parsers.c: they belong to the binary).
 *
 * 1. A data: URL whose media type holds a NUL byte ("data:i\0\0mage/png;base64,...", the fuzzer's
 *    input below) was accepted with media_type "i": token_char() used strchr("!#$&^_.+-", c), which
 *    matches the terminator for c == 0. The media type is then silently truncated (and the
 *    type/subtype check sees "i", not the bytes sent). Not reachable through JSON (jansson refuses
 *    \u0000 without JSON_ALLOW_NUL), but the parser takes a length and must not depend on that.
 *    Fix (tools/server/dataurl.c): token_char returns 0 for c == 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/server/base64.c"
#include "../../tools/server/dataurl.c"

static const uint8_t CRASH_DATAURL_NUL[] = {
    0x02, 0x64, 0x61, 0x74, 0x61, 0x3a, 0x69, 0x00, 0x00, 0x6d, 0x61, 0x67, 0x65, 0x2f, 0x70, 0x6e, 0x67,
    0x3b, 0x62, 0x61, 0x73, 0x65, 0x36, 0x34, 0x2c, 0x69, 0x56, 0x42, 0x4f, 0x52, 0x77, 0x30, 0x4b, 0x47,
    0x67, 0x6f, 0x41, 0x41, 0x41, 0x41, 0x4e, 0x53, 0x55, 0x68, 0x45, 0x55, 0x67, 0x41, 0x41, 0x41, 0x41,
    0x47, 0x55, 0x6c, 0x45, 0x51, 0x56, 0x52, 0x34, 0x6e, 0x47, 0x4e, 0x6b, 0x59, 0x50, 0x69, 0x76};

static void test_dataurl_nul_in_media_type(void **state) {
    (void)state;
    assert_int_equal(CRASH_DATAURL_NUL[0] % 3, 2); /* the harness's data-URL mode */
    const char *url = (const char *)CRASH_DATAURL_NUL + 1;
    size_t n = sizeof CRASH_DATAURL_NUL - 1;
    srv_data_url d;
    char err[256] = "";
    assert_int_equal(srv_data_url_parse(url, n, &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid character"));
    /* one NUL anywhere in the media type or its parameters is refused the same way */
    static const char one[] = "data:image/pn\0g;base64,QQ==";
    assert_int_equal(srv_data_url_parse(one, sizeof one - 1, &d, err, sizeof err), -1);
    /* the same URL without the NUL bytes is fine */
    static const char ok[] = "data:image/png;base64,QQ==";
    assert_int_equal(srv_data_url_parse(ok, sizeof ok - 1, &d, err, sizeof err), 0);
    assert_string_equal(d.media_type, "image/png");
    assert_int_equal(d.payload_len, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataurl_nul_in_media_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
