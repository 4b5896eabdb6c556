#!/usr/bin/env bash
# serve_fields.sh — request fields nothing reads, on the tiny fixture model:
#  - by default a chat or completions body with such fields (a misspelt max_token, OpenAI's user) is
#    answered, and the response's X-Ignored-Fields header and the log line name them (vLLM logs them);
#    so are a Responses body's, a /tokenize or /detokenize body's and a transcription form's;
#  - a body of fields the server reads (most of the documented ones, with valid values) names none
#    (chat, responses, tokenize);
#  - `serve --strict-params` refuses the first with a 400 unknown_parameter naming them (OpenAI's
#    "Unrecognized request argument supplied"), and still serves the second.
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model

check() { # strict(0|1) port
  $PY - "$1" "$2" <<'EOF'
import http.client, json, sys
strict, port = sys.argv[1] == "1", sys.argv[2]

def call(path, body):
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=120)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, r.getheader("X-Ignored-Fields"), data

def report(name, ok, why=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))

tag = "strict_" if strict else ""
msgs = [{"role": "user", "content": "Hi"}]
st, h, d = call("/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "max_token": 3, "user": "me"})
if strict:
    e = json.loads(d).get("error", {})
    report("strict_unknown_fields_refused", st == 400 and e.get("code") == "unknown_parameter" and e.get("param") == "max_token"
           and "max_token, user" in e.get("message", ""), "%s %s" % (st, d[:300]))
else:
    report("unknown_fields_named", st == 200 and h == "max_token, user", "%s %r %s" % (st, h, d[:200]))
st, h, d = call("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream": True, "foo": 1, "suffix": ""})
report(tag + "completions_unknown_field", (st == 400) if strict else (st == 200 and h == "foo" and d.rstrip().endswith("[DONE]")),
       "%s %r %s" % (st, h, d[-200:]))
kitchen = {"model": "m", "messages": msgs, "n": 1, "max_completion_tokens": 3, "temperature": 0.5, "top_p": 0.9, "min_p": 0.01,
           "top_k": 40, "seed": 1, "stream": False, "stop": ["zz"], "stop_token_ids": [5], "include_stop_str_in_output": False,
           "skip_special_tokens": True, "return_tokens_as_token_ids": False, "truncate_prompt_tokens": 100, "bad_words": ["qq"],
           "logprobs": True, "top_logprobs": 1, "prompt_logprobs": 0, "frequency_penalty": 0.1, "presence_penalty": 0.1,
           "repetition_penalty": 1.05, "logit_bias": {"7": 1}, "min_tokens": 0, "ignore_eos": False, "response_format": {"type": "text"},
           "guided_decoding_backend": "xgrammar", "modalities": ["text"], "cache_salt": "s", "mm_processor_kwargs": {"dynamic_hd": 4},
           "tools": [], "tool_choice": "none", "parallel_tool_calls": True, "add_generation_prompt": True, "continue_final_message": False,
           "echo": False}
st, h, d = call("/v1/chat/completions", kitchen)
report(tag + "read_fields_not_named", st == 200 and h is None, "%s %r %s" % (st, h, d[:300]))

def refused_or_named(name, st, h, d, want):
    if strict:
        e = json.loads(d).get("error", {})
        report("strict_" + name, st == 400 and e.get("code") == "unknown_parameter" and e.get("param") == want.split(",")[0],
               "%s %s" % (st, d[:300]))
    else:
        report(name, st == 200 and h == want, "%s %r %s" % (st, h, d[:300]))

# the other routes with a JSON body: the Responses API, /tokenize (chat's or completions' fields), /detokenize
st, h, d = call("/v1/responses", {"input": "Hi", "max_output_tokens": 2, "reasoning": {"effort": "low"}, "service_tier": "auto"})
refused_or_named("responses_unknown_fields", st, h, d, "reasoning, service_tier")
resp = {"model": "m", "input": [{"role": "user", "content": "Hi"}], "instructions": "Be brief.", "max_output_tokens": 2,
        "temperature": 0.5, "top_p": 0.9, "seed": 1, "store": False, "metadata": {"k": "v"}, "user": "me",
        "text": {"format": {"type": "text"}}, "tools": [], "tool_choice": "none", "parallel_tool_calls": True, "include": [],
        "top_logprobs": 0, "truncation": "disabled", "stream": False}
st, h, d = call("/v1/responses", resp)
report(tag + "responses_read_fields_not_named", st == 200 and h is None, "%s %r %s" % (st, h, d[:300]))
st, h, d = call("/tokenize", {"prompt": "Hi", "add_special_tokens": True})
refused_or_named("tokenize_unknown_field", st, h, d, "add_special_tokens")
st, h, d = call("/tokenize", {"messages": msgs, "model": "m", "add_generation_prompt": True})
report(tag + "tokenize_read_fields_not_named", st == 200 and h is None, "%s %r %s" % (st, h, d[:300]))
st, h, d = call("/detokenize", {"tokens": [5, 6], "model": "m", "x": 1})
refused_or_named("detokenize_unknown_field", st, h, d, "x")

# a transcription's form fields: an unknown one named (once, though sent twice)
import io, math, struct, wave
buf = io.BytesIO()
with wave.open(buf, "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / 16000))) for i in range(16000)))
fields = [("model", "m"), ("max_tokens", "2"), ("response_format", "json"), ("speed", "1"), ("speed", "2")]
bnd = "----pm"
body = b"".join(('--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (bnd, k, v)).encode() for k, v in fields)
body += ('--%s\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n' % bnd).encode()
body += buf.getvalue() + ("\r\n--%s--\r\n" % bnd).encode()
c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=120)
c.request("POST", "/v1/audio/transcriptions", body, {"Content-Type": "multipart/form-data; boundary=" + bnd})
r = c.getresponse()
st, h, d = r.status, r.getheader("X-Ignored-Fields"), r.read().decode()
c.close()
refused_or_named("transcription_unknown_field", st, h, d, "speed")
EOF
}

start_server -m "$M"
if [ -n "$port" ]; then
  check 0 "$port"
  grep -q 'POST /v1/chat/completions -> 200 ([0-9.]* s); fields ignored: max_token, user' "$tmp/srv.log" && pass unknown_fields_logged ||
    fail unknown_fields_logged "$(grep POST "$tmp/srv.log" | head -3)"
  stop_server
else fail serve_fields_server "did not start: $(tail -3 "$tmp/srv.log")"; fi
start_server -m "$M" --quiet --strict-params
if [ -n "$port" ]; then
  check 1 "$port"
  stop_server
else fail serve_fields_strict_server "did not start: $(tail -3 "$tmp/srv.log")"; fi
