#!/usr/bin/env bash
# transcribe.sh — `phi4mm transcribe` over many files on the tiny fixture model:
#  - files decoded together (--parallel) give each file the text it gets alone, printed in the
#    order given ("FILE: text"), 20 files with 8 at a time as well;
#  - --jsonl: an object a file, in order, errors included;
#  - a missing and a corrupt file among good ones: each named on stderr, the others transcribed,
#    exit status 1;
#  - --translate LANGUAGE is generate with the translation instruction, --prompt TEXT with that instruction;
#  - --chunk S: a long file in pieces, each the text its samples get alone, cut in the pauses;
#  - --srt / --vtt: the pieces as subtitle cues with the times --jsonl reports; one file only;
#  - FILE - is standard input (a piped WAV or WebM).
set -u
source "$(dirname "$0")/common.bash"
M=$FIX/phi4mm-tiny/tiny_model
I=$FIX/phi4mm-tiny/inputs
clips=("$I/clip_a_16k.wav" "$I/clip_b_8k.wav" "$I/clip_c_48k.wav" "$I/clip_d_22k.wav")

alone=()
for c in "${clips[@]}"; do alone+=("$("$BIN" transcribe -m "$M" -n 8 "$c" 2>/dev/null)"); done
want=$(for i in "${!clips[@]}"; do printf '%s: %s\n' "${clips[$i]}" "${alone[$i]}"; done)
got=$("$BIN" transcribe -m "$M" -n 8 --parallel 4 "${clips[@]}" 2>"$tmp/err")
if [ "$got" = "$want" ] && [ -n "${alone[0]}" ]; then pass transcribe_parallel_equals_alone
else fail transcribe_parallel_equals_alone "$(head -c 600 <<<"$got") vs $(head -c 600 <<<"$want"); $(tail -3 "$tmp/err")"; fi

many=(); for _ in $(seq 1 5); do many+=("${clips[@]}"); done
got=$("$BIN" transcribe -m "$M" -n 8 --parallel 8 "${many[@]}" 2>"$tmp/err")
want20=$(for _ in $(seq 1 5); do printf '%s\n' "$want"; done)
if [ "$got" = "$want20" ]; then pass transcribe_20_files_8_at_a_time
else fail transcribe_20_files_8_at_a_time "$(wc -l <<<"$got") lines; $(tail -3 "$tmp/err")"; fi

head -c 200 "${clips[0]}" >"$tmp/corrupt.wav"
"$BIN" transcribe -m "$M" -n 8 --parallel 3 "${clips[0]}" "$tmp/missing.wav" "$tmp/corrupt.wav" "${clips[1]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
want2=$(printf '%s: %s\n%s: %s' "${clips[0]}" "${alone[0]}" "${clips[1]}" "${alone[1]}")
if [ $rc = 1 ] && [ "$(cat "$tmp/out")" = "$want2" ] && grep -q "missing.wav" "$tmp/err" && grep -q "corrupt.wav" "$tmp/err"; then
  pass transcribe_bad_files_named_others_done
else fail transcribe_bad_files_named_others_done "rc $rc; $(head -c 400 "$tmp/out"); $(cat "$tmp/err")"; fi

"$BIN" transcribe -m "$M" -n 8 --jsonl "${clips[0]}" "$tmp/missing.wav" "${clips[2]}" >"$tmp/out" 2>/dev/null
rc=$?
if $PY - "$tmp/out" "${clips[0]}" "$tmp/missing.wav" "${clips[2]}" "${alone[0]}" "${alone[2]}" <<'EOF'
import json, sys
out, f0, f1, f2, t0, t2 = sys.argv[1:7]
rows = [json.loads(l) for l in open(out, encoding="utf-8")]
ok = (len(rows) == 3 and [r["file"] for r in rows] == [f0, f1, f2] and rows[0]["text"] == t0 and rows[2]["text"] == t2
      and rows[0]["finish"] in ("stop", "length") and "error" in rows[1] and "missing.wav" in rows[1]["error"])
sys.exit(0 if ok else 1)
EOF
then [ $rc = 1 ] && pass transcribe_jsonl || fail transcribe_jsonl "rc $rc"
else fail transcribe_jsonl "$(head -c 600 "$tmp/out")"; fi

