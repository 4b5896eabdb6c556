#!/usr/bin/env bash
# lark_diff.sh — differential test of Lark grammars (src/engine/grammar_lark.c) against python3-lark's
# Earley parser: builds tests/tools/grammar_driver.c against $BUILD/libphi4mm.a and runs
# tests/e2e/lark_diff.py, which prints the PASS/FAIL lines.
set -u
. "$(dirname "$0")/common.bash"
if ! "$PY" -c 'import lark' 2>/dev/null; then
  fail lark_diff "python3-lark is missing (make test-deps installs it)"
  exit 1
fi
build_driver lark_diff tests/tools/grammar_driver.c "$tmp/driver" || exit 1
"$PY" tests/e2e/lark_diff.py "$tmp/driver"
