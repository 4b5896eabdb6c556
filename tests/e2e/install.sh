#!/usr/bin/env bash
# install.sh — `make install` into a staging folder (DESTDIR) and a program built against it as a
# user would (examples/simple.c with `pkg-config --cflags --libs phi4mm`, the public header and the
# static library only): it runs the tiny fixture model and gives `phi4mm generate`'s text, for a
# text prompt and for an image with an audio clip (examples/batch.c: three prompts decoded together,
# each generate's answer alone); the installed binary reports the header's
# version; `make uninstall` leaves nothing behind.
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model
I=$FIX/phi4mm-tiny/inputs
B=${BUILD:-build}
stage=$tmp/stage
pre=/opt/phi4mm-test

if ! make --no-print-directory -s install BUILD="$B" PREFIX="$pre" DESTDIR="$stage" >"$tmp/install.log" 2>&1; then
  fail install_staged "$(tail -5 "$tmp/install.log")"
  exit 0
fi
ok=1
for f in bin/phi4mm lib/libphi4mm.a include/phi4mm.h lib/pkgconfig/phi4mm.pc; do [ -f "$stage$pre/$f" ] || ok=0; done
want=$(sed -n 's/^#define PM_VERSION "\(.*\)"/\1/p' include/phi4mm.h)
[ $ok = 1 ] && [ "$("$stage$pre/bin/phi4mm" --version)" = "phi4mm $want" ] &&
  grep -q "^Version: $want$" "$stage$pre/lib/pkgconfig/phi4mm.pc" && grep -q "^prefix=$pre$" "$stage$pre/lib/pkgconfig/phi4mm.pc" &&
  pass install_staged || fail install_staged "$(ls -R "$stage" | head -20)"

# the staged tree seen through pkg-config as if it were installed (the sysroot prefixes its paths)
flags=$(PKG_CONFIG_PATH="$stage$pre/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage" pkg-config --cflags --libs phi4mm 2>"$tmp/pc.err")
# shellcheck disable=SC2086 # the flag lists are words
if [ -z "$flags" ] || ! cc -O2 -std=c11 -Wall -Wextra -Werror ${EXTRA_CFLAGS:-} examples/simple.c $flags ${EXTRA_LDFLAGS:-} \
     -o "$tmp/simple" 2>"$tmp/cc.log"; then
  fail example_builds_against_install "$(cat "$tmp/pc.err") $(head -5 "$tmp/cc.log")"
  exit 0
fi
pass example_builds_against_install

check_same() { # name prompt media...
  local name=$1 prompt=$2; shift 2
  local got want args=()
  got=$("$tmp/simple" "$M" "$prompt" "$@" 2>"$tmp/ex.err")
  for f in "$@"; do case $f in *.wav) args+=(--audio "$f") ;; *) args+=(--image "$f") ;; esac; done
  want=$("$BIN" generate -m "$M" -n 64 -p "$prompt" "${args[@]}" 2>/dev/null)
  if [ -n "$got" ] && [ "$got" = "$want" ] && grep -q 'prompt tokens, 64 generated\|generated\]' "$tmp/ex.err"; then pass "$name"
  else fail "$name" "'$got' vs '$want' $(tail -2 "$tmp/ex.err")"; fi
}
check_same example_text_equals_generate "What is the capital of France?"
check_same example_image_audio_equals_generate "Answer the spoken question about the image." "$I/image.png" "$I/clip_a_16k.wav"
# examples/batch.c: three prompts decoded together, each the answer it gets alone
# shellcheck disable=SC2086
if cc -O2 -std=c11 -Wall -Wextra -Werror ${EXTRA_CFLAGS:-} examples/batch.c $flags ${EXTRA_LDFLAGS:-} -o "$tmp/batch" 2>"$tmp/cc.log"; then
  got=$("$tmp/batch" "$M" "What is the capital of France?" "Name three colours." "Hello" 2>"$tmp/ex.err"; echo "rc=$?")
  want=$(for p in "What is the capital of France?" "Name three colours." "Hello"; do "$BIN" generate -m "$M" -n 32 -p "$p" 2>/dev/null; done; echo "rc=0")
  [ "$got" = "$want" ] && pass example_batch_each_its_solo_answer || fail example_batch_each_its_solo_answer "'$got' vs '$want' $(tail -2 "$tmp/ex.err")"
else fail example_batch_each_its_solo_answer "$(head -5 "$tmp/cc.log")"; fi
"$tmp/simple" "$M" x "$tmp/none.png" >/dev/null 2>"$tmp/ex.err" && fail example_missing_file_refused ||
  { grep -q 'none.png' "$tmp/ex.err" && pass example_missing_file_refused || fail example_missing_file_refused "$(cat "$tmp/ex.err")"; }

make --no-print-directory -s uninstall PREFIX="$pre" DESTDIR="$stage" >/dev/null 2>&1
left=$(find "$stage" -type f | wc -l)
[ "$left" = 0 ] && pass uninstall_removes_everything || fail uninstall_removes_everything "$left files left"
