/* regex_driver.c — src/engine/regex.c for tests/e2e/regex_diff.py, a line protocol on stdin:
 *   P <hex>   compile the pattern: prints "OK <states>" or "ERR <code> <message>"
 *   Q <hex>   the same with PM_REGEX_SEARCH | PM_REGEX_ECMA (JSON Schema's pattern)
 *   S <hex>   whole-match the string against the last pattern compiled: prints 1 or 0
 * (hex: the bytes, so any pattern or text passes whole). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/regex.h"
#include "driver_util.h"

int main(void) {
    static char line[1 << 22], buf[1 << 21];
    pm_regex *rx = NULL;
    while (fgets(line, sizeof line, stdin)) {
        size_t n = unhex(line + 2, buf);
        if (line[0] == 'P' || line[0] == 'Q') {
            pm_regex_free(rx);
            rx = NULL;
            pm_err e = {0};
            if (pm_regex_compile_flags(buf, n, line[0] == 'Q' ? PM_REGEX_SEARCH | PM_REGEX_ECMA : 0, &rx, &e))
                printf("ERR %d %s\n", e.code, e.msg);
            else printf("OK %d\n", pm_regex_states(rx));
        } else if (line[0] == 'S')
            printf("%d\n", rx ? pm_regex_fullmatch(rx, buf, n) : -1);
        fflush(stdout);
    }
    pm_regex_free(rx);
    return 0;
}
