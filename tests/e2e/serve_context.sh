#!/usr/bin/env bash
# serve_context.sh — the context a request may hold, on the tiny fixture model:
#  - `serve --max-model-len 96`: /v1/models and /tokenize report it; a prompt + max_tokens over it is a
#    400 context_length_exceeded naming the numbers, within it is served;
#  - a request that names no max_tokens and whose prompt leaves less than --default-max-tokens of the
#    context gets what the context leaves (answered, cut at the context: finish "length"), where it
#    used to be refused for a max_tokens it never asked for; one that names max_tokens is still refused;
#  - --max-model-len above the checkpoint's max_position_embeddings is refused at start.
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model

start_server -m "$M" --quiet --max-model-len 96 --default-max-tokens 64
if [ -z "$port" ]; then
  fail serve_context_server "did not start: $(tail -3 "$tmp/srv.log")"
  exit 0
fi
$PY - "$port" <<'EOF'
import json, sys, urllib.request
port = sys.argv[1]

def call(method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), json.dumps(body).encode() if body is not None else None,
                                 {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def report(name, ok, why=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))

st, m = call("GET", "/v1/models")
st2, t = call("POST", "/tokenize", {"prompt": "Hello"})
report("max_model_len_reported", st == st2 == 200 and m["data"][0].get("max_model_len") == 96 and t["max_model_len"] == 96, "%s %s" % (m, t))

words = " ".join(["word"] * 60)  # ~70 prompt tokens with the template
msgs = [{"role": "user", "content": words}]
st, p = call("POST", "/tokenize", {"messages": msgs})
n = p["count"]
st, d = call("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 96 - n + 1})
report("over_max_model_len_refused", st == 400 and d["error"]["code"] == "context_length_exceeded" and "96" in d["error"]["message"],
       "%d %s" % (st, d))
st, d = call("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 96 - n})
report("within_max_model_len_served", st == 200 and d["usage"]["prompt_tokens"] == n and d["usage"]["completion_tokens"] <= 96 - n,
       "%d %s" % (st, str(d)[:300]))
# no max_tokens: --default-max-tokens 64 does not fit beside the prompt; the room is taken instead
st, d = call("POST", "/v1/chat/completions", {"messages": msgs, "ignore_eos": True})
report("no_max_tokens_takes_the_room", n + 64 > 96 and st == 200 and d["usage"]["completion_tokens"] == 96 - n
       and d["choices"][0]["finish_reason"] == "length", "%d %d %s" % (n, st, str(d)[:300]))
st, d = call("POST", "/v1/completions", {"prompt": words, "ignore_eos": True})
report("no_max_tokens_takes_the_room_completions", st == 200 and d["usage"]["prompt_tokens"] + d["usage"]["completion_tokens"] == 96,
       "%d %s" % (st, str(d)[:300]))
EOF
stop_server

"$BIN" serve -m "$M" --port 0 --max-model-len 200000 >"$tmp/big.log" 2>&1 && fail serve_context_over_checkpoint_refused "it started" ||
  { grep -q 'max_position_embeddings (131072)' "$tmp/big.log" && pass serve_context_over_checkpoint_refused ||
    fail serve_context_over_checkpoint_refused "$(tail -2 "$tmp/big.log")"; }