got=$("$BIN" transcribe -m "$M" -n 8 --translate French "${clips[0]}" 2>&1)
ref=$("$BIN" generate -m "$M" -n 8 --raw --audio "${clips[0]}" -p "<|user|><|audio_1|>Translate the audio to French.<|end|><|assistant|>" 2>/dev/null)
if [ "$got" = "$ref" ] && [ -n "$got" ]; then pass transcribe_translate_is_generate
else fail transcribe_translate_is_generate "$got vs $ref"; fi

# --prompt: the instruction after the clip, or the whole user turn where it places <|audio_1|>
got=$("$BIN" transcribe -m "$M" -n 8 --prompt "List the words." "${clips[0]}" 2>&1)
ref=$("$BIN" generate -m "$M" -n 8 --raw --audio "${clips[0]}" -p "<|user|><|audio_1|>List the words.<|end|><|assistant|>" 2>/dev/null)
got2=$("$BIN" transcribe -m "$M" -n 8 --prompt "Words: <|audio_1|>" "${clips[0]}" 2>&1)
ref2=$("$BIN" generate -m "$M" -n 8 --raw --audio "${clips[0]}" -p "<|user|>Words: <|audio_1|><|end|><|assistant|>" 2>/dev/null)
err=$("$BIN" transcribe -m "$M" --prompt "x <|audio_2|>" "${clips[0]}" 2>&1); rc=$?
if [ "$got" = "$ref" ] && [ -n "$got" ] && [ "$got2" = "$ref2" ] && [ -n "$got2" ] && [ $rc = 1 ] && grep -q 'audio_2' <<<"$err"
then pass transcribe_prompt_is_generate
else fail transcribe_prompt_is_generate "$got vs $ref / $got2 vs $ref2 / $rc $err"; fi

"$BIN" transcribe -m "$M" --parallel 0 "${clips[0]}" >/dev/null 2>"$tmp/err" && fail transcribe_bad_parallel_refused || pass transcribe_bad_parallel_refused

# --chunk: long-form pieces. clip_long (41 s) in pieces of at most 15 s: each piece's text is the
# one its samples get alone (cut here with Python's wave module at the reported sample ranges),
# the file's text is the pieces' joined by a space, text mode prints the same text as --jsonl.
L=$I/clip_long_16k.wav
"$BIN" transcribe -m "$M" -n 6 --chunk 15 --jsonl "$L" >"$tmp/long.jsonl" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && $PY - "$tmp/long.jsonl" "$L" "$tmp" <<'EOF2'
import json, sys, wave
out, src, tmp = sys.argv[1:4]
row = json.loads(open(out, encoding="utf-8").read())
segs = row["segments"]
w = wave.open(src); sr = w.getframerate(); n = w.getnframes(); pcm = w.readframes(n)
assert len(segs) == 3, segs
assert segs[0]["start"] == 0 and abs(segs[-1]["end"] * sr - n) < 0.5, segs
for a, b in zip(segs, segs[1:]): assert a["end"] == b["start"]
for i, s in enumerate(segs):
    lo, hi = round(s["start"] * sr), round(s["end"] * sr)
    assert 0 < hi - lo <= 15 * sr, s
    o = wave.open(f"{tmp}/piece{i}.wav", "wb"); o.setnchannels(1); o.setsampwidth(2); o.setframerate(sr)
    o.writeframes(pcm[2 * lo:2 * hi]); o.close()
