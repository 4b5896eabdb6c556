#!/usr/bin/env bash
# regex_diff.sh — differential test of the guided patterns' DFA (src/engine/regex.c) against
# Python's re and node's RegExp: builds tests/tools/regex_driver.c against $BUILD/libphi4mm.a and
# runs tests/e2e/regex_diff.py, which prints the PASS/FAIL lines.
set -u
. "$(dirname "$0")/common.bash"
build_driver regex_diff tests/tools/regex_driver.c "$tmp/driver" || exit 1
"$PY" tests/e2e/regex_diff.py "$tmp/driver"
