#!/usr/bin/env bash
# bad_matrix.sh — the CLI half of the bad-input matrix (issue 8), beyond tests/e2e/bad_inputs.sh:
# media the decoders must refuse (rates, non-finite and overflowing samples, refused formats, extreme
# sizes, the fuzzers' crash inputs), generation options out of range, and damaged checkpoints.
# Table-driven: each row is  name | expected exit | regex the whole output must match | command.
# An error row needs exit status 1 (an error, never a signal: >= 128 is a crash) and its message;
# an "ok" row needs status 0. The server half lives in the server's own tests.
set -u
BIN=${PHI4MM_BIN:-build/phi4mm}
FX=$(cd "${PHI4MM_FIXTURES:-../shared/fixtures}" && pwd)/phi4mm-tiny # absolute: the damaged checkpoints below link to its files
M=$FX/tiny_model
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=/usr/bin/python3

row() { # name expected-rc regex command...
  local name=$1 want=$2 re=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -Eq -- "$re" <<<"$out"; then echo "PASS $name"
  else echo "FAIL $name (rc=$rc, want $want; /$re/): $(head -c 300 <<<"$out")"; fi
}
gen() { "$BIN" generate -m "$M" -n 2 "$@"; }
E='^phi4mm generate: error: '
EI='^phi4mm info: error: '

# ---------------------------------------------------------------- media files
"$PY" - "$T" <<'PY'
import io, struct, sys, wave, zlib
from PIL import Image
d = sys.argv[1]
def wav(name, rate, n, ch=1):
    w = wave.open(f"{d}/{name}", "wb"); w.setnchannels(ch); w.setsampwidth(2); w.setframerate(rate)
    w.writeframes(b"\x10\x00" * n * ch); w.close()
wav("r7999.wav", 7999, 8000)
wav("r8000_short.wav", 8000, 279)          # one sample under the 2-frame minimum at 8 kHz
def float_wav(name, vals, rate=16000):
    data = b"".join(struct.pack("<f", v) for v in vals)
    hdr = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 3, 1, rate, rate * 4, 4, 32)
    open(f"{d}/{name}", "wb").write(hdr + b"data" + struct.pack("<I", len(data)) + data)
float_wav("inf.wav", [0.1] * 999 + [float("inf")] + [0.1] * 1000)
float_wav("huge.wav", [3e38 if i % 2 else -3e38 for i in range(2000)])   # finite, but the spectrum overflows
# Sun .au, float samples of 1.6e38: the fuzz_wave crash input's shape (tests/unit/test_regress_wave.c)
au = b".snd" + struct.pack(">IIIII", 24, 2240, 6, 16000, 1) + struct.pack(">f", 1.6e38) * 560
open(f"{d}/huge.au", "wb").write(au)
hdr0 = b"RIFF" + struct.pack("<I", 36 + 8) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 0, 16000, 0, 0, 16)
open(f"{d}/zero_channels.wav", "wb").write(hdr0 + b"data" + struct.pack("<I", 8) + bytes(8))
open(f"{d}/empty.wav", "wb").close()
open(f"{d}/fake.ogg", "wb").write(b"OggS" + bytes(60))
def save(name, mode, size, fmt):
    b = io.BytesIO(); Image.new(mode, size, 128 if mode in ("L", "P") else (200, 10, 10)).save(b, fmt); open(f"{d}/{name}", "wb").write(b.getvalue())
