#!/usr/bin/env bash
# The yardstick: every case of the shared fixture set through `phi4mm parity` (PASS/FAIL lines
# are counted by tests/run_all.sh; the exit status must be 0).
set -u
BIN=${PHI4MM_BIN:-build/phi4mm}
FX=${PHI4MM_FIXTURES:-../shared/fixtures}/phi4mm-tiny
"$BIN" parity --fixtures "$FX"
