#!/usr/bin/env bash
# run_batch.sh — `phi4mm run-batch` on the tiny fixture model:
#  - an OpenAI Batch input file (chat with text, with an image, with audio; completions; a Responses
#    request) gets a line a request in the input's order, each 200 answer the very body
#    `phi4mm serve` gives the same request (ids and times aside; neither keeps responses), greedy answers equal the CLI's;
#  - 24 requests decoded 4 at a time (--parallel 4) each get the answer it gets alone; with a queue of
#    one, the 503s are sent again after their Retry-After and answered;
#  - lines that are no request (not JSON, another method or URL, a streamed body, a custom_id seen
#    before) and requests the server refuses get their line naming why; the others go on; the exit
#    status says some failed; standard input and output work; the server's own options are refused.
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model
I=$FIX/phi4mm-tiny/inputs

start_server -m "$M" --quiet --response-store off # as run-batch runs its own
if [ -z "$port" ]; then
  fail run_batch_server "the reference server did not start: $(tail -3 "$tmp/srv.log")"
  exit 0
fi
$PY - "$BIN" "$M" "$I" "$port" "$tmp" <<'EOF'
import base64, json, re, subprocess, sys, urllib.request
binary, model, inputs, port, tmp = sys.argv[1:6]

def b64(path):
    return base64.b64encode(open(path, "rb").read()).decode()

def post(url, body):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, url), json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def strip(body):  # what differs between two answers of the same request: ids and times
    if isinstance(body, dict):
        return {k: strip(v) for k, v in body.items() if k not in ("id", "created", "created_at", "system_fingerprint")}
    if isinstance(body, list):
        return [strip(v) for v in body]
    return body

def run(args, data=None):
    p = subprocess.run([binary, "run-batch", "-m", model] + args, input=data, capture_output=True, timeout=900)
    return p.returncode, p.stdout, p.stderr

img = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(inputs + "/image.png")}}
aud = {"type": "input_audio", "input_audio": {"data": b64(inputs + "/clip_a_16k.wav"), "format": "wav"}}
q = "What is the capital of France?"
good = [
    ("chat-text", "/v1/chat/completions", {"messages": [{"role": "user", "content": q}], "max_tokens": 8}),
    ("chat-image", "/v1/chat/completions", {"messages": [{"role": "user", "content": [img, {"type": "text", "text": "Describe it."}]}], "max_tokens": 6}),
    ("chat-audio", "/v1/chat/completions", {"messages": [{"role": "user", "content": [aud, {"type": "text", "text": "Transcribe."}]}], "max_tokens": 6}),
    ("completion", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 6, "logprobs": 2}),
    ("responses", "/v1/responses", {"input": q, "max_output_tokens": 5}),
    ("sampled", "/v1/chat/completions", {"messages": [{"role": "user", "content": q}], "max_tokens": 8, "temperature": 1.0, "seed": 3, "n": 2}),
]
lines = [json.dumps({"custom_id": c, "method": "POST", "url": u, "body": b}) for c, u, b in good]
path = tmp + "/batch.jsonl"
open(path, "w").write("\n".join(lines) + "\n\n")
rc, out, err = run(["-i", path, "-o", tmp + "/out.jsonl"])
res = [json.loads(l) for l in open(tmp + "/out.jsonl")] if rc == 0 else []
why = []
for (c, u, b), r in zip(good, res):
    st, ref = post(u, b)
    if r["custom_id"] != c or r["error"] is not None or r["response"]["status_code"] != 200 or st != 200 \
            or strip(r["response"]["body"]) != strip(ref) or r["response"]["request_id"] != r["response"]["body"]["id"] \
            or not r["id"].startswith("batch_req_"):
        why.append("%s: %s vs %s" % (c, json.dumps(r)[:300], json.dumps(ref)[:300]))
ok = rc == 0 and len(res) == len(good) and not why and len({r["id"] for r in res}) == len(res)
print(("PASS" if ok else "FAIL") + " run_batch_answers_equal_the_servers" + ("" if ok else ": rc %d %s %s" % (rc, why[:2], err[-300:])))
# greedy text: the CLI's answer
g = subprocess.run([binary, "generate", "-m", model, "-n", "8", "-p", q], capture_output=True, timeout=300).stdout.decode()[:-1]
ok = bool(res) and res[0]["response"]["body"]["choices"][0]["message"]["content"] == g
print(("PASS" if ok else "FAIL") + " run_batch_greedy_equals_cli" + ("" if ok else ": %r" % g))

