#!/usr/bin/env bash
# server_api.sh — end-to-end test of `phi4mm serve` (issue 6) on the tiny fixture model.
# Starts three servers on free loopback ports (--port 0 + --port-file), always stopped by the trap:
#   A: --api-key, 16 parallel sequences, --allow-media-dir <fixture inputs>, image URLs of 127.0.0.1
#   B: 1 parallel sequence, queue of 1, 1 MiB body cap (overload and body-cap checks), no response store,
#      one HTTP thread (free while a slow image URL is fetched), image URLs of 127.0.0.1 within 4 s
#   C: 4 parallel sequences, a 3 MiB KV budget (requests refused, kept waiting, then served) and 2 MiB
#      for decoded media (a long clip refused, a short one served); --recache (its log line checked)
#   D: --prefill-chunk 2 (a long prompt keeps the prompt thread busy): a short text request goes past it;
#      image URLs of any public host ('*': 127.0.0.1 and localhost refused)
#   E: HTTPS (--tls-cert / --tls-key, a self-signed certificate made with openssl): A's answer over TLS
# then runs tests/e2e/server_api.py (raw HTTP, stdlib Python), the official `openai` npm client
# (tests/node; installed with `npm ci` into tests/node/node_modules when absent, bounded by a
# timeout), and a graceful-shutdown check. Prints PASS/FAIL lines.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BIN=${PHI4MM_BIN:-$PWD/$BUILD/phi4mm}
FIX=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}/phi4mm-tiny
PY=/usr/bin/python3
# Spinning OpenMP workers steal the few cores from the HTTP threads and test clients; passive
# waiting changes no result (same thread count, same arithmetic).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

fail() { echo "FAIL server_api ($*)"; exit 1; }
[ -x "$BIN" ] || fail "$BIN is missing: run make first"
[ -f "$FIX/tiny_model/config.json" ] || fail "fixtures not found at $FIX (set PHI4MM_FIXTURES)"
[ -x "$PY" ] || fail "$PY is missing"
command -v curl >/dev/null || fail "curl is missing: make test-deps"

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

KEY="test-key-$$"
start() { # name, extra args...
  local name=$1; shift
  "$BIN" serve -m "$FIX/tiny_model" --host 127.0.0.1 --port 0 --port-file "$tmp/$name.port" --quiet "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
}
# SIGTERM to a server, then up to 10 s for it to exit: stopped=1 when it did, src its status.
term_wait() {
  kill -TERM "$1" 2>/dev/null
  stopped=0
  for i in $(seq 1 100); do
    if ! kill -0 "$1" 2>/dev/null; then wait "$1"; src=$?; stopped=1; return; fi
    sleep 0.1
  done
}

wait_ready() { # name -> prints the port
  local name=$1 i port
  for i in $(seq 1 300); do
    if [ -s "$tmp/$name.port" ]; then
      port=$(cat "$tmp/$name.port")
      if curl -sf -m 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1; then echo "$port"; return 0; fi
    fi
    sleep 0.1
  done
  return 1
}

start a --api-key "$KEY" --parallel 16 --max-queue 64 --default-max-tokens 64 --allow-media-dir "$FIX/inputs" --allow-media-hosts 127.0.0.1
start b --parallel 1 --max-queue 1 --max-body 1M --default-max-tokens 64 --prompt-threads inline --response-store off --http-threads 1 \
  --allow-media-hosts 127.0.0.1 --media-fetch-timeout 4
start c --parallel 4 --max-queue 4 --kv-budget 3M --max-request-memory 2M --default-max-tokens 64 --recache
start d --parallel 4 --max-queue 4 --prefill-chunk 2 --default-max-tokens 64 --draft 4 --allow-media-hosts '*'
# E: HTTPS with a self-signed certificate for 127.0.0.1 (checked after the Python checks)
tls_ok=0
if command -v openssl >/dev/null && openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/tls.key" -out "$tmp/tls.crt" -days 2 \
     -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" >/dev/null 2>&1; then
  tls_ok=1
  start e --parallel 2 --default-max-tokens 8 --api-key "$KEY" --tls-cert "$tmp/tls.crt" --tls-key "$tmp/tls.key"
