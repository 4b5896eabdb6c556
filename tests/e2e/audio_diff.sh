#!/usr/bin/env bash
# audio_diff.sh — differential test of the audio front-end against Debian's python3-scipy and
# python3-numpy (issue 4, item 8): builds tests/tools/audio_diff_driver.c against $BUILD/libphi4mm.a
# and runs tests/e2e/audio_diff.py, then tests/e2e/audio_containers.py (MP4 / WebM audio against the
# WAV path and the ffmpeg CLI), which print the PASS/FAIL lines.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
if ! "$PY" -c 'import numpy, scipy.signal' 2>/dev/null; then
  echo "FAIL audio_diff (needs python3-numpy and python3-scipy: make test-deps)"
  exit 1
fi
lib=$BUILD/libphi4mm.a
if [ ! -f "$lib" ]; then
  echo "FAIL audio_diff ($lib is missing: run make first)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs=$(pkg-config --libs sndfile libavformat libavcodec libavutil jansson openblas libpcre2-8 libmicrohttpd libpng libjpeg libwebp 2>/dev/null ||
  pkg-config --libs sndfile libavformat libavcodec libavutil)
if ! cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Iinclude -Isrc ${EXTRA_CFLAGS:-} tests/tools/audio_diff_driver.c "$lib" $libs -fopenmp -lm -lpthread ${EXTRA_LDFLAGS:-} \
     -o "$tmp/driver" 2>"$tmp/cc.log"; then
  echo "FAIL audio_diff (the driver does not build:)"
  head -20 "$tmp/cc.log"
  exit 1
fi
"$PY" tests/e2e/audio_diff.py "$tmp/driver" "$tmp"
rc=$?
# MP4 / M4A and WebM / Matroska (src/audio/wave_av.c) against the WAV path and the ffmpeg CLI
inputs=${PHI4MM_FIXTURES:-../shared/fixtures}/phi4mm-tiny/inputs
if ! command -v ffmpeg >/dev/null || ! command -v ffprobe >/dev/null; then
  echo "FAIL audio_containers (needs the ffmpeg CLI to make the test files: make test-deps)"
  exit 1
fi
mkdir -p "$tmp/containers"
"$PY" tests/e2e/audio_containers.py "$tmp/driver" "$tmp/containers" "$inputs" || rc=1
exit $rc
