# common.bash — sourced by e2e scripts (not a test itself: tests/run_all.sh runs *.sh): the
# repository root as the working directory, the binary and the fixtures, a temporary folder removed
# at exit, and the PASS / FAIL lines that run_all.sh counts.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${PHI4MM_BIN:-$PWD/${BUILD:-build}/phi4mm}
FIX=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
PY=/usr/bin/python3
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; }

# build_driver NAME SRC OUT: a test driver (tests/tools/*.c) against $BUILD/libphi4mm.a, with an
# ASan build's flags (EXTRA_CFLAGS / EXTRA_LDFLAGS); FAIL NAME with the compiler's first lines
# when it does not build.
build_driver() {
  local lib=${BUILD:-build}/libphi4mm.a libs
  if [ ! -f "$lib" ]; then
    fail "$1" "$lib is missing: run make first"
    return 1
  fi
  # libav* and libsndfile are opened at run time (src/audio/av_lib.h, sf_lib.h), not linked, as in the
  # binary; the library has no HTTP
  libs="$(pkg-config --libs jansson openblas libpcre2-8 libpng libjpeg libwebp 2>/dev/null) -ldl"
  # shellcheck disable=SC2086 # the flag lists are words
  if ! cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Iinclude -Isrc ${EXTRA_CFLAGS:-} "$2" "$lib" $libs -fopenmp -lm -lpthread ${EXTRA_LDFLAGS:-} \
       -o "$3" 2>"$tmp/cc.log"; then
    fail "$1" "the driver does not build: $(head -5 "$tmp/cc.log")"
    return 1
  fi
}

# Starts `phi4mm serve` with the given options on a free port of 127.0.0.1 (its output in
# $tmp/srv.log) and waits up to 30 s for /health: srv is its pid, port the port (empty if it never
# answered), $tmp/h.json the answer. stop_server ends it.
start_server() {
  rm -f "$tmp/port" "$tmp/h.json"
  "$BIN" serve --host 127.0.0.1 --port 0 --port-file "$tmp/port" "$@" >"$tmp/srv.log" 2>&1 &
  srv=$!
  port=
  for _ in $(seq 1 300); do
    [ -s "$tmp/port" ] && port=$(cat "$tmp/port") && curl -sf "http://127.0.0.1:$port/health" >"$tmp/h.json" 2>/dev/null && return 0
    sleep 0.1
  done
  port=
}
# check_completion NAME CONTENT N: a chat completion of CONTENT with max_tokens N to the server
# start_server started; PASS NAME when it comes back with N completion tokens.
check_completion() {
  local body="{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":$3}"
  if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" |
     grep -q "\"completion_tokens\": *$3"; then pass "$1"
  else fail "$1" "port=${port:-none} $(tail -2 "$tmp/srv.log")"; fi
}
stop_server() {
  [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
  srv=
}
