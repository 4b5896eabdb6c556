#!/usr/bin/env bash
# make_corpus.sh — builds the seed corpora of the fuzz targets into fuzz/corpus/<target>/ (ignored by
# git, see fuzz/.gitignore) from the tiny fixture and from small generated files. Idempotent: seeds are
# (re)written, inputs the fuzzer added to a corpus directory are kept.
#   usage: fuzz/make_corpus.sh [BUILD_DIR]      (BUILD_DIR: where the audio seed writer is built)
# Needs: $PHI4MM_FIXTURES (default ../shared/fixtures), /usr/bin/python3 with PIL, cc + libsndfile;
# the ffmpeg CLI for the MP4 / WebM audio seeds (skipped, with a note, without it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-fuzz}
FX=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}/phi4mm-tiny
C=fuzz/corpus
PY=/usr/bin/python3
[ -d "$FX/tiny_model" ] || { echo "make_corpus: fixture not found at $FX (set PHI4MM_FIXTURES)" >&2; exit 1; }
for t in safetensors config tok_load tok_encode wave image chat multipart base64 json_schema regex grammar; do mkdir -p "$C/$t"; done

# ---- audio: the fixture clips (all but the 1.3 MB long one) and every format libsndfile writes
mkdir -p "$BUILD_DIR"
cc -O1 -o "$BUILD_DIR/seed_audio" fuzz/seed_audio.c $(pkg-config --cflags --libs sndfile) -lm
for f in clip_a_16k clip_b_8k clip_c_48k clip_d_22k; do cp "$FX/inputs/$f.wav" "$C/wave/fixture_$f.wav"; done
"$BUILD_DIR/seed_audio" "$C/wave" >/dev/null
# the containers libavformat reads (src/audio/wave_av.c), 0.3 s each, when the ffmpeg CLI is here
if command -v ffmpeg >/dev/null; then
  src="$FX/inputs/clip_a_16k.wav"
  for spec in "alac.m4a:-c:a alac" "aac.m4a:-c:a aac -b:a 32k" "aac_fast.m4a:-c:a aac -b:a 32k -movflags +faststart" \
              "opus.webm:-c:a libopus -b:a 16k" "vorbis.webm:-c:a libvorbis" "flac.mka:-c:a flac" "pcm.mkv:-c:a pcm_s16le" \
              "mp3.mp4:-c:a libmp3lame -b:a 32k" "stereo_alac.m4a:-ac 2 -ar 22050 -c:a alac"; do
    # shellcheck disable=SC2086 # the codec options are words
    ffmpeg -v error -y -t 0.3 -i "$src" ${spec#*:} "$C/wave/container_${spec%%:*}"
  done
else
  echo "make_corpus: no ffmpeg CLI: the wave target gets no MP4 / WebM seeds" >&2
fi

# ---- everything else from Python (Debian's python3: numpy, PIL)
"$PY" - "$FX" "$C" <<'PY'
import base64, io, json, os, struct, sys, wave, zlib
fx, C = sys.argv[1], sys.argv[2]
tm = f"{fx}/tiny_model"

def put(target, name, data):
    if isinstance(data, str): data = data.encode()
    with open(f"{C}/{target}/{name}", "wb") as f: f.write(data)

def st_file(tensors, pad=True):
    """safetensors bytes: tensors = [(name, dtype, shape, nbytes)], zero data."""
    h, off = {}, 0
    for name, dt, shape, nb in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}; off += nb
    h["__metadata__"] = {"format": "pt"}
    hb = json.dumps(h, separators=(",", ":")).encode()
    if pad: hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + bytes(range(256)) * (off // 256) + bytes(off % 256)

# -- safetensors: mode 0 (parse) and 2 (lone file) take a shard, mode 1 an index
with open(f"{tm}/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; hdr = json.loads(f.read(n))
small = []
for k, v in list(hdr.items())[:40]:
    if k == "__metadata__": continue
    nb = v["data_offsets"][1] - v["data_offsets"][0]
    if nb <= 4096: small.append((k, v["dtype"], v["shape"], nb))
for mode in (0, 2):
    put("safetensors", f"m{mode}_fixture_subset", bytes([mode]) + st_file(small))
    put("safetensors", f"m{mode}_mixed", bytes([mode]) + st_file([("a", "F32", [2], 8), ("b", "BF16", [1, 2], 4), ("c", "F16", [3], 6), ("e", "BF16", [0, 4], 0)]))
    put("safetensors", f"m{mode}_unpadded", bytes([mode]) + st_file([("h", "F16", [1], 2), ("f", "F32", [2], 8)], pad=False))
    put("safetensors", f"m{mode}_empty", bytes([mode]) + st_file([]))
put("safetensors", "m0_header_only", b"\x00" + struct.pack("<Q", 2) + b"{}")
idx = {"metadata": {"total_size": 26}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
       "c": "model-00002-of-00002.safetensors"}}
put("safetensors", "m1_index_valid", b"\x01" + json.dumps(idx).encode())
idx1 = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}}
put("safetensors", "m1_index_partial", b"\x01" + json.dumps(idx1).encode())
with open(f"{tm}/model.safetensors.index.json", "rb") as f: put("safetensors", "m1_fixture_index", b"\x01" + f.read())

