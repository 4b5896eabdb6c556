#!/usr/bin/env bash
# The yardstick can fail: `phi4mm parity` on copies of the fixture set with one thing wrong each
# must exit non-zero and name exactly that stage, while the untouched copy passes. Guards against a
# parity command that compares nothing, widens a tolerance, or passes a set it does not understand
# (it is run on fixture sets we do not have).
set -u
. "$(dirname "$0")/common.bash"
SRC=$FIX/phi4mm-tiny

# fresh_copy: $tmp/fx mirrors the fixture set with symbolic links (nothing is copied but what a
# case then rewrites: own_file replaces one link with a real copy).
fresh_copy() { rm -rf "$tmp/fx" && cp -rs "$SRC" "$tmp/fx"; }
own_file() { cp --remove-destination "$(readlink -f "$tmp/fx/$1")" "$tmp/fx/$1"; }
# numpy_edit FILE EXPR: rewrites the reference tensor FILE as EXPR of its array a.
numpy_edit() {
  own_file "$1"
  "$PY" -c 'import sys, numpy as np
a = np.load(sys.argv[1]); a = eval(sys.argv[2]); np.save(sys.argv[1], a)' "$tmp/fx/$1" "$2"
}
# expect NAME WANT_FAILS REGEX [PARITY_ARGS...]: runs parity on $tmp/fx; PASS NAME when it exits as
# WANT_FAILS says (0: status 0 and no FAIL line; N: non-zero and exactly N FAIL lines, every one
# matching REGEX). The cases are narrowed with --case where one case says it (the sanitizer build runs this too).
expect() {
  local name=$1 want=$2 re=$3
  shift 3
  "$BIN" parity --fixtures "$tmp/fx" "$@" >"$tmp/out" 2>&1
  local rc=$? n
  n=$(grep -c '^FAIL ' "$tmp/out")
  if [ "$want" -eq 0 ]; then
    if [ "$rc" -eq 0 ] && [ "$n" -eq 0 ] && grep -q ' passed, 0 failed$' "$tmp/out"; then pass "$name"
    else fail "$name" "rc=$rc, $n FAIL lines: $(grep -m2 '^FAIL ' "$tmp/out" | tr '\n' ' ')$(tail -1 "$tmp/out")"; fi
  elif [ "$rc" -ne 0 ] && [ "$n" -eq "$want" ] && [ "$(grep '^FAIL ' "$tmp/out" | grep -cE "$re")" -eq "$n" ]; then pass "$name"
  else fail "$name" "rc=$rc, $n FAIL lines (want $want matching '$re'): $(grep -m3 '^FAIL ' "$tmp/out" | tr '\n' ' ')"; fi
}

fresh_copy
expect "parity: an untouched copy of the fixture set passes" 0 ""

numpy_edit ref/cases/audio/enc/block1_out.npy 'a + np.where(np.arange(a.size).reshape(a.shape) == 100, 0.01, 0).astype(a.dtype)'
expect "parity: one Conformer block output off by 0.01 in one element fails that stage alone" 1 '^FAIL audio/enc/block1_out ' --case audio

fresh_copy
numpy_edit ref/cases/audio/enc/block1_out.npy 'a + np.float32(2e-4)'
expect "parity: the same stage off by 2e-4 everywhere (within its 1e-3) passes" 0 "" --case audio

fresh_copy
numpy_edit ref/cases/text/generated_ids.npy 'np.concatenate([a[:-1], a[-1:] + 1])'
expect "parity: a last greedy token changed fails generated_ids" 1 '^FAIL text/generated_ids ' --case text

fresh_copy
numpy_edit ref/cases/image/vit/avgpool_out.npy 'a[:-1]'
expect "parity: a reference of the wrong shape fails that stage with the shapes" 1 '^FAIL image/vit/avgpool_out .*(element count|shape)' --case image

fresh_copy
own_file ref/cases/text/logits_last.npy
truncate -s 1000 "$tmp/fx/ref/cases/text/logits_last.npy"
expect "parity: a truncated reference file fails that stage, no crash" 1 '^FAIL text/logits_last ' --case text

fresh_copy
cp "$SRC/ref/cases/text/final_norm_out.npy" "$tmp/fx/ref/cases/text/unknown_stage.npy"
expect "parity: a reference file no check compares is a failure, not a silent pass" 1 'unknown_stage.*not compared' --case text

fresh_copy
rm "$tmp/fx/inputs/clip_b_8k.wav"
"$BIN" parity --fixtures "$tmp/fx" --case audio2 --case text >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && grep -q '^FAIL audio2' "$tmp/out" && grep -q 'clip_b_8k' "$tmp/out" &&
   ! grep -q '^FAIL \(text\|image\)/' "$tmp/out"; then
  pass "parity: a missing input clip fails the cases that use it (named), the others still run"
else fail "parity: a missing input clip" "rc=$rc: $(grep -m3 'FAIL\|clip_b' "$tmp/out" | tr '\n' ' ')"; fi
