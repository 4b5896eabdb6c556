#!/usr/bin/env bash
# Negative tests: each classic mistake, injected on purpose, must make parity fail at the stage
# that exposes it (a check that cannot fail proves nothing).
set -u
BIN=${PHI4MM_BIN:-build/phi4mm}
FX=${PHI4MM_FIXTURES:-../shared/fixtures}/phi4mm-tiny
expect_fail() { # name case fault stage-regex
  local out
  out=$("$BIN" parity --fixtures "$FX" --case "$2" --inject-fault "$3" 2>&1)
  if [ $? -ne 0 ] && grep -Eq "^FAIL $2/$4" <<<"$out"; then echo "PASS $1"; else echo "FAIL $1 (fault $3 not caught at $4)"; fi
}
expect_fail fault-speech-adapter-disabled audio no-adapter decoder_layer0_out
expect_fail fault-vision-projection-for-audio-only audio wrong-proj inputs_embeds
expect_fail fault-speech-projection-in-mixed-mode mixed wrong-proj inputs_embeds
expect_fail fault-embeddings-added-not-replaced audio2 add-embeds inputs_embeds
expect_fail fault-image-embeddings-added image add-embeds inputs_embeds
expect_fail fault-adapter-leaks-from-other-sequence audio leak-adapter generated_ids
expect_fail fault-vision-adapter-disabled image no-adapter decoder_layer0_out
