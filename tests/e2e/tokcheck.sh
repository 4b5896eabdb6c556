#!/usr/bin/env bash
# tokcheck.sh — runs the shared tokenizer vectors (encode / decode / chat records) through `phi4mm tokcheck` against
# the fixture checkpoint's tokenizer.json. One PASS/FAIL line per vector file; the vectors live in
# $PHI4MM_FIXTURES/../tokenizer (shared/tokenizer beside shared/fixtures).
set -u
cd "$(dirname "$0")/../.."
FIX=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
BIN=${PHI4MM_BIN:-$PWD/${BUILD:-build}/phi4mm}
MODEL="$FIX/phi4mm-tiny/tiny_model"
VEC="$FIX/../tokenizer"
if [ ! -x "$BIN" ]; then echo "FAIL tokcheck (no binary at $BIN)"; exit 1; fi
if [ ! -f "$MODEL/tokenizer.json" ]; then echo "FAIL tokcheck (no tokenizer at $MODEL)"; exit 1; fi
shopt -s nullglob
files=("$VEC"/*.jsonl)
if [ ${#files[@]} -eq 0 ]; then echo "FAIL tokcheck (no vector files in $VEC)"; exit 1; fi
total_fail=0
for f in "${files[@]}"; do
  name=$(basename "$f" .jsonl)
  out=$("$BIN" tokcheck -m "$MODEL" "$f" 2>&1)
  rc=$?
  summary=$(printf '%s\n' "$out" | tail -1)
  if [ $rc -eq 0 ] && printf '%s\n' "$summary" | grep -Eq '^[1-9][0-9]* passed, 0 failed$'; then
    echo "PASS tokcheck_$name ($summary)"
  else
    printf '%s\n' "$out" | head -20 | sed 's/^/    /'
    echo "FAIL tokcheck_$name ($summary)"
    total_fail=1
  fi
done
exit $total_fail
