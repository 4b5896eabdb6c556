#!/usr/bin/env bash
# make soak SOAK_SECONDS=N: phi4mm serve on the tiny fixture model (loopback, random port, small
# queue so bursts overflow, a small response store) under tests/load/soak.py; stops by itself. SOAK_SERVE_ARGS: more serve
# options (e.g. "--kv-cache bf16").
set -u
BIN=${1:-build/phi4mm}
SECS=${SOAK_SECONDS:-60}
FX=${PHI4MM_FIXTURES:-../shared/fixtures}/phi4mm-tiny
PORT=$((20000 + RANDOM % 20000))
LOG=$(mktemp)
# shellcheck disable=SC2086 # SOAK_SERVE_ARGS is a list of options
# --response-store 4M: the kept responses (each holds its request's image) fill the store within
# seconds, so the soak churns its evictions and the RSS check sees a full store from the warm mark
# on (the default 64M would still be filling at the end: +25 MB in 60 s, a bounded cache, not a leak)
"$BIN" serve -m "$FX/tiny_model" --port "$PORT" --parallel 8 --max-queue 16 --response-store 4M --allow-media-hosts 127.0.0.1 \
  ${SOAK_SERVE_ARGS:-} >"$LOG" 2>&1 &
PID=$!
echo "soak: serve options: ${SOAK_SERVE_ARGS:-(none)}"
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
/usr/bin/python3 tests/load/soak.py --port "$PORT" --pid "$PID" --inputs "$FX/inputs" --model "$FX/tiny_model" --seconds "$SECS"
rc=$?
grep -Ei "sanitizer|segv|abort" "$LOG" | head -5
exit $rc
