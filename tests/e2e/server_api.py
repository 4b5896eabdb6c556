#!/usr/bin/python3
"""server_api.py — end-to-end checks of `phi4mm serve` over raw HTTP (stdlib only).

Run by tests/e2e/server_api.sh, which starts three servers on free loopback ports (A and C encode and
prefill new requests on their prompt thread, B inline on the inference thread):
  A: --api-key, --parallel 16, --allow-media-dir <fixture inputs>   (most checks)
     --allow-media-hosts 127.0.0.1                                    (image URLs of a local host)
  B: --parallel 1 --max-queue 1 --max-body 1M --prompt-threads inline (overload, body cap)
     --http-threads 1 --allow-media-hosts 127.0.0.1 --media-fetch-timeout 4
  C: --parallel 4 --kv-budget 3M --max-request-memory 2M               (KV budget: refuse, wait, serve;
                                                                      decoded-media budget)
  D: --parallel 4 --prefill-chunk 2 --draft 4 --allow-media-hosts '*' (a short text request past a busy
                                                                      prompt thread; the prompt cache;
                                                                      drafts)
Prints one "PASS <name>" / "FAIL <name> (why)" line per check. Every request has a timeout and
every loop is bounded. Writes the CLI's reference outputs to --expected for the openai-client test.
"""
import argparse
import base64
import datetime
import decimal
import ipaddress
import http.client
import json
import random
import shutil
import re
import socket
import subprocess
import tempfile
import sys
import threading
import time
import uuid

TIMEOUT = 120
results = []


def report(name, ok, why=""):
    results.append(ok)
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not why else " (" + why + ")"), flush=True)


