/* grammar_driver.c — src/engine/grammar.c for tests/e2e/lark_diff.py, a line protocol on stdin:
 *   G <hex>   compile the grammar (GBNF or Lark): prints "OK <rules> <terminals>" or "ERR <code> <message>"
 *   S <hex>   whole-output verdict of the last grammar compiled: prints 1, 0 or "ERR <code> <message>"
 * (hex: the bytes, so any text passes whole). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "driver_util.h"

int main(void) {
    static char line[1 << 22], buf[1 << 21];
    pm_grammar *g = NULL;
    while (fgets(line, sizeof line, stdin)) {
        size_t n = unhex(line + 2, buf);
        pm_err e = {0};
        if (line[0] == 'G') {
            pm_grammar_free(g);
            g = NULL;
            int rules, terms;
            if (pm_grammar_compile(buf, n, &g, &e)) printf("ERR %d %s\n", e.code, e.msg);
            else {
                pm_grammar_stats(g, &rules, &terms);
                printf("OK %d %d\n", rules, terms);
            }
        } else if (line[0] == 'S') {
            int v = g ? pm_grammar_fullmatch(g, buf, n, &e) : -1;
            if (v < 0 && g) printf("ERR %d %s\n", e.code, e.msg);
            else printf("%d\n", v);
        }
        fflush(stdout);
    }
    pm_grammar_free(g);
    return 0;
}