texts = [s["text"] for s in segs]
assert row["text"] == " ".join(t for t in texts if t), row
open(f"{tmp}/pieces.txt", "w", encoding="utf-8").write("\n".join(texts) + "\n")
open(f"{tmp}/joined.txt", "w", encoding="utf-8").write(row["text"] + "\n")
EOF2
then
  ok=1
  for i in 0 1 2; do
    alone=$("$BIN" transcribe -m "$M" -n 6 "$tmp/piece$i.wav" 2>/dev/null | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
    [ "$alone" = "$(sed -n "$((i + 1))p" "$tmp/pieces.txt")" ] || { ok=0; fail transcribe_chunk_pieces_alone "piece $i: '$alone' vs '$(sed -n "$((i + 1))p" "$tmp/pieces.txt")'"; }
  done
  [ $ok = 1 ] && pass transcribe_chunk_pieces_alone
  got=$("$BIN" transcribe -m "$M" -n 6 --chunk 15 --parallel 2 "$L" 2>/dev/null)
  if [ "$got" = "$(cat "$tmp/joined.txt")" ]; then pass transcribe_chunk_text_mode
  else fail transcribe_chunk_text_mode "'$got' vs '$(cat "$tmp/joined.txt")'"; fi
else fail transcribe_chunk_pieces_alone "rc $rc; $(head -c 600 "$tmp/long.jsonl"); $(tail -3 "$tmp/err")"; fi

# the cuts go to the pauses: clip_a, 1 s of silence, clip_a, 1 s of silence, clip_a (8 s) in pieces
# of at most 3.5 s: cut in the middles of the silences (2.5 and 5.5 s)
$PY - "${clips[0]}" "$tmp/paused.wav" <<'EOF2'
import sys, wave
w = wave.open(sys.argv[1]); sr = w.getframerate(); pcm = w.readframes(w.getnframes())
o = wave.open(sys.argv[2], "wb"); o.setnchannels(1); o.setsampwidth(2); o.setframerate(sr)
o.writeframes(pcm + bytes(2 * sr) + pcm + bytes(2 * sr) + pcm); o.close()
EOF2
"$BIN" transcribe -m "$M" -n 4 --chunk 3.5 --jsonl "$tmp/paused.wav" >"$tmp/paused.jsonl" 2>"$tmp/err"
if $PY -c '
import json, sys
s = json.loads(open(sys.argv[1]).read())["segments"]
sys.exit(0 if len(s) == 3 and abs(s[0]["end"] - 2.5) <= 0.02 and abs(s[1]["end"] - 5.5) <= 0.02 else 1)' "$tmp/paused.jsonl"; then
  pass transcribe_chunk_cuts_in_pauses
else fail transcribe_chunk_cuts_in_pauses "$(head -c 600 "$tmp/paused.jsonl"); $(tail -3 "$tmp/err")"; fi

"$BIN" transcribe -m "$M" --chunk 0.5 "${clips[0]}" >/dev/null 2>"$tmp/err" && fail transcribe_bad_chunk_refused "accepted" \
  || { grep -q -- '--chunk' "$tmp/err" && pass transcribe_bad_chunk_refused || fail transcribe_bad_chunk_refused "$(cat "$tmp/err")"; }
"$BIN" transcribe -m "$M" -n 2 "$L" >/dev/null 2>"$tmp/err"
if grep -q 'clip_long_16k.wav is 41.0 s long.*--chunk 30' "$tmp/err"; then pass transcribe_long_file_note
else fail transcribe_long_file_note "$(cat "$tmp/err")"; fi

# --srt / --vtt: one file's subtitles, a cue a piece with the times --jsonl reports (the text on one line)
for fmt in srt vtt; do
  "$BIN" transcribe -m "$M" -n 6 --chunk 15 --$fmt "$L" >"$tmp/long.$fmt" 2>"$tmp/err"
  if $PY - "$tmp/long.jsonl" "$tmp/long.$fmt" "$fmt" <<'EOF2'
import json, sys
segs = json.loads(open(sys.argv[1], encoding="utf-8").read())["segments"]
got, fmt = open(sys.argv[2], encoding="utf-8").read(), sys.argv[3]
def stamp(t):
    ms = int(t * 1000 + 0.5)
    return "%02d:%02d:%02d%s%03d" % (ms // 3600000, ms // 60000 % 60, ms // 1000 % 60, "," if fmt == "srt" else ".", ms % 1000)
cues = [s for s in segs if s["text"]]
want = ("WEBVTT\n\n" if fmt == "vtt" else "") + "".join(
    ("%d\n" % (i + 1) if fmt == "srt" else "") + "%s --> %s\n%s\n\n" % (stamp(s["start"]), stamp(s["end"]), s["text"].replace("\n", " "))
    for i, s in enumerate(cues))
sys.exit(0 if got == want and "-->" not in "".join(s["text"] for s in cues) else 1)
EOF2
  then pass transcribe_$fmt; else fail transcribe_$fmt "$(head -c 400 "$tmp/long.$fmt"); $(tail -2 "$tmp/err")"; fi
done
"$BIN" transcribe -m "$M" --srt "${clips[0]}" "${clips[1]}" >/dev/null 2>"$tmp/err" && fail transcribe_srt_one_file "accepted" \
  || { grep -q -- '--srt' "$tmp/err" && pass transcribe_srt_one_file || fail transcribe_srt_one_file "$(cat "$tmp/err")"; }

# FILE - is standard input: a WAV piped by the ffmpeg CLI (its header's sizes unknown) gives the
# file's text, a WebM piped its file's; a second - finds stdin read, an empty one is refused; chat
# refuses /audio - (stdin holds the conversation)
if command -v ffmpeg >/dev/null; then
  ref=$("$BIN" transcribe -m "$M" -n 8 "${clips[0]}" 2>/dev/null)
  got=$(ffmpeg -v error -i "${clips[0]}" -f wav - | "$BIN" transcribe -m "$M" -n 8 - 2>"$tmp/err")
  ffmpeg -v error -y -i "${clips[0]}" -c:a libopus "$tmp/a.webm"
  got2=$("$BIN" transcribe -m "$M" -n 8 - <"$tmp/a.webm" 2>>"$tmp/err") want2=$("$BIN" transcribe -m "$M" -n 8 "$tmp/a.webm" 2>>"$tmp/err")
  "$BIN" transcribe -m "$M" -n 8 - - <"${clips[0]}" >"$tmp/out" 2>"$tmp/err2"
  rc=$?
  "$BIN" transcribe -m "$M" -n 8 - </dev/null >/dev/null 2>"$tmp/err3"
  rc3=$?
  printf '/audio -\n/quit\n' | "$BIN" chat -m "$M" >/dev/null 2>"$tmp/err4"
  if [ -n "$ref" ] && [ "$got" = "$ref" ] && [ -n "$want2" ] && [ "$got2" = "$want2" ] && [ $rc = 1 ] && [ "$(cat "$tmp/out")" = "-: $ref" ] \
     && grep -q "nothing on standard input" "$tmp/err2" && [ $rc3 = 1 ] && grep -q "nothing on standard input" "$tmp/err3" \
     && grep -q "standard input holds the conversation" "$tmp/err4"; then
    pass transcribe_stdin
  else fail transcribe_stdin "got '$got' vs '$ref'; '$got2' vs '$want2'; rc $rc $rc3; $(cat "$tmp/err" "$tmp/err2" "$tmp/err3" "$tmp/err4" | tail -5)"; fi
else fail transcribe_stdin "needs the ffmpeg CLI (make test-deps)"; fi

# FFmpeg's libraries are opened by the first MP4 / WebM payload, not at start (src/audio/av_lib.h;
# dynlibs.sh checks that the binary does not name them): a WAV's transcription never loads them, a
# WebM's does (and transcribes as above)
if [ -f "$tmp/a.webm" ]; then
  LD_DEBUG=files "$BIN" transcribe -m "$M" -n 8 "${clips[0]}" >/dev/null 2>"$tmp/ld_wav"
  LD_DEBUG=files "$BIN" transcribe -m "$M" -n 8 "$tmp/a.webm" >"$tmp/out_webm" 2>"$tmp/ld_webm"
  if ! grep -q 'file=libavformat' "$tmp/ld_wav" && grep -q 'file=libavformat.*dynamically loaded' "$tmp/ld_webm" \
     && [ "$(cat "$tmp/out_webm")" = "$want2" ]; then
    pass transcribe_libav_opened_on_use
  else fail transcribe_libav_opened_on_use "wav run: $(grep -c 'file=libav' "$tmp/ld_wav"); webm run: $(grep -c 'file=libavformat' "$tmp/ld_webm"), '$(cat "$tmp/out_webm")' vs '$want2'"; fi
else fail transcribe_libav_opened_on_use "needs the ffmpeg CLI"; fi
