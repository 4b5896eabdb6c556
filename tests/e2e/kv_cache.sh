#!/usr/bin/env bash
# kv_cache.sh — the opt-in bf16 KV cache from the command line on the tiny fixture model:
#  - generate and transcribe run with --kv-cache bf16 (and f32, the default) and produce their tokens;
#  - a long enough prompt on bf16 caches crosses a cache page and still completes;
#  - any other value is refused by name, on generate, transcribe and serve;
#  - serve names the cache's element type (start-up line, /health) and answers a completion on it;
#  - `parity --kv-cache bf16` reports the fixture cases' greedy agreement; info states the bytes.
# (Unit tests check the arithmetic: test_llm's test_kv_bf16 and test_decode_matches_prompt_path.)
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model

for t in f32 bf16; do
  if out=$("$BIN" generate -m "$M" -p "Hello there" -n 6 --kv-cache $t --stats 2>&1) && echo "$out" | grep -q '6 completion tokens'; then
    pass generate_kv_$t
  else fail generate_kv_$t "$out"; fi
done

long=$(printf 'word %.0s' $(seq 1 200)) # past one 128-position page
if out=$("$BIN" generate -m "$M" -p "$long" -n 4 --kv-cache bf16 --stats 2>&1) && echo "$out" | grep -q '4 completion tokens'; then
  pass generate_kv_bf16_long
else fail generate_kv_bf16_long "$out"; fi

wav="$FIX/phi4mm-tiny/inputs/clip_a_16k.wav"
if [ -f "$wav" ]; then
  if out=$("$BIN" transcribe -m "$M" -n 3 --kv-cache bf16 "$wav" 2>&1); then pass transcribe_kv_bf16
  else fail transcribe_kv_bf16 "$out"; fi
else fail transcribe_kv_bf16 "missing $wav"; fi

for c in "generate -m $M -p hi" "transcribe -m $M x.wav" "serve -m $M --port 0"; do
  name=$(echo "$c" | cut -d' ' -f1)
  out=$("$BIN" $c --kv-cache fp8 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && echo "$out" | grep -q "kv-cache must be f32 or bf16, got 'fp8'"; then pass ${name}_rejects_bad_kv_cache
  else fail ${name}_rejects_bad_kv_cache "rc=$rc: $out"; fi
done

start_server -m "$M" --kv-cache bf16
if grep -q 'ready in .*(bf16 cache)' "$tmp/srv.log" && grep -q '"kv_cache": *"bf16"' "$tmp/h.json"; then pass serve_kv_bf16_startup
else fail serve_kv_bf16_startup "$(cat "$tmp/srv.log") $(cat "$tmp/h.json" 2>/dev/null)"; fi
check_completion serve_kv_bf16_completion Hello 3
stop_server

# the fixture cases' greedy tokens on bf16 caches against the official ones: a report, not a parity check
if "$BIN" parity --fixtures "$FIX/phi4mm-tiny" --kv-cache bf16 >"$tmp/p.txt" 2>&1 &&
   grep -Eq '^bf16 KV greedy agreement: 5 cases, [0-9]+ identical; common prefix [0-9]+/60 tokens' "$tmp/p.txt" &&
   [ "$(grep -c '^KV16 ' "$tmp/p.txt")" = 5 ]; then
  pass parity_kv_bf16_agreement
else fail parity_kv_bf16_agreement "$(tail -3 "$tmp/p.txt")"; fi

# info states what a position costs in either element type (tiny model: 3 layers x 2 KV heads x 16)
if "$BIN" info -m "$M" 2>&1 | grep -q '^kv cache  *0.75 KiB per position fp32, 0.375 KiB bf16'; then pass info_kv_cache
else fail info_kv_cache "$("$BIN" info -m "$M" 2>&1 | grep kv)"; fi