# -- config.json readers
for name in ("config.json", "generation_config.json", "preprocessor_config.json"):
    with open(f"{tm}/{name}", "rb") as f: put("config", name, f.read())
cfg = json.load(open(f"{tm}/config.json"))
c2 = dict(cfg); c2.pop("rope_scaling", None); c2.pop("_oracle_siglip_vision_config", None); put("config", "no_rope_no_oracle.json", json.dumps(c2))
c3 = dict(cfg); c3["img_processor"] = {"layer_idx": -2, "type_feature": "patch"}; c3["eos_token_id"] = [1, 2]; put("config", "img_processor.json", json.dumps(c3))
put("config", "audio_processor_only.json", json.dumps(cfg.get("audio_processor", {})))
put("config", "gen_int_eos.json", '{"eos_token_id": 200020}')
put("config", "gen_list_eos.json", '{"eos_token_id": [200020, 199999, 5]}')

# -- tokenizer.json: the fixture's cut down to 300 ordinary tokens (+ merges among them), and minimal ones
tok = json.load(open(f"{tm}/tokenizer.json"))
vocab = {k: v for k, v in tok["model"]["vocab"].items() if v < 300}
merges = []
for m in tok["model"]["merges"]:
    a, b = m.split(" ", 1) if isinstance(m, str) else m
    if a in vocab and b in vocab and a + b in vocab: merges.append(m)
small_tok = dict(tok); small_tok["model"] = dict(tok["model"], vocab=vocab, merges=merges)
put("tok_load", "fixture_cut.json", json.dumps(small_tok, ensure_ascii=False))
gpt2 = {"version": "1.0", "added_tokens": [{"id": 3, "content": "<s>", "special": True}], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}, "post_processor": None,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 4, "\u0120a": 5}, "merges": ["a b", ["\u0120", "a"]]}}
put("tok_load", "minimal_gpt2.json", json.dumps(gpt2, ensure_ascii=False))
put("tok_load", "minimal_escapes.json", json.dumps(gpt2, ensure_ascii=True))

# -- tokenizer encode: first byte = mode | options << 3
texts = [b"Hello, world!", "Ünïcödé ünd 中文 😀 \u0301".encode(), b"  spaces\n\n\ttabs\r\n", b"\xff\xfe\xc3(invalid\xe2\x82", b"<|endoftext|><|user|>x<|end|>",
         b"1234567 numbers 3.14159", b"don't I'LL we've"]
man = json.load(open(f"{fx}/ref/manifest.json"))
for case, d in man.get("cases", {}).items():
    if isinstance(d, dict) and isinstance(d.get("prompt"), str): texts.append(d["prompt"].encode())
for i, t in enumerate(texts):
    put("tok_encode", f"enc{i}", bytes([i % 2]) + t)
put("tok_encode", "ph_1img_1aud", bytes([2 | ((1 | 1 << 2) << 3)]) + b"<|user|><|image_1|><|audio_1|>What is this?<|end|><|assistant|>")
put("tok_encode", "ph_2aud", bytes([2 | ((2 << 2) << 3)]) + b"<|audio_1|> then <|audio_2|>")
put("tok_encode", "ids", bytes([3]) + struct.pack("<8i", 200019, 1, 2, 72, 199999, 200010, -5, 300000))
put("tok_encode", "chat", bytes([4 | 8]) + b"system\0You are helpful.\0user\0Hi <|image_1|>\0assistant\0Hello")
put("tok_encode", "chat_open", bytes([4 | 16]) + b"user\0Hi\0assistant\0The answer is")