fi
PA=$(wait_ready a) || { tail -5 "$tmp/a.log"; fail "server A did not become ready in 30 s"; }
PB=$(wait_ready b) || { tail -5 "$tmp/b.log"; fail "server B did not become ready in 30 s"; }
PC=$(wait_ready c) || { tail -5 "$tmp/c.log"; fail "server C did not become ready in 30 s"; }
PD=$(wait_ready d) || { tail -5 "$tmp/d.log"; fail "server D did not become ready in 30 s"; }
echo "servers: A on 127.0.0.1:$PA, B on 127.0.0.1:$PB, C on 127.0.0.1:$PC, D on 127.0.0.1:$PD"

timeout 600 "$PY" tests/e2e/server_api.py --a "127.0.0.1:$PA" --b "127.0.0.1:$PB" --c "127.0.0.1:$PC" --d "127.0.0.1:$PD" --key "$KEY" --bin "$BIN" \
  --model "$FIX/tiny_model" --inputs "$FIX/inputs" --expected "$tmp/expected.json"
rc=$?
[ $rc -eq 124 ] && echo "FAIL server_api.py (timed out)"
if grep -Eq "^phi4mm serve: re-read [0-9.]+ GB of checkpoint, [0-9.]+ GB of it in 2 MB pages" "$tmp/c.log"; then
  echo "PASS serve --recache (server C re-read its checkpoint before loading and said so)"
else
  echo "FAIL serve --recache (no re-read line in server C's log: $(head -c 300 "$tmp/c.log"))"
fi

# The official openai client (tests/node pins the version; node_modules is git-ignored).
NODE_DIR=tests/node
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "FAIL openai-node (node/npm missing: make test-deps)"
elif [ ! -f "$tmp/expected.json" ]; then
  echo "FAIL openai-node (no reference outputs: server_api.py did not finish)"
else
  if [ ! -d "$NODE_DIR/node_modules/openai" ]; then
    echo "installing the openai npm client into $NODE_DIR/node_modules"
    if ! timeout 300 npm ci --prefix "$NODE_DIR" --no-audit --no-fund >"$tmp/npm.log" 2>&1; then
      echo "FAIL openai-node (npm ci failed or timed out; offline? last lines: $(tail -3 "$tmp/npm.log" | tr '\n' ' '))"
    fi
  fi
  if [ -d "$NODE_DIR/node_modules/openai" ]; then
    timeout 300 node "$NODE_DIR/openai_client.mjs" "http://127.0.0.1:$PA" "$KEY" "$tmp/expected.json" \
      "$FIX/inputs/clip_a_16k.wav" "$tmp/openai_session.txt"
    nrc=$?
    [ $nrc -eq 124 ] && echo "FAIL openai-node (timed out)"
    if [ -n "${SERVER_TRANSCRIPT:-}" ] && [ -f "$tmp/openai_session.txt" ]; then cp "$tmp/openai_session.txt" "$SERVER_TRANSCRIPT"; fi
  fi
fi

# HTTPS (server E): a chat completion over TLS answers as server A does over plain HTTP; plain HTTP
# to the TLS port gets no answer; the start-up line says https.
if [ $tls_ok = 1 ]; then
  for i in $(seq 1 300); do [ -s "$tmp/e.port" ] && curl -sf -m 2 --cacert "$tmp/tls.crt" "https://127.0.0.1:$(cat "$tmp/e.port")/health" >/dev/null 2>&1 && break; sleep 0.1; done
  PE=$(cat "$tmp/e.port" 2>/dev/null)
  body='{"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":8}'
  over_tls=$(curl -s -m 60 --cacert "$tmp/tls.crt" -H "Authorization: Bearer $KEY" "https://127.0.0.1:$PE/v1/chat/completions" -d "$body" |
             "$PY" -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])' 2>/dev/null)
  plain=$(curl -s -m 60 -H "Authorization: Bearer $KEY" "http://127.0.0.1:$PA/v1/chat/completions" -d "$body" |
          "$PY" -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])' 2>/dev/null)
  curl -s -m 5 "http://127.0.0.1:$PE/health" >/dev/null 2>&1; plain_rc=$?
  if [ -n "$over_tls" ] && [ "$over_tls" = "$plain" ] && [ $plain_rc != 0 ] && grep -q "listening on https://127.0.0.1:" "$tmp/e.log"; then
    echo "PASS HTTPS (--tls-cert/--tls-key): the plain server's answer over TLS; plain HTTP to it refused"
  else
    echo "FAIL HTTPS (--tls-cert/--tls-key) (TLS answer '$over_tls', plain '$plain', plain HTTP to the TLS port rc $plain_rc; $(head -c 300 "$tmp/e.log"))"
  fi
  term_wait "$pid_e"
