#!/usr/bin/env bash
# image_diff.sh — differential tests of the image front-end (decode, Pillow bilinear resize,
# PyTorch bicubic global view, crop grid, whole dynamic-HD preprocessing) against Debian's
# python3-pil and python3-torch. Compiles tests/e2e/image_driver.c against $BUILD/libphi4mm.a and
# runs tests/e2e/image_oracle.py; prints PASS/FAIL lines.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
lib="$BUILD/libphi4mm.a"
if [ ! -f "$lib" ]; then echo "FAIL image_diff ($lib not built; run make)"; exit 1; fi
if ! "$PY" -c 'import numpy, PIL, torch' 2>/dev/null; then
  echo "FAIL image_diff (needs Debian's python3-numpy python3-pil python3-torch: make test-deps)"; exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2046
if ! ${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Isrc ${EXTRA_CFLAGS:-} $(pkg-config --cflags libpng libjpeg libwebp libgif) \
     -o "$work/image_driver" tests/e2e/image_driver.c "$lib" \
     $(pkg-config --libs libpng libjpeg libwebp libgif) -lm -fopenmp ${EXTRA_LDFLAGS:-} 2>"$work/cc.log"; then
  echo "FAIL image_diff (driver does not build)"; sed 's/^/    /' "$work/cc.log" | head -20; exit 1
fi
TMPDIR="$work" "$PY" tests/e2e/image_oracle.py "$work/image_driver"
