#!/usr/bin/env bash
# make demo: synthesize a tiny random-weight checkpoint in the official layout and run the CLI end
# to end on text, audio and image+audio. Needs nothing downloaded and nothing from ../shared.
set -euo pipefail
BIN=${1:-build/phi4mm}
D=${DEMO_DIR:-build/demo}
mkdir -p "$D"
echo "== phi4mm demo (random weights: the text is meaningless, the pipeline is real)"
if [ ! -f "$D/model/config.json" ]; then
  "$BIN" synth --preset tiny --out "$D/model" --seed 1
fi
"$BIN" mkmedia --out "$D/media"
"$BIN" info -m "$D/model"
echo
echo "== text:  phi4mm generate -m $D/model -p 'What is the capital of France?' -n 16"
"$BIN" generate -m "$D/model" -p "What is the capital of France?" -n 16 --stats
echo
echo "== audio: phi4mm transcribe -m $D/model $D/media/tone.wav"
"$BIN" transcribe -m "$D/model" -n 16 "$D/media/tone.wav"
echo
echo "== image + audio (vision adapter, vision branch of the audio projection)"
"$BIN" generate -m "$D/model" --image "$D/media/pattern.png" --audio "$D/media/tone.wav" \
  -p "<|image_1|><|audio_1|>Answer the spoken question about the image." -n 16 --stats
if [ -x "$BIN" ] && "$BIN" serve --help >/dev/null 2>&1 && command -v curl >/dev/null; then
  echo
  echo "== served: phi4mm serve + curl /v1/audio/transcriptions"
  PORT=$((20000 + RANDOM % 20000))
  "$BIN" serve -m "$D/model" --port "$PORT" >"$D/serve.log" 2>&1 &
  SPID=$!
  trap 'kill $SPID 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -s "http://127.0.0.1:$PORT/v1/audio/transcriptions" -F file=@"$D/media/tone.wav" -F model=phi4mm -F max_tokens=16 || true
  echo
fi
echo "== demo done"