# -- images (mode byte 0x00 + file), geometry (mode byte odd + 3 int32)
from PIL import Image
put("image", "fixture.png", b"\x00" + open(f"{fx}/inputs/image.png", "rb").read())
def img_bytes(mode, size, fmt, **kw):
    im = Image.new(mode, size)
    px = im.load()
    for y in range(size[1]):
        for x in range(size[0]):
            v = (x * 37 + y * 11) % 256
            px[x, y] = v if mode in ("L", "P", "1", "I;16", "I") else tuple([v, (v * 3) % 256, 255 - v, 128][:len(mode)]) if mode != "CMYK" else (v, 255 - v, 3 * v % 256, 40)
    b = io.BytesIO(); im.save(b, fmt, **kw); return b.getvalue()
seeds = [("rgb.png", "RGB", (20, 13), "PNG", {}), ("rgba.png", "RGBA", (9, 30), "PNG", {}), ("l.png", "L", (16, 16), "PNG", {}),
         ("p.png", "P", (12, 7), "PNG", {}), ("i16.png", "I;16", (8, 8), "PNG", {}), ("bw.png", "1", (17, 5), "PNG", {}),
         ("rgb.jpg", "RGB", (24, 16), "JPEG", {"quality": 80}), ("prog.jpg", "RGB", (33, 17), "JPEG", {"progressive": True}),
         ("l.jpg", "L", (16, 9), "JPEG", {}), ("cmyk.jpg", "CMYK", (8, 8), "JPEG", {}),
         ("lossy.webp", "RGB", (20, 20), "WEBP", {"quality": 50}), ("lossless.webp", "RGBA", (10, 14), "WEBP", {"lossless": True}),
         ("rgb.bmp", "RGB", (7, 5), "BMP", {}), ("p.bmp", "P", (9, 3), "BMP", {}), ("bw.bmp", "1", (13, 2), "BMP", {}),
         ("g.gif", "P", (4, 4), "GIF", {}), ("gi.gif", "P", (11, 9), "GIF", {"interlace": True}),
         ("gt.gif", "P", (6, 5), "GIF", {"transparency": 3}), ("t.tiff", "RGB", (4, 4), "TIFF", {}), ("wide.png", "RGB", (300, 2), "PNG", {}),
         ("tall.png", "L", (3, 200), "PNG", {})]
for name, mode, size, fmt, kw in seeds:
    try: put("image", name, bytes([0x00 if name != "rgb.png" else 0xFE]) + img_bytes(mode, size, fmt, **kw))
    except Exception as ex: print("make_corpus: skipped", name, ex, file=sys.stderr)
for i, (w, h, d) in enumerate([(640, 480, 36), (1, 100000, 36), (896, 896, 4096), (-1, 5, 36), (448, 449, 1), (1 << 30, 3, 36)]):
    put("image", f"plan{i}", bytes([1 | (i << 1)]) + struct.pack("<3i", w, h, d))

# -- chat requests (with small inline media)
def tiny_wav():
    b = io.BytesIO(); w = wave.open(b, "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(b"".join(struct.pack("<h", (i * 97) % 2000 - 1000) for i in range(800))); w.close(); return b.getvalue()
png = img_bytes("RGB", (8, 8), "PNG")
b64p, b64w = base64.b64encode(png).decode(), base64.b64encode(tiny_wav()).decode()
reqs = {
 "text": {"model": "phi4mm", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 8},
 "image": {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64p}},
                                                      {"type": "text", "text": "Describe."}]}], "temperature": 0.7, "top_p": 0.9, "seed": 3},
 "audio": {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": b64w, "format": "wav"}},
                                                      {"type": "text", "text": "Transcribe."}]}], "stream": True, "stream_options": {"include_usage": True}},
 "explicit": {"messages": [{"role": "user", "content": [{"type": "text", "text": "<|audio_1|> and <|image_1|>?"},
                                                         {"type": "image_url", "image_url": "data:image/png;base64," + b64p},
                                                         {"type": "input_audio", "input_audio": {"data": b64w, "format": "wav"}}]}],
              "stop": ["\n", "END"], "top_k": 5},
 "params": {"messages": [{"role": "developer", "content": "x"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "y"}],
            "n": 1, "max_completion_tokens": 3, "frequency_penalty": 0, "presence_penalty": 0, "logprobs": False, "tools": [],
            "response_format": {"type": "text"}, "modalities": ["text"], "logit_bias": {}, "stop": "x"},
}
wfn = {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}}, "required": ["city"], "$defs": {"u": {"enum": ["c", "f"]}}}}}
reqs["tools_named"] = {"messages": [{"role": "user", "content": "Hi"}], "tools": [wfn, {"type": "function", "function": {"name": "s"}}],
                       "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": False}