# 24 requests, 4 decoded together: each the answer it gets alone
many = [("m%02d" % i, {"messages": [{"role": "user", "content": "Count to %d." % i}], "max_tokens": 4 + i % 5}) for i in range(24)]
data = "".join(json.dumps({"custom_id": c, "method": "POST", "url": "/v1/chat/completions", "body": b}) + "\n" for c, b in many)
rc, out, err = run(["-i", "-", "--parallel", "4"], data.encode())
res = [json.loads(l) for l in out.decode().splitlines()]
bad = [c for (c, b), r in zip(many, res)
       if r["custom_id"] != c or strip(r["response"]["body"]) != strip(post("/v1/chat/completions", b)[1])]
ok = rc == 0 and len(res) == 24 and not bad
print(("PASS" if ok else "FAIL") + " run_batch_parallel_4_each_its_solo_answer" + ("" if ok else ": rc %d %s %s" % (rc, bad[:3], err[-300:])))

# a queue of one: the requests beyond it get 503s, sent again after their Retry-After, all answered
few = many[:6]
data = "".join(json.dumps({"custom_id": c, "method": "POST", "url": "/v1/chat/completions", "body": b}) + "\n" for c, b in few)
rc, out, err = run(["-i", "-", "--parallel", "1", "--max-queue", "1"], data.encode())
res = [json.loads(l) for l in out.decode().splitlines()]
bad = [c for (c, b), r in zip(few, res) if r["response"] is None or r["response"]["status_code"] != 200
       or strip(r["response"]["body"]) != strip(post("/v1/chat/completions", b)[1])]
resent = re.search(rb"\((\d+) sent again after a 503\)", err)
ok = rc == 0 and len(res) == 6 and not bad and resent and int(resent.group(1)) > 0
print(("PASS" if ok else "FAIL") + " run_batch_503_sent_again" + ("" if ok else ": rc %d %s %s" % (rc, bad, err[-300:])))

# lines that are no request, and requests refused: named in their line, the others answered
mixed = [
    json.dumps({"custom_id": "ok1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Hi", "max_tokens": 2}}),
    "{not json",
    json.dumps({"custom_id": "get", "method": "GET", "url": "/v1/models", "body": {}}),
    json.dumps({"custom_id": "url", "method": "POST", "url": "/v1/embeddings", "body": {}}),
    json.dumps({"custom_id": "strm", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [], "stream": True}}),
    json.dumps({"custom_id": "ok1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Hi"}}),
    json.dumps({"custom_id": "empty", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}}),
    json.dumps({"method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}}),
    json.dumps({"custom_id": "ok2", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}}),
]
rc, out, err = run(["-i", "-"], ("\n".join(mixed) + "\n").encode())
res = [json.loads(l) for l in out.decode().splitlines()]
codes = [(r["custom_id"], (r["error"] or {}).get("code") or r["response"]["status_code"]) for r in res]
want = [("ok1", 200), (None, "invalid_json"), ("get", "invalid_request"), ("url", "invalid_request"), ("strm", "invalid_request"),
        ("ok1", "duplicate_custom_id"), ("empty", 400), (None, "invalid_request"), ("ok2", 200)]
ok = rc == 1 and codes == want and "line 2" in res[1]["error"]["message"] and "messages" in json.dumps(res[6]["response"]["body"])
print(("PASS" if ok else "FAIL") + " run_batch_bad_lines_named_the_others_answered" + ("" if ok else ": rc %d %s" % (rc, codes)))

for name, args, needle in [("run_batch_own_server_options_refused", ["-i", path, "--port", "9"], b"--port"),
                           ("run_batch_missing_input", [], b"missing -i"),
                           ("run_batch_input_not_found", ["-i", tmp + "/none.jsonl"], b"none.jsonl")]:
    rc, out, err = run(args)
    print(("PASS" if rc not in (0,) and rc < 128 and needle in err else "FAIL") + " " + name + ("" if needle in err else ": %r" % err[-200:]))
EOF
stop_server
