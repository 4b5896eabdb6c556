# common.bash — sourced by e2e scripts (not a test itself: tests/run_all.sh runs *.sh): the
# repository root as the working directory, the binary and the fixtures, a temporary folder removed
# at exit, and the PASS / FAIL lines that run_all.sh counts.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${PHI4MM_BIN:-$PWD/${BUILD:-build}/phi4mm}
FIX=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; }