reqs["tools_history"] = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"P\"}"}}]},
    {"role": "tool", "tool_call_id": "c", "content": "18 C"}], "tools": [wfn], "tool_choice": "required"}
reqs["urls"] = {"messages": [{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": "https://images.example.com/a.png"}}, {"type": "audio_url", "audio_url": "HTTP://h:8/c.wav?x=1"},
    {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64," + b64w}}, {"type": "image_url", "image_url": "https://images.example.com/a.png"},
    {"type": "text", "text": "Compare."}]}]}
for k, v in reqs.items(): put("chat", f"{k}.json", json.dumps(v))
put("chat", "calls_text.txt", ' functools[{"name": "f", "arguments": {"a": [1, {"b": null}]}}, {"name": "g", "parameters": "{}"}]')
put("chat", "calls_list.txt", '[ {"name": "get_weather", "arguments": {"city": "P\\"a ris", "n": [1, 2.5e0]}} ,\n{"parameters": {}, "name": "f-2"}]')
put("chat", "call_one.txt", '{"name":"f","arguments":{"a":{"b":[true,null]}},"extra":{"name":"x"}} trailing')
put("chat", "responses.json", json.dumps({"instructions": "Be brief.", "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"},
    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}, {"type": "function_call", "call_id": "c", "name": "f",
    "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": "ok"}], "max_output_tokens": 5,
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": {"type": "function", "name": "f"},
    "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}}))
put("chat", "nested.json", '{"messages": [' * 70 + ']' * 70 + '}')
put("chat", "dup.json", '{"messages": [], "messages": []}')
# /v1/completions bodies (the chat harness parses every body both ways)
put("chat", "completion.json", json.dumps({"prompt": "<|user|>Hi<|end|><|assistant|>", "max_tokens": 4, "logprobs": 0, "echo": False,
                                           "suffix": "", "best_of": 1, "stream": True}))
put("chat", "completion_array.json", json.dumps({"prompt": ["one"], "stop": ["x"], "temperature": 0.3}))
put("chat", "logprobs.json", json.dumps({"messages": [{"role": "user", "content": "Hi"}], "logprobs": True, "top_logprobs": 3, "prompt_logprobs": 2}))
put("chat", "grammar.json", json.dumps({"messages": [{"role": "user", "content": "Hi"}], "guided_grammar": 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [a-z]+ | root\n',
                                       "stream_options": {"include_usage": True, "continuous_usage_stats": True}, "max_token": 3}))
put("chat", "grammar_llama.json", json.dumps({"prompt": "x", "grammar": 'root ::= ("a" | b){2,3}\nb ::= [^a-c]? "z"\n'}))
put("chat", "prompt_logprobs.json", json.dumps({"prompt": [1, 2, 3], "max_tokens": 0, "echo": True, "prompt_logprobs": True}))
put("chat", "guided.json", json.dumps({"messages": [{"role": "user", "content": "Hi"}], "guided_regex": "\\d{2,3}(-[a-z]+)?", "min_p": 0.1}))
put("chat", "continue.json", json.dumps({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "text", "text": "The"}]}],
                                       "continue_final_message": True, "add_generation_prompt": False, "echo": True,
                                       "stop_token_ids": [200020, 7], "include_stop_str_in_output": True, "skip_special_tokens": False}))
put("chat", "guided_choice.json", json.dumps({"messages": [{"role": "user", "content": "Hi"}], "structured_outputs": {"choice": ["a.b", "c"]}}))

