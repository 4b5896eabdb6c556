/* regex_internal.h — what regex_parse.c hands regex.c: the pattern as a tree of code-point sets,
 * concatenations, alternations and repeats. */
#ifndef PM_REGEX_INTERNAL_H
#define PM_REGEX_INTERNAL_H

#include <stdint.h>

#include "util/err.h"

enum { RX_EMPTY, RX_SET, RX_CAT, RX_ALT, RX_REP };

/* Code points lo..hi, both included. */
typedef struct rx_range {
    uint32_t lo, hi;
} rx_range;

/* A set of code points: sorted, disjoint, non-adjacent ranges once rx_set_normalize has run. */
typedef struct rx_set {
    rx_range *r;
    int n, cap;
} rx_set;

typedef struct rx_node {
    int kind;      /* RX_* */
    int a, b;      /* CAT, ALT: the two children (a first); REP: the child in a */
    int min, max;  /* REP: counts, max < 0 unbounded */
    int set;       /* SET: index into rx_tree.sets */
} rx_node;

typedef struct rx_tree {
    rx_node *nodes;
    int n_nodes, cap_nodes;
    rx_set *sets;
    int n_sets, cap_sets;
    int root;
    int anchor_start, anchor_end; /* ^ (\A) began the pattern, $ (\Z) ended it */
    int top_alt;                  /* it has an alternation outside every group */
} rx_tree;

/* Parses pattern[0, len) into t (zeroed by the caller; rx_tree_free after, whatever the result);
 * flags: PM_REGEX_ECMA. */
int rx_parse(const char *pattern, size_t len, int flags, rx_tree *t, pm_err *e);
void rx_tree_free(rx_tree *t);

#endif