else
  echo "FAIL HTTPS (no openssl CLI to make a certificate: make test-deps)"
fi

# Graceful shutdown: SIGTERM with a stream in flight -> the stream gets a final event, exit 0.
curl -sN -m 30 -H "Authorization: Bearer $KEY" "http://127.0.0.1:$PA/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"Long."}],"max_tokens":100000,"stream":true}' >"$tmp/last_stream.txt" 2>/dev/null &
curl_pid=$!
for i in $(seq 1 100); do grep -q '"content"' "$tmp/last_stream.txt" 2>/dev/null && break; sleep 0.05; done
term_wait "$pid_a"
wait "$curl_pid" 2>/dev/null
if [ $stopped = 1 ] && [ "$src" = 0 ] && grep -q '"code":"cancelled"' "$tmp/last_stream.txt" && tail -c 20 "$tmp/last_stream.txt" | grep -q '\[DONE\]'; then
  echo "PASS graceful shutdown (SIGTERM: the open stream ended with an error event and [DONE]; exit 0)"
else
  echo "FAIL graceful shutdown (exited: $stopped, status ${src:-?}; stream tail: $(tail -c 200 "$tmp/last_stream.txt"))"
  tail -5 "$tmp/a.log"
fi
# Shutdown while an image URL is being fetched (server B): the transfer gives up, the request gets a
# 503 shutting_down, the server exits 0 at once (not at the host's pace, nor at --media-fetch-timeout).
"$PY" -c '
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self): time.sleep(30)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()' "$tmp/slowhost.port" &
slow_pid=$!
pids+=($slow_pid)
for i in $(seq 1 50); do [ -s "$tmp/slowhost.port" ] && break; sleep 0.1; done
curl -s -m 30 "http://127.0.0.1:$PB/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\
\"image_url\":{\"url\":\"http://127.0.0.1:$(cat "$tmp/slowhost.port")/a.png\"}}]}],\"max_tokens\":2}" >"$tmp/fetch_stop.txt" 2>/dev/null &
curl_pid=$!
sleep 1
t0=$(date +%s%N)
term_wait "$pid_b"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$curl_pid" 2>/dev/null
kill "$slow_pid" 2>/dev/null
if [ $stopped = 1 ] && [ "$src" = 0 ] && [ $ms -lt 3500 ] && grep -q '"code":"shutting_down"' "$tmp/fetch_stop.txt"; then
  echo "PASS shutdown during an image URL's fetch (503 shutting_down, exit 0 in $ms ms)"
else
  echo "FAIL shutdown during an image URL's fetch (exited: $stopped, status ${src:-?}, $ms ms; answer: $(head -c 200 "$tmp/fetch_stop.txt"))"
fi
for p in "$pid_c" "$pid_d"; do term_wait "$p"; done
if grep -qi "panic\|assert\|Sanitizer\|runtime error" "$tmp/a.log" "$tmp/b.log" "$tmp/c.log" "$tmp/d.log"; then
  echo "FAIL server logs report a panic, an assertion or a sanitizer error"
  grep -i -A5 "panic\|assert\|Sanitizer\|runtime error" "$tmp/a.log" "$tmp/b.log" "$tmp/c.log" "$tmp/d.log" | head -40
else
  echo "PASS server logs clean (no panic, assertion or sanitizer report)"
fi
exit 0