# -- multipart: Content-Type line, then the body
def mp(boundary, parts, ct=None):
    body = b""
    for name, fn, ctype, data in parts:
        body += b"--" + boundary + b"\r\nContent-Disposition: form-data; name=\"" + name + b"\""
        if fn is not None: body += b"; filename=\"" + fn + b"\""
        body += b"\r\n"
        if ctype: body += b"Content-Type: " + ctype + b"\r\n"
        body += b"\r\n" + data + b"\r\n"
    body += b"--" + boundary + b"--\r\n"
    return (ct or b"multipart/form-data; boundary=" + boundary) + b"\n" + body
wav = tiny_wav()
put("multipart", "asr", mp(b"XyZ", [(b"file", b"a.wav", b"audio/wav", wav[:600]), (b"model", None, None, b"whisper-1"),
                                    (b"response_format", None, None, b"verbose_json")]))
put("multipart", "ast", mp(b"----b0undary", [(b"file", b"a.wav", None, wav[:300]), (b"language", None, None, b"fr"),
                                             (b"temperature", None, None, b"0.2"), (b"prompt", None, None, b"Say it in French")],
                           ct=b'multipart/form-data; charset=utf-8; boundary="----b0undary"'))
put("multipart", "fields", mp(b"B", [(b"file", b"x", None, b"--B not a delimiter\r\n--Bx"), (b"stream", None, None, b"true"),
                                      (b"max_tokens", None, None, b"12")]))
put("multipart", "longform", mp(b"L", [(b"file", b"a.wav", None, wav[:400]), (b"chunking_strategy", None, None, b"auto"),
                                        (b"response_format", None, None, b"verbose_json"), (b"include[]", None, None, b"logprobs"),
                                        (b"timestamp_granularities[]", None, None, b"segment"), (b"response_format", None, None, b"srt")]))
put("multipart", "nocrlf", b"multipart/form-data; boundary=Q\n--Q\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc")

# -- base64 (mode 0 decode, 1 encode round trip, 2 data URL)
for i, s in enumerate([b"", b"QQ==", b"QUI=", b"QUJD", b"SGVsbG8sIHdvcmxkIQ==", b"QR==", b"A===", b"QUJD\n", b"====", b"Zm9v YmFy"]):
    put("base64", f"dec{i}", b"\x00" + s)
put("base64", "enc0", b"\x01" + bytes(range(40)))
for i, s in enumerate([b"data:image/png;base64," + b64p.encode()[:64], b"DATA:Image/JPEG;charset=x;base64,QUJD", b"data:;base64,QQ==",
                       b"data:text/plain,hello", b"data:image/png;base64", b"data:a/b/c;base64,QQ=="]):
    put("base64", f"url{i}", b"\x02" + s)

# -- json_schema: "schema NUL document", or a document alone (JSON mode's any object)
schemas = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
     "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 3}, "n": {"type": ["number", "null"]}},
     "required": ["name", "age"], "additionalProperties": False},
    {"$defs": {"t": {"type": "object", "properties": {"v": {"const": 1}, "k": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}},
     "$ref": "#/$defs/t"},
    {"anyOf": [{"type": "string", "minLength": 2}, {"type": "boolean"}, {"type": "object", "additionalProperties": {"type": "number"}}]},
    {"type": "array", "items": {"anyOf": [  # a discriminated union (forced tool calls)
        {"properties": {"name": {"const": "a"}, "arguments": {"properties": {"n": {"type": "integer"}}, "required": ["n"]}}, "required": ["name", "arguments"]},
        {"properties": {"name": {"enum": ["b", "ab"]}, "arguments": {"type": "object"}}, "required": ["name", "arguments"]}]}},
]
docs = [{"name": "Ada", "age": 36, "tags": ["a", 3], "n": None}, {"v": 1, "k": [{"v": 1, "k": []}]}, "xy",
        [{"name": "a", "arguments": {"n": 2}}, {"name": "ab", "arguments": {"x": [1]}}]]
for i, (sc, d) in enumerate(zip(schemas, docs)):
    put("json_schema", f"schema{i}", json.dumps(sc).encode() + b"\x00" + json.dumps(d).encode())