open(f"{d}/noimg.gif", "wb").write(b"GIF89a" + struct.pack("<HH", 8, 8) + b"\0\0\0;")
save("img.tiff", "RGB", (8, 8), "TIFF")
save("thin.png", "RGB", (2000, 1), "PNG")       # aspect ratio the HD preprocessor cannot keep
save("ok.bmp", "RGB", (16, 8), "BMP")
open(f"{d}/trunc.bmp", "wb").write(open(f"{d}/ok.bmp", "rb").read()[:80])
def chunk(t, b): return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
# the fuzz_image crash input's shape: IHDR sides of 2^32 - 1 (tests/unit/test_regress_image.c)
ihdr = struct.pack(">IIBBBBB", 0xFFFFFFFF, 0xFFFFFFFF, 8, 2, 0, 0, 0)
open(f"{d}/max.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
open(f"{d}/empty.png", "wb").close()
PY
mkdir "$T/dir.wav"

A1='<|audio_1|>x'
row audio-rate-7999 1 "${E}.*r7999.wav: sample rate 7999 Hz is below the supported minimum of 8000 Hz" gen --audio "$T/r7999.wav" -p "$A1"
row audio-8k-one-sample-short 1 "${E}.*needs at least 280 samples at 8000 Hz" gen --audio "$T/r8000_short.wav" -p "$A1"
row audio-float-inf 1 "${E}.*inf.wav: sample 999 is infinite" gen --audio "$T/inf.wav" -p "$A1"
row audio-float-overflowing-spectrum 1 "${E}.*not finite: sample magnitudes are far outside \[-1, 1\]" gen --audio "$T/huge.wav" -p "$A1"
row audio-au-fuzz-crash-shape 1 "${E}.*not finite" gen --audio "$T/huge.au" -p "$A1"
row audio-zero-channels 1 "${E}.*zero_channels.wav: not a readable audio payload \(unsupported format or damaged header\)" gen --audio "$T/zero_channels.wav" -p "$A1"
row audio-zero-bytes 1 "${E}.*empty.wav: the audio payload is empty \(0 bytes\)" gen --audio "$T/empty.wav" -p "$A1"
row audio-fake-ogg 1 "${E}.*fake.ogg: not a readable audio payload \(unsupported format or damaged header\)" gen --audio "$T/fake.ogg" -p "$A1"
row audio-directory 1 "${E}.*dir.wav" gen --audio "$T/dir.wav" -p "$A1"
row audio-too-many-clips 1 "${E}1 audio clips exceed the limit of 0 per request" gen --max-audio-clips 0 --audio "$FX/inputs/clip_a_16k.wav" -p "$A1"
row image-gif-without-image 1 "${E}.*noimg.gif: GIF without an image" gen --image "$T/noimg.gif" -p "<|image_1|>x"
row image-tiff-refused 1 "${E}.*img.tiff: TIFF images are not supported \(convert to PNG or JPEG\)" gen --image "$T/img.tiff" -p "<|image_1|>x"
row image-2000x1-aspect 1 "${E}.*2000x1 image has too extreme an aspect ratio" gen --image "$T/thin.png" -p "<|image_1|>x"
row image-ihdr-2^32-fuzz-crash-shape 1 "${E}.*max.png: PNG image is 4294967295x4294967295 = [0-9]+ pixels, over the limit" gen --image "$T/max.png" -p "<|image_1|>x"
row image-zero-bytes 1 "${E}.*empty.png" gen --image "$T/empty.png" -p "<|image_1|>x"
row image-truncated-bmp 1 "${E}.*trunc.bmp" gen --image "$T/trunc.bmp" -p "<|image_1|>x"
row image-bmp-ok 0 "." gen --image "$T/ok.bmp" -p "<|image_1|>x"

# ---------------------------------------------------------------- prompt and options
row opt-top-p-2 1 "${E}--top-p must be in \[0, 1\], got '2'" gen -p x --top-p 2
row opt-top-k-negative 1 "${E}--top-k must be >= 0, got '-3'" gen -p x --top-k -3
row opt-seed-not-a-number 1 "${E}--seed must be a non-negative integer, got 'abc'" gen -p x --seed abc
row opt-temp-nan 1 "${E}--temp must be a number in \[0, 100\], got 'nan'" gen -p x --temp nan
row opt-max-tokens-huge 1 "${E}-n must be a non-negative integer, got '100000000'" gen -p x -n 100000000
row opt-max-tokens-zero 1 "${E}-n 0 generates nothing: only with --score" gen -p x -n 0
row opt-max-audio-seconds-negative 1 "${E}--max-audio-seconds must be a non-negative number, got '-1'" gen -p x --max-audio-seconds -1
row prompt-image-placeholder-no-image 1 "${E}prompt: <\|image_1\|> has no image: only 0 images were given" gen -p "<|image_1|>x"
row prompt-invalid-utf8-refused 1 "${E}the prompt is not UTF-8 text \(byte 0\)" gen -p $'\xff\xfe caf\xc3 \xed\xa0\x80 x'
row prompt-missing 1 "${E}missing -p PROMPT" "$BIN" generate -m "$M" -n 2
printf 'root ::= "[" item ("," item)* "]"\nitem ::= [a-z]+ | rot\n' > "$T/undef.gbnf"
printf 'root ::= list\nlist ::= ws item "," [a-z] | [a-z]\nitem ::= list\nws ::= [ ]*\n' > "$T/left.gbnf" # through a rule that may be empty: refused (the rest is rewritten)
printf 'root ::= "a" (\n' > "$T/open.gbnf"
printf 'root ::= "(" root ")" | "x"\n' > "$T/ok.gbnf"
row grammar-undefined-rule 1 "${E}grammar: rule 'rot' is used but not defined at byte 52" gen -p x --grammar "$T/undef.gbnf"
row grammar-left-recursion 1 "${E}grammar: left recursion: rule 'list' can reach itself" gen -p x --grammar "$T/left.gbnf"
row grammar-unclosed-group 1 "${E}grammar: expected '\)' closing the group at byte 13" gen -p x --grammar "$T/open.gbnf"
row grammar-missing-file 1 "${E}.*nope.gbnf" gen -p x --grammar "$T/nope.gbnf"
row grammar-with-regex 1 "${E}--json, --json-schema, --regex, --choice and --grammar exclude each other" gen -p x --grammar "$T/ok.gbnf" --regex a
row grammar-ok 0 "^[(]*x?[)]*$" gen -p x --grammar "$T/ok.gbnf"
# --mlock: refused by a small RLIMIT_MEMLOCK (root also loses CAP_IPC_LOCK, which would override it)
lowlock() { # command... under ulimit -l 64
  if [ "$(id -u)" = 0 ]; then (ulimit -l 64 && exec setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock "$@")
  else (ulimit -l 64 && exec "$@"); fi
}
# (AddressSanitizer intercepts mlock as a no-op: in its builds the refusal cannot happen, the row is skipped)
if grep -qa "__asan_init" "$BIN"; then
  echo "SKIP mlock-refused (AddressSanitizer ignores mlock)"
else
  row mlock-refused 1 "${E}.*model.safetensors: cannot lock its [0-9.]+ MB in memory \(--mlock\): .*the limit of locked memory is 0.1 MB \(ulimit -l" lowlock "$BIN" generate -m "$M" -n 2 -p x --mlock
fi
row mlock-not-asked 0 "." lowlock "$BIN" generate -m "$M" -n 2 -p x
if [ "$(id -u)" = 0 ] || [ "$(ulimit -l)" = unlimited ]; then row mlock-ok 0 "." gen -p x --mlock; fi
# --recache: the shards re-read into 2 MB pages before the load; the same text as without it
row recache-stats 0 "phi4mm: re-read [0-9.]+ GB of checkpoint, [0-9.]+ GB of it in 2 MB pages" gen -p x --recache --stats
row recache-same-text 0 "^same$" bash -c '[ "$("$1" generate -m "$2" -n 4 -p hello 2>/dev/null)" = "$("$1" generate -m "$2" -n 4 -p hello --recache 2>/dev/null)" ] && echo same' _ "$BIN" "$M"
if [ "$(id -u)" = 0 ] || [ "$(ulimit -l)" = unlimited ]; then row recache-then-mlock 0 "." gen -p x --recache --mlock; fi
# serve refuses its options before loading anything (exit 2, as every serve option error)
row serve-prompt-threads-zero 2 "^phi4mm serve: error: --prompt-threads must be auto, inline or 1..1024, got '0'" "$BIN" serve -m "$M" --prompt-threads 0
row serve-prompt-threads-word 2 "^phi4mm serve: error: --prompt-threads must be auto, inline or 1..1024, got 'half'" "$BIN" serve -m "$M" --prompt-threads half

# ---------------------------------------------------------------- damaged checkpoints (json copies + the weights)
mk() { rm -rf "$T/ck"; mkdir "$T/ck"; cp "$M"/*.json "$T/ck/"; ln -s "$M/model.safetensors" "$T/ck/model.safetensors"; }
mk; sed -i 's/"original_max_position_embeddings": [0-9]*/"original_max_position_embeddings": 1/' "$T/ck/config.json"
row ckpt-orig-max-pos-1 1 "${EI}.*config.json: field \"original_max_position_embeddings\" = 1 is out of range \[2, " "$BIN" info -m "$T/ck"
mk; printf '{"eos_token_id": -3}' >"$T/ck/generation_config.json"
row ckpt-eos-int-negative 1 "${EI}.*generation_config.json: eos_token_id -3 is not a token id below 200064" "$BIN" info -m "$T/ck"
mk; printf '[1, 2]' >"$T/ck/config.json"
row ckpt-config-array 1 "${EI}.*config.json: top level is not a JSON object" "$BIN" info -m "$T/ck"
mk; head -c 100000 "$M/tokenizer.json" >"$T/ck/tokenizer.json"
row ckpt-tokenizer-truncated 1 "${EI}.*tokenizer.json" "$BIN" info -m "$T/ck"
mk; sed -i 's/"model.norm.weight": "model.safetensors"/"model.norm.weight": "..\/model.safetensors"/' "$T/ck/model.safetensors.index.json"
row ckpt-index-path-escape 1 "${EI}.*weight_map entry 'model.norm.weight' is not a plain file name" "$BIN" info -m "$T/ck"
mk; rm "$T/ck/model.safetensors"; printf '\xff\xff\xff\xff\x00\x00\x00\x00{}' >"$T/ck/model.safetensors"
row ckpt-header-length-huge 1 "${EI}.*model.safetensors: header length 4294967295 exceeds the file" "$BIN" info -m "$T/ck"
# An unpadded, odd-length header puts every tensor at an odd address: must load and run the same
# (the loader copies misaligned tensors; tests/unit/test_regress_safetensors.c).
mk; rm "$T/ck/model.safetensors"; "$PY" - "$M/model.safetensors" "$T/ck/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.dumps(json.loads(b[8:8 + n]), separators=(",", ":")).encode()
if len(h) % 2 == 0: h += b" "
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
want=$("$BIN" generate -m "$M" -n 4 -p "Hello" 2>/dev/null)
row ckpt-misaligned-tensors-same-output 0 "^$(printf '%s' "$want" | sed 's/[][\.*^$|+?(){}]/\\&/g')\$" "$BIN" generate -m "$T/ck" -n 4 -p "Hello"