class Server:
    def __init__(self, hostport, key=None):
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.key = key

    def conn(self, timeout=TIMEOUT):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, extra=None, key=True):
        h = {}
        if key and self.key:
            h["Authorization"] = "Bearer " + self.key
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, headers=None, key=True):
        c = self.conn()
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                headers = dict(headers or {}, **{"Content-Type": "application/json"})
            c.request(method, path, body=body, headers=self.headers(headers, key))
            r = c.getresponse()
            data = r.read()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, key=True):
        st, h, data = self.request(method, path, body, headers, key)
        try:
            return st, h, json.loads(data)
        except ValueError:
            return st, h, data

    def stream(self, path, body, headers=None):
        """POST and read an SSE response: (status, [parsed data payloads], raw text)."""
        c = self.conn()
        try:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            h = self.headers(headers or {"Content-Type": "application/json"})
            c.request("POST", path, body=raw, headers=h)
            r = c.getresponse()
            text = r.read().decode("utf-8")
            if r.status != 200:
                return r.status, [], text
            events = []
            for block in text.split("\n\n"):
                if not block.strip():
                    continue
                name = None
                if block.startswith("event: "):  # the Responses API names each event: its data's type
                    name, block = block[7:].split("\n", 1)
                assert block.startswith("data: "), block[:80]
                payload = block[6:]
                events.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
                assert name is None or events[-1]["type"] == name, block[:80]
            return r.status, events, text
        finally:
            c.close()

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        return data.decode() if st == 200 else ""

    def metric(self, name):
        m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", self.metrics(), re.M)
        return float(m.group(1)) if m else None

    def health_ok(self):
        st, _, d = self.json("GET", "/health", key=False)
        return st == 200 and isinstance(d, dict) and d.get("status") == "ok"


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def multipart(fields, files):
    boundary = "----phi4mmtest%08x" % random.Random(len(fields)).getrandbits(32)
    out = []
    for k, v in fields.items():
        out.append(("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, k, v)).encode())
    for k, (fname, data) in files.items():
        out.append(("--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                    "Content-Type: application/octet-stream\r\n\r\n" % (boundary, k, fname)).encode() + data + b"\r\n")
    out.append(("--%s--\r\n" % boundary).encode())
    return b"".join(out), "multipart/form-data; boundary=" + boundary


def err_code(d):
    return d.get("error", {}).get("code") if isinstance(d, dict) else None


def chat_content(d):
    return d["choices"][0]["message"]["content"]


def joined_calls(deltas):
    """delta.tool_calls entries put together as a client does (by index): [{name, arguments}]."""
    calls = {}
    for d in deltas:
        c = calls.setdefault(d["index"], {"name": "", "arguments": ""})
        c["name"] += d.get("function", {}).get("name", "")
        c["arguments"] += d.get("function", {}).get("arguments", "")
    return [calls[k] for k in sorted(calls)]


def strip_ids(calls):
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls or []]


def usage_counts(u):
    """A usage without what the prompt cache held (that depends on the requests before)."""
    return {k: v for k, v in (u or {}).items() if k != "prompt_tokens_details"}


def stream_content(events):
    text, finish, usage, done = "", None, None, False
    for e in events:
        if e == "[DONE]":
            done = True
            continue
        if "error" in e:
            return None, "error:" + e["error"].get("message", ""), None, done
        if e.get("usage"):
            usage = e["usage"]
        for ch in e.get("choices", []):
            text += (ch["delta"].get("content") or "") if "delta" in ch else ch.get("text", "")
            finish = ch.get("finish_reason") or finish
    return text, finish, usage, done


class MediaHost:
    """A local HTTP server the servers fetch image URLs from (--allow-media-hosts 127.0.0.1)."""

    def __init__(self, image_path, wav_path):
        import http.server
        png, wav = open(image_path, "rb").read(), open(wav_path, "rb").read()
        host = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def send(self, code, body=b"", headers=()):
                try:
                    self.send_response(code)
                    for k, v in headers:
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the server hung up: past its cap, or its timeout
                    pass

            def do_GET(self):
                host.hits[self.path] = host.hits.get(self.path, 0) + 1
                p = self.path
                if p == "/image.png":
                    self.send(200, png, [("Content-Type", "image/png")])
                elif p == "/clip.wav":
                    self.send(200, wav, [("Content-Type", "audio/wav")])
                elif p == "/noauth":  # the image, to a request without credentials
                    self.send(403 if self.headers.get("Authorization") else 200, png, [("Content-Type", "image/png")])
                elif p == "/redirect":
                    self.send(302, b"", [("Location", "/image.png")])
                elif p == "/away":  # another host name for the same server: not in the list
                    self.send(302, b"", [("Location", "http://localhost:%d/image.png" % host.port)])
                elif p == "/ftp":
                    self.send(302, b"", [("Location", "ftp://127.0.0.1/image.png")])
                elif p == "/loop":
                    self.send(302, b"", [("Location", "/loop")])
                elif p == "/big":
                    self.send(200, b"\0" * (2 << 20), [("Content-Type", "image/png")])
                elif p == "/text":
                    self.send(200, b"hello world, not an image", [("Content-Type", "image/png")])
                elif p == "/empty":
                    self.send(200, b"")
                elif p == "/slow":
                    time.sleep(float(host.slow))
                    self.send(200, png, [("Content-Type", "image/png")])
                else:
                    self.send(404, b"not here")

        self.hits, self.slow = {}, 6
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def url(self, path, name="127.0.0.1"):
        return "http://%s:%d%s" % (name, self.port, path)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def remote_urls(A, B, D, inputs, image_answer, audio_answer):
    """Media URLs fetched over HTTP: A and B allow 127.0.0.1 (B: one HTTP thread, 1 MiB media, a
    4 s fetch budget), D allows any public host ('*')."""
    mh = MediaHost(inputs + "/image.png", inputs + "/clip_a_16k.wav")
    chat = "/v1/chat/completions"

    def ask(server, url, extra=None, n_images=1):
        parts = [{"type": "image_url", "image_url": {"url": url}} for _ in range(n_images)]
        text = "Describe the image in detail." if n_images == 1 else "".join("<|image_%d|>" % (i + 1) for i in range(n_images)) + "Compare."
        msgs = [{"role": "user", "content": parts + [{"type": "text", "text": text}]}]
        return server.json("POST", chat, dict({"messages": msgs, "max_tokens": 12}, **(extra or {})))

    def refused(name, server, path, needle, code="invalid_image_url", url=None, param="messages[0].content[0].image_url.url"):
        st, _, d = ask(server, url or mh.url(path))
        e = d.get("error", {}) if isinstance(d, dict) else {}
        report("image URL %s -> 400 %s" % (name, code), st == 400 and e.get("code") == code and needle in e.get("message", "")
               and e.get("param") == param, "got %s %s" % (st, str(d)[:300]))

    try:
        ok0, failed0 = A.metric('phi4mm_media_fetches_total{result="ok"}'), A.metric('phi4mm_media_fetches_total{result="failed"}')
        st, _, d = ask(A, mh.url("/image.png"))
        report("image URL fetched: the answer about the same image sent inline", st == 200 and chat_content(d) == image_answer,
               "%s %s" % (st, str(d)[:200]))
        st, _, d = ask(A, "http://user:secret@127.0.0.1:%d/noauth" % mh.port)
        report("image URL with user:password@: fetched without the credentials", st == 200 and chat_content(d) == image_answer,
               "%s %s" % (st, str(d)[:200]))
        st, _, d = ask(A, mh.url("/redirect"))
        report("image URL through a redirect to the same host", st == 200 and chat_content(d) == image_answer, "%s %s" % (st, str(d)[:200]))
        before = mh.hits.get("/image.png", 0)
        st, _, d = ask(A, mh.url("/image.png"), n_images=2)
        report("one URL twice in a request is fetched once", st == 200 and mh.hits.get("/image.png", 0) == before + 1,
               "%s, fetched %d times" % (st, mh.hits.get("/image.png", 0) - before))
        # the Responses API's input_image, and /tokenize, take URLs the same way
        rb = {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": mh.url("/image.png")},
                                                     {"type": "input_text", "text": "Describe the image in detail."}]}],
              "max_output_tokens": 12, "store": False}
        st, _, d = A.json("POST", "/v1/responses", rb)
        out = "".join(c.get("text", "") for o in (d.get("output") or []) for c in (o.get("content") or [])) if isinstance(d, dict) else ""
        report("Responses input_image by URL", st == 200 and out == image_answer, "%s %s" % (st, str(d)[:200]))
        tk = lambda url: A.json("POST", "/tokenize", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe."}]}]})
        (s1, _, t1), (s2, _, t2) = tk(mh.url("/image.png")), tk("data:image/png;base64," + b64(inputs + "/image.png"))
        report("/tokenize with an image URL counts what the inline image counts", s1 == s2 == 200 and t1.get("count") == t2.get("count") > 1000,
               "%s %s / %s %s" % (s1, str(t1)[:120], s2, str(t2)[:120]))
        # vLLM's audio_url part: a fetched URL, a data: URL, a path under --allow-media-dir: the input_audio answer
        def ask_audio(url):
            msgs = [{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": url}},
                                                 {"type": "text", "text": "Transcribe the audio clip into text."}]}]
            return A.json("POST", chat, {"messages": msgs, "max_tokens": 12})
        got = [ask_audio(u) for u in (mh.url("/clip.wav"), "data:audio/wav;base64," + b64(inputs + "/clip_a_16k.wav"),
                                      "file://" + inputs + "/clip_a_16k.wav")]
        report("audio_url by URL, data: URL and media-dir path: the input_audio answer",
               all(st == 200 and chat_content(d) == audio_answer for st, _, d in got), str([(st, str(d)[:120]) for st, _, d in got]))
        st, _, d = ask_audio(mh.url("/missing.wav"))
        report("audio_url answered 404 -> 400 invalid_audio_url", st == 400 and err_code(d) == "invalid_audio_url" and "HTTP 404" in str(d)
               and d["error"]["param"] == "messages[0].content[0].audio_url.url", "%s %s" % (st, str(d)[:200]))
        refused("answered 404", A, "/missing", "answered HTTP 404")
        refused("redirected to a host not in the list", A, "/away", "is not one this server fetches media from")
        refused("of a host not in the list", A, "/image.png", "'example.com' is not one this server fetches", url="http://example.com/image.png")
        refused("redirected to ftp", A, "/ftp", "only http and https")
        refused("redirecting in a loop", A, "/loop", "more than 5 redirects")
        refused("with an empty body", A, "/empty", "empty body")
        refused("of bytes that are no image", A, "/text", "not a recognised image", code="invalid_image", param="messages[0].content[0]")
        ok1, failed1 = A.metric('phi4mm_media_fetches_total{result="ok"}'), A.metric('phi4mm_media_fetches_total{result="failed"}')
        report("media fetch metrics: A's URLs counted by result, their bytes and time", ok0 == failed0 == 0 and ok1 == 8 and failed1 == 7
               and A.metric("phi4mm_media_fetch_bytes_total") > 0 and A.metric("phi4mm_media_fetch_seconds_total") > 0,
               "ok %s -> %s, failed %s -> %s" % (ok0, ok1, failed0, failed1))
        refused("larger than the media cap (B: 1 MiB)", B, "/big", "larger than 1048576 bytes")
        refused("of 127.0.0.1 under a wildcard (D: '*')", D, "/image.png", "internal address")
        refused("of localhost under a wildcard (D: '*')", D, "/image.png", "internal address", url=mh.url("/image.png", "localhost"))
        # a slow host: the fetch gives up at --media-fetch-timeout, and B's only HTTP thread keeps answering meanwhile
        box = {}
        t = threading.Thread(target=lambda: box.update(r=ask(B, mh.url("/slow"))))
        t0 = time.time()
        t.start()
        time.sleep(0.5)
        t1 = time.time()
        st_m, _, _ = B.json("GET", "/v1/models")
        t_models = time.time() - t1
        t.join(30)
        st, _, d = box.get("r", (None, None, {}))
        report("a slow image host: 400 at --media-fetch-timeout (4 s), the HTTP thread free meanwhile",
               st == 400 and "timed out" in str(d) and 3.5 < time.time() - t0 < 6 and st_m == 200 and t_models < 1.0,
               "%s %s after %.1f s; /v1/models %s in %.2f s" % (st, str(d)[:200], time.time() - t0, st_m, t_models))
    finally:
        mh.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--c", required=True)
    ap.add_argument("--d", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--expected", required=True)
    args = ap.parse_args()
    A, B, C, D = Server(args.a, args.key), Server(args.b), Server(args.c), Server(args.d)
    I = args.inputs
    img = "data:image/png;base64," + b64(I + "/image.png")
    wav = {c: b64("%s/%s.wav" % (I, c)) for c in ("clip_a_16k", "clip_b_8k", "clip_c_48k", "clip_d_22k")}

    def cli(*a):
        r = subprocess.run([args.bin] + list(a), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
        out = r.stdout.decode("utf-8")
        return out[:-1] if out.endswith("\n") else out, r.returncode

    def image_part():
        return {"type": "image_url", "image_url": {"url": img}}

    def audio_part(clip="clip_a_16k"):
        return {"type": "input_audio", "input_audio": {"data": wav[clip], "format": "wav"}}

    # ------------------------------------------------------------ basics
    report("health", A.health_ok())
    st, _, d = A.json("GET", "/v1/models")
    report("models", st == 200 and d["data"][0]["object"] == "model", str(d)[:200])
    version = subprocess.run([args.bin, "--version"], capture_output=True, timeout=60).stdout.decode().split()[-1]
    st, _, d = A.json("GET", "/version")
    st2, _, h = A.json("GET", "/health")
    report("/version and /health name the binary's version; /metrics its build_info", st == st2 == 200 and d == {"version": version}
           and h.get("version") == version and ('phi4mm_build_info{version="%s"} 1' % version) in A.metrics(), "%s %s %s" % (d, h, version))

    # ------------------------------------------------------------ greedy parity with the CLI
    M = args.model
    cases = {
        "text": ([{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": "What is the capital of France?"}],
                 ["--system", "You are a helpful assistant.", "-p", "What is the capital of France?"]),
        "image": ([{"role": "user", "content": [image_part(), {"type": "text", "text": "Describe the image in detail."}]}],
                  ["--image", I + "/image.png", "-p", "<|image_1|>Describe the image in detail."]),
        "audio": ([{"role": "user", "content": [audio_part(), {"type": "text", "text": "Transcribe the audio clip into text."}]}],
                  ["--audio", I + "/clip_a_16k.wav", "-p", "<|audio_1|>Transcribe the audio clip into text."]),
        "image+audio": ([{"role": "user", "content": [image_part(), audio_part(),
                                                      {"type": "text", "text": "Answer the spoken question about the image."}]}],
                        ["--image", I + "/image.png", "--audio", I + "/clip_a_16k.wav", "-p",
                         "<|image_1|><|audio_1|>Answer the spoken question about the image."]),
    }
    expected = {}
    for name, (msgs, cli_args) in cases.items():
        ref, rc = cli("generate", "-m", M, "-n", "12", *cli_args)
        expected[name] = ref
        st, _, d = A.json("POST", "/v1/chat/completions", {"model": "phi4mm", "messages": msgs, "max_tokens": 12})
        ok = st == 200 and rc == 0 and chat_content(d) == ref and d["usage"]["completion_tokens"] == 12 \
            and d["choices"][0]["finish_reason"] == "length"
        report("chat %s equals CLI (greedy, 12 tokens)" % name, ok, "status %s, cli rc %s: %r vs %r" % (st, rc, d, ref))
        st, ev, raw = A.stream("/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "stream": True,
                                                        "stream_options": {"include_usage": True}})
        text, finish, usage, done = stream_content(ev) if st == 200 else (None, None, None, False)
        first = ev[0] if ev else {}
        ok = (st == 200 and text == ref and finish == "length" and done and usage and usage["completion_tokens"] == 12
              and first.get("choices", [{}])[0].get("delta", {}).get("role") == "assistant")
        report("chat %s streamed equals CLI (+usage, [DONE])" % name, ok, "status %s: %r vs %r; %s" % (st, text, ref, raw[-300:]))

    # /tokenize: each case's chat counts the prompt tokens its completion reports, its media
    # placeholders expanded; the chat template's text through "prompt" gives the text case's ids,
    # which /detokenize turns back into that text; bad bodies are 400s naming the field
    counts, placeholders = {}, {}
    for name, (msgs, _) in cases.items():
        st, _, d = A.json("POST", "/tokenize", {"messages": msgs})
        st2, _, d2 = A.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
        counts[name] = st == 200 and st2 == 200 and d["count"] == len(d["tokens"]) == d2["usage"]["prompt_tokens"] \
            and d["max_model_len"] > 0
        placeholders[name] = sorted({t for t in d.get("tokens", []) if d["tokens"].count(t) > 20})
    # the CLI's tokenize gives each case's ids as /tokenize does
    same = {}
    for name, (msgs, cli_args) in cases.items():
        out, rc = cli("tokenize", "-m", M, "--json", *cli_args)
        st, _, d = A.json("POST", "/tokenize", {"messages": msgs})
        try:
            t = json.loads(out)
        except ValueError:
            t = {}
        same[name] = rc == 0 and st == 200 and t.get("tokens") == d["tokens"] and t.get("count") == d["count"] \
            and t["image"] == d["tokens"].count(200010) and t["audio"] == d["tokens"].count(200011)
    report("phi4mm tokenize: each case's ids and counts as /tokenize gives them", all(same.values()), str(same))
    templ = "<|system|>You are a helpful assistant.<|end|><|user|>What is the capital of France?<|end|><|assistant|>"
    st, _, d = A.json("POST", "/tokenize", {"prompt": templ})
    st2, _, d2 = A.json("POST", "/tokenize", {"messages": cases["text"][0]})
    st3, _, d3 = A.json("POST", "/detokenize", {"tokens": d.get("tokens")})
    bad = [A.json("POST", "/tokenize", b)[2].get("error", {}).get("param") for b in ({}, {"prompt": ["a", "b"]}, {"messages": "x"})] + \
          [A.json("POST", "/detokenize", b)[2].get("error", {}).get("param") for b in ({"tokens": [1, -1]}, {"tokens": "x"})]
    report("/tokenize counts each case's prompt tokens as its completion does; /detokenize reverses it",
           all(counts.values()) and placeholders["text"] == [] and len(placeholders["image"]) == 1 and len(placeholders["audio"]) == 1
           and len(placeholders["image+audio"]) == 2 and st == st2 == st3 == 200 and d["tokens"] == d2["tokens"]
           and d3["prompt"] == templ and bad == ["messages", "prompt", "messages", "tokens[1]", "tokens"],
           "%s %s %s %s %s %s" % (counts, placeholders, str(d)[:200], str(d2)[:200], str(d3)[:200], bad))

    # /v1/completions: the prompt as written, no template; the chat template's own text gives the
    # chat answer token for token, streamed or not; text only
    templ = "<|system|>You are a helpful assistant.<|end|><|user|>What is the capital of France?<|end|><|assistant|>"
    st, _, d = A.json("POST", "/v1/completions", {"model": "phi4mm", "prompt": templ, "max_tokens": 12})
    ok = (st == 200 and d.get("object") == "text_completion" and d["id"].startswith("cmpl-") and d["choices"][0]["text"] == expected["text"]
          and d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 12)
    report("completions of the chat template's text equal chat (greedy, 12 tokens)", ok, "status %s: %s vs %r" % (st, str(d)[:300], expected["text"]))
    st, ev, raw = A.stream("/v1/completions", {"prompt": [templ], "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}})
    text, finish, usage, done = stream_content(ev) if st == 200 else (None, None, None, False)
    ok = (st == 200 and text == expected["text"] and finish == "length" and done and usage and usage["completion_tokens"] == 12
          and all(e == "[DONE]" or e.get("object") == "text_completion" for e in ev))
    report("completions streamed (a one-prompt array) equal chat (+usage, [DONE])", ok, "status %s: %r; %s" % (st, text, raw[-300:]))

    # log-probabilities: one entry a generated token, whose bytes make the text; greedy picks the
    # first of the top ones; streamed, the chunks carry the same entries; completions' own format
    def lp_check(entries, text, ntok, k):
        if len(entries) != ntok:
            return "%d entries for %d tokens" % (len(entries), ntok)
        if bytes(b for e in entries for b in e["bytes"]).decode("utf-8", "replace") != text:
            return "the entries' bytes do not make the text"
        for e in entries:
            top = e["top_logprobs"]
            if len(top) != k or top[0]["token"] != e["token"] or top[0]["logprob"] != e["logprob"] or e["logprob"] > 0 \
                    or any(top[i]["logprob"] < top[i + 1]["logprob"] for i in range(k - 1)) \
                    or bytes(e["bytes"]).decode("utf-8", "replace") != e["token"]:
                return "entry %s" % str(e)[:300]
        return ""
    body = {"messages": cases["text"][0], "max_tokens": 12, "logprobs": True, "top_logprobs": 3}
    st, _, d = A.json("POST", "/v1/chat/completions", body)
    why = lp_check(d["choices"][0]["logprobs"]["content"], chat_content(d), 12, 3) if st == 200 else "status %s" % st
    report("chat logprobs: an entry a token, top 3, greedy = top[0]", st == 200 and not why and chat_content(d) == expected["text"], why)
    st, ev, raw = A.stream("/v1/chat/completions", dict(body, stream=True))
    streamed = [e for x in ev if x != "[DONE]" for c in x.get("choices", []) if c.get("logprobs") for e in c["logprobs"]["content"]]
    report("chat logprobs streamed: the same entries", st == 200 and d and streamed == d["choices"][0]["logprobs"]["content"],
           "status %s: %s" % (st, raw[-300:]))
    st, _, d = A.json("POST", "/v1/completions", {"prompt": templ, "max_tokens": 12, "logprobs": 2})
    ok = st == 200
    if ok:
        lp, text = d["choices"][0]["logprobs"], d["choices"][0]["text"]
        ok = (len(lp["tokens"]) == 12 and "".join(lp["tokens"]) == text and len(lp["token_logprobs"]) == 12
              and all(len(t) <= 2 and max(t.values()) == v for t, v in zip(lp["top_logprobs"], lp["token_logprobs"]))
              and lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(12)]
              and all(text[o:].startswith(t) for o, t in zip(lp["text_offset"], lp["tokens"])))
    report("completions logprobs 2: tokens, token_logprobs, top_logprobs, text_offset", ok, str(d)[:400])
    gen = d["choices"][0]["logprobs"] if ok else None

    # penalties and logit_bias: the CLI's flags give the same text; a token biased by 100 fills the
    # answer (and its reported log-probability stays the model's, below 0); an id outside the
    # vocabulary is a 400
    # (the tiny model's logits lie tens apart: a bias of 30 makes the token a contender, which the
    # penalties then push back after it comes)
    pen = {"frequency_penalty": 1.5, "presence_penalty": 0.5, "repetition_penalty": 1.2, "logit_bias": {"1000": 30, "13": -5}}
    q = ["generate", "-m", M, "-n", "12", "--system", "You are a helpful assistant.", "-p", "What is the capital of France?"]
    ref, rc = cli(*q, "--frequency-penalty", "1.5", "--presence-penalty", "0.5", "--repetition-penalty", "1.2",
                  "--logit-bias", "1000=30", "--logit-bias", "13=-5")
    biased, _ = cli(*q, "--logit-bias", "1000=30", "--logit-bias", "13=-5")
    st, _, d = A.json("POST", "/v1/chat/completions", dict(pen, messages=cases["text"][0], max_tokens=12))
    report("chat penalties + logit_bias equal the CLI's flags (and change the answer)",
           st == 200 and rc == 0 and chat_content(d) == ref and len({ref, biased, expected["text"]}) == 3,
           "status %s, rc %s: %r vs %r (biased only %r, plain %r)" % (st, rc, d, ref, biased, expected["text"]))
    st, _, d = A.json("POST", "/v1/completions", {"prompt": templ, "max_tokens": 4, "logprobs": 1, "logit_bias": {"1000": 100}})
    ok = st == 200
    if ok:
        lp = d["choices"][0]["logprobs"]
        forced, _ = cli("generate", "-m", M, "-n", "1", "--raw", "-p", templ, "--logit-bias", "1000=100")
        ok = d["choices"][0]["text"] == forced * 4 and all(v < -1 for v in lp["token_logprobs"])
    report("completions logit_bias 100 forces the token; its log-probability is the model's", ok, str(d)[:300])
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": cases["text"][0], "max_tokens": 2, "logit_bias": {"200064": 1}})
    report("logit_bias outside the vocabulary: 400", st == 400 and "logit_bias" in d.get("error", {}).get("message", ""), str(d)[:300])

    # min_tokens and ignore_eos hold back an end token pushed to the top (200020, <|end|>)
    endb = {"prompt": templ, "max_tokens": 6, "logit_bias": {"200020": 100}}
    got = []
    for extra in ({}, {"min_tokens": 3}, {"ignore_eos": True}):
        st, _, d = A.json("POST", "/v1/completions", dict(endb, **extra))
        got.append((d["usage"]["completion_tokens"], d["choices"][0]["finish_reason"]) if st == 200 else st)
    report("min_tokens 3 / ignore_eos hold the end token back", got == [(0, "stop"), (3, "stop"), (6, "length")], str(got))

    # JSON mode: pushed to close (a bias on "}", id 92 in this vocabulary) the answer is a complete
    # object that ends the request; unpushed, what comes is a prefix of one (the CLI's --json gives
    # the same), streamed or not; a schema is refused
    jm = {"messages": cases["text"][0], "response_format": {"type": "json_object"}}
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm, max_tokens=40, logit_bias={"92": 100}))
    ok = st == 200 and d["choices"][0]["finish_reason"] == "stop"
    try:
        ok = ok and isinstance(json.loads(chat_content(d)), dict)
    except ValueError:
        ok = False
    report("chat json_object: a complete object, then the end", ok, str(d)[:300])
    ref, rc = cli(*q, "--json", "-n", "16")
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm, max_tokens=16))
    st2, ev, raw = A.stream("/v1/chat/completions", dict(jm, max_tokens=16, stream=True))
    text = stream_content(ev)[0] if st2 == 200 else None
    report("chat json_object equals the CLI's --json, streamed too", st == 200 and rc == 0 and chat_content(d) == ref == text
           and ref.lstrip().startswith("{"), "%r / %r / %r" % (chat_content(d) if st == 200 else d, ref, text))
    # a schema: the answer is a value of it, the CLI's --json-schema gives the same; a keyword it
    # cannot hold is a 400 naming it
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "population": {"type": "integer"},
                                               "capital": {"type": "boolean"}},
              "required": ["city", "population", "capital"], "additionalProperties": False}
    tmpdir = tempfile.mkdtemp(prefix="phi4mm-schema-")
    with open(tmpdir + "/schema.json", "w") as fh:
        json.dump(schema, fh)
    ref, rc = cli(*q, "--json-schema", tmpdir + "/schema.json", "-n", "80")
    shutil.rmtree(tmpdir, ignore_errors=True)
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm, max_tokens=80, response_format={
        "type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": schema}}))
    ok = st == 200 and d["choices"][0]["finish_reason"] == "stop" and chat_content(d) == ref and rc == 0
    try:
        v = json.loads(chat_content(d)) if ok else None
        ok = ok and list(v) == ["city", "population", "capital"] and isinstance(v["city"], str) and len(v["city"]) <= 12 \
            and type(v["population"]) is int and type(v["capital"]) is bool
    except ValueError:
        ok = False
    report("chat json_schema: a value of the schema, as the CLI's --json-schema", ok, "%s / %r" % (str(d)[:300], ref))
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}}}}
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm, response_format=bad))
    report("json_schema with uniqueItems: 400 unsupported_value naming it", st == 400 and err_code(d) == "unsupported_value"
           and "uniqueItems" in d["error"]["message"] and d["error"]["param"] == "response_format.json_schema.schema", str(d)[:300])
    # multipleOf (Pydantic's Field(multiple_of=)): sampled answers' numbers are whole multiples, read as decimals
    mul = {"type": "json_schema", "json_schema": {"name": "m", "schema": {"type": "object", "properties": {
        "k": {"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 99}, "q": {"type": "number", "multipleOf": 0.25, "minimum": -2, "maximum": 2}},
        "required": ["k", "q"]}}}
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm, response_format=mul, temperature=1.5, seed=5, n=4, max_tokens=60))
    vals, ok = [], st == 200
    for c in d.get("choices", []) if ok else []:
        if c["finish_reason"] != "stop":
            continue
        try:
            v = json.loads(c["message"]["content"], parse_float=decimal.Decimal)
            vals.append((v["k"], str(v["q"])))
            ok = ok and type(v["k"]) is int and v["k"] % 3 == 0 and 0 <= v["k"] <= 99 and decimal.Decimal(v["q"]) % decimal.Decimal("0.25") == 0 \
                and -2 <= v["q"] <= 2
        except (ValueError, KeyError, TypeError):
            ok = False
    report("json_schema with multipleOf: sampled answers' numbers whole multiples within their bounds", ok and len(vals) >= 1,
           "%s %r %s" % (st, vals, str(d)[:300]))
    # bounds (Pydantic's Field(ge=, le=)): sampled answers are whole objects whose values lie in their ranges
    rng = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": -5, "maximum": 12}, "m": {"type": "integer", "exclusiveMinimum": 100},
        "p": {"type": "number", "minimum": 0, "exclusiveMaximum": 0.5}}, "required": ["n", "m", "p"]}}}
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm, response_format=rng, temperature=1.5, seed=11, n=4, max_tokens=80))
    vals, ok = [], st == 200
    for c in d.get("choices", []) if ok else []:
        if c["finish_reason"] != "stop":  # cut by max_tokens (the random model writes much whitespace): a prefix
            continue
        try:
            v = json.loads(c["message"]["content"])
            vals.append((v["n"], v["m"], v["p"]))
            ok = ok and type(v["n"]) is int and -5 <= v["n"] <= 12 and type(v["m"]) is int and v["m"] > 100 \
                and type(v["p"]) in (int, float) and 0 <= v["p"] < 0.5
        except (ValueError, KeyError, TypeError):
            ok = False
    report("json_schema with an integer's and a number's minimum / maximum: sampled answers in range", ok and len(vals) >= 2, "%s %r %s" % (st, vals, str(d)[:300]))
    # vLLM's guided decoding: a choice is one of the list, as the CLI's --choice gives it, streamed the
    # formats: sampled answers that Python's own parsers take (datetime, uuid, ipaddress)
    fm = {"type": "json_schema", "json_schema": {"name": "f", "schema": {"type": "object", "properties": {
        "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"}, "ip6": {"type": "string", "format": "ipv6"}}, "required": ["when", "id", "ip", "ip6"]}}}
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm, response_format=fm, temperature=1.5, seed=5, n=4, max_tokens=200))
    got, ok = [], st == 200
    for c in d.get("choices", []) if ok else []:
        if c["finish_reason"] != "stop":
            continue
        try:
            v = json.loads(c["message"]["content"])
            got.append(v)
            datetime.datetime.fromisoformat(v["when"]), uuid.UUID(v["id"]), ipaddress.IPv4Address(v["ip"]), ipaddress.IPv6Address(v["ip6"])
        except (ValueError, KeyError, TypeError):
            ok = False
    report("json_schema formats date-time, uuid, ipv4, ipv6: sampled answers Python's parsers take", ok and len(got) >= 2, "%s %r %s" % (st, got, str(d)[:300]))
    # same; sampled answers to a pattern are whole matches (Python's re judges), the first the CLI's
    # --regex with the same seed; /v1/completions takes structured_outputs; bad patterns, grammars: 400
    colours = ["red", "green", "dark blue", "blue"]
    ref, rc = cli(*q, "--choice", "red", "--choice", "green", "--choice", "dark blue", "--choice", "blue")
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text := {"messages": cases["text"][0]}, guided_choice=colours))
    st2, ev, _ = A.stream("/v1/chat/completions", dict(jm_text, guided_choice=colours, stream=True))
    report("guided_choice: one of the list, the CLI's --choice answer, streamed the same",
           st == st2 == 200 and rc == 0 and chat_content(d) == ref == stream_content(ev)[0] and ref in colours
           and d["choices"][0]["finish_reason"] == "stop", "%s %s / %r / %s" % (st, str(d)[:200], ref, st2))
    pat = r"[A-Z]{2}-\d{3}( [a-z]{1,6})?"
    ref, rc = cli(*q, "--regex", pat, "--temp", "1.5", "--seed", "7", "-n", "24")
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, guided_regex=pat, temperature=1.5, seed=7, n=4, max_tokens=24))
    answers = [c["message"]["content"] for c in d.get("choices", [])] if st == 200 else []
    report("guided_regex: 4 sampled answers, each a whole match; the first the CLI's --regex with the seed",
           st == 200 and rc == 0 and len(answers) == 4 and all(re.fullmatch(pat, x, re.ASCII) for x in answers) and answers[0] == ref
           and all(c["finish_reason"] == "stop" for c in d["choices"]), "%s %r / %r" % (st, answers or d, ref))
    st, _, d = A.json("POST", "/v1/completions", {"prompt": "The answer is", "max_tokens": 8, "temperature": 1.0, "seed": 3,
                                                  "structured_outputs": {"choice": ["42", "forty-two", "none"]}})
    report("completions structured_outputs.choice: one of the list", st == 200 and d["choices"][0]["text"] in ("42", "forty-two", "none"),
           "%s %s" % (st, str(d)[:300]))
    ok = True
    why = []
    for body, code, param, needle in [({"guided_regex": "(a|b"}, "invalid_value", "guided_regex", "never closed"),
                                      ({"guided_regex": "a(?<=b)"}, "unsupported_value", "guided_regex", "lookaround"),
                                      ({"guided_regex": ".*a.{16}"}, "unsupported_value", "guided_regex", "too large"),
                                      ({"guided_grammar": "root ::= x"}, "invalid_value", "guided_grammar", "rule 'x' is used but not defined"),
                                      ({"guided_grammar": 'root: "a"'}, "invalid_value", "guided_grammar", "no rule 'start' (the whole output is a start) (read as Lark"),
                                      ({"guided_grammar": 'start: a{x}'}, "unsupported_value", "guided_grammar", "templates"),
                                      ({"grammar": 'root ::= e a "x" | "b"\ne ::= "" | "q"\na ::= root "y"'}, "unsupported_value", "grammar", "left recursion"),
                                      ({"guided_grammar": 'root ::= "a"', "guided_regex": "a"}, "invalid_value", None, "cannot be combined"),
                                      ({"guided_whitespace_pattern": " "}, "unsupported_parameter", "guided_whitespace_pattern", "not supported"),
                                      ({"guided_choice": ["a"], "guided_regex": "a"}, "invalid_value", None, "cannot be combined"),
                                      ({"min_p": -0.5}, "invalid_value", "min_p", "min_p")]:
        st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, **body))
        good = st == 400 and err_code(d) == code and (param is None or d["error"]["param"] == param) and needle in d["error"]["message"]
        ok = ok and good
        if not good:
            why.append("%s -> %s %s" % (body, st, str(d)[:200]))
    report("guided decoding and min_p refusals: 400 naming the parameter and why", ok, "; ".join(why))
    # guided_grammar (GBNF, recursive): sampled answers are nested lists; one that ends is whole (a
    # check written here), one cut by max_tokens a prefix that could still become one; the first the
    # CLI's --grammar with the seed; completions take structured_outputs.grammar and llama.cpp's grammar
    gbnf = 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [a-z] | root\n'

    def nested(t):  # (a prefix of a nested list, a whole one)
        depth, prev = 0, ""
        for i, c in enumerate(t):
            if (i == 0 and c != "[") or (i > 0 and depth == 0):
                return False, False
            if c == "[":
                if i > 0 and prev not in "[,":
                    return False, False
                depth += 1
            elif c == "]":
                if prev == ",":
                    return False, False
                depth -= 1
            elif c == ",":
                if prev in "[,":
                    return False, False
            elif "a" <= c <= "z":
                if prev not in "[,":
                    return False, False
            else:
                return False, False
            prev = c
        return True, bool(t) and depth == 0

    gdir = tempfile.mkdtemp(prefix="phi4mm-grammar-")
    with open(gdir + "/list.gbnf", "w") as fh:
        fh.write(gbnf)
    ref, rc = cli(*q, "--grammar", gdir + "/list.gbnf", "--temp", "1.5", "--seed", "5", "-n", "24")
    shutil.rmtree(gdir, ignore_errors=True)
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, guided_grammar=gbnf, temperature=1.5, seed=5, n=4, max_tokens=24))
    chs = d.get("choices", []) if st == 200 else []
    ok = st == 200 and rc == 0 and len(chs) == 4 and chs[0]["message"]["content"] == ref
    for c in chs:
        pre, whole = nested(c["message"]["content"])
        ok = ok and pre and (whole if c["finish_reason"] == "stop" else c["finish_reason"] == "length")
    report("guided_grammar: 4 sampled nested lists, whole where they ended, prefixes where cut; the first the CLI's --grammar",
           ok, "%s %r / %r" % (st, [(c["message"]["content"], c["finish_reason"]) for c in chs] or d, ref))
    # guided_grammar in Lark's notation (left recursion, %import common, %ignore): sampled answers
    # that ended are whole by Lark's own Earley parser (dynamic_complete: read character by character)
    larkg = ('?start: sum\n?sum: product | sum "+" product -> add\n?product: atom | product "*" atom\n'
             '?atom: NUMBER | "(" sum ")"\n%import common.INT -> NUMBER\n%import common.WS_INLINE\n%ignore WS_INLINE\n')
    try:
        import lark
        ref_parser = lark.Lark(larkg, parser="earley", lexer="dynamic_complete")
    except Exception as ex:  # python3-lark is a test dependency (make test-deps)
        ref_parser, why = None, repr(ex)
    def lark_ok(t, whole):  # whole: Lark parses it; else a prefix: closing what is open makes one it parses
        k = t.count("(") - t.count(")")
        for u in ([t] if whole else [t + ")" * k, t + "1" + ")" * k]):
            try:
                ref_parser.parse(u)
                return True
            except lark.exceptions.LarkError:
                pass
        return False

    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, guided_grammar=larkg, temperature=1.5, seed=7, n=4, max_tokens=24))
    chs = d.get("choices", []) if st == 200 else []
    ok = ref_parser is not None and st == 200 and len(chs) == 4
    for c in chs if ok else []:
        ok = ok and c["finish_reason"] in ("stop", "length") and lark_ok(c["message"]["content"], c["finish_reason"] == "stop")
    # and a grammar whose answer must end: a terminal with flag i, then only the end token
    st2, _, d2 = A.json("POST", "/v1/chat/completions", dict(jm_text, guided_grammar='start: ANSWER\nANSWER: "yes"i | "no"\n',
                                                               temperature=1.5, seed=7, n=4, max_tokens=8))
    chs2 = d2.get("choices", []) if st2 == 200 else []
    ok = ok and len(chs2) == 4 and all(c["finish_reason"] == "stop" and re.fullmatch("(?i:yes)|no", c["message"]["content"]) for c in chs2)
    report("guided_grammar in Lark's notation: 4 sampled sums whole or prefixes by Lark's own parser; yes/no answers whole",
           ok, "%s %r %r" % (st, [(c["message"]["content"], c["finish_reason"]) for c in chs] or d, chs2 or d2))
    ok = True
    for key, val in (("structured_outputs", {"grammar": 'root ::= "yes" | "no" | "maybe " [0-9]'}), ("grammar", 'root ::= "yes" | "no"')):
        st, _, d = A.json("POST", "/v1/completions", {"prompt": "Is it?", "max_tokens": 8, "temperature": 1.0, "seed": 3, key: val})
        ok = ok and st == 200 and re.fullmatch("yes|no|maybe [0-9]", d["choices"][0]["text"]) and d["choices"][0]["finish_reason"] == "stop"
    report("completions structured_outputs.grammar and grammar (llama.cpp's): a whole root", ok, str(d)[:300])
    # JSON Schema's pattern (ECMAScript's, held over the string's decoded text): sampled answers hold it
    pschema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                                                "note": {"type": "string", "pattern": "ok", "maxLength": 8}},
               "required": ["code", "note"], "additionalProperties": False}
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=80, temperature=1.0, seed=11, n=3, response_format={
        "type": "json_schema", "json_schema": {"name": "p", "schema": pschema}}))
    vals = []
    try:
        vals = [json.loads(c["message"]["content"]) for c in d["choices"]] if st == 200 else []
    except (ValueError, KeyError):
        pass
    report("json_schema pattern: 3 sampled answers, each code a whole match and each note holding ok within 8 characters",
           len(vals) == 3 and all(re.fullmatch("[A-Z]{3}-[0-9]{2}", v["code"]) and "ok" in v["note"] and len(v["note"]) <= 8 for v in vals),
           "%s %s" % (st, str(d)[:400]))
    # min_p 1 keeps only the most likely token: sampled hot, the greedy answer
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, temperature=2.0, seed=5, min_p=1.0, max_tokens=12))
    st2, _, d2 = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=12))
    report("min_p 1: a hot sample is the greedy answer", st == st2 == 200 and chat_content(d) == chat_content(d2) == expected["text"],
           "%s / %s" % (str(d)[:200], str(d2)[:200]))

    # vLLM's chat template switches: continue_final_message leaves the assistant's prefix open (the
    # completion of the template's text with the prefix, token for token, and the CLI's --prefill),
    # echo puts the prefix before the answer, streamed the same
    pre = "The capital"
    cont = dict(messages=cases["text"][0] + [{"role": "assistant", "content": pre}], max_tokens=8, continue_final_message=True,
                add_generation_prompt=False)
    st, _, d = A.json("POST", "/v1/completions", {"prompt": templ + pre, "max_tokens": 8})
    st2, _, d2 = A.json("POST", "/v1/chat/completions", dict(cont, echo=True))
    st3, ev, _ = A.stream("/v1/chat/completions", dict(cont, echo=True, stream=True))
    st4, _, d4 = A.json("POST", "/v1/chat/completions", cont)
    ref, rc = cli("generate", "-m", M, "-n", "8", "--system", "You are a helpful assistant.", "-p", "What is the capital of France?",
                  "--prefill", pre)
    tail = d["choices"][0]["text"] if st == 200 else None
    report("continue_final_message: the prefix continued as the completion of the template's text with it; echo puts it first; CLI --prefill",
           st == st2 == st3 == st4 == 200 and rc == 0 and tail and chat_content(d2) == pre + tail == stream_content(ev)[0] == ref
           and chat_content(d4) == tail and d2["usage"]["completion_tokens"] == 8,
           "%s %s / %s / %s / %r" % (st, str(d)[:200], str(d2)[:200], str(d4)[:200], ref))
    # stop_token_ids: a token pushed to the top ends the answer at once, counted, its text only with
    # include_stop_str_in_output; a stop string is kept with it too; special tokens' text with
    # skip_special_tokens false
    push = dict(jm_text, max_tokens=4, logit_bias={"1000": 100}, stop_token_ids=[1000])
    st, _, d = A.json("POST", "/v1/chat/completions", push)
    st2, _, d2 = A.json("POST", "/v1/chat/completions", dict(push, include_stop_str_in_output=True))
    st3, _, d3 = A.json("POST", "/detokenize", {"tokens": [1000]})
    st4, ev, _ = A.stream("/v1/chat/completions", dict(push, include_stop_str_in_output=True, stream=True))
    report("stop_token_ids: the answer ends at the token, counted; its text only with include_stop_str_in_output, streamed the same",
           st == st2 == st3 == st4 == 200 and chat_content(d) == "" and d["choices"][0]["finish_reason"] == "stop"
           and d["usage"]["completion_tokens"] == 1 and chat_content(d2) == d3["prompt"] == stream_content(ev)[0] != "",
           "%s / %s / %s" % (str(d)[:200], str(d2)[:200], str(d3)[:200]))
    full = expected["text"]
    cut = next((i for i in range(2, len(full) - 2) if full.find(full[i:i + 2]) == i and full[i:i + 2].strip()), None)
    stop = full[cut:cut + 2] if cut else "\x00"
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=12, stop=[stop]))
    st2, _, d2 = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=12, stop=[stop], include_stop_str_in_output=True))
    report("include_stop_str_in_output: the stop string kept at the end of the answer", cut is not None and st == st2 == 200
           and chat_content(d) == full[:cut] and chat_content(d2) == full[:cut + 2] and d2["choices"][0]["finish_reason"] == "stop",
           "%r %r / %s / %s" % (full, stop, str(d)[:200], str(d2)[:200]))
    st, _, t = A.json("POST", "/tokenize", {"prompt": "<|tool_call|>"})
    sid = t["tokens"][0] if st == 200 and t["count"] == 1 else None
    spec = dict(jm_text, max_tokens=2, logit_bias={str(sid): 100})
    st, _, d = A.json("POST", "/v1/chat/completions", spec)
    st2, _, d2 = A.json("POST", "/v1/completions", {"prompt": templ, "max_tokens": 2, "logit_bias": {str(sid): 100},
                                                    "skip_special_tokens": False})
    report("skip_special_tokens false: a special token's text kept (dropped by default)",
           sid is not None and st == st2 == 200 and chat_content(d) == "" and d2["choices"][0]["text"] == "<|tool_call|>" * 2,
           "%s %s / %s" % (sid, str(d)[:200], str(d2)[:200]))
    # allowed_token_ids and bad_words: the CLI's --allow-id / --bad-word answers; the allowed answer
    # holds only those tokens (its log-probability entries say which), the bad word never comes
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=6, allowed_token_ids=[1000, 2028, 553], logprobs=True))
    ref, rc = cli("generate", "-m", M, "-n", "6", "--system", "You are a helpful assistant.", "-p", "What is the capital of France?",
                  "--allow-id", "1000", "--allow-id", "2028", "--allow-id", "553")
    allowed_txt = {A.json("POST", "/detokenize", {"tokens": [t]})[2]["prompt"] for t in (1000, 2028, 553)}
    ents = d["choices"][0]["logprobs"]["content"] if st == 200 else []
    report("allowed_token_ids: only those tokens, the CLI's --allow-id answer", st == 200 and rc == 0 and chat_content(d) == ref
           and len(ents) == 6 and all(e["token"] in allowed_txt for e in ents), "%s / %r / %s" % (str(d)[:300], ref, allowed_txt))
    # errors of the request's own making met while decoding are 4xx, by the engine's error class:
    # an ambiguous grammar past its mask limit (only "z" allowed, so the model must write z's),
    # bans that leave no token (the one allowed token banned as an end until min_tokens)
    zid = A.json("POST", "/tokenize", {"prompt": "z"})[2].get("tokens", [None])[0]
    amb = dict(jm_text, max_tokens=40, allowed_token_ids=[zid], guided_grammar='root ::= s\ns ::= "z" s "y" | "z" s . | ""\n')
    st, _, d = A.json("POST", "/v1/chat/completions", amb)
    report("a grammar past its mask limit while decoding: 400 limit_exceeded naming it", st == 400 and err_code(d) == "limit_exceeded"
           and d["error"]["type"] == "invalid_request_error" and "grammar: a step's mask" in d["error"]["message"], str(d)[:300])
    st, ev, raw = A.stream("/v1/chat/completions", dict(amb, stream=True))
    errs = [e["error"] for e in ev if e != "[DONE]" and "error" in e]
    report("the same streamed: 200, then an error event of code limit_exceeded", st == 200 and len(errs) == 1
           and errs[0]["code"] == "limit_exceeded" and errs[0]["type"] == "invalid_request_error", raw[-400:])
    st, _, d = A.json("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 4, "min_tokens": 2, "allowed_token_ids": [199999]})
    report("bans that leave no token while decoding: 400 invalid_request", st == 400 and err_code(d) == "invalid_request"
           and "exclude them all" in d["error"]["message"], str(d)[:300])
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=12, logprobs=True))
    toks = [e["token"] for e in d["choices"][0]["logprobs"]["content"]] if st == 200 else []
    # a word the answer writes as one token after a space (so that " word" is how the tokenizer spells it too)
    word = next((t[1:] for t in toks if t.startswith(" ") and t[1:].isalpha()
                 and A.json("POST", "/tokenize", {"prompt": t})[2].get("count") == 1), "")
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=12, bad_words=[word]))
    ref, rc = cli("generate", "-m", M, "-n", "12", "--system", "You are a helpful assistant.", "-p", "What is the capital of France?",
                  "--bad-word", word)
    report("bad_words: the word never comes, the CLI's --bad-word answer", st == 200 and rc == 0 and chat_content(d) == ref
           and word and (" " + word) in full and (" " + word) not in chat_content(d), "%r / %s / %r" % (word, str(d)[:300], ref))
    # return_tokens_as_token_ids: the entries name tokens "token_id:N"; those ids detokenize to the answer
    st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, max_tokens=8, logprobs=True, top_logprobs=2,
                                                           return_tokens_as_token_ids=True))
    ents = d["choices"][0]["logprobs"]["content"] if st == 200 else []
    ids = [int(e["token"][9:]) for e in ents if re.fullmatch(r"token_id:\d+", e["token"])]
    st2, _, dt = A.json("POST", "/detokenize", {"tokens": ids})
    st3, _, dc = A.json("POST", "/v1/completions", {"prompt": templ, "max_tokens": 3, "logprobs": 2, "return_tokens_as_token_ids": True})
    lp = dc["choices"][0]["logprobs"] if st3 == 200 else {}
    report("return_tokens_as_token_ids: tokens named token_id:N (chat and completions), the ids make the answer",
           st == st2 == st3 == 200 and len(ids) == len(ents) == 8 and dt["prompt"] == chat_content(d)
           and all(bytes(e["bytes"]).decode() == e["token"] and all(re.fullmatch(r"token_id:\d+", t["token"]) for t in e["top_logprobs"])
                   for e in ents)
           and all(re.fullmatch(r"token_id:\d+", t) for t in lp.get("tokens", ["x"]))
           and all(re.fullmatch(r"token_id:\d+", k) for t in lp.get("top_logprobs", []) for k in t),
           "%s / %s / %s" % (str(d)[:300], str(dt)[:200], str(dc)[:300]))
    # truncate_prompt_tokens: the prompt's last k tokens, as a prompt of those ids; with an image, 400
    st, _, tk = A.json("POST", "/tokenize", {"prompt": templ})
    st2, _, d = A.json("POST", "/v1/completions", {"prompt": templ, "max_tokens": 6, "truncate_prompt_tokens": 7})
    st3, _, d2 = A.json("POST", "/v1/completions", {"prompt": tk["tokens"][-7:], "max_tokens": 6})
    st4, _, d3 = A.json("POST", "/v1/chat/completions", {"messages": cases["image"][0], "max_tokens": 2, "truncate_prompt_tokens": 50})
    report("truncate_prompt_tokens: the prompt's last k tokens; refused beside an image",
           st == st2 == st3 == 200 and d["choices"][0]["text"] == d2["choices"][0]["text"] and d["usage"]["prompt_tokens"] == 7
           and st4 == 400 and "without images or audio" in d3["error"]["message"], "%s / %s / %s" % (str(d)[:200], str(d2)[:200], str(d3)[:200]))
    ok, why = True, []
    for body, param, needle in [({"continue_final_message": True, "add_generation_prompt": True}, "continue_final_message", "both"),
                                ({"continue_final_message": True, "guided_regex": "a+"}, "continue_final_message", "guided"),
                                ({"stop_token_ids": [200064]}, None, "stop token id"),
                                ({"stop_token_ids": [1, "x"]}, "stop_token_ids[1]", "token id"),
                                ({"allowed_token_ids": [5, 300000]}, None, "allowed token id 300000"),
                                ({"bad_words": ["ok", "  "]}, "bad_words[1]", "leading whitespace"),
                                ({"bad_words": "x"}, "bad_words", "array"),
                                ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "positive")]:
        st, _, d = A.json("POST", "/v1/chat/completions", dict(jm_text, **body))
        good = st == 400 and (param is None or d["error"]["param"] == param) and needle in d["error"]["message"]
        ok = ok and good
        if not good:
            why.append("%s -> %s %s" % (body, st, str(d)[:200]))
    report("template switches, stop tokens, allowed tokens and bad words refused: 400 naming the parameter and why", ok, "; ".join(why))

    # tools: a named function's call is held to its parameters and comes back as tool_calls; the
    # same prompt (the checkpoint's template with the tools' list) and schema through /v1/completions
    # give the very call as text, streamed the same; auto mode answers as text; history with calls
    # and results is accepted
    params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
              "required": ["city", "unit"]}
    fns = [{"name": "get_weather", "description": "Weather of a city", "parameters": params}, {"name": "search"}]
    tools = [{"type": "function", "function": f} for f in fns]
    umsg = [{"role": "user", "content": "What is the weather in Paris?"}]
    tb = {"messages": umsg, "tools": tools, "max_tokens": 300, "parallel_tool_calls": False,
          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    st, _, d = A.json("POST", "/v1/chat/completions", tb)
    calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
    ok = st == 200 and d["choices"][0]["finish_reason"] == "tool_calls" and d["choices"][0]["message"]["content"] is None \
        and calls and len(calls) == 1 and calls[0]["function"]["name"] == "get_weather" and calls[0]["type"] == "function" \
        and calls[0]["id"].startswith("call_")
    try:
        targs = json.loads(calls[0]["function"]["arguments"]) if ok else None
        ok = ok and list(targs) == ["city", "unit"] and isinstance(targs["city"], str) and len(targs["city"]) <= 12 and targs["unit"] in "cf"
    except ValueError:
        ok = False
    report("chat tool_choice a function: one call of it, arguments of its parameters", ok, str(d)[:400])
    tprompt = "<|system|><|tool|>" + json.dumps(fns) + "<|/tool|><|end|><|user|>What is the weather in Paris?<|end|><|assistant|>"
    tschema = {"type": "array", "items": {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": params},
                                          "required": ["name", "arguments"]}, "minItems": 1, "maxItems": 1}
    st2, _, d2 = A.json("POST", "/v1/completions", {"prompt": tprompt, "max_tokens": 300, "response_format": {
        "type": "json_schema", "json_schema": {"name": "calls", "schema": tschema}}})
    try:
        same = ok and st2 == 200 and json.loads(d2["choices"][0]["text"]) == [{"name": "get_weather", "arguments": targs}] \
            and usage_counts(d2["usage"]) == usage_counts(d["usage"])
    except ValueError:
        same = False
    report("the call is the completion of the tools' prompt under the calls' schema", same, "%s / %s" % (str(d)[:200], str(d2)[:300]))
    st3, ev, raw = A.stream("/v1/chat/completions", dict(tb, stream=True))
    deltas = [c for e in ev if isinstance(e, dict) for ch in e.get("choices", []) for c in ch.get("delta", {}).get("tool_calls", [])]
    text, finish, _, done = stream_content(ev) if st3 == 200 else (None, None, None, False)
    report("streamed: the call's name in its first delta, then its arguments in pieces that add up to the same call",
           ok and st3 == 200 and done and finish == "tool_calls" and text == "" and joined_calls(deltas) == strip_ids(calls)
           and set(deltas[0]) == {"index", "id", "type", "function"} and deltas[0]["id"].startswith("call_")
           and all(set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in deltas[1:]), str(raw)[:400])
    # cut by max_tokens while the call streams: what was read of it went out, finish "length"; cut
    # before its name was complete, the text comes as content, as without streaming
    st, _, d = A.json("POST", "/v1/chat/completions", dict(tb, max_tokens=8))
    st3, ev, raw = A.stream("/v1/chat/completions", dict(tb, max_tokens=8, stream=True))
    deltas = [c for e in ev if isinstance(e, dict) for ch in e.get("choices", []) for c in ch.get("delta", {}).get("tool_calls", [])]
    text, finish, _, done = stream_content(ev) if st3 == 200 else (None, None, None, False)
    whole = chat_content(d) if st == 200 else None
    report("streamed call cut by max_tokens: its start as tool_calls (or as content before its name), finish length",
           st == 200 and d["choices"][0]["finish_reason"] == "length" and done and finish == "length"
           and ((deltas and text == "" and whole.startswith('[{"name"')) or (not deltas and text == whole)),
           "%s / %s" % (str(d)[:300], str(raw)[:400]))
    # required among several: each call's arguments follow its own function's parameters
    sparams = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 8}}, "required": ["q"]}
    tools2 = [tools[0], {"type": "function", "function": {"name": "search", "parameters": sparams}}]
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": umsg, "tools": tools2, "tool_choice": "required", "max_tokens": 400,
                                                      "parallel_tool_calls": False})
    calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
    ok = bool(st == 200 and calls and d["choices"][0]["finish_reason"] == "tool_calls")
    try:
        for c in calls or []:
            a = json.loads(c["function"]["arguments"])
            if c["function"]["name"] == "search":
                ok = ok and list(a) == ["q"] and isinstance(a["q"], str) and len(a["q"]) <= 8
            else:
                ok = ok and c["function"]["name"] == "get_weather" and list(a) == ["city", "unit"] and a["unit"] in "cf"
    except ValueError:
        ok = False
    report("tool_choice required among two: each call's arguments of its own function", ok, str(d)[:400])
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": umsg, "tools": tools, "max_tokens": 8})
    st2, ev, raw = A.stream("/v1/chat/completions", {"messages": umsg, "tools": tools, "max_tokens": 8, "stream": True})
    ok = st == 200 and st2 == 200 and "tool_calls" not in d["choices"][0]["message"] and d["choices"][0]["finish_reason"] == "length" \
        and stream_content(ev)[:2] == (chat_content(d), "length")
    report("tools, auto: the tiny model's text comes back as content, streamed the same", ok, "%s / %s" % (str(d)[:200], str(raw)[:200]))
    # auto, the model made to write <|tool_call|> (a logit bias): what follows is held to the calls
    # (a list or one call); the same prompt with the marker and that schema through /v1/completions
    # give the very calls
    added = {t["content"]: t["id"] for t in json.load(open(M + "/tokenizer.json"))["added_tokens"]}
    push = {str(added["<|tool_call|>"]): 100}
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": umsg, "tools": tools, "max_tokens": 300, "logit_bias": push,
                                                      "parallel_tool_calls": False})
    calls = d["choices"][0]["message"].get("tool_calls") if st == 200 else None
    ok = bool(st == 200 and calls and len(calls) == 1 and d["choices"][0]["finish_reason"] == "tool_calls"
              and d["choices"][0]["message"]["content"] is None)
    call = lambda f: {"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": f.get(
        "parameters", {"type": "object", "additionalProperties": False})}, "required": ["name", "arguments"]}
    lschema = {"anyOf": [{"type": "array", "items": {"anyOf": [call(f) for f in fns]}, "minItems": 1, "maxItems": 1}]
               + [call(f) for f in fns]}
    st2, _, d2 = A.json("POST", "/v1/completions", {"prompt": tprompt + "<|tool_call|>", "max_tokens": 300, "logit_bias": push,
                                                   "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": lschema}}})
    try:
        want = json.loads(d2["choices"][0]["text"]) if st2 == 200 else None
        want = want if isinstance(want, list) else [want]
        got = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])} for c in calls or []]
        ok = ok and got == want and d2["choices"][0]["finish_reason"] == "stop"
    except (ValueError, TypeError, KeyError):
        ok = False
    report("tools, auto: once the model writes <|tool_call|>, the calls are held to their schema (= completions under it)", ok,
           "%s / %s" % (str(d)[:300], str(d2)[:300]))
    st3, ev, raw = A.stream("/v1/chat/completions", {"messages": umsg, "tools": tools, "max_tokens": 300, "logit_bias": push,
                                                      "parallel_tool_calls": False, "stream": True})
    deltas = [c for e in ev if isinstance(e, dict) for ch in e.get("choices", []) for c in ch.get("delta", {}).get("tool_calls", [])]
    text, finish, _, done = stream_content(ev) if st3 == 200 else (None, None, None, False)
    report("tools, auto, streamed: the calls after the model's <|tool_call|> stream as they are written, the same calls",
           ok and st3 == 200 and done and finish == "tool_calls" and text == "" and joined_calls(deltas) == strip_ids(calls),
           str(raw)[:400])
    hist = umsg + [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": hist, "tools": tools, "max_tokens": 4})
    report("a conversation with a call and its result is answered", st == 200 and d["usage"]["prompt_tokens"] > 0, str(d)[:300])
    st, _, d = A.json("POST", "/v1/chat/completions", dict(tb, tool_choice={"type": "function", "function": {"name": "nope"}}))
    report("tool_choice naming no tool: 400", st == 400 and d["error"]["param"] == "tool_choice.function.name", str(d)[:300])

    # ------------------------------------------------------------ /v1/responses
    # the Responses API over the same chat requests: the same answer and token counts as chat
    # completions (text, image + audio, a forced call), streamed as its events (a sequence numbered
    # from 0; the deltas add up to the final response, which equals the non-streamed one)
    def resp_text(r):
        return "".join(p["text"] for it in r["output"] if it["type"] == "message" for p in it["content"])

    def resp_events_ok(ev):
        types = [e["type"] for e in ev]
        return (types[:2] == ["response.created", "response.in_progress"] and types[-1] in ("response.completed", "response.incomplete")
                and [e["sequence_number"] for e in ev] == list(range(len(ev))) and ev[0]["response"]["status"] == "in_progress")

    def same_response(a, b):  # ids, times and what the prompt cache held apart
        strip = lambda r: json.loads(re.sub(r'"(resp|msg|fc|call)_[0-9a-f]{24}', r'"\1_x', json.dumps(dict(
            r, created_at=0, usage=dict(r["usage"], input_tokens_details=None)))))
        return strip(a) == strip(b)

    rcases = [("text", {"instructions": "You are a helpful assistant.", "input": "What is the capital of France?"},
               [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is the capital of France?"}]),
              ("image+audio", {"input": [{"role": "user", "content": [
                  {"type": "input_image", "image_url": img}, dict(audio_part()),
                  {"type": "input_text", "text": "Answer the spoken question about the image."}]}]},
               [{"role": "user", "content": [image_part(), audio_part(), {"type": "text", "text": "Answer the spoken question about the image."}]}])]
    for name, rbody, msgs in rcases:
        st, _, d = A.json("POST", "/v1/responses", dict(rbody, max_output_tokens=12))
        st2, _, dc = A.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 12})
        ok = st == 200 and st2 == 200 and d["object"] == "response" and d["id"].startswith("resp_") and resp_text(d) == chat_content(dc) \
            and d["usage"]["input_tokens"] == dc["usage"]["prompt_tokens"] and d["usage"]["output_tokens"] == dc["usage"]["completion_tokens"] \
            and d["status"] == {"stop": "completed", "length": "incomplete"}[dc["choices"][0]["finish_reason"]]
        report("responses %s: the chat completion's answer and counts" % name, ok, "%s / %s" % (str(d)[:300], str(dc)[:200]))
        st3, ev, raw = A.stream("/v1/responses", dict(rbody, max_output_tokens=12, stream=True))
        deltas = "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta")
        ok = st3 == 200 and resp_events_ok(ev) and deltas == resp_text(d) and same_response(ev[-1]["response"], d)
        report("responses %s streamed: events in order, the same response" % name, ok, str(raw)[:400])
    # log-probabilities (include, top_logprobs): the chat completion's entries, streamed with the deltas
    lb = {"input": "What is the capital of France?", "max_output_tokens": 6, "include": ["message.output_text.logprobs"], "top_logprobs": 3}
    st, _, d = A.json("POST", "/v1/responses", lb)
    st2, _, dc = A.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": lb["input"]}], "max_tokens": 6,
                                                        "logprobs": True, "top_logprobs": 3})
    st3, ev, raw = A.stream("/v1/responses", dict(lb, stream=True))
    got = d["output"][0]["content"][0]["logprobs"] if st == 200 else None
    streamed = [x for e in ev if e["type"] == "response.output_text.delta" for x in e["logprobs"]]
    ok = st == st2 == st3 == 200 and got == dc["choices"][0]["logprobs"]["content"] and len(got) == 6 and streamed == got \
        and all(len(x["top_logprobs"]) == 3 for x in got) and d["top_logprobs"] == 3
    report("responses logprobs: the chat completion's entries, streamed with their deltas", ok, "%s / %s" % (str(got)[:300], str(dc)[:200]))
    rtb = {"input": "What is the weather in Paris?", "tools": [dict(type="function", **f) for f in fns], "max_output_tokens": 300,
           "parallel_tool_calls": False, "tool_choice": {"type": "function", "name": "get_weather"}}
    st, _, d = A.json("POST", "/v1/responses", rtb)
    st2, _, dc = A.json("POST", "/v1/chat/completions", tb)
    items = d.get("output", []) if st == 200 else []
    want = strip_ids(dc["choices"][0]["message"].get("tool_calls")) if st2 == 200 else None
    ok = len(items) == 1 and items[0]["type"] == "function_call" and items[0]["call_id"].startswith("call_") and items[0]["status"] == "completed" \
        and [{"name": it["name"], "arguments": it["arguments"]} for it in items] == want and d["status"] == "completed"
    report("responses, a function forced: a function_call item, the chat completion's call", ok, "%s / %s" % (str(d)[:300], str(dc)[:300]))
    st3, ev, raw = A.stream("/v1/responses", dict(rtb, stream=True))
    fargs = "".join(e["delta"] for e in ev if e["type"] == "response.function_call_arguments.delta")
    done = [e for e in ev if e["type"] == "response.function_call_arguments.done"]
    ok = ok and st3 == 200 and resp_events_ok(ev) and fargs == items[0]["arguments"] and len(done) == 1 \
        and done[0]["arguments"] == fargs and same_response(ev[-1]["response"], d) \
        and not any(e["type"].startswith("response.output_text") for e in ev)
    report("responses, the call streamed: its arguments in deltas, the same response", ok, str(raw)[:400])
    # auto mode, the model's <|tool_call|> pushed by growing biases: text, then text and a call
    # (the message done before the call item begins), streamed as answered
    mixed, same_all = 0, True
    atools = [{"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}]
    for bias in (14, 18, 22):
        ab = {"input": "What is the weather in Paris?", "tools": atools, "max_output_tokens": 120,
              "logit_bias": {str(added["<|tool_call|>"]): bias}}
        st, _, d = A.json("POST", "/v1/responses", ab)
        st3, ev, raw = A.stream("/v1/responses", dict(ab, stream=True))
        kinds = [it["type"] for it in d.get("output", [])] if st == 200 else []
        mixed += kinds == ["message", "function_call"]
        seq = [e["type"] for e in ev if e["type"].startswith("response.output_item")]
        same_all = same_all and st == st3 == 200 and resp_events_ok(ev) and same_response(ev[-1]["response"], d) \
            and (kinds != ["message", "function_call"] or seq == ["response.output_item.added", "response.output_item.done"] * 2)
    report("responses, auto: text then a call, streamed as answered (the message done before the call begins)", same_all and mixed > 0,
           "mixed %d; %s" % (mixed, str(raw)[:300]))
    # a history in items (a call and its output) is the chat conversation with the call
    hist_items = [{"role": "user", "content": "What is the weather in Paris?"},
                  {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"},
                  {"type": "function_call_output", "call_id": "call_1", "output": "18 C, sunny"}]
    st, _, d = A.json("POST", "/v1/responses", {"input": hist_items, "tools": rtb["tools"], "max_output_tokens": 6})
    st2, _, dc = A.json("POST", "/v1/chat/completions", {"messages": hist, "tools": tools, "max_tokens": 6})
    ok = st == 200 and st2 == 200 and resp_text(d) == chat_content(dc) and d["usage"]["input_tokens"] == dc["usage"]["prompt_tokens"]
    report("responses: function_call and function_call_output items are the chat history with the call", ok,
           "%s / %s" % (str(d)[:300], str(dc)[:300]))
    # previous_response_id: the stored conversation (the answer as the assistant's message) goes
    # before the new input, the instructions are the new request's: the chat completion of the
    # whole conversation; a call answered by a function_call_output the same; unknown ids, ids
    # stored with store false or under another cache_salt are 400s
    q1 = {"instructions": "You are a helpful assistant.", "input": "What is the capital of France?", "max_output_tokens": 12}
    st, _, r1 = A.json("POST", "/v1/responses", q1)
    st2, _, r2 = A.json("POST", "/v1/responses", {"instructions": "You are a helpful assistant.", "input": "And of Italy?",
                                                 "max_output_tokens": 12, "previous_response_id": r1.get("id")})
    full = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": resp_text(r1) if st == 200 else ""}, {"role": "user", "content": "And of Italy?"}]
    st3, _, dc = A.json("POST", "/v1/chat/completions", {"messages": full, "max_tokens": 12})
    ok = st == st2 == st3 == 200 and r1["store"] is True and r2["previous_response_id"] == r1["id"] and resp_text(r2) == chat_content(dc) \
        and r2["usage"]["input_tokens"] == dc["usage"]["prompt_tokens"] and re.fullmatch(r"resp_[0-9a-f]{24}", r2["id"])
    report("responses: previous_response_id continues the stored conversation (= the chat completion of all of it)", ok,
           "%s / %s" % (str(r2)[:300], str(dc)[:200]))
    st, _, c1 = A.json("POST", "/v1/responses", dict(rtb, max_output_tokens=300))
    call = [it for it in c1.get("output", []) if it["type"] == "function_call"] if st == 200 else []
    st2, _, c2 = A.json("POST", "/v1/responses", {"previous_response_id": c1.get("id"), "tools": rtb["tools"], "max_output_tokens": 6,
                                                 "input": [{"type": "function_call_output", "call_id": call[0]["call_id"] if call else "x",
                                                            "output": "18 C, sunny"}]})
    hist2 = [{"role": "user", "content": rtb["input"]},
             {"role": "assistant", "content": None, "tool_calls": [{"id": c["call_id"], "type": "function", "function": {
                 "name": c["name"], "arguments": c["arguments"]}} for c in call]},
             {"role": "tool", "tool_call_id": call[0]["call_id"] if call else "x", "content": "18 C, sunny"}]
    st3, _, dc = A.json("POST", "/v1/chat/completions", {"messages": hist2, "tools": tools, "max_tokens": 6})
    ok = st == st2 == st3 == 200 and len(call) == 1 and resp_text(c2) == chat_content(dc) and c2["usage"]["input_tokens"] == dc["usage"]["prompt_tokens"]
    report("responses: a call's output sent with previous_response_id (= the chat history with the call)", ok,
           "%s / %s" % (str(c2)[:300], str(dc)[:200]))
    st, _, nk = A.json("POST", "/v1/responses", dict(q1, store=False, cache_salt="tenant-r"))
    st4, _, sk = A.json("POST", "/v1/responses", dict(q1, cache_salt="tenant-r"))
    bad = [A.json("POST", "/v1/responses", dict(b, input="x", max_output_tokens=2)) for b in (
        {"previous_response_id": "resp_0"}, {"previous_response_id": nk.get("id")}, {"previous_response_id": sk.get("id")},
        {"previous_response_id": sk.get("id"), "cache_salt": "tenant-s"})]
    good = A.json("POST", "/v1/responses", {"previous_response_id": sk.get("id"), "cache_salt": "tenant-r", "input": "x", "max_output_tokens": 2})
    st, ev, raw = A.stream("/v1/responses", dict(q1, stream=True))
    sid = ev[-1]["response"]["id"] if st == 200 and ev else None
    st2, _, r3 = A.json("POST", "/v1/responses", {"instructions": "You are a helpful assistant.", "input": "And of Italy?",
                                                 "max_output_tokens": 12, "previous_response_id": sid})
    st3, _, off = B.json("POST", "/v1/responses", {"input": "x", "max_output_tokens": 2, "previous_response_id": sid})
    report("responses: a streamed response is kept as well; a server with --response-store off refuses previous_response_id",
           st == st2 == 200 and resp_text(r3) == resp_text(r2) and st3 == 400 and off["error"]["code"] == "unsupported_parameter"
           and A.metric("phi4mm_response_store_entries") >= 5 and B.metric("phi4mm_response_store_entries") == 0,
           "%s / %s" % (str(r3)[:200], str(off)[:200]))
    report("responses: unknown, unstored and other-salt previous_response_id are 400s; the same salt finds it",
           st == st4 == 200 and nk["store"] is False and all(b[0] == 400 and b[2]["error"]["param"] == "previous_response_id" for b in bad)
           and good[0] == 200, str([b[2] for b in bad])[:400])
    # GET /v1/responses/{id}: the response object as it was answered (streamed: the final event's);
    # under a cache_salt only with ?cache_salt=; DELETE forgets it (then GET 404, previous_response_id 400)
    g1 = A.json("GET", "/v1/responses/" + r1["id"])
    g2 = A.json("GET", "/v1/responses/" + str(sid))
    g3 = A.json("GET", "/v1/responses/" + sk["id"])
    g4 = A.json("GET", "/v1/responses/" + sk["id"] + "?cache_salt=tenant-r")
    ok = (g1[0] == 200 and g1[2] == r1 and g2[0] == 200 and g2[2] == ev[-1]["response"] and g3[0] == 404
          and g3[2]["error"]["param"] == "response_id" and g4[0] == 200 and g4[2] == sk)
    report("responses: GET /v1/responses/{id} returns the response as answered (streamed too); a salted one only with its cache_salt", ok,
           str([g[0] for g in (g1, g2, g3, g4)]) + str(g3[2])[:200])
    d0 = A.json("DELETE", "/v1/responses/" + sk["id"])
    d1 = A.json("DELETE", "/v1/responses/" + sk["id"] + "?cache_salt=tenant-r")
    g5 = A.json("GET", "/v1/responses/" + sk["id"] + "?cache_salt=tenant-r")
    p5 = A.json("POST", "/v1/responses", {"previous_response_id": sk["id"], "cache_salt": "tenant-r", "input": "x", "max_output_tokens": 2})
    d2 = A.json("DELETE", "/v1/responses/" + sk["id"] + "?cache_salt=tenant-r")
    off = B.json("GET", "/v1/responses/" + r1["id"])
    items = A.json("GET", "/v1/responses/" + sk["id"] + "/input_items?cache_salt=tenant-r")
    rs = A.json("GET", "/v1/responses/" + r1["id"] + "?stream=true")
    post = A.request("POST", "/v1/responses/" + r1["id"], {"input": "x"})
    ok = (d0[0] == 404 and d1[0] == 200 and d1[2] == {"id": sk["id"], "object": "response", "deleted": True} and g5[0] == 404
          and p5[0] == 400 and d2[0] == 404 and off[0] == 404 and items[0] == 404 and rs[0] == 400 and rs[2]["error"]["param"] == "stream"
          and post[0] == 405 and post[1].get("allow") == "GET, DELETE")
    report("responses: DELETE forgets a kept response (then GET and input_items 404, previous_response_id 400); store off, stream=true, POST refused",
           ok, str([x[0] for x in (d0, d1, g5, p5, d2, off, items, rs, post)]) + str(d1[2])[:200])
    # GET /v1/responses/{id}/input_items: the conversation the response answered, less the
    # instructions and the answer, newest first unless order=asc; an item keeps its id in every
    # response holding it (r1's answer is r1's output message); paged by limit and after
    def items_of(rid, query=""):
        st, h, d = A.json("GET", "/v1/responses/%s/input_items%s" % (rid, query))
        return d if st == 200 else {"status": st, "body": d}
    i2 = items_of(r2["id"], "?order=asc")
    want = [("message", "user", "What is the capital of France?"), ("message", "assistant", resp_text(r1)), ("message", "user", "And of Italy?")]
    got = [(it["type"], it["role"], it["content"][0]["text"]) for it in i2.get("data", [])]
    ok = (i2.get("object") == "list" and got == want and i2["data"][1]["id"] == r1["output"][0]["id"]
          and i2["data"][0]["id"] == items_of(r1["id"])["data"][0]["id"] and i2["has_more"] is False
          and [it["content"][0]["type"] for it in i2["data"]] == ["input_text", "output_text", "input_text"]
          and i2["first_id"] == i2["data"][0]["id"] and i2["last_id"] == i2["data"][-1]["id"]
          and items_of(r2["id"])["data"] == i2["data"][::-1] and len({it["id"] for it in i2["data"]}) == 3)
    walk, after = [], ""
    for _ in range(4):
        pg = items_of(r2["id"], "?order=asc&limit=1" + after)
        walk += pg.get("data", [])
        if not pg.get("has_more"):
            break
        after = "&after=" + pg["last_id"]
    ok = ok and walk == i2["data"]
    report("responses: input_items lists the conversation a response answered (earlier answers by their output ids), paged by limit / after",
           ok, "%s / %s" % (str(i2)[:400], str(walk)[:200]))
    ic = items_of(c2["id"], "?order=asc")
    kinds = [it["type"] for it in ic.get("data", [])]
    fc = ic["data"][1] if kinds == ["message", "function_call", "function_call_output"] else {}
    ok = (kinds == ["message", "function_call", "function_call_output"] and call and fc["id"] == call[0]["id"]
          and fc["call_id"] == call[0]["call_id"] and fc["arguments"] == call[0]["arguments"] and fc["name"] == call[0]["name"]
          and ic["data"][2]["call_id"] == call[0]["call_id"] and ic["data"][2]["output"] == "18 C, sunny")
    st, _, ci = A.json("POST", "/v1/responses", {"input": [dict(hist_items[0], id="msg_mine"), dict(hist_items[1], id="fc_mine"),
                                                           dict(hist_items[2], id="fco_mine")], "max_output_tokens": 2})
    ok = ok and st == 200 and [it["id"] for it in items_of(ci["id"], "?order=asc").get("data", [])] == ["msg_mine", "fc_mine", "fco_mine"]
    report("responses: input_items of calls: the model's call (its output id) and the tool's output; a client's own item ids kept", ok, str(ic)[:400])
    st, _, mi = A.json("POST", "/v1/responses", {"input": rcases[1][1]["input"], "max_output_tokens": 2})
    plain, full = items_of(mi.get("id"), "?order=asc"), items_of(mi.get("id"), "?order=asc&include%5B%5D=message.input_image.image_url")
    parts = lambda d: [p["type"] for p in d["data"][0]["content"]] if d.get("data") else None
    ok = (st == 200 and parts(plain) == parts(full) == ["input_image", "input_audio", "input_text"]
          and plain["data"][0]["content"][0]["image_url"] is None and full["data"][0]["content"][0]["image_url"] == img
          and full["data"][0]["content"][1]["input_audio"] == audio_part()["input_audio"])
    report("responses: input_items of an image and a clip: the image's url only with include message.input_image.image_url", ok,
           str(plain)[:300])
    bad = [(q, A.json("GET", "/v1/responses/%s/input_items%s" % (r2["id"], q))) for q in
           ("?limit=0", "?limit=101", "?order=up", "?after=msg_none", "?before=x", "?include=message.output_text.logprobs", "?include=x")]
    dele = A.request("DELETE", "/v1/responses/%s/input_items" % r2["id"])
    ok = (all(b[0] == 400 and b[2]["error"]["param"] == q[1:].split("=")[0] for q, b in bad) and dele[0] == 405
          and dele[1].get("allow") == "GET" and A.json("GET", "/v1/responses/resp_0/input_items")[0] == 404)
    report("responses: input_items refuses a bad limit, order, after, before, include (400 naming it), DELETE (405), an unknown id (404)", ok,
           str([(q, b[0], b[2]) for q, b in bad])[:500])
    st, _, d = A.json("POST", "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]})
    report("responses: a bad image is a 400 naming input[0].content[0]", st == 400 and d["error"]["code"] == "invalid_image"
           and d["error"]["param"].startswith("input[0].content[0]"), str(d)[:300])

    # echo: the prompt comes back before the completion; with logprobs its tokens are scored (the
    # first has nothing before it: null); max_tokens 0 scores only (what evaluation harnesses send).
    # Scoring the prompt plus the greedy continuation gives the generated tokens' own log-probabilities.
    st, _, d = A.json("POST", "/v1/completions", {"prompt": templ, "max_tokens": 0, "echo": True, "logprobs": 2})
    ok = st == 200
    if ok:
        c, u = d["choices"][0], d["usage"]
        lp = c["logprobs"]
        n = len(lp["tokens"])
        ok = (c["text"] == templ and "".join(lp["tokens"]) == templ and n == u["prompt_tokens"] and u["completion_tokens"] == 0
              and c["finish_reason"] == "length" and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
              and all(v is not None and v <= 0 for v in lp["token_logprobs"][1:])
              and all(len(t) == 2 and max(t.values()) >= v for t, v in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:]))
              and lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(n)])
    report("completions echo, max_tokens 0, logprobs 2: the prompt scored, nothing generated", ok, str(d)[:400])
    if gen:
        st, _, d = A.json("POST", "/v1/completions", {"prompt": templ + "".join(gen["tokens"][:11]), "max_tokens": 0, "echo": True,
                                                       "logprobs": 0})
        lp = d["choices"][0]["logprobs"] if st == 200 else None
        # the text re-tokenized may split differently: compare where the tokens are the generated ones
        ok = lp is not None and lp["tokens"][-11:] == gen["tokens"][:11] and all(
            abs(a - b) < 1e-3 for a, b in zip(lp["token_logprobs"][-11:], gen["token_logprobs"][:11]))
        report("completions echo scores the greedy continuation as it was generated (teacher forcing)", ok,
               "status %s: %s vs %s" % (st, str(lp)[:300], str(gen)[:300]))
    st, _, d = A.json("POST", "/v1/completions", {"prompt": templ, "max_tokens": 5, "echo": True})
    ok = st == 200 and gen and d["choices"][0]["text"] == templ + "".join(gen["tokens"][:5]) and d["choices"][0]["logprobs"] is None \
        and d["usage"]["completion_tokens"] == 5
    report("completions echo without logprobs: the prompt, then the completion", ok, str(d)[:300])
    # vLLM's prompt_logprobs: each prompt position after the first scored as echo scores it, keyed by
    # token id with rank and decoded_token, the k likeliest beside the prompt's token; completions'
    # in the choice, chat's at the top (the template's tokens, once for n choices); the generated
    # entries keep their own count of alternatives; not with stream; -1 (vLLM: the whole vocabulary) refused.
    pids = json.load(open(I + "/../ref/manifest.json"))["cases"]["text"]["unexpanded_ids"]
    st, _, d = A.json("POST", "/v1/completions", {"prompt": pids, "max_tokens": 0, "echo": True, "logprobs": 2, "prompt_logprobs": 3})
    ok, why = st == 200, str(d)[:400]
    if ok:
        c = d["choices"][0]
        lp, pl = c["logprobs"], c["prompt_logprobs"]
        ok = len(pl) == len(pids) == len(lp["tokens"]) and pl[0] is None
        for i in range(1, len(pl) if ok else 0):
            e, mine = pl[i], pl[i].get(str(pids[i]))
            if mine is None or abs(mine["logprob"] - lp["token_logprobs"][i]) > 1e-6 or mine["decoded_token"] != lp["tokens"][i]:
                ok = False
            else:  # the 3 likeliest ranked 1..3, the prompt's token among them or after them
                top3 = sorted(((v["logprob"], k) for k, v in e.items()), reverse=True)[:3]
                theirs = [e[k]["rank"] for _, k in top3]
                best2 = sorted(lp["top_logprobs"][i].values(), reverse=True)
                ok = theirs == [1, 2, 3] and all(abs(a - b) < 1e-6 for a, b in zip(best2, [x for x, _ in top3]))
                if mine["rank"] <= 3:
                    ok = ok and len(e) == 3 and mine["rank"] == 1 + sum(v["logprob"] > mine["logprob"] for v in e.values())
                else:
                    ok = ok and len(e) == 4 and mine["logprob"] < top3[-1][0]
            if not ok:
                why = "position %d: %s / %s" % (i, e, lp["top_logprobs"][i])
                break
    report("prompt_logprobs (completions): the echo's scores keyed by id, with rank and decoded_token", ok, why)
    # two prompts, two choices each: each prompt scored once, its choices carrying the same entries
    st, _, d = A.json("POST", "/v1/completions", {"prompt": ["Hello there", "Goodbye now"], "n": 2, "max_tokens": 1, "prompt_logprobs": 1})
    pls = [c.get("prompt_logprobs") for c in sorted(d.get("choices", []), key=lambda c: c["index"])] if st == 200 else []
    report("prompt_logprobs with n 2 and two prompts: each choice its prompt's entries, the prompts apart",
           len(pls) == 4 and pls[0] == pls[1] and pls[2] == pls[3] and pls[0] != pls[2] and all(p and p[0] is None for p in pls),
           "%s %s" % (st, str(d)[:400]))
    msgs = [{"role": "user", "content": "Hi there"}]
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "n": 2, "logprobs": True, "prompt_logprobs": True})
    ok = st == 200 and len(d.get("prompt_logprobs") or []) == d["usage"]["prompt_tokens"]
    if ok:
        pl = d["prompt_logprobs"]
        ok = (pl[0] is None and all(1 <= len(e) <= 2 and any(v["rank"] == 1 for v in e.values()) for e in pl[1:])
              and all(ch["logprobs"]["content"] and all(t["top_logprobs"] == [] for t in ch["logprobs"]["content"]) for ch in d["choices"])
              and all("prompt_logprobs" not in ch for ch in d["choices"]))
    report("prompt_logprobs (chat, true): the template's tokens scored once at the top; the answers' entries keep top_logprobs 0", ok,
           str(d)[:500])
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "prompt_logprobs": 1, "stream": True})
    st2, _, d2 = A.json("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1, "prompt_logprobs": -1})
    st3, _, d3 = A.json("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1})
    report("prompt_logprobs: refused with stream and at -1 (400 naming it); absent unless asked",
           st == 400 and d["error"]["param"] == "prompt_logprobs" and st2 == 400 and d2["error"]["param"] == "prompt_logprobs"
           and st3 == 200 and "prompt_logprobs" not in d3["choices"][0] and "prompt_logprobs" not in d3, str((d, d2))[:400])
    # a prompt of token ids (the fixture's own tokenization of templ), bare or as an array of one, as
    # lm-evaluation-harness sends tokenized requests: the same answer as the text
    ids = json.load(open(I + "/../ref/manifest.json"))["cases"]["text"]["unexpanded_ids"]
    body = {"max_tokens": 3, "echo": True, "logprobs": 1}
    st, _, d = A.json("POST", "/v1/completions", dict(body, prompt=templ))
    ok = st == 200
    for prompt in (ids, [ids]):
        st2, _, d2 = A.json("POST", "/v1/completions", dict(body, prompt=prompt))
        ok = ok and st2 == 200 and d2["choices"][0]["text"] == d["choices"][0]["text"] and usage_counts(d2["usage"]) == usage_counts(d["usage"]) \
            and d2["choices"][0]["logprobs"] == d["choices"][0]["logprobs"]
    report("completions of token ids equal the text's (bare and as an array of one)", ok, "%s %s" % (str(d)[:200], str(d2)[:200]))
    expect_ids = [("a token id outside the vocabulary", [5, 999999], 400, "invalid_request"),
                  ("an image placeholder id", [200010, 5], 400, "placeholder_mismatch"),
                  ("a negative token id", [5, -1], 400, "invalid_value"), ("an empty id list", [[]], 400, "invalid_value"),
                  ("an id list among prompts with a bad id", ["a", [5, -1]], 400, "invalid_value")]
    st, _, d = A.json("POST", "/v1/completions", {"prompt": [templ, [5, 999999]], "max_tokens": 2000})
    report("completions of 2 prompts, the second with a bad id: 400 naming prompt[1] before the first runs",
           st == 400 and d["error"]["param"] == "prompt[1]" and "position 1" in d["error"]["message"], str(d)[:200])
    for name, prompt, status, code in expect_ids:
        st, _, d = A.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2})
        report("completions with %s -> %d %s" % (name, status, code), st == status and d["error"]["code"] == code, str(d)[:200])
    # several choices: n samples (seed + i each), several prompts (each its own choice, in order), or
    # both; each choice is what its own request gives; the usage counts each prompt once
    def one(route, body):
        st, _, d = A.json("POST", route, body)
        return (d["choices"][0]["message"]["content"] if route.endswith("chat/completions") else d["choices"][0]["text"]) \
            if st == 200 else None, d.get("usage") if st == 200 else None
    msgs = cases["text"][0]
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "n": 3, "temperature": 1.2, "seed": 40})
    singles = [one("/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 1.2, "seed": 40 + i}) for i in range(3)]
    ok = (st == 200 and [c["index"] for c in d["choices"]] == [0, 1, 2]
          and [c["message"]["content"] for c in d["choices"]] == [t for t, _ in singles]
          and d["usage"]["prompt_tokens"] == singles[0][1]["prompt_tokens"]
          and d["usage"]["completion_tokens"] == sum(u["completion_tokens"] for _, u in singles))
    report("chat n 3 (temperature 1.2, seed 40): choice i is the request with seed 40 + i; the prompt counted once", ok, str(d)[:300])
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": cases["image+audio"][0], "max_tokens": 12, "n": 2})
    ok = st == 200 and [c["message"]["content"] for c in d["choices"]] == [expected["image+audio"]] * 2
    report("chat image+audio n 2 (greedy): both choices the CLI's answer", ok, str(d)[:300])
    prompts = [templ, "Once upon a time", ids]
    st, _, d = A.json("POST", "/v1/completions", {"prompt": prompts, "max_tokens": 4, "n": 2, "best_of": 2, "logprobs": 1})
    singles = [one("/v1/completions", {"prompt": p, "max_tokens": 4}) for p in prompts]
    ok = (st == 200 and [c["index"] for c in d["choices"]] == list(range(6))
          and [c["text"] for c in d["choices"]] == [t for t, _ in singles for _ in range(2)]
          and all(len(c["logprobs"]["tokens"]) == 4 for c in d["choices"])
          and d["usage"]["prompt_tokens"] == sum(u["prompt_tokens"] for _, u in singles)
          and d["usage"]["completion_tokens"] == 2 * sum(u["completion_tokens"] for _, u in singles))
    report("completions of 3 prompts (text, text, token ids) x n 2: six choices in order, each its prompt's greedy answer", ok, str(d)[:300])
    # streamed, the choices come one after the other, each with its index, role chunk (chat) and
    # finish chunk; the usage chunk and [DONE] once, after the last: the same texts and usage
    for name, route, body, field in (
            ("chat n 3 (temperature 1.2, seed 40)", "/v1/chat/completions",
             {"messages": msgs, "max_tokens": 6, "n": 3, "temperature": 1.2, "seed": 40}, "content"),
            ("completions of 3 prompts x n 2 with logprobs", "/v1/completions",
             {"prompt": prompts, "max_tokens": 4, "n": 2, "logprobs": 1}, "text")):
        st, _, d = A.json("POST", route, body)
        st2, ev, raw = A.stream(route, dict(body, stream=True, stream_options={"include_usage": True}))
        chunks = [x for x in ev if x != "[DONE]"]
        got, order, fin, roles, lps = {}, [], {}, {}, {}
        for x in chunks:
            for c in x["choices"]:
                i = c["index"]
                if not order or order[-1] != i:
                    order.append(i)
                piece = c["delta"].get("content", "") if field == "content" else c["text"]
                got[i] = got.get(i, "") + (piece or "")
                roles[i] = roles.get(i, 0) + (c.get("delta", {}).get("role") == "assistant")
                if c.get("logprobs"):
                    lps[i] = lps.get(i, []) + c["logprobs"]["tokens"]
                if c["finish_reason"]:
                    fin[i] = c["finish_reason"]
        want = [c["message"]["content"] if field == "content" else c["text"] for c in d["choices"]] if st == 200 else None
        ok = (st == 200 and st2 == 200 and order == list(range(len(want))) and [got[i] for i in order] == want
              and all(fin.get(i) == c["finish_reason"] for i, c in enumerate(d["choices"]))
              and (field == "text" or all(roles[i] == 1 for i in order))
              and (field == "content" or all(lps[i] == c["logprobs"]["tokens"] for i, c in enumerate(d["choices"])))
              and ev[-1] == "[DONE]" and ev.count("[DONE]") == 1 and chunks[-1]["choices"] == []
              and usage_counts(chunks[-1]["usage"]) == usage_counts(d["usage"]))
        report("%s streamed: choice after choice, the same texts, one usage chunk and [DONE]" % name, ok, raw[-300:])
    for name, route, body in (("chat n 17", "/v1/chat/completions", {"messages": msgs, "n": 17}),
                              ("completions of 9 prompts x n 2", "/v1/completions", {"prompt": ["a"] * 9, "n": 2})):
        st, _, d = A.json("POST", route, body)
        report("%s -> 400" % name, st == 400 and d["error"]["param"] == "n", str(d)[:200])
    body = {"prompt": templ, "max_tokens": 4, "echo": True, "logprobs": 1}
    st, _, d = A.json("POST", "/v1/completions", body)
    st2, ev, raw = A.stream("/v1/completions", dict(body, stream=True))
    chunks = [c for x in ev if x != "[DONE]" for c in x.get("choices", [])]
    merged = {k: [v for c in chunks if c.get("logprobs") for v in c["logprobs"][k]] for k in ("tokens", "token_logprobs", "text_offset")}
    ok = (st == 200 and st2 == 200 and "".join(c["text"] for c in chunks) == d["choices"][0]["text"]
          and d["choices"][0]["text"].startswith(templ)
          and all(merged[k] == d["choices"][0]["logprobs"][k] for k in merged))
    report("completions echo streamed: the same text and entries", ok, "status %s/%s: %s" % (st, st2, raw[-300:]))
    # vLLM's stream_options.continuous_usage_stats: every chunk carries its choice's usage so far
    # (the prompt's tokens, the tokens come), counting up to the choice's final count; the usage
    # chunk after all choices sums them as before; only beside include_usage; not a boolean: 400
    body = {"messages": msgs, "max_tokens": 6, "n": 2, "temperature": 1.0, "seed": 3, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    st, ev, raw = A.stream("/v1/chat/completions", body)
    ok, why = st == 200 and ev and ev[-1] == "[DONE]", raw[-400:]
    if ok:
        final = ev[-2]
        per = {0: [], 1: []}
        for e in ev[:-2]:
            per[e["choices"][0]["index"]].append(e["usage"])
        ok = (final["choices"] == [] and final["usage"]["completion_tokens"] == 12 and all(len(v) >= 2 for v in per.values())
              and all(u["prompt_tokens"] == final["usage"]["prompt_tokens"] and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
                      for v in per.values() for u in v)
              and all([u["completion_tokens"] for u in v] == sorted(u["completion_tokens"] for u in v) and v[-1]["completion_tokens"] == 6
                      for v in per.values()))
    st2, ev2, _ = A.stream("/v1/chat/completions", dict(body, stream_options={"continuous_usage_stats": True}))
    st3, _, d3 = A.json("POST", "/v1/chat/completions", dict(body, stream_options={"include_usage": True, "continuous_usage_stats": 1}))
    ok = ok and st2 == 200 and all("usage" not in e for e in ev2[:-1]) and st3 == 400 \
        and d3["error"]["param"] == "stream_options.continuous_usage_stats"
    report("stream_options.continuous_usage_stats: each chunk its choice's usage so far, beside include_usage only", ok, why)

    # stop strings end the text before the first occurrence, finish_reason "stop"
    ref = expected["text"]
    stop = ref[6:10]
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": cases["text"][0], "max_tokens": 12, "stop": [stop]})
    ok = st == 200 and chat_content(d) == ref[:ref.index(stop)] and d["choices"][0]["finish_reason"] == "stop"
    report("stop sequence", ok, "%r / stop %r: %s" % (ref, stop, d))

    # LongRoPE: a conversation crossing original_max_position (4,096) while decoding recomputes its
    # cache with the long factors. A (prompt thread) runs it beside the steps while a second stream
    # decodes, B (inline) in its steps; both give the CLI's text, and only A counts a recompute.
    long_text = "hello " * 4086  # 4,090 prompt tokens: the 7th generated token crosses
    lref, rc = cli("generate", "-m", M, "-n", "12", "-p", long_text)
    long_body = {"messages": [{"role": "user", "content": long_text}], "max_tokens": 12}
    for srv, name, want in ((A, "A, beside the steps", 1), (B, "B, inline", 0)):
        before = srv.metric("phi4mm_longrope_recomputes_total")
        side = {}
        th = None
        if srv is A:  # a short stream decoding meanwhile, which must give its own answer
            def short():
                side["r"] = A.stream("/v1/chat/completions", {"messages": cases["text"][0], "max_tokens": 12, "stream": True})
            th = threading.Thread(target=short)
            th.start()
        st, _, d = srv.json("POST", "/v1/chat/completions", long_body)
        if th:
            th.join(TIMEOUT)
        after = srv.metric("phi4mm_longrope_recomputes_total")
        ok = (st == 200 and rc == 0 and chat_content(d) == lref and d["usage"]["prompt_tokens"] == 4090
              and d["usage"]["completion_tokens"] == 12 and before is not None and after == before + want)
        if srv is A:
            sst, sev, _ = side.get("r", (None, [], ""))
            ok = ok and sst == 200 and stream_content(sev)[0] == expected["text"]
        report("LongRoPE crossing at 4,096 tokens (%s) equals CLI" % name, ok,
               "status %s, cli rc %s, recomputes %s -> %s: %r vs %r" % (st, rc, before, after, str(d)[:200], lref))

    # A short text request does not wait behind a busy prompt thread (--inline-prompt-max, default
    # 64 tokens): on D a 4,090-token prompt prefills 2 rows per chunk there; the short one, sent
    # meanwhile, is admitted at once and prefilled by the steps, with the CLI's answer.
    long_out = {}

    def long_req():
        long_out["r"] = D.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": long_text}], "max_tokens": 2})
    th = threading.Thread(target=long_req)
    th.start()
    busy = False
    for _ in range(400):
        if D.metric("phi4mm_preparing_requests") == 1:
            busy = True
            break
        time.sleep(0.005)
    before = D.metric("phi4mm_inline_admissions_total")
    st, _, d = D.json("POST", "/v1/chat/completions", {"messages": cases["text"][0], "max_tokens": 12})
    after = D.metric("phi4mm_inline_admissions_total")
    still = D.metric("phi4mm_preparing_requests")
    th.join(TIMEOUT)
    lst = long_out.get("r", (None,))[0]
    ok = busy and st == 200 and chat_content(d) == expected["text"] and after == before + 1 and lst == 200
    report("short text request past a busy prompt thread (inline prefill) equals CLI", ok,
           "busy %s, status %s/%s, inline admissions %s -> %s, preparing after %s: %r" % (busy, st, lst, before, after, still, str(d)[:200]))

    # the prompt cache (server D: chunks of 2 rows): every case, asked again, starts past the kept
    # chunks of its first asking and still equals the CLI; a conversation's next turn starts past
    # the history and equals server C's answer (no prompt cache there: an explicit --kv-budget)
    h0, r0 = D.metric("phi4mm_prompt_cache_hits_total"), D.metric("phi4mm_prompt_cache_reused_tokens_total")
    m0 = D.metric("phi4mm_media_cache_hits_total")
    same = []
    for name, (msgs, _) in cases.items():
        for _ in range(2):
            st, _, d = D.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 12})
            same.append(st == 200 and chat_content(d) == expected[name])
    h1, r1 = D.metric("phi4mm_prompt_cache_hits_total"), D.metric("phi4mm_prompt_cache_reused_tokens_total")
    m1 = D.metric("phi4mm_media_cache_hits_total")
    turn2 = cases["text"][0] + [{"role": "assistant", "content": expected["text"]}, {"role": "user", "content": "And of Italy?"}]
    st, _, d = D.json("POST", "/v1/chat/completions", {"messages": turn2, "max_tokens": 12})
    h2, r2 = D.metric("phi4mm_prompt_cache_hits_total"), D.metric("phi4mm_prompt_cache_reused_tokens_total")
    st3, _, d3 = C.json("POST", "/v1/chat/completions", {"messages": turn2, "max_tokens": 12})
    report("prompt cache: each case asked twice equals the CLI, the second time past its first asking and its media's encoders",
           all(same) and len(same) == 8 and h1 >= h0 + 4 and r1 - r0 >= 4 * 16 and m1 >= m0 + 3
           and C.metric("phi4mm_prompt_cache_cap_bytes") == 0,
           "same %s, hits %s -> %s, reused %s -> %s, media hits %s -> %s" % (same, h0, h1, r0, r1, m0, m1))
    report("prompt cache: a next turn starts past the history, as server C answers it without a cache",
           st == 200 and st3 == 200 and chat_content(d) == chat_content(d3) and h2 == h1 + 1 and r2 - r1 >= 16
           and d["usage"]["prompt_tokens_details"]["cached_tokens"] == r2 - r1 and d3["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
           "%r / %r, hits %s -> %s, reused %s -> %s" % (str(d)[:200], str(d3)[:200], h1, h2, r1, r2))
    # cache_salt: the same turn salted reuses nothing the unsalted ones left, nor its media's rows;
    # asked again under the same salt it does; the answers stay the CLI's; a bad salt is a 400
    salted = []
    for salt in ("tenant-a", "tenant-a"):
        salted.append(D.json("POST", "/v1/chat/completions", {"messages": cases["image"][0], "max_tokens": 12, "cache_salt": salt}))
        salted.append((D.metric("phi4mm_prompt_cache_hits_total"), D.metric("phi4mm_media_cache_hits_total")))
    (sa, _, da), (ha, ma), (sb, _, db), (hb, mb) = salted
    h3, m3 = D.metric("phi4mm_prompt_cache_hits_total"), D.metric("phi4mm_media_cache_hits_total")
    bad = [D.json("POST", "/v1/chat/completions", {"messages": cases["text"][0], "max_tokens": 2, "cache_salt": v})
           for v in ("", 7, "x" * 257)]
    sc, _, dc = D.json("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 2, "cache_salt": "tenant-b"})
    report("cache_salt: a salted request reuses only its own salt's prompt and media entries; bad salts are 400",
           sa == 200 and sb == 200 and chat_content(da) == expected["image"] and chat_content(db) == expected["image"]
           and ha == h2 and ma == m1 and hb == h2 + 1 and mb == m1 + 1
           and da["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 < db["usage"]["prompt_tokens_details"]["cached_tokens"]
           and all(s == 400 and b["error"]["param"] == "cache_salt" for s, _, b in bad) and sc == 200,
           "%s %s, hits %s -> %s -> %s, media %s -> %s -> %s, bad %s, completions %s" %
           (sa, sb, h2, ha, hb, m1, ma, mb, [(s, str(b)[:80]) for s, _, b in bad], sc))
    # --draft (server D): a request pushed to repeat a word (a logit bias) decodes with drafts taken,
    # and answers as server A (no drafts) does, streamed or not
    word = "1000"  # a plain token of the vocabulary
    db = {"messages": cases["text"][0], "max_tokens": 24, "logit_bias": {word: 100}}
    t0, a0 = D.metric("phi4mm_draft_tokens_total"), D.metric("phi4mm_draft_accepted_total")
    st, _, d = D.json("POST", "/v1/chat/completions", db)
    st2, _, d2 = A.json("POST", "/v1/chat/completions", db)
    st3, ev, _ = D.stream("/v1/chat/completions", dict(db, stream=True))
    t1, a1 = D.metric("phi4mm_draft_tokens_total"), D.metric("phi4mm_draft_accepted_total")
    report("--draft: drafts taken, the answer the same as without them (streamed too)",
           st == st2 == st3 == 200 and chat_content(d) == chat_content(d2) and stream_content(ev)[0] == chat_content(d)
           and usage_counts(d["usage"]) == usage_counts(d2["usage"]) and a1 > a0 and t1 >= a1 and A.metric("phi4mm_draft_tokens_total") == 0,
           "%s / %s; drafted %s -> %s, taken %s -> %s" % (str(d)[:200], str(d2)[:200], t0, t1, a0, a1))

    # local media path inside --allow-media-dir gives the same answer as the data: URL
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file://" + I + "/image.png"}},
                                         {"type": "text", "text": "Describe the image in detail."}]}]
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 12})
    report("image from --allow-media-dir path", st == 200 and chat_content(d) == expected["image"], "%s %s" % (st, d))
    remote_urls(A, B, D, I, expected["image"], expected["audio"])
    # predicted outputs (OpenAI's prediction): the answer without it, its tokens drafted and taken
    # (completion_tokens_details), streamed too; an unrelated prediction changes nothing either
    tb = {"messages": cases["text"][0], "max_tokens": 12}
    sp, _, dp = A.json("POST", "/v1/chat/completions", dict(tb, prediction={"type": "content", "content": expected["text"]}))
    sq, ev, _ = A.stream("/v1/chat/completions", dict(tb, stream=True, stream_options={"include_usage": True},
                                                      prediction={"type": "content", "content": [{"type": "text", "text": expected["text"]}]}))
    su, _, du = A.json("POST", "/v1/chat/completions", dict(tb, prediction={"type": "content", "content": "Nothing like it."}))
    det = (dp.get("usage") or {}).get("completion_tokens_details", {}) if isinstance(dp, dict) else {}
    sdet = next((x["usage"] for x in reversed(ev) if isinstance(x, dict) and x.get("usage")), {}).get("completion_tokens_details", {})
    report("prediction: the same answer, its tokens drafted and taken (usage.completion_tokens_details), streamed too",
           sp == sq == su == 200 and chat_content(dp) == stream_content(ev)[0] == chat_content(du) == expected["text"]
           and det.get("accepted_prediction_tokens", 0) >= 6 and sdet.get("accepted_prediction_tokens", 0) >= 6
           and du["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0,
           "%s %s / %s %s / %s %s" % (sp, str(dp)[:300], sq, sdet, su, str(du.get("usage"))[:200]))
    # fewer HD crops per image (vLLM's mm_processor_kwargs.dynamic_hd; the CLI's --max-crops): the CLI's
    # answer, fewer prompt tokens; the default again afterwards (the media cache keeps the two apart)
    ref1, rc1 = cli("generate", "-m", M, "-n", "12", "--max-crops", "1", "--image", I + "/image.png", "-p",
                    "<|image_1|>Describe the image in detail.")
    img_body = lambda **kw: dict({"messages": cases["image"][0], "max_tokens": 12}, **kw)
    s36, _, d36 = A.json("POST", "/v1/chat/completions", img_body())
    s1, _, d1 = A.json("POST", "/v1/chat/completions", img_body(mm_processor_kwargs={"dynamic_hd": 1}))
    s36b, _, d36b = A.json("POST", "/v1/chat/completions", img_body())
    t1 = A.json("POST", "/tokenize", {"messages": cases["image"][0], "mm_processor_kwargs": {"dynamic_hd": 1}})[2]
    report("mm_processor_kwargs dynamic_hd 1: the CLI's --max-crops 1 answer, fewer prompt tokens; the default unchanged around it",
           rc1 == 0 and s36 == s1 == s36b == 200 and chat_content(d1) == ref1 and chat_content(d36) == chat_content(d36b) == expected["image"]
           and ref1 != expected["image"] and d1["usage"]["prompt_tokens"] == t1.get("count") < d36["usage"]["prompt_tokens"],
           "cli %s %r; %s %s / %s %s / %s; tokenize %s" % (rc1, ref1, s1, str(d1)[:160], s36, str(d36.get("usage")), s36b, str(t1)[:80]))
    # a GIF (its first frame, as PIL's): the CLI's answer about the same file
    box = tempfile.mkdtemp()
    try:
        from PIL import Image
        Image.open(I + "/image.png").convert("P", palette=Image.ADAPTIVE, colors=64).save(box + "/image.gif")
        gref, grc = cli("generate", "-m", M, "-n", "12", "--image", box + "/image.gif", "-p", "<|image_1|>Describe the image in detail.")
        gif_url = "data:image/gif;base64," + b64(box + "/image.gif")
    finally:
        shutil.rmtree(box)
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": gif_url}},
                                         {"type": "text", "text": "Describe the image in detail."}]}]
    st, _, d = A.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 12})
    report("a GIF image: the CLI's answer about the same file", grc == 0 and gref and st == 200 and chat_content(d) == gref,
           "%s %s vs %r" % (st, str(d)[:200], gref))

    # ------------------------------------------------------------ transcriptions / translations
    ref, rc = cli("transcribe", "-m", M, "-n", "12", I + "/clip_a_16k.wav")
    expected["transcribe"] = ref
    wav_bytes = open(I + "/clip_a_16k.wav", "rb").read()
    for fmt in ("json", "verbose_json", "text"):
        body, ct = multipart({"model": "phi4mm", "response_format": fmt, "max_tokens": "12"}, {"file": ("a.wav", wav_bytes)})
        st, h, data = A.request("POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
        text = data.decode() if fmt == "text" else json.loads(data).get("text")
        ok = st == 200 and text == ref
        if fmt == "verbose_json":
            v = json.loads(data)
            ok = ok and v["task"] == "transcribe" and abs(v["duration"] - 2.0) < 1e-6 and len(v["segments"][0]["tokens"]) == 12
        report("transcription %s equals CLI transcribe" % fmt, ok, "%s %r vs %r" % (st, data[:300], ref))
    body, ct = multipart({"model": "phi4mm", "stream": "true", "max_tokens": "12"}, {"file": ("a.wav", wav_bytes)})
    st, ev, raw = A.stream("/v1/audio/transcriptions", body, {"Content-Type": ct})
    deltas = "".join(e["delta"] for e in ev if e != "[DONE]" and e.get("type") == "transcript.text.delta")
    done = [e for e in ev if e != "[DONE]" and e.get("type") == "transcript.text.done"]
    ok = st == 200 and deltas == ref and len(done) == 1 and done[0]["text"] == ref
    report("transcription stream (transcript.text.delta/done)", ok, raw[-300:])
    tref, rc = cli("generate", "-m", M, "-n", "12", "--audio", I + "/clip_a_16k.wav", "-p", "<|audio_1|>Translate the audio to French.")
    body, ct = multipart({"model": "phi4mm", "language": "fr", "max_tokens": "12"}, {"file": ("a.wav", wav_bytes)})
    st, _, d = A.json("POST", "/v1/audio/translations", body, {"Content-Type": ct})
    report("translation (AST prompt, language=fr) equals CLI", st == 200 and d.get("text") == tref, "%s %s vs %r" % (st, d, tref))
    # what phones and browsers record: ALAC in M4A (lossless: the WAV's own text), Opus in WebM (the
    # CLI's text of the same file), a chat part labelled m4a; a WebM cut short is a 400 naming it
    box = tempfile.mkdtemp()
    try:
        for ext, codec in (("m4a", "alac"), ("webm", "libopus")):
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", I + "/clip_a_16k.wav", "-c:a", codec, "%s/a.%s" % (box, ext)], check=True)
        m4a, webm = (open("%s/a.%s" % (box, e), "rb").read() for e in ("m4a", "webm"))
        wref, rc2 = cli("transcribe", "-m", M, "-n", "12", box + "/a.webm")
        got = []
        for fname, data in (("a.m4a", m4a), ("a.webm", webm)):
            body, ct = multipart({"model": "phi4mm", "max_tokens": "12"}, {"file": (fname, data)})
            got.append(A.json("POST", "/v1/audio/transcriptions", body, {"Content-Type": ct}))
        chat_a = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": base64.b64encode(m4a).decode(), "format": "m4a"}},
                                               {"type": "text", "text": "Transcribe the audio clip into text."}]}]
        st3, _, d3 = A.json("POST", "/v1/chat/completions", {"messages": chat_a, "max_tokens": 12})
        st4, _, d4 = A.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [audio_part(), chat_a[0]["content"][1]]}],
                                                            "max_tokens": 12})
        body, ct = multipart({"model": "phi4mm"}, {"file": ("cut.webm", webm[:len(webm) // 2])})
        st5, _, d5 = A.json("POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    finally:
        shutil.rmtree(box)
    ok = (rc2 == 0 and wref and got[0][0] == 200 and got[0][2]["text"] == ref and got[1][0] == 200 and got[1][2]["text"] == wref
          and st3 == st4 == 200 and chat_content(d3) == chat_content(d4) and st5 == 400 and err_code(d5) == "invalid_audio"
          and "truncated" in d5["error"]["message"])
    report("M4A (ALAC: the WAV's text) and WebM (Opus: the CLI's text) transcribed; a chat part labelled m4a; a cut WebM a 400", ok,
           "%s / %r / %s %s / %s" % ([g[2] for g in got], wref, st3, st4, str(d5)[:200]))
    # include[] logprobs: each generated token's entry, the chat completion's for the same prompt
    # (the clip, then the instruction); streamed, the done event has them all
    body, ct = multipart({"model": "phi4mm", "max_tokens": "12", "include[]": "logprobs"}, {"file": ("a.wav", wav_bytes)})
    st, _, v = A.json("POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    st2, _, dc = A.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
        audio_part("clip_a_16k"), {"type": "text", "text": "Transcribe the audio clip into text."}]}], "max_tokens": 12, "logprobs": True})
    want = [{k: e[k] for k in ("token", "logprob", "bytes")} for e in dc["choices"][0]["logprobs"]["content"]] if st2 == 200 else None
    body, ct = multipart({"model": "phi4mm", "max_tokens": "12", "include[]": "logprobs", "stream": "true"}, {"file": ("a.wav", wav_bytes)})
    st3, ev, raw = A.stream("/v1/audio/transcriptions", body, {"Content-Type": ct})
    done = [e for e in ev if e != "[DONE]" and e.get("type") == "transcript.text.done"]
    ok = (st == 200 and v["text"] == ref and v.get("logprobs") == want and len(want) == 12 and chat_content(dc) == ref
          and st3 == 200 and len(done) == 1 and done[0].get("logprobs") == want)
    report("transcription include[] logprobs = the chat completion's (streamed: in the done event)", ok,
           "%s %s vs %s" % (st, str(v)[:300], str(want)[:300]))
    # chunking_strategy auto: the 41 s clip in pieces of at most 30 s, the same pieces and texts as
    # `transcribe --chunk 30` (each piece the text it gets alone: transcribe.sh), streamed as one transcript
    lref, rc = cli("transcribe", "-m", M, "-n", "6", "--chunk", "30", "--jsonl", I + "/clip_long_16k.wav")
    lref = json.loads(lref)
    long_bytes = open(I + "/clip_long_16k.wav", "rb").read()
    body, ct = multipart({"model": "phi4mm", "response_format": "verbose_json", "max_tokens": "6", "chunking_strategy": "auto"},
                         {"file": ("long.wav", long_bytes)})
    st, _, v = A.json("POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    segs = v.get("segments", []) if st == 200 else []
    ok = (st == 200 and v["text"] == lref["text"] and len(segs) == len(lref["segments"]) == 2 and abs(v["duration"] - 41.0) < 1e-6
          and [(g["start"], g["end"], g["text"]) for g in segs] == [(g["start"], g["end"], g["text"]) for g in lref["segments"]]
          and all(len(g["tokens"]) == 6 for g in segs) and v["usage"]["output_tokens"] == 12 and segs[1]["seek"] == round(segs[1]["start"] * 100))
    report("chunking_strategy auto: pieces and text = transcribe --chunk 30", ok, "%s %s vs %s" % (st, str(v)[:500], str(lref)[:300]))
    def stamp(t, sep):
        ms = int(t * 1000 + 0.5)
        return "%02d:%02d:%02d%s%03d" % (ms // 3600000, ms // 60000 % 60, ms // 1000 % 60, sep, ms % 1000)
    want_srt = "".join("%d\n%s --> %s\n%s\n\n" % (i + 1, stamp(g["start"], ","), stamp(g["end"], ","), g["text"].replace("\n", " "))
                       for i, g in enumerate(lref["segments"]))
    want_vtt = "WEBVTT\n\n" + "".join("%s --> %s\n%s\n\n" % (stamp(g["start"], "."), stamp(g["end"], "."), g["text"].replace("\n", " "))
                                      for g in lref["segments"])
    subs = []
    for fmt in ("srt", "vtt"):
        body, ct = multipart({"model": "phi4mm", "response_format": fmt, "max_tokens": "6", "chunking_strategy": "auto"},
                             {"file": ("long.wav", long_bytes)})
        subs.append(A.request("POST", "/v1/audio/transcriptions", body, {"Content-Type": ct}))
    ok = (subs[0][0] == subs[1][0] == 200 and subs[0][2].decode() == want_srt and subs[1][2].decode() == want_vtt
          and subs[1][1]["content-type"].startswith("text/vtt") and "-->" not in "".join(g["text"] for g in lref["segments"]))
    report("response_format srt / vtt: a cue a piece with its times", ok, "%r / %r vs %r" % (subs[0][2][:300], subs[1][2][:200], want_srt[:300]))
    body, ct = multipart({"model": "phi4mm", "stream": "true", "max_tokens": "6", "chunking_strategy": "auto"}, {"file": ("long.wav", long_bytes)})
    st, ev, raw = A.stream("/v1/audio/transcriptions", body, {"Content-Type": ct})
    deltas = "".join(e["delta"] for e in ev if e != "[DONE]" and e.get("type") == "transcript.text.delta")
    done = [e for e in ev if e != "[DONE]" and e.get("type") == "transcript.text.done"]
    ok = st == 200 and deltas == lref["text"] and len(done) == 1 and done[0]["text"] == lref["text"] and done[0]["usage"]["output_tokens"] == 12
    report("chunking_strategy auto streamed: the deltas add up to the pieces' joined text", ok, raw[-400:])
    with open(args.expected, "w") as f:
        json.dump(expected, f)

    # ------------------------------------------------------------ isolation
    clips = ["clip_a_16k", "clip_b_8k", "clip_c_48k", "clip_d_22k"]
    prompts = ["Describe it.", "What do you notice?", "Summarise in one line.", "Give three words."]
    reqs = []
    for v in range(4):
        variant = {"max_tokens": 6 + 2 * v}
        if v == 2:
            variant.update({"temperature": 0.8, "top_p": 0.9, "seed": 17 + v})
        if v in (1, 3):
            variant.update({"stream": True, "stream_options": {"include_usage": v == 3}})
        for mode in ("text", "image", "audio", "image+audio"):
            parts = []
            if "image" in mode:
                parts.append(image_part())
            if "audio" in mode:
                parts.append(audio_part(clips[v]))
            parts.append({"type": "text", "text": prompts[v]})
            msgs = [{"role": "user", "content": parts}]
            if v == 3:
                msgs.insert(0, {"role": "system", "content": "Answer briefly."})
            reqs.append((mode, dict(variant, messages=msgs)))

    def run(body):
        if body.get("stream"):
            st, ev, raw = A.stream("/v1/chat/completions", body)
            text, finish, usage, done = stream_content(ev) if st == 200 else (raw, None, None, False)
            return st, text, finish, done
        st, _, d = A.json("POST", "/v1/chat/completions", body)
        return (st, chat_content(d), d["choices"][0]["finish_reason"], usage_counts(d["usage"])) if st == 200 else (st, d, None, None)

    t0 = time.time()
    alone = [run(b) for _, b in reqs]
    t_alone = time.time() - t0
    order = list(range(len(reqs)))
    random.Random(1234).shuffle(order)
    together = [None] * len(reqs)
    peak = [0]
    stop_poll = threading.Event()

    def poll():
        for _ in range(2000):
            if stop_poll.is_set():
                return
            v = A.metric("phi4mm_active_sequences")
            peak[0] = max(peak[0], int(v or 0))
            time.sleep(0.05)

    def worker(i, delay):
        time.sleep(delay)
        try:
            together[i] = run(reqs[i][1])
        except Exception as ex:  # reported as a mismatch below
            together[i] = ("exception", repr(ex))

    poller = threading.Thread(target=poll)
    poller.start()
    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(i, 0.03 * k)) for k, i in enumerate(order)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    t_together = time.time() - t0
    stop_poll.set()
    poller.join()
    same = [alone[i] == together[i] and alone[i][0] == 200 for i in range(len(reqs))]
    per_mode = {}
    for (mode, _), s in zip(reqs, same):
        per_mode.setdefault(mode, [0, 0])
        per_mode[mode][0] += s
        per_mode[mode][1] += 1
    summary = ("isolation: %d concurrent requests (%s; %d streamed, %d sampled with a seed), interleaved arrival 30 ms apart, "
               "peak %d live sequences: %d/%d identical to the same request alone [alone %.1f s sequential, together %.1f s]"
               % (len(reqs), ", ".join("%s %d/%d" % (m, a, b) for m, (a, b) in per_mode.items()),
                  sum(1 for _, b in reqs if b.get("stream")), sum(1 for _, b in reqs if b.get("temperature")),
                  peak[0], sum(same), len(same), t_alone, t_together))
    print(summary, flush=True)
    bad = [i for i, s in enumerate(same) if not s]
    report("isolation 16 concurrent mixed-mode requests", not bad and peak[0] >= 2,
           "; ".join("#%d %s: %r vs %r" % (i, reqs[i][0], alone[i], together[i]) for i in bad[:3]) or "peak %d" % peak[0])

    # ------------------------------------------------------------ cancellation
    def cancelled_count():
        m = re.search(r'^phi4mm_request_finish_total\{reason="cancelled"\} (\d+)$', A.metrics(), re.M)
        return int(m.group(1)) if m else -1

    def wait_active_zero(limit=10.0):
        t = time.time()
        while time.time() - t < limit:
            if A.metric("phi4mm_active_sequences") == 0:
                return time.time() - t
            time.sleep(0.02)
        return None

    before = cancelled_count()
    c = A.conn()
    c.request("POST", "/v1/chat/completions", body=json.dumps({"messages": [{"role": "user", "content": "Go on forever."}],
                                                                 "max_tokens": 100000, "stream": True}),
              headers=A.headers({"Content-Type": "application/json"}))
    r = c.getresponse()
    got = 0
    for _ in range(200):
        line = r.fp.readline()
        if line.startswith(b"data: ") and b'"content"' in line:
            got += 1
            if got >= 4:
                break
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    dt = wait_active_zero()
    ok = got >= 4 and dt is not None and cancelled_count() == before + 1 and A.health_ok()
    report("cancel mid-stream frees the sequence", ok, "chunks %d, active->0 after %s s, cancelled %d->%d" % (got, dt, before, cancelled_count()))

    before = cancelled_count()
    s = socket.create_connection((A.host, A.port), timeout=TIMEOUT)
    body = json.dumps({"messages": [{"role": "user", "content": "Go on forever."}], "max_tokens": 100000}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + args.key.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    t = time.time()
    while time.time() - t < 10 and A.metric("phi4mm_active_sequences") != 1:
        time.sleep(0.02)
    waited = time.time() - t
    s.close()
    dt = wait_active_zero()
    after = cancelled_count()
    ok = dt is not None and after == before + 1 and A.health_ok()
    report("cancel of a waiting non-streamed request frees the sequence", ok,
           "active after %.2f s, ->0 after %s s, cancelled %d->%d" % (waited, dt, before, after))

    # ------------------------------------------------------------ errors
    def expect(name, st_want, code_want, method, path, body=None, headers=None, key=True, server=A):
        st, h, d = server.json(method, path, body, headers, key)
        ok = st == st_want and err_code(d) == code_want and d["error"]["message"] and "type" in d["error"] and "param" in d["error"]
        report("%s -> %d %s" % (name, st_want, code_want), ok, "got %s %s" % (st, str(d)[:300]))
        return d

    chat = "/v1/chat/completions"
    jh = {"Content-Type": "application/json"}
    expect("bad JSON", 400, "invalid_json", "POST", chat, b'{"messages": [', jh)
    expect("JSON nested 100 deep", 400, "invalid_json", "POST", chat, b"[" * 100 + b"]" * 100, jh)
    expect("JSON of 300,000 values (jansson: ~40 bytes each)", 400, "invalid_json", "POST", chat,
           b'{"messages":[{"role":"user","content":"hi"}],"x":[' + b"0," * 299999 + b"0]}", jh)
    # a 20 MB one-word prompt: refused from its length alone, before its BPE (which would take seconds and GBs)
    st, _, d = A.json("POST", chat, {"messages": [{"role": "user", "content": "a" * 20000000}], "max_tokens": 4})
    report("20 MB one-word prompt -> 400 context_length_exceeded, encoding stopped", st == 400 and err_code(d) == "context_length_exceeded" and
           "encoding stopped" in str(d), "got %s %s" % (st, str(d)[:200]))
    expect("missing messages", 400, "missing_required_parameter", "POST", chat, {"model": "x"})
    d = expect("bad base64 audio", 400, "invalid_base64", "POST", chat,
               {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklGR!!!", "format": "wav"}}]}]})
    report("bad base64 names the field", isinstance(d, dict) and d.get("error", {}).get("param") == "messages[0].content[0].input_audio.data", str(d))
    expect("bad base64 image", 400, "invalid_base64", "POST", chat,
           {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO=w=="}}]}]})
    expect("undecodable image bytes", 400, "invalid_image", "POST", chat,
           {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8gd29ybGQ="}}]}]})
    expect("unknown content part", 400, "unknown_content_part", "POST", chat,
           {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}]})
    expect("remote image URL (server C: no --allow-media-hosts)", 400, "unsupported_url", "POST", chat,
           {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}, server=C)
    expect("local path outside media dir", 400, "invalid_image_url", "POST", chat,
           {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]})
    expect("placeholder without media", 400, "placeholder_mismatch", "POST", chat,
           {"messages": [{"role": "user", "content": "<|image_1|>What is this?"}]})
    expect("two placeholders, one image", 400, "placeholder_mismatch", "POST", chat,
           {"messages": [{"role": "user", "content": [image_part(), {"type": "text", "text": "<|image_1|><|image_2|>Compare."}]}]})
    expect("audio placeholder numbered wrong", 400, "placeholder_mismatch", "POST", chat,
           {"messages": [{"role": "user", "content": [audio_part(), {"type": "text", "text": "<|audio_2|>Transcribe."}]}]})
    expect("n=17", 400, "invalid_value", "POST", chat, {"messages": [{"role": "user", "content": "hi"}], "n": 17})
    d = expect("mm_processor_kwargs dynamic_hd 0", 400, "invalid_value", "POST", chat,
               {"messages": [{"role": "user", "content": "hi"}], "mm_processor_kwargs": {"dynamic_hd": 0}})
    report("mm_processor_kwargs dynamic_hd 0 names the field", isinstance(d, dict) and d.get("error", {}).get("param") == "mm_processor_kwargs.dynamic_hd", str(d)[:200])
    expect("mm_processor_kwargs of another processor setting", 400, "unsupported_parameter", "POST", chat,
           {"messages": [{"role": "user", "content": "hi"}], "mm_processor_kwargs": {"num_crops": 4}})
    cmpl = "/v1/completions"
    expect("completions without a prompt", 400, "missing_required_parameter", "POST", cmpl, {"max_tokens": 2})
    expect("completions with an empty prompt", 400, "invalid_value", "POST", cmpl, {"prompt": ""})
    expect("completions with a number as prompt", 400, "invalid_type", "POST", cmpl, {"prompt": 5})
    expect("completions with a media placeholder", 400, "placeholder_mismatch", "POST", cmpl, {"prompt": "<|audio_1|>Transcribe."})
    expect("completions with logprobs 6", 400, "invalid_value", "POST", cmpl, {"prompt": "hi", "logprobs": 6})
    expect("chat top_logprobs without logprobs", 400, "invalid_value", "POST", chat,
           {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})
    expect("chat top_logprobs 21", 400, "invalid_value", "POST", chat,
           {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21})
    expect("completions with max_tokens 0 without echo", 400, "invalid_value", "POST", cmpl, {"prompt": "hi", "max_tokens": 0})
    expect("completions with best_of 3", 400, "unsupported_value", "POST", cmpl, {"prompt": "hi", "best_of": 3})
    expect("max_tokens as a string", 400, "invalid_type", "POST", chat, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "5"})
    expect("wrong API key", 401, "invalid_api_key", "POST", chat, {"messages": [{"role": "user", "content": "hi"}]},
           {"Authorization": "Bearer nope"}, key=False)
    expect("missing API key", 401, "invalid_api_key", "GET", "/v1/models", key=False)
    expect("unknown endpoint", 404, "not_found", "GET", "/v1/nothing")
    expect("wrong method", 405, "method_not_allowed", "GET", chat)
    body, ct = multipart({"model": "x"}, {})
    expect("transcription without file", 400, "missing_required_parameter", "POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    body, ct = multipart({"model": "x"}, {"file": ("a.wav", b"not audio at all")})
    expect("transcription of a non-audio file", 400, "invalid_audio", "POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    body, ct = multipart({"chunking_strategy": '{"type": "server_vad"}'}, {"file": ("a.wav", wav_bytes)})
    expect("chunking_strategy server_vad refused", 400, "unsupported_value", "POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    body, ct = multipart({"response_format": "verbose_json", "timestamp_granularities[]": "word"}, {"file": ("a.wav", wav_bytes)})
    expect("word timestamps refused", 400, "unsupported_value", "POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    body, ct = multipart({"response_format": "srt", "include[]": "logprobs"}, {"file": ("a.wav", wav_bytes)})
    expect("logprobs with srt refused", 400, "invalid_value", "POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    # a clip of more pieces than the server queues (121 s: 5 pieces, server D's --max-queue 4) is a 400
    import io, wave as wavemod
    w = wavemod.open(io.BytesIO(open(I + "/clip_long_16k.wav", "rb").read()))
    pcm, sr = w.readframes(w.getnframes()), w.getframerate()
    out = io.BytesIO()
    o = wavemod.open(out, "wb"); o.setnchannels(1); o.setsampwidth(2); o.setframerate(sr); o.writeframes((pcm * 3)[:2 * sr * 121]); o.close()
    body, ct = multipart({"chunking_strategy": "auto", "max_tokens": "2"}, {"file": ("a.wav", out.getvalue())})
    expect("a clip of more pieces than --max-queue", 400, "limit_exceeded", "POST", "/v1/audio/transcriptions", body, {"Content-Type": ct}, server=D)
    body, ct = multipart({"chunking_strategy": "always"}, {"file": ("a.wav", wav_bytes)})
    expect("chunking_strategy other than auto refused", 400, "invalid_value", "POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    report("health without API key", A.health_ok())

    # oversized bodies: declared (answered before the body is read) and chunked (counted while read)
    def read_status(s):
        """The status of the response read from socket s (None if it closed first)."""
        data = b""
        while b"\r\n\r\n" not in data:
            b = s.recv(65536)
            if not b:
                break
            data += b
        m = re.match(rb"HTTP/1\.[01] (\d+)", data)
        return int(m.group(1)) if m else None

    def raw_status(server, head, chunks=()):
        s = socket.create_connection((server.host, server.port), timeout=TIMEOUT)
        try:
            s.sendall(head)
            try:
                for ch in chunks:
                    s.sendall(ch)
            except OSError:
                pass  # the server may close once the cap is passed
            return read_status(s)
        finally:
            s.close()

    st = raw_status(A, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + args.key.encode() +
                    b"\r\nContent-Type: application/json\r\nContent-Length: 70000000\r\n\r\n")
    report("declared 70 MB body -> 413 (default 64 MiB cap)", st == 413, "got %s" % st)
    piece = b"x" * 65536
    chunks = [b"%x\r\n" % len(piece) + piece + b"\r\n"] * 24 + [b"0\r\n\r\n"]
    st = raw_status(B, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n", chunks)
    report("chunked 1.5 MB body over a 1M cap -> 413", st == 413, "got %s" % st)

    # ------------------------------------------------------------ overload (server B: 1 slot, queue 1)
    c1 = B.conn()
    c1.request("POST", chat, body=json.dumps({"messages": [{"role": "user", "content": "Long."}], "max_tokens": 100000, "stream": True}),
               headers={"Content-Type": "application/json"})
    r1 = c1.getresponse()
    r1.fp.readline()  # admitted: the first chunk arrived
    holder = {}

    def second():
        holder["r"] = B.json("POST", chat, {"messages": [{"role": "user", "content": "Short."}], "max_tokens": 3})

    t2 = threading.Thread(target=second)
    t2.start()
    t = time.time()
    while time.time() - t < 10:
        st, _, h = B.json("GET", "/health")
        if h.get("queue_depth") == 1:
            break
        time.sleep(0.02)
    st, hd, d = B.json("POST", chat, {"messages": [{"role": "user", "content": "Third."}], "max_tokens": 3})
    ok = st == 503 and err_code(d) == "overloaded" and hd.get("retry-after") == "1"
    report("overload -> 503 with Retry-After", ok, "got %s %s %s" % (st, hd.get("retry-after"), d))
    c1.sock.shutdown(socket.SHUT_RDWR)
    c1.close()
    t2.join(TIMEOUT)
    st2 = holder.get("r", (None,))[0]
    report("queued request served after the slot frees", st2 == 200, "got %s" % (holder.get("r"),))
    report("overloaded server healthy afterwards", B.health_ok())

    # ------------------------------------------------------------ KV budget (server C: 4 slots, 3 MiB)
    # Every request reserves, while it lives, its prompt plus max_tokens in whole KV pages (96 KiB per
    # 128 positions on the tiny model) and the rows it keeps beside them (its logits over the 200,064
    # ids, 0.8 MB, and its prompt's embeddings): "Long." + 3000 tokens needs 24 pages + 0.8 MB, over
    # 3 MiB; + 2300 tokens 19 pages + 0.8 MB fits, and leaves no room for another page + 0.8 MB.
    budget = C.metric("phi4mm_kv_budget_bytes")
    report("KV budget exported", budget == 3 << 20, "got %s" % budget)
    st, _, d = C.json("POST", chat, {"messages": [{"role": "user", "content": "Long."}], "max_tokens": 3000})
    msg = d.get("error", {}).get("message", "") if isinstance(d, dict) else ""
    report("request larger than the KV budget -> 400 limit_exceeded", st == 400 and err_code(d) == "limit_exceeded" and "KV budget" in msg,
           "got %s %s" % (st, d))
    c1 = C.conn()
    c1.request("POST", chat, body=json.dumps({"messages": [{"role": "user", "content": "Long."}], "max_tokens": 2300, "stream": True}),
               headers={"Content-Type": "application/json"})
    r1 = c1.getresponse()
    r1.fp.readline()  # admitted: the first chunk arrived
    reserved = C.metric("phi4mm_kv_reserved_bytes") or 0
    report("a live request reserves its worst case", 0 < reserved <= budget, "reserved %s of %s" % (reserved, budget))
    held = {}

    def waiter():
        held["r"] = C.json("POST", chat, {"messages": [{"role": "user", "content": "Short."}], "max_tokens": 64})

    t2 = threading.Thread(target=waiter)
    t2.start()
    seen, t = None, time.time()
    while time.time() - t < 10:
        st, _, h = C.json("GET", "/health")
        if h.get("queue_depth") == 1:
            seen = h
            break
        time.sleep(0.02)
    time.sleep(0.5)  # still waiting half a second later (a request merely passing through the queue is gone by then)
    st, _, later = C.json("GET", "/health")
    report("a request that does not fit beside it waits in the queue (free slots, no KV room)",
           seen is not None and later.get("queue_depth") == 1 and later.get("active_sequences") == 1 and "r" not in held,
           "health %s, then %s" % (seen, later))
    c1.sock.shutdown(socket.SHUT_RDWR)
    c1.close()
    t2.join(TIMEOUT)
    st2 = held.get("r", (None,))[0]
    report("the waiting request is served once the KV cache frees", st2 == 200 and bool(chat_content(held["r"][2])),
           "got %s" % (held.get("r"),))
    t = time.time()
    while time.time() - t < 10 and C.metric("phi4mm_kv_reserved_bytes") != 0:
        time.sleep(0.02)
    report("KV reservations return to 0", C.metric("phi4mm_kv_reserved_bytes") == 0 and C.health_ok())

    # ------------------------------------------------------------ decoded-media budget (server C: 2 MiB)
    # clip_long_16k (41 s at 16 kHz) decodes to 5.2 MB of samples: more than the server may hold for
    # every request together, so it can never fit (413); clip_a (2 s, 256 KB) fits. Every byte is
    # given back whatever the outcome (/health request_bytes).
    with open(I + "/clip_long_16k.wav", "rb") as f:
        long_wav = f.read()
    body, ct = multipart({"model": "phi4mm", "max_tokens": "4"}, {"file": ("long.wav", long_wav)})
    st, _, d = C.json("POST", "/v1/audio/transcriptions", body, {"Content-Type": ct})
    report("transcription decoding past the media budget -> 413 media_too_large", st == 413 and err_code(d) == "media_too_large",
           "got %s %s" % (st, d))
    long_part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(long_wav).decode(), "format": "wav"}}
    st, _, d = C.json("POST", chat, {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."}, long_part]}],
                                     "max_tokens": 4})
    report("chat audio past the media budget -> 413 media_too_large", st == 413 and err_code(d) == "media_too_large", "got %s %s" % (st, d))
    st, _, d = C.json("POST", chat, {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi."}, audio_part()]}],
                                     "max_tokens": 4})
    st_h, _, h = C.json("GET", "/health")
    report("audio within the media budget served, every decoded byte given back", st == 200 and h.get("request_bytes") == 0,
           "got %s %s, health %s" % (st, str(d)[:200], h))
    # Bodies are charged too: a 3 MB body can never be buffered in 2 MiB (413); while a 1.5 MB upload
    # is under way (its 2 MiB buffer held), even a small request finds no room (503, Retry-After).
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 3000000}], "max_tokens": 2}).encode()
    st = raw_status(C, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(big), [big])
    report("body larger than the request memory -> 413", st == 413, "got %s" % st)
    slow = socket.create_connection((C.host, C.port), timeout=TIMEOUT)
    half = json.dumps({"messages": [{"role": "user", "content": "y" * 1500000}], "max_tokens": 2}).encode()
    slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % len(half) + half[:-10])
    held, t = 0, time.time()
    while time.time() - t < 10 and held < 2 << 20:  # the whole 2 MiB buffer (1.5 MB arrived)
        held = C.json("GET", "/health")[2].get("request_bytes") or 0
        time.sleep(0.02)
    st, hd, d = C.json("POST", chat, {"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2})
    report("no room beside an upload in progress -> 503 overloaded with Retry-After",
           held >= 2 << 20 and st == 503 and err_code(d) == "overloaded" and hd.get("retry-after") == "1",
           "held %s, got %s %s" % (held, st, d))
    slow.sendall(half[-10:])
    st_slow = read_status(slow)
    slow.close()
    st, _, d = C.json("POST", chat, {"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2})
    report("the upload completes (answered: its 1.5 M-character prompt is over the context) and the memory comes back",
           st_slow == 400 and st == 200 and C.json("GET", "/health")[2].get("request_bytes") == 0, "upload %s, then %s" % (st_slow, st))

    # ------------------------------------------------------------ after all that
    st, _, d = A.json("POST", chat, {"messages": cases["text"][0], "max_tokens": 12})
    report("server still answers correctly after the error checks", st == 200 and chat_content(d) == expected["text"] and A.health_ok(),
           str(d)[:200])
    m = A.metrics()
    need = ['phi4mm_requests_total{endpoint="chat",mode="vision_speech",status="200"}', 'status="400"', "phi4mm_queue_depth 0",
            "phi4mm_active_sequences 0", "phi4mm_preparing_requests 0", "phi4mm_tokens_per_second", "phi4mm_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
            'phi4mm_requests_total{endpoint="transcriptions",mode="speech",status="200"}']
    missing = [n for n in need if n not in m]
    audio_s = A.metric("phi4mm_audio_seconds_total") or 0
    report("metrics exposition", not missing and audio_s > 0, "missing %s, audio %s" % (missing, audio_s))
    print("%d checks, %d failed" % (len(results), results.count(False)), flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