put("json_schema", "object", '{"a": [1, -2.5e+3, true, null, {"b": "\\u00e9\\uD83D\\uDE00\\n"}], "c": "\u4e2d"}'.encode())
put("json_schema", "bad_schema", b'{"type": "string", "pattern": "x(?=y)"}\x00"x"')
put("json_schema", "pattern", b'{"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]{2}\\\\d+$"}}}\x00{"id": "ab12"}')
put("json_schema", "pattern_len", b'{"type": "string", "pattern": "ok|no", "minLength": 2, "maxLength": 9}\x00"xxokxx"')
put("json_schema", "int_bounds", b'{"type": "object", "properties": {"n": {"type": "integer", "minimum": -20, "exclusiveMaximum": 150}}}\x00{"n": 149}')
put("json_schema", "number_bounds", b'{"type": ["number", "null"], "exclusiveMinimum": -0.25, "maximum": 12.125}\x00-0.1')
put("json_schema", "multiple_of", b'{"type": "object", "properties": {"k": {"type": "integer", "multipleOf": 7, "maximum": 70}, "q": {"type": "number", "multipleOf": 0.05}}}\x00{"k": 63, "q": -1.15}')
put("json_schema", "tuple", b'{"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "format": "date"}], "items": false}\x00[3, "2024-01-31"]')
put("json_schema", "formats", b'{"type": "object", "properties": {"t": {"type": "string", "format": "date-time"}, "e": {"type": "string", "format": "email"}}}\x00{"t": "2024-01-31T00:00:00Z"}')

# -- regex: "pattern NUL text"
for i, (p, t) in enumerate([(r"\d{3}-[a-z]{2,4}( ok)?", "123-ab ok"), (r"(red|green|dark blue)", "dark b"),
                            (r"^(?:[^\W\d_]|\s)+$", "été ici"), (r".{0,20}\u00e9", "abcé"), (r"(?P<y>\d{4})-(?<m>\d\d)?", "2026-"),
                            (r"[\x00-\x7fࠀ-\U0010FFFF]*[^a-c]{2,}?", "😀x"), (r"a{,3}b{2,}c+?d*e?", "aabbbcc"), (r"(a|b)*(?!x)", "ab"),
                            (r"[]a-]\]\\\x41\101\0", "]]\\AA"), (r"(?i)x(?-i:y[^a])(?s:.)(?is:Q.)", "XyB\nq\n")]):
    put("regex", f"p{i}", p.encode() + b"\x00" + t.encode())

# -- grammar: "GBNF or Lark NUL text"
for i, (g, t) in enumerate([('root ::= "[" (item ("," item)*)? "]"\nitem ::= [a-z]+ | root\n', "[ab,[c],[]]"),
                            ('root ::= term ("+" term)*\nterm ::= [0-9]+ | "(" root ")"  # sums\n', "(1+2)+3"),
                            ('root ::= "yes" | "no"', "no"), ('root ::= s\ns ::= "z" s "y" | "z" s "w" | ""\n', "zzzyw"),
                            ('root ::= obj\nobj ::= "{" ws (str ":" ws val ("," ws str ":" ws val)*)? "}"\nval ::= obj | str | [0-9]{1,3}\n'
                             'str ::= "\\"" [^"\\\\]* "\\""\nws ::= [ \\t\\n]*\n', '{"a": {"b":1}}'),
                            ('root ::= . [^a-c]? "\\u00e9"{2,3} x\nx ::= | "\\x41"\n  | "b"\n', "z\u00e9\u00e9A"),
                            ('root ::= expr\nexpr ::= expr "+" "1" | "1"\n', "1+1"),
                            ('root ::= (x)* "."\nx ::= "(" x ")" | ""\n', "(())()."),
                            # Lark's notation
                            ('?start: sum\n?sum: product | sum "+" product -> add\n?product: atom | product "*" atom\n'
                             '?atom: NUMBER | "(" sum ")" | NAME\nNAME.2: /[a-z_]\\w*/i\n%import common.NUMBER\n%import common.WS\n%ignore WS\n',
                             "a * (1.5e3 + b)"),
                            ('start: "[" [value ("," value)*] "]"\nvalue: ESCAPED_STRING | "true"i | start\n'
                             '%import common (ESCAPED_STRING, WS_INLINE)\n%ignore WS_INLINE  // spaces\n', '[ "a\\"b", TRUE, []]'),
                            ('start: A ~ 2..3 B\nA: "a".."c"\nB: /x+/s | C_COMMENT\n%import common.C_COMMENT\n', "ab/* c */")]):
    put("grammar", f"g{i}", g.encode() + b"\x00" + t.encode())
PY
echo "make_corpus: $(for d in "$C"/*/; do printf '%s=%s ' "$(basename "$d")" "$(ls "$d" | wc -l)"; done)"
