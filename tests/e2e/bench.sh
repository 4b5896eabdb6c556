#!/usr/bin/env bash
# bench.sh — `phi4mm bench --quick` on the tiny fixture checkpoint: it runs to the end, writes JSON
# whose rows cover every section with finite values (the register-only FMA peak where SIMD kernels
# run; the decode rows paired with a plain read of the step's bytes and interleaved with batch 1
# included, q8 steps interleaved with bf16 ones; the warm-up evicted and re-read the shards),
# its rows held to the limits measured at its start (--quick re-measures nothing), and a missing
# model directory is an error.
# The numbers of a tiny model mean nothing; this only keeps the benchmark's code paths working.
set -u
. "$(dirname "$0")/common.bash"
MODEL=$FIX/phi4mm-tiny/tiny_model

if [ ! -x "$BIN" ]; then fail bench_binary "$BIN not built"; exit 1; fi
if [ ! -d "$MODEL" ]; then fail bench_fixture "$MODEL missing"; exit 1; fi

if "$BIN" bench -m "$MODEL" --quick --json "$tmp/b.json" >"$tmp/out.txt" 2>"$tmp/err.txt"; then
  pass bench_quick_runs
else
  fail bench_quick_runs "$(tail -c 300 "$tmp/err.txt")"; exit 1
fi

if $PY - "$tmp/b.json" <<'EOF' >"$tmp/py.txt" 2>&1
import json, math, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert isinstance(d["machine"], dict) and rows, "empty"
assert isinstance(d["machine"]["thp"], str) and d["machine"]["damon_monitors_on"] >= 0, d["machine"]
by = {(r["section"], r["name"]): r for r in rows}
need = [("machine", "read bandwidth"), ("machine", "compute peak"), ("load", "load time (warm cache)"),
        ("decode", "decode batch 1"), ("decode", "batch 1 vs reading its bytes"), ("decode", "decode batch 8"),
        ("decode", "batch 8 / batch 1 interleaved"), ("memory", "RSS after decode"), ("prefill", "prefill 128 tokens"),
        ("decode", "decode batch 1 at ctx 1024"),
        ("q8", "q8 decode batch 1"), ("q8", "q8 / bf16 interleaved, batch 1"), ("audio", "audio 10 s clip"),
        ("image", "image 448x448"), ("tokenizer", "encode")]
missing = [k for k in need if k not in by]
assert not missing, f"missing rows: {missing}"
for r in rows:
    v = r["value"]
    assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f"{r['section']}/{r['name']}: value {v}"
    if r.get("ratio") is not None and r["ratio"] >= 0:
        assert math.isfinite(r["ratio"]), f"{r['name']}: ratio {r['ratio']}"
read = by[("decode", "batch 1 vs reading its bytes")]
assert read["bytes_per_step"] > 0 and read["read_gbs_median"] > 0, read
long = by[("decode", "decode batch 1 at ctx 1024")]
assert long["ctx"] == 1024 and long["batch"] == 1 and long["bytes_per_step"] > by[("decode", "decode batch 1")]["bytes_per_step"], long
warm = by[("load", "page-cache warm-up")]
assert warm["evicted_first"] is True and warm["gb"] > 0 and 0 <= warm["huge_gb"] <= warm["gb"], warm
lr = by[("serve", "stream beside a LongRoPE recompute")]
assert lr["switch_at"] == 1024 and lr["tokens_inline"] > 0 and lr["tokens_beside"] > 0 and lr["long_inline_s"] > 0, lr
inter = by[("decode", "batch 8 / batch 1 interleaved")]
assert inter["batch"] == 8 and inter["batch1_step_s"] > 0 and inter["batchB_step_s"] > 0, inter
fma = d["machine"]["fma_peak_gflops"]  # 0 only at the portable kernel level, which then has no row
assert fma >= 0 and (fma == 0) == (("machine", "FMA peak (registers only)") not in by), fma
qi = by[("q8", "q8 / bf16 interleaved, batch 1")]
assert qi["batch"] == 1 and qi["base_step_s"] > 0 and qi["variant_step_s"] > 0, qi
# --quick holds every row to the limits measured at the start: nothing re-measured them
for first, best in (("read bandwidth", "read bandwidth (best of run)"), ("compute peak", "compute peak (best of run)")):
    assert by[("machine", best)]["value"] == by[("machine", first)]["value"], (first, by[("machine", first)]["value"], by[("machine", best)]["value"])
print(len(rows), "rows")
EOF
then pass bench_json_rows; else fail bench_json_rows "$(tail -3 "$tmp/py.txt" | tr '\n' ' ')"; fi

if "$BIN" bench -m "$tmp/no-such-model" --quick >"$tmp/o2.txt" 2>"$tmp/e2.txt"; then
  fail bench_missing_model "exit 0"
elif grep -q "no-such-model" "$tmp/e2.txt"; then
  pass bench_missing_model
else
  fail bench_missing_model "message does not name the directory: $(head -c 200 "$tmp/e2.txt")"
fi
