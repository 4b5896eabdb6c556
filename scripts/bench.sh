#!/usr/bin/env bash
# bench.sh — `make bench`: the full-size synthetic checkpoint, then `phi4mm bench` on it.
#
# Usage: scripts/bench.sh BINARY [extra phi4mm bench options]
#   PHI4MM_BENCH_MODEL  checkpoint directory (default: synth/full in the repo, git-ignored); it is
#                       synthesized once with `phi4mm synth --preset full` (11 GB, ~1-2 min) when absent
#   PHI4MM_BENCH_JSON   where to write the JSON results (default: bench/results-<host>-<date>.json)
#   PHI4MM_FIXTURES     if it holds phi4mm-tiny/tiny_model/tokenizer.json (the real o200k vocabulary),
#                       the tokenizer row uses it instead of the synthetic checkpoint's small BPE
#   OMP_WAIT_POLICY / GOMP_SPINCOUNT  passed through; unset, the binary spins 1000 times before an
#                       idle OpenMP worker sleeps (tools/cli/main.c); OMP_WAIT_POLICY=passive or active
#                       to compare. The header of the table prints both.
# Whole run on a 2-core machine: ~10-12 min (synthesis excluded). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?usage: scripts/bench.sh PATH/TO/phi4mm [bench options]}
shift
MODEL=${PHI4MM_BENCH_MODEL:-synth/full}
FIX=${PHI4MM_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
if [ ! -f "$MODEL/model.safetensors.index.json" ]; then
  echo "bench: synthesizing the full-size checkpoint into $MODEL (11 GB, once)"
  mkdir -p "$MODEL"
  "$BIN" synth --preset full --out "$MODEL"
fi
avail_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)
if [ "$avail_kb" -gt 0 ] && [ "$avail_kb" -lt $((14 * 1024 * 1024)) ]; then
  echo "bench: warning: only $((avail_kb / 1024)) MB available; the decoder needs ~8 GB of page cache plus ~3 GB of KV and activations" >&2
fi
mkdir -p bench
JSON=${PHI4MM_BENCH_JSON:-bench/results-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ).json}
TOK=()
if [ -f "$FIX/phi4mm-tiny/tiny_model/tokenizer.json" ]; then
  TOK=(--tokenizer "$FIX/phi4mm-tiny/tiny_model/tokenizer.json")
fi
load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
echo "bench: load average before the run: $load (other work on the machine lowers every ratio)"
exec "$BIN" bench -m "$MODEL" --json "$JSON" "${TOK[@]}" "$@"
