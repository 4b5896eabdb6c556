#!/usr/bin/env bash
# run.sh — runs every fuzz target for a time budget and prints one line per target:
#   "fuzz <target>: <execs> execs in <s> s (cap <cap> s), <n> corpus units, OK|CRASH (artifact)".
# Each target fuzzes its corpus directory fuzz/corpus/<target>/ (seeded by make_corpus.sh; new
# interesting inputs are added there) and writes crash/timeout/leak inputs to BUILD_DIR/artifacts/.
# Cumulative executions per target are appended to BUILD_DIR/fuzz-execs.tsv. Exits 1 if any target
# found something.
#   usage: fuzz/run.sh BUILD_DIR SECONDS [target...]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:?usage: fuzz/run.sh BUILD_DIR SECONDS [target...]}
SECS=${2:?seconds per target}
shift 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.c; do t=$(basename "$f" .c); targets+=("${t#fuzz_}"); done
fi
export PHI4MM_FIXTURES=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0}
export OMP_NUM_THREADS=1
mkdir -p "$BUILD_DIR/artifacts" "$BUILD_DIR/logs"
# Targets run FUZZ_JOBS at a time (default: the CPU count, at most 4); each is one thread.
. scripts/parallel.bash
jobs_max=$(pm_jobs_max FUZZ_JOBS)

# fuzz_one TARGET: fuzzes one target, prints its line, leaves "execs ok" in logs/TARGET.result.
fuzz_one() {
  local t=$1 t0=$SECONDS bin="$BUILD_DIR/fuzz/fuzz_$1" maxlen budget log rc execs units art
  log="$BUILD_DIR/logs/$t.log"
  rm -f "$BUILD_DIR/logs/$t.result"
  [ -x "$bin" ] || { echo "fuzz $t: not built ($bin)"; echo "0 0" >"$BUILD_DIR/logs/$t.result"; return; }
  mkdir -p "fuzz/corpus/$t"
  # Per-target input cap: media targets get room for real files, parsers stay small and fast.
  case $t in
    wave) maxlen=65536 ;; image) maxlen=131072 ;; tok_load) maxlen=65536 ;; safetensors) maxlen=16384 ;; *) maxlen=8192 ;;
  esac
  # FUZZ_RUNS (CI): a fixed number of inputs from a fixed seed, so a CI verdict is reproducible;
  # otherwise a time budget. The time cap still bounds a slow target.
  if [ -n "${FUZZ_RUNS:-}" ]; then budget=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}" -max_total_time="$SECS")
  else budget=(-max_total_time="$SECS"); fi
  "$bin" "${budget[@]}" -max_len=$maxlen -timeout=20 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="$BUILD_DIR/artifacts/$t-" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  execs=${execs:-0}
  units=$(ls "fuzz/corpus/$t" | wc -l)
  printf '%s\t%s\t%s\n' "$(date +%s)" "$t" "$execs" >>"$BUILD_DIR/fuzz-execs.tsv"
  if [ $rc -eq 0 ]; then
    echo "fuzz $t: $execs execs in $((SECONDS - t0)) s (cap ${SECS} s), $units corpus units, OK"
    echo "$execs 1" >"$BUILD_DIR/logs/$t.result"
  else
    art=$(grep -Eo 'Test unit written to [^ ]+' "$log" | tail -1 | sed 's/Test unit written to //')
    # one write, so that the lines of targets ending together do not interleave
    printf 'fuzz %s: %s execs, CRASH (rc=%s) %s\n%s\n' "$t" "$execs" "$rc" "${art:-see $log}" \
      "$(grep -E 'ERROR: |FUZZ_CHECK|runtime error|SUMMARY' "$log" | head -5 | sed 's/^/    /')"
    echo "$execs 0" >"$BUILD_DIR/logs/$t.result"
  fi
}

# the slowest targets first (wave may reach its time cap in CI), so that the rest fill the other cores
pm_run_parallel "$jobs_max" fuzz_one wave regex grammar tok_encode -- "${targets[@]}"
bad=0
total=0
for t in "${targets[@]}"; do
  if [ -f "$BUILD_DIR/logs/$t.result" ]; then read -r execs ok <"$BUILD_DIR/logs/$t.result"; else execs=0 ok=0; fi
  total=$((total + execs))
  [ "$ok" = 1 ] || bad=1
done
echo "fuzz: $total execs in all"
exit $bad
