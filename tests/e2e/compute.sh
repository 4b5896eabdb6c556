#!/usr/bin/env bash
# compute.sh — the opt-in bf16 products (--compute bf16) from the command line on the tiny fixture
# model:
#  - generate and transcribe run with --compute bf16 (and f32, the default) and produce their tokens;
#  - any other value is refused by name, on generate, transcribe, serve and parity;
#  - serve and info say whether the products are bf16 (start-up line, /health "compute"), which is
#    exactly where the CPU has AVX512-BF16 (else a note says it stays fp32), and serve answers;
#  - `parity --compute bf16` reports the fixture cases' greedy agreement.
# (Unit tests check the arithmetic: test_kernels' test_gemm_dot, test_engine's test_compute_bf16.)
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model
if grep -qw avx512_bf16 /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then want=bf16; else want=fp32; fi

long=$(printf 'word %.0s' $(seq 1 60)) # past the 40 rows the GEMV keeps
for t in f32 bf16; do
  if out=$("$BIN" generate -m "$M" -p "$long" -n 6 --compute $t --stats 2>&1) && echo "$out" | grep -q '6 completion tokens'; then
    pass generate_compute_$t
  else fail generate_compute_$t "$out"; fi
done
out=$("$BIN" generate -m "$M" -p hi -n 1 --compute bf16 2>&1)
if [ $want = bf16 ] && ! echo "$out" | grep -q 'needs AVX512-BF16'; then pass compute_note
elif [ $want = fp32 ] && echo "$out" | grep -q 'needs AVX512-BF16, which this CPU lacks'; then pass compute_note
else fail compute_note "$out"; fi

wav="$FIX/phi4mm-tiny/inputs/clip_a_16k.wav"
if [ -f "$wav" ]; then
  if out=$("$BIN" transcribe -m "$M" -n 3 --compute bf16 "$wav" 2>&1); then pass transcribe_compute_bf16
  else fail transcribe_compute_bf16 "$out"; fi
else fail transcribe_compute_bf16 "missing $wav"; fi

for c in "generate -m $M -p hi" "transcribe -m $M x.wav" "serve -m $M --port 0" "parity --fixtures $FIX/phi4mm-tiny"; do
  name=$(echo "$c" | cut -d' ' -f1)
  out=$("$BIN" $c --compute fp16 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && echo "$out" | grep -q "compute must be f32 or bf16, got 'fp16'"; then pass ${name}_rejects_bad_compute
  else fail ${name}_rejects_bad_compute "rc=$rc: $out"; fi
done

start_server -m "$M" --compute bf16
if grep -q "ready in .* $want products" "$tmp/srv.log" && grep -q "\"compute\": *\"$want\"" "$tmp/h.json"; then pass serve_compute_startup
else fail serve_compute_startup "$(cat "$tmp/srv.log") $(cat "$tmp/h.json" 2>/dev/null)"; fi
check_completion serve_compute_completion "$long" 3
stop_server
start_server -m "$M"
if grep -q '"compute": *"fp32"' "$tmp/h.json"; then pass serve_compute_default_fp32
else fail serve_compute_default_fp32 "$(cat "$tmp/h.json" 2>/dev/null)"; fi
stop_server

# the fixture cases' greedy tokens with bf16 products against the official ones: a report, not a parity check
if "$BIN" parity --fixtures "$FIX/phi4mm-tiny" --compute bf16 >"$tmp/p.txt" 2>&1 &&
   grep -Eq '^bf16 products greedy agreement: 5 cases, [0-9]+ identical; common prefix [0-9]+/60 tokens' "$tmp/p.txt" &&
   [ "$(grep -c '^BF16 ' "$tmp/p.txt")" = 5 ]; then
  pass parity_compute_bf16_agreement
else fail parity_compute_bf16_agreement "$(tail -3 "$tmp/p.txt")"; fi

if "$BIN" info -m "$M" 2>&1 | grep -q "^products  *fp32; bf16 with --compute bf16: $([ $want = bf16 ] && echo available || echo 'not on this CPU')"; then
  pass info_compute
else fail info_compute "$("$BIN" info -m "$M" 2>&1 | grep products)"; fi
