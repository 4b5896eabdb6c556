#!/usr/bin/env bash
# Bad input as a new user would try it, through the CLI: each must exit non-zero with a clear
# message naming the input, never crash (exit status >= 128 means a signal).
set -u
BIN=${PHI4MM_BIN:-build/phi4mm}
FX=${PHI4MM_FIXTURES:-../shared/fixtures}/phi4mm-tiny
M=$FX/tiny_model
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=/usr/bin/python3

check() { # name expected-regex command...
  local name=$1 re=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -Eqi -- "$re" <<<"$out"; then echo "PASS $name"
  else echo "FAIL $name (rc=$rc): $(head -c 300 <<<"$out")"; fi
}
ok() { # name command...
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "PASS $name"; else echo "FAIL $name (rc=$rc): $(head -c 300 <<<"$out")"; fi
}
gen() { "$BIN" generate -m "$M" -n 2 "$@"; }

# --- audio files
head -c 30 "$FX/inputs/clip_a_16k.wav" >"$T/trunc.wav"
$PY - "$T" <<'PY'
import sys, wave, struct, math
d = sys.argv[1]
def w(name, rate, n, val=None, width=2):
    f = wave.open(f"{d}/{name}", "wb"); f.setnchannels(1); f.setsampwidth(width); f.setframerate(rate)
    f.writeframes(b"".join(struct.pack("<h", int(3000*math.sin(i*0.05)) if val is None else val) for i in range(n))); f.close()
