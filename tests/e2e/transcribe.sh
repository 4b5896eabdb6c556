#!/usr/bin/env bash
# transcribe.sh — `phi4mm transcribe` over many files on the tiny fixture model:
#  - files decoded together (--parallel) give each file the text it gets alone, printed in the
#    order given ("FILE: text"), 20 files with 8 at a time as well;
#  - --jsonl: an object a file, in order, errors included;
#  - a missing and a corrupt file among good ones: each named on stderr, the others transcribed,
#    exit status 1;
#  - --translate LANGUAGE is generate with the translation instruction.
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

"$BIN" transcribe -m "$M" --parallel 0 "${clips[0]}" >/dev/null 2>"$tmp/err" && fail transcribe_bad_parallel_refused || pass transcribe_bad_parallel_refused
