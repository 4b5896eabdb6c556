#!/usr/bin/python3
"""load.py — a bounded load run against `phi4mm serve` (not part of CI).

N clients (threads, one keep-alive connection each) send M requests each, cycling through mixed
modes: text chat, image chat, audio chat, image+audio chat, transcription; every other chat is
streamed. Reports requests/s, latency percentiles (overall and per mode), errors, and the server's
RSS before/after (from /proc/PID/status when --pid is given). Loopback only; stops by itself
after --time-limit seconds.

  tests/load/load.py --url http://127.0.0.1:8080 --pid $(pgrep -f 'phi4mm serve') \\
      --inputs ../shared/fixtures/phi4mm-tiny/inputs --clients 32 --requests 50
"""
import argparse
import base64
import http.client
import json
import threading
import time
import urllib.parse

MODES = ["text", "image", "audio", "image+audio", "transcription"]


def rss(pid):
    if not pid:
        return None
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) / 1024.0
    return out


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--key", default=None)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=900)
    args = ap.parse_args()
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    assert host in ("127.0.0.1", "localhost", "::1"), "loopback only"
    img = "data:image/png;base64," + base64.b64encode(open(args.inputs + "/image.png", "rb").read()).decode()
    wav_bytes = open(args.inputs + "/clip_a_16k.wav", "rb").read()
    wav = base64.b64encode(wav_bytes).decode()
    auth = {"Authorization": "Bearer " + args.key} if args.key else {}
    boundary = "----phi4mmload"
    form = (("--%s\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nphi4mm\r\n"
             "--%s\r\nContent-Disposition: form-data; name=\"max_tokens\"\r\n\r\n%d\r\n"
             "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n")
            % (boundary, boundary, args.max_tokens, boundary)).encode() + wav_bytes + ("\r\n--%s--\r\n" % boundary).encode()

    def body_for(mode, i):
        if mode == "transcription":
            return "/v1/audio/transcriptions", form, {"Content-Type": "multipart/form-data; boundary=" + boundary}, False
        parts = []
        if "image" in mode:
            parts.append({"type": "image_url", "image_url": {"url": img}})
        if "audio" in mode:
            parts.append({"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}})
        parts.append({"type": "text", "text": "Request %d: say something." % i})
        stream = i % 2 == 1
        b = {"messages": [{"role": "user", "content": parts}], "max_tokens": args.max_tokens, "stream": stream}
        return "/v1/chat/completions", json.dumps(b).encode(), {"Content-Type": "application/json"}, stream

    lat = {m: [] for m in MODES}
    errors = []
    lock = threading.Lock()
    deadline = time.time() + args.time_limit
    skipped = [0]

    def client(cid):
        conn = http.client.HTTPConnection(host, port, timeout=300)
        for k in range(args.requests):
            if time.time() > deadline:
                with lock:
                    skipped[0] += args.requests - k
                return
            mode = MODES[(cid + k) % len(MODES)]
            path, body, hdr, stream = body_for(mode, cid * 1000 + k)
            t = time.time()
            try:
                conn.request("POST", path, body=body, headers=dict(hdr, **auth))
                r = conn.getresponse()
                data = r.read()
                ok = r.status == 200 and (not stream or data.rstrip().endswith(b"data: [DONE]"))
                if not ok:
                    with lock:
                        errors.append("%s %s %s" % (mode, r.status, data[:200]))
            except Exception as ex:  # counted as an error, new connection
                with lock:
                    errors.append("%s %r" % (mode, ex))
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=300)
                continue
            with lock:
                lat[mode].append(time.time() - t)
        conn.close()

    before = rss(args.pid)
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    time.sleep(0.5)
    after = rss(args.pid)
    allv = [x for m in MODES for x in lat[m]]
    n = len(allv)
    print("load: %d clients x %d requests, max_tokens %d, modes %s" % (args.clients, args.requests, args.max_tokens, "/".join(MODES)))
    print("completed %d, errors %d, skipped (time limit) %d, wall %.1f s, %.2f requests/s"
          % (n, len(errors), skipped[0], wall, n / wall if wall else 0))
    print("latency all: p50 %.3f s, p90 %.3f s, p99 %.3f s, max %.3f s" % (pct(allv, 50), pct(allv, 90), pct(allv, 99), max(allv or [0])))
    for m in MODES:
        print("  %-14s n=%4d p50 %.3f s p99 %.3f s" % (m, len(lat[m]), pct(lat[m], 50), pct(lat[m], 99)))
    if before and after:
        print("server RSS before %.1f MiB, after %.1f MiB (peak %.1f MiB)" % (before["VmRSS"], after["VmRSS"], after["VmHWM"]))
    for e in errors[:10]:
        print("  error:", e)
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
