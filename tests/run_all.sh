#!/usr/bin/env bash
# Runs every test of phi4mm and ends with one line "N passed, M failed"; each test file's line
# gives its seconds (what a slow CI stage is made of).
#  - build/tests/test_*: cmocka unit tests (each test case counts);
#  - tests/e2e/*.sh: end-to-end scripts; each prints "PASS name" / "FAIL name" lines.
# Fixtures come from $PHI4MM_FIXTURES (default ../shared/fixtures).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export PHI4MM_FIXTURES=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
export PHI4MM_BIN=${PHI4MM_BIN:-$PWD/$BUILD/phi4mm}
export BUILD
passed=0
failed=0
failures=()
log=$(mktemp -d)
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  t0=$SECONDS
  CMOCKA_MESSAGE_OUTPUT=stdout "$t" >"$log/$name.log" 2>&1
  rc=$?
  p=$(grep -Eo '\[  PASSED  \] [0-9]+' "$log/$name.log" | grep -Eo '[0-9]+$' | tail -1)
  f=$(grep -Eo '\[  FAILED  \] [0-9]+' "$log/$name.log" | grep -Eo '[0-9]+$' | tail -1)
  p=${p:-0}; f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # crashed or exited badly without a summary
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$f" -ne 0 ]; then failures+=("$name"); sed 's/^/    /' "$log/$name.log" | grep -E 'FAIL|ERROR|error|Assert|Sanitizer' | head -20; fi
  echo "unit  $name: $p passed, $f failed ($((SECONDS - t0)) s)"
done
for s in tests/e2e/*.sh; do
  [ -f "$s" ] || continue
  name=$(basename "$s" .sh)
  t0=$SECONDS
  bash "$s" >"$log/$name.log" 2>&1
  rc=$?
  p=$(grep -c '^PASS ' "$log/$name.log")
  f=$(grep -c '^FAIL ' "$log/$name.log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "    $name exited $rc"; tail -5 "$log/$name.log" | sed 's/^/    /'; fi
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$f" -ne 0 ]; then failures+=("$name"); grep '^FAIL ' "$log/$name.log" | head -20 | sed 's/^/    /'; fi
  echo "e2e   $name: $p passed, $f failed ($((SECONDS - t0)) s)"
done
[ ${#failures[@]} -gt 0 ] && echo "failing: ${failures[*]} (logs in $log)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
