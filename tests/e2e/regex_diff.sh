#!/usr/bin/env bash
# regex_diff.sh — differential test of the guided patterns' DFA (src/engine/regex.c) against
# Python's re: builds tests/tools/regex_driver.c against $BUILD/libphi4mm.a and runs
# tests/e2e/regex_diff.py, which prints the PASS/FAIL lines.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
lib=$BUILD/libphi4mm.a
if [ ! -f "$lib" ]; then
  echo "FAIL regex_diff ($lib is missing: run make first)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs=$(pkg-config --libs sndfile libavformat libavcodec libavutil jansson openblas libpcre2-8 libmicrohttpd libpng libjpeg libwebp 2>/dev/null)
if ! cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Iinclude -Isrc ${EXTRA_CFLAGS:-} tests/tools/regex_driver.c "$lib" $libs -fopenmp -lm -lpthread ${EXTRA_LDFLAGS:-} \
     -o "$tmp/driver" 2>"$tmp/cc.log"; then
  echo "FAIL regex_diff (the driver does not build:)"
  head -20 "$tmp/cc.log"
  exit 1
fi
"$PY" tests/e2e/regex_diff.py "$tmp/driver"
