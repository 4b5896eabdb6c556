#!/usr/bin/env bash
# audio_diff.sh — differential test of the audio front-end against Debian's python3-scipy and
# python3-numpy (issue 4, item 8): builds tests/tools/audio_diff_driver.c against $BUILD/libphi4mm.a
# and runs tests/e2e/audio_diff.py, then tests/e2e/audio_containers.py (MP4 / WebM audio against the
# WAV path and the ffmpeg CLI), which print the PASS/FAIL lines.
set -u
. "$(dirname "$0")/common.bash"
if ! "$PY" -c 'import numpy, scipy.signal' 2>/dev/null; then
  echo "FAIL audio_diff (needs python3-numpy and python3-scipy: make test-deps)"
  exit 1
fi
build_driver audio_diff tests/tools/audio_diff_driver.c "$tmp/driver" || exit 1
"$PY" tests/e2e/audio_diff.py "$tmp/driver" "$tmp"
rc=$?
# MP4 / M4A and WebM / Matroska (src/audio/wave_av.c) against the WAV path and the ffmpeg CLI
inputs=$FIX/phi4mm-tiny/inputs
if ! command -v ffmpeg >/dev/null || ! command -v ffprobe >/dev/null; then
  echo "FAIL audio_containers (needs the ffmpeg CLI to make the test files: make test-deps)"
  exit 1
fi
mkdir -p "$tmp/containers"
"$PY" tests/e2e/audio_containers.py "$tmp/driver" "$tmp/containers" "$inputs" || rc=1
exit $rc
