#!/usr/bin/env bash
# q8.sh — the opt-in int8 weights from the command line on the tiny fixture model:
#  - `parity --weights q8` runs every fixture case's greedy decode on int8 weights and reports the
#    agreement with the official tokens (a summary with 5 cases), exit 0;
#  - `q8check` decodes synthetic prompts on both loads and reports match rates; the first token of
#    most prompts agrees (the tiny random model has small logit margins, so later tokens drift);
#  - generate/transcribe/info/serve accept --weights q8, and any other value is refused by name;
#  - the default (bf16) parity is untouched by the option's existence (checked by parity.sh).
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model

if "$BIN" parity --fixtures "$FIX/phi4mm-tiny" --weights q8 >"$tmp/p.txt" 2>&1 &&
   grep -Eq '^q8 greedy agreement: 5 cases, [0-9]+ identical; common prefix [0-9]+/60 tokens' "$tmp/p.txt" &&
   [ "$(grep -c '^Q8 ' "$tmp/p.txt")" = 5 ]; then
  pass q8_parity_agreement
else fail q8_parity_agreement "$(tail -3 "$tmp/p.txt")"; fi

if "$BIN" q8check -m "$M" --prompts 24 --tokens 6 --batch 8 >"$tmp/q.txt" 2>"$tmp/qe.txt"; then
  first=$(sed -n 's/^  first token equal *\([0-9]*\)\/24.*/\1/p' "$tmp/q.txt")
  if [ -n "$first" ] && [ "$first" -ge 12 ] && grep -q 'common prefix' "$tmp/q.txt"; then pass q8check_runs
  else fail q8check_runs "first-token agreement ${first:-?}/24: $(cat "$tmp/q.txt")"; fi
else fail q8check_runs "$(tail -2 "$tmp/qe.txt")"; fi

if out=$("$BIN" generate -m "$M" -p "Hello" -n 4 --weights q8 --stats 2>&1) && echo "$out" | grep -q '4 completion tokens'; then
  pass q8_generate
else fail q8_generate "$out"; fi
if "$BIN" info -m "$M" --weights q8 2>&1 | grep -q '^weights  *q8: '; then pass q8_info; else fail q8_info; fi

for c in "generate -m $M -p hi" "transcribe -m $M x.wav" "info -m $M" "serve -m $M --port 0" "parity --fixtures $FIX/phi4mm-tiny"; do
  name=$(echo "$c" | cut -d' ' -f1)
  out=$("$BIN" $c --weights int4 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && echo "$out" | grep -q "weights must be bf16 or q8, got 'int4'"; then pass "q8_bad_value_$name"
  else fail "q8_bad_value_$name" "rc=$rc $out"; fi
done

start_server -m "$M" --quiet --weights q8
body='{"model":"m","messages":[{"role":"user","content":"Hello"}],"max_tokens":3}'
if [ -n "$port" ] && grep -q '"weights": *"q8"' "$tmp/h.json" &&
   curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" | grep -q '"completion_tokens": *3'; then
  pass q8_serve
else fail q8_serve "port=${port:-none} health=$(cat "$tmp/h.json" 2>/dev/null) $(tail -2 "$tmp/srv.log")"; fi
