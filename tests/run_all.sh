#!/usr/bin/env bash
# Runs every test of phi4mm and ends with one line "N passed, M failed"; each test file's line
# gives its seconds (what a slow CI stage is made of).
#  - build/tests/test_*: cmocka unit tests (each test case counts);
#  - tests/e2e/*.sh: end-to-end scripts; each prints "PASS name" / "FAIL name" lines.
# Fixtures come from $PHI4MM_FIXTURES (default ../shared/fixtures).
# Test files run PHI4MM_TEST_JOBS at a time (default: the CPU count, at most 4): a single file keeps
# ~1.2 of 2 cores busy (process starts, model loads, servers waiting on clients), so two at once
# fill the machine. Each file has its own temporary directory and servers take free ports, so files
# do not meet; a file's line is printed when it ends, the totals once all have ended.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export PHI4MM_FIXTURES=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
export PHI4MM_BIN=${PHI4MM_BIN:-$PWD/$BUILD/phi4mm}
export BUILD
. scripts/parallel.bash
jobs_max=$(pm_jobs_max PHI4MM_TEST_JOBS)
log=$(mktemp -d)
# Two files at once on few cores: OpenMP's threads spinning at a barrier would take the other file's
# core (two test_engine runs together took 2 x as long as one after the other); waiting asleep, they
# take 1.1-1.2 x.
[ "$jobs_max" -gt 1 ] && export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# run_file KIND:NAME: runs one test file (unit: $BUILD/tests/NAME, e2e: tests/e2e/NAME.sh), writes
# "passed failed" to $log/NAME.count and prints its line (with the first failure lines when it failed).
run_file() {
  local kind=${1%%:*} name=${1#*:} t0=$SECONDS rc p f
  if [ "$kind" = unit ]; then CMOCKA_MESSAGE_OUTPUT=stdout "$BUILD/tests/$name" >"$log/$name.log" 2>&1
  else bash "tests/e2e/$name.sh" >"$log/$name.log" 2>&1; fi
  rc=$?
  if [ "$kind" = unit ]; then
    p=$(grep -Eo '\[  PASSED  \] [0-9]+' "$log/$name.log" | grep -Eo '[0-9]+$' | tail -1)
    f=$(grep -Eo '\[  FAILED  \] [0-9]+' "$log/$name.log" | grep -Eo '[0-9]+$' | tail -1)
    p=${p:-0}; f=${f:-0}
  else
    p=$(grep -c '^PASS ' "$log/$name.log")
    f=$(grep -c '^FAIL ' "$log/$name.log")
  fi
  local detail=""
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then  # crashed or exited badly without a summary
    f=1; detail=$(printf '    %s exited %s\n' "$name" "$rc"; tail -5 "$log/$name.log" | sed 's/^/    /')
  elif [ "$f" -ne 0 ] && [ "$kind" = unit ]; then
    detail=$(sed 's/^/    /' "$log/$name.log" | grep -E 'FAIL|ERROR|error|Assert|Sanitizer' | head -20)
  elif [ "$f" -ne 0 ]; then
    detail=$(grep '^FAIL ' "$log/$name.log" | head -20 | sed 's/^/    /')
  fi
  echo "$p $f" >"$log/$name.count"
  # one write, so that lines of files ending together do not interleave
  printf '%s%-5s %s: %s passed, %s failed (%s s)\n' "${detail:+$detail$'\n'}" "$kind" "$name" "$p" "$f" \
    "$((SECONDS - t0))"
}

all=()
for t in "$BUILD"/tests/test_*; do [ -x "$t" ] && all+=("unit:$(basename "$t")"); done
for s in tests/e2e/*.sh; do [ -f "$s" ] && all+=("e2e:$(basename "$s" .sh)"); done
# the files that take longest in CI first, then the rest in name order
pm_run_parallel "$jobs_max" run_file e2e:server_api e2e:bench e2e:lark_diff unit:test_engine e2e:parity_honest e2e:faults \
  e2e:perplexity -- "${all[@]}"

passed=0
failed=0
failures=()
for e in "${all[@]}"; do
  name=${e#*:}
  if [ -f "$log/$name.count" ]; then read -r p f <"$log/$name.count"; else p=0 f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -ne 0 ] && failures+=("$name")
done
[ ${#failures[@]} -gt 0 ] && echo "failing: ${failures[*]} (logs in $log)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