w("empty.wav", 16000, 0)
w("s100.wav", 16000, 100)
w("r4k.wav", 4000, 8000)
w("cap_exact.wav", 16000, 32000)
w("cap_over.wav", 16000, 32001)
# float WAV with NaN (WAVE_FORMAT_IEEE_FLOAT)
n = 4000
data = b"".join(struct.pack("<f", float("nan") if i == 1234 else 0.1) for i in range(n))
hdr = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 3, 1, 16000, 64000, 4, 32) + b"data" + struct.pack("<I", len(data))
open(f"{d}/nan.wav", "wb").write(hdr + data)
PY
cp "$FX/inputs/image.png" "$T/image_renamed.wav"
printf 'hello, I am text' >"$T/text.png"
head -c 2000 "$FX/inputs/image.png" >"$T/trunc.png"
printf '\xff\xd8\xff\xe0garbage-not-a-jpeg' >"$T/bad.jpg"
$PY - "$T" <<'PY'
import sys, struct, zlib
d = sys.argv[1]
def png(name, w, h):
    def chunk(t, b): return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    raw = zlib.compress(b"\x00" * 16)
    open(f"{d}/{name}", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", raw) + chunk(b"IEND", b""))
png("zero.png", 0, 0)
png("huge.png", 20000, 20000)
PY

check audio-truncated-header "trunc.wav" gen --audio "$T/trunc.wav" -p "<|audio_1|>x"
check audio-zero-samples "empty.wav" gen --audio "$T/empty.wav" -p "<|audio_1|>x"
check audio-100-samples "at least [0-9]+ samples" gen --audio "$T/s100.wav" -p "<|audio_1|>x"
check audio-4khz "4000" gen --audio "$T/r4k.wav" -p "<|audio_1|>x"
check audio-nan "nan" gen --audio "$T/nan.wav" -p "<|audio_1|>x"
check audio-png-renamed "image_renamed.wav" gen --audio "$T/image_renamed.wav" -p "<|audio_1|>x"
check audio-missing-file "no_such.wav" gen --audio "$T/no_such.wav" -p "<|audio_1|>x"
check placeholders-3-for-2-clips "placeholder|audio" gen --audio "$FX/inputs/clip_a_16k.wav" --audio "$FX/inputs/clip_b_8k.wav" -p "<|audio_1|><|audio_2|><|audio_3|>x"
check placeholders-out-of-order "order|audio_2" gen --audio "$FX/inputs/clip_a_16k.wav" --audio "$FX/inputs/clip_b_8k.wav" -p "<|audio_2|><|audio_1|>x"
check placeholders-2-images-for-1 "image" gen --image "$FX/inputs/image.png" -p "<|image_1|><|image_2|>x"
ok audio-duration-cap-exact gen --audio "$T/cap_exact.wav" -p "<|audio_1|>x" --max-audio-seconds 2
check audio-duration-cap-one-sample-over "over the limit" gen --audio "$T/cap_over.wav" -p "<|audio_1|>x" --max-audio-seconds 2
check image-truncated-png "trunc.png" gen --image "$T/trunc.png" -p "<|image_1|>x"
check image-bad-jpeg "bad.jpg" gen --image "$T/bad.jpg" -p "<|image_1|>x"
check image-zero-size "zero.png" gen --image "$T/zero.png" -p "<|image_1|>x"
check image-20000x20000 "huge.png|pixels|limit" gen --image "$T/huge.png" -p "<|image_1|>x"
check image-text-renamed "text.png" gen --image "$T/text.png" -p "<|image_1|>x"
check cli-bad-max-tokens "-n" gen -p x -n -5
check cli-bad-temp "--temp" gen -p x --temp -1
check cli-unknown-option "unknown option" gen -p x --frobnicate 1
check cli-missing-model "missing|no_such_dir" "$BIN" generate -m "$T/no_such_dir" -p x
check cli-logprobs-out-of-range "--logprobs" gen -p x --logprobs 21
check cli-stop-id-outside-vocab "stop token id 300000" gen -p x --stop-id 300000
check cli-stop-id-not-a-number "--stop-id" gen -p x --stop-id abc
check cli-stop-empty "--stop needs" gen -p x --stop ""
check cli-prefill-with-raw "--prefill" gen -p x --raw --prefill y
check cli-prefill-with-json "--prefill cannot" gen -p x --json --prefill "{"
check cli-prompt-not-utf8 "not UTF-8 text \(byte 2\)" gen -p "$(printf 'ab\xff\xfecd')"
check cli-system-not-utf8 "--system is not UTF-8" gen -p x --system "$(printf '\xe9t\xe9')"
check cli-prompt-and-file "-p and -f" gen -p x -f "$T/nothing.txt"
check cli-prompt-file-missing "no_such.txt" gen -f "$T/no_such.txt"
check cli-prompt-file-nul "NUL" gen -f "$FX/inputs/image.png"
check cli-prompt-stdin-empty "nothing on standard input" gen -f - </dev/null
check cli-tokenize-placeholder-mismatch "image_2" "$BIN" tokenize -m "$M" -p "<|image_2|>x" --image "$FX/inputs/image.png"
check cli-tokenize-no-prompt "missing -p" "$BIN" tokenize -m "$M"
# -f FILE is -p "$(cat FILE)": the same answer, its final line endings dropped
printf 'What is the capital of France?\r\n\n' >"$T/q.txt"
a=$(gen -n 6 -p "What is the capital of France?" 2>&1); b=$(gen -n 6 -f "$T/q.txt" 2>&1); c=$(gen -n 6 -f - <"$T/q.txt" 2>&1)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then echo "PASS cli-prompt-file-equals-prompt"; else echo "FAIL cli-prompt-file-equals-prompt: '$a' '$b' '$c'"; fi

# --logprobs K: a stderr line a generated token, greedy = the first of its K top ones, the same text
"$BIN" generate -m "$M" -n 6 -p "What is the capital of France?" >"$T/plain.txt" 2>/dev/null
"$BIN" generate -m "$M" -n 6 -p "What is the capital of France?" --logprobs 3 >"$T/lp.txt" 2>"$T/lp.err"
lines=$(grep -c '^logprob ' "$T/lp.err")
bad=$(grep '^logprob ' "$T/lp.err" | awk '{ split($0, t, "  top: "); split(t[2], a, ", "); c = t[1]; sub(/^logprob +[-0-9.]+ /, "", c);
  if (index(a[1], c " ") != 1 || split(t[2], x, ", ") != 3) n++ } END { print n + 0 }')
if [ "$lines" -eq 6 ] && [ "$bad" -eq 0 ] && cmp -s "$T/plain.txt" "$T/lp.txt"; then echo "PASS cli-logprobs (6 lines, greedy = top 1, same text)"
else echo "FAIL cli-logprobs: $lines lines, $bad off; $(head -c 300 "$T/lp.err")"; fi

# --score: a line a prompt token (the first unscored), then the generated ones' as --logprobs; -n 0
# generates nothing
"$BIN" generate -m "$M" -n 6 -p "What is the capital of France?" --logprobs 3 --score >"$T/sc.txt" 2>"$T/sc.err"
"$BIN" generate -m "$M" -n 0 -p "What is the capital of France?" --score >"$T/sc0.txt" 2>"$T/sc0.err"
p=$(grep -c '^prompt ' "$T/sc.err"); g=$(grep -c '^logprob ' "$T/sc.err"); first=$(grep -m1 '^prompt ' "$T/sc.err")
p0=$(grep -c '^prompt ' "$T/sc0.err"); g0=$(grep -c '^logprob ' "$T/sc0.err")
if [ "$p" -ge 10 ] && [ "$g" -eq 6 ] && [ "$p0" -eq "$p" ] && [ "$g0" -eq 0 ] && cmp -s "$T/plain.txt" "$T/sc.txt" \
   && [[ "$first" == "prompt     0 logprob         - "* ]] && ! grep -q '^logprob ' <(head -n "$p" "$T/sc.err" | grep -v '^prompt ')
then echo "PASS cli-score ($p prompt lines before the 6 generated; -n 0: the same $p0, nothing generated)"
else echo "FAIL cli-score: $p/$g and $p0/$g0 lines; $(head -c 300 "$T/sc.err")"; fi

# --- corrupt checkpoints (each a copy of the tiny model with one thing broken)
mk() { rm -rf "$T/ck"; mkdir "$T/ck"; cp "$M"/*.json "$T/ck/"; cp "$M/model.safetensors" "$T/ck/"; }
mk; truncate -s 1000000 "$T/ck/model.safetensors"
check ckpt-truncated-safetensors "model.safetensors.*(truncated|outside)" "$BIN" info -m "$T/ck"
mk; $PY - "$T/ck" <<'PY'
import sys, json, struct
d = sys.argv[1]; p = f"{d}/model.safetensors"
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8+n]); h["model.norm.weight"]["dtype"] = "I16"
hb = json.dumps(h).encode()
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8+n:])
PY
check ckpt-wrong-dtype "I16" "$BIN" info -m "$T/ck"
mk; $PY - "$T/ck" <<'PY'
import sys, json
d = sys.argv[1]; idx = json.load(open(f"{d}/model.safetensors.index.json"))
idx["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors"
json.dump(idx, open(f"{d}/model.safetensors.index.json", "w"))
PY
check ckpt-missing-shard "model-00002-of-00002.safetensors" "$BIN" info -m "$T/ck"
mk; $PY - "$T/ck" <<'PY'
import sys, json, struct
d = sys.argv[1]; p = f"{d}/model.safetensors"
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8+n]); data = b[8+n:]
drop = [k for k in h if k.startswith("model.layers.1.self_attn.o_proj.lora_B.speech")]
for k in drop: del h[k]
hb = json.dumps(h).encode()
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
idx = json.load(open(f"{d}/model.safetensors.index.json"))
for k in drop: del idx["weight_map"][k]
json.dump(idx, open(f"{d}/model.safetensors.index.json", "w"))
PY
check ckpt-missing-lora-B "lora_B.speech.*missing|incomplete LoRA" "$BIN" info -m "$T/ck"
mk; $PY - "$T/ck" <<'PY'
import sys, json, struct
d = sys.argv[1]; p = f"{d}/model.safetensors"
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8+n]); data = b[8+n:]
drop = [k for k in h if "lora_" in k and ".speech." in k]
for k in drop: del h[k]
hb = json.dumps(h).encode()
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
idx = json.load(open(f"{d}/model.safetensors.index.json"))
for k in drop: del idx["weight_map"][k]
json.dump(idx, open(f"{d}/model.safetensors.index.json", "w"))
PY
check ckpt-without-speech-lora "speech" "$BIN" info -m "$T/ck"
mk; sed -i 's/"hidden_size": 64/"hidden_size": -3/' "$T/ck/config.json"
check ckpt-bad-config-value "config.json.*hidden_size" "$BIN" info -m "$T/ck"
mk; sed -i 's/"r": 10/"r": 12/' "$T/ck/config.json"
check ckpt-lora-rank-mismatch "rank|lora" "$BIN" info -m "$T/ck"
mk; printf '{"broken": ' >"$T/ck/config.json"
check ckpt-config-not-json "config.json.*(invalid|JSON)" "$BIN" info -m "$T/ck"
mk; rm "$T/ck/tokenizer.json"
check ckpt-missing-tokenizer "tokenizer.json" "$BIN" info -m "$T/ck"
