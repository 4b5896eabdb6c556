#!/usr/bin/env bash
# perplexity.sh — `phi4mm perplexity` on the tiny fixture model:
#  - its per-token log-probabilities of the text case's prompt (one window) against the official
#    implementation's: the fixture's final_norm_out times embed_tokens^T (read from the checkpoint
#    with numpy), log-softmax, the prompt's next token; logits abs <= 2e-3 per the fixture README,
#    so a log-probability within 4e-3;
#  - the sliding windows: ctx 8 / stride 4 scores every token but the first once, its first window
#    the same numbers as the whole prompt's window (causal), the same bits in batches of 1 and 4;
#    stride = ctx leaves each window's first token unscored; --max-windows stops early;
#  - a text tokenized as `tokenize --raw` counts it; mean NLL = mean of the per-token entries;
#  - --compare q8 / kv-bf16: the second pass's block, its delta NLL = its NLL - the first's, agreement
#    within [0, 1], a change of some log-probability, not a large one; the base scored in lockstep
#    gives the numbers it gives alone; each position's KL divergence at least the two-outcome one
#    (the text token against the rest: coarse-graining lowers KL), its mean, median, 99th
#    percentile and largest those of the per-token list (the KL's arithmetic: test_sampler);
#  - a text is tokenized as the tokenizer reads it (the shared encode vectors: added tokens whole, a
#    media placeholder's spelling plain text, as Hugging Face's tokenizer(text));
#  - bad input refused by name: an id outside the vocabulary, a one-token text, --stride > --ctx,
#    a malformed id list.
set -u
source "$(dirname "$0")/common.bash"
C=$FIX/phi4mm-tiny/ref/cases/text
M=$FIX/phi4mm-tiny/tiny_model
ids=$("$PY" -c "import numpy as np; print(','.join(str(int(x)) for x in np.load('$C/input_ids.npy')))")

if "$BIN" perplexity -m "$M" --ids "$ids" --ctx 4096 --json --per-token --quiet >"$tmp/full.json" 2>"$tmp/e.txt" &&
   out=$("$PY" - "$tmp/full.json" "$C" "$M" <<'EOF'
import glob, json, struct, sys
import numpy as np
r = json.load(open(sys.argv[1])); case, model = sys.argv[2], sys.argv[3]
def tensor(name):
    for f in sorted(glob.glob(model + '/*.safetensors')):
        with open(f, 'rb') as fh:
            n = struct.unpack('<Q', fh.read(8))[0]; hd = json.loads(fh.read(n))
            if name in hd:
                m = hd[name]; s, e = m['data_offsets']; fh.seek(8 + n + s)
                raw = np.frombuffer(fh.read(e - s), dtype=np.uint16)
                return (raw.astype(np.uint32) << 16).view(np.float32).reshape(m['shape'])
    sys.exit('no ' + name)
ids = np.load(case + '/input_ids.npy'); h = np.load(case + '/final_norm_out.npy').astype(np.float64)
lg = h @ tensor('model.embed_tokens.weight').astype(np.float64).T
lg -= lg.max(1, keepdims=True); lg -= np.log(np.exp(lg).sum(1, keepdims=True))
want = np.array([lg[p - 1, ids[p]] for p in range(1, len(ids))])
got = np.array([t[2] for t in r['token_logprobs']]); pos = [t[0] for t in r['token_logprobs']]
assert pos == list(range(1, len(ids))), pos
d = np.abs(want - got).max()
assert r['windows'] == 1 and r['scored'] == len(ids) - 1, r
assert d <= 4e-3, d
assert abs(-want.mean() - r['nll']) <= 4e-3 and abs(np.exp(r['nll']) / r['ppl'] - 1) < 1e-5, (want.mean(), r['nll'], r['ppl'])
print('max|d| %.2e over %d tokens' % (d, len(want)))
EOF
); then pass "perplexity_matches_official ($out)"
else fail perplexity_matches_official "$(cat "$tmp/e.txt") ${out:-}"; fi

ok=1
for b in 1 4; do
  "$BIN" perplexity -m "$M" --ids "$ids" --ctx 8 --stride 4 --batch $b --json --per-token --quiet >"$tmp/w$b.json" 2>"$tmp/e.txt" || ok=0
done
if [ $ok = 1 ] && out=$("$PY" - "$tmp/full.json" "$tmp/w1.json" "$tmp/w4.json" 2>&1 <<'EOF'
import json, sys
full, w1, w4 = (json.load(open(f)) for f in sys.argv[1:])
assert w1 == {**w4, 'seconds': w1['seconds']}, 'batch 1 and batch 4 differ'
assert w1['windows'] == 4 and w1['scored'] == full['scored'], w1
assert [t[0] for t in w1['token_logprobs']] == [t[0] for t in full['token_logprobs']]
# positions 1..7 come from the first window: the same prefix as the whole prompt's window
d = max(abs(a[2] - b[2]) for a, b in zip(full['token_logprobs'][:7], w1['token_logprobs'][:7]))
assert d <= 1e-4, d
# later positions see only 4..7 tokens before them: not the whole prompt's numbers
assert any(abs(a[2] - b[2]) > 1e-2 for a, b in zip(full['token_logprobs'][7:], w1['token_logprobs'][7:]))
EOF
); then pass perplexity_sliding_windows
else fail perplexity_sliding_windows "$(cat "$tmp/e.txt") ${out:-}"; fi

if "$BIN" perplexity -m "$M" --ids "$ids" --ctx 8 --stride 8 --json --quiet >"$tmp/d.json" 2>"$tmp/e.txt" &&
   "$BIN" perplexity -m "$M" --ids "$ids" --ctx 8 --stride 3 --max-windows 2 --json --quiet >"$tmp/m.json" 2>>"$tmp/e.txt" &&
   grep -q '"scored": 15, "windows": 3, "ctx": 8, "stride": 8' "$tmp/d.json" &&
   grep -q '"scored": 10, "windows": 2, "ctx": 8, "stride": 3' "$tmp/m.json"; then
  pass perplexity_disjoint_and_max_windows
else fail perplexity_disjoint_and_max_windows "$(cat "$tmp/e.txt" "$tmp/d.json" "$tmp/m.json")"; fi

text="Perplexity is the exponential of the mean negative log-likelihood. $(seq 1 60 | tr '\n' ' ')"
if n=$("$BIN" tokenize -m "$M" --raw -p "$text" --json 2>"$tmp/e.txt" | sed -n 's/^{"count": \([0-9]*\),.*/\1/p') &&
   "$BIN" perplexity -m "$M" -p "$text" --ctx 32 --json --per-token --quiet >"$tmp/t.json" 2>>"$tmp/e.txt" &&
   out=$("$PY" - "$tmp/t.json" "$n" 2>&1 <<'EOF'
import json, math, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2])
lp = [t[2] for t in r['token_logprobs']]
assert r['tokens'] == n and r['scored'] == n - 1, (r['tokens'], r['scored'], n)
assert abs(-sum(lp) / len(lp) - r['nll']) < 1e-4, r['nll']
assert all(math.isfinite(x) and x <= 0 for x in lp)
EOF
); then pass perplexity_text_tokens
else fail perplexity_text_tokens "$(cat "$tmp/e.txt") ${out:-}"; fi

for what in q8 kv-bf16; do
  if "$BIN" perplexity -m "$M" -p "$text" --ctx 32 --compare $what --json --per-token --quiet >"$tmp/q.json" 2>"$tmp/e.txt" &&
     "$BIN" perplexity -m "$M" -p "$text" --ctx 32 --compare $what --quiet >"$tmp/q.txt" 2>>"$tmp/e.txt" &&
     out=$("$PY" - "$tmp/q.json" "$tmp/t.json" "$what" 2>&1 <<'EOF'
import json, math, sys
q, t = (json.load(open(f)) for f in sys.argv[1:3])
assert q['setup'] == 'bf16' and abs(q['nll'] - t['nll']) < 1e-5, (q['nll'], t['nll'])  # top-1 requested changes nothing
# the base scored beside the variant (in lockstep) gives the very numbers it gives alone
assert [e[:3] for e in q['token_logprobs']] == t['token_logprobs'], 'the base moved in lockstep'
kl = [e[4] for e in q['token_logprobs']]
for pos, _, lb, lq, d in q['token_logprobs']:  # coarse-graining lowers KL: the text token against the rest
    p, r = math.exp(lb), math.exp(lq)
    two = p * (lb - lq) + (1 - p) * (math.log1p(-p) - math.log1p(-r))
    assert d >= 0 and d >= two - 1e-6 * max(1.0, two), (pos, d, two)
s = sorted(kl); n = len(s)
def quant(x):
    at = x * (n - 1); i = int(at)
    return s[i] + (at - i) * (s[i + 1] - s[i]) if i + 1 < n else s[-1]
k = q['compare']
assert k['setup'] == ('q8' if sys.argv[3] == 'q8' else 'bf16+' + sys.argv[3]), k
assert abs(k['delta_nll'] - (k['nll'] - q['nll'])) < 1e-5, k
assert 0 <= k['same_top'] <= 1 and 0 <= k['rms_delta_p'] <= 1 and k['max_abs_delta_logprob'] >= abs(k['delta_nll']) - 1e-6, k
assert 0 < k['max_abs_delta_logprob'] < 5, k  # it moves the model, a little
assert abs(k['ppl_ratio'] - k['ppl'] / q['ppl']) < 1e-4 * k['ppl_ratio'], k
assert 0 < k['kl_mean'] < 1 and abs(k['kl_mean'] - sum(kl) / n) <= 1e-5 * k['kl_mean'] + 1e-9, (k['kl_mean'], sum(kl) / n)
for name, want in (('kl_median', quant(0.5)), ('kl_p99', quant(0.99)), ('kl_max', s[-1])):
    assert abs(k[name] - want) <= 1e-4 * want + 1e-9, (name, k[name], want)
EOF
  ) && grep -q ' against bf16: PPL ratio' "$tmp/q.txt" && grep -q '^  KL divergence of .* from bf16: mean ' "$tmp/q.txt"; then pass "perplexity_compare_$what"
  else fail "perplexity_compare_$what" "$(cat "$tmp/e.txt") ${out:-}"; fi
done

# -p TEXT: the scored tokens are the tokenizer's ids of the text (after the first)
VEC=$FIX/../tokenizer/vectors_encode.jsonl
for vid in main-enc-0328 main-enc-0332 main-enc-0006; do
  if out=$("$PY" - "$BIN" "$M" "$VEC" "$vid" 2>&1 <<'EOF'
import json, subprocess, sys
binp, model, vec, vid = sys.argv[1:]
v = next(json.loads(l) for l in open(vec) if json.loads(l)['id'] == vid)
assert v['mode'] == 'special', v
r = subprocess.run([binp, 'perplexity', '-m', model, '-p', v['text'], '--json', '--per-token', '--quiet'], capture_output=True, text=True)
assert r.returncode == 0, r.stderr
got = [t[1] for t in json.loads(r.stdout)['token_logprobs']]
assert got == v['ids'][1:], (got, v['ids'])
print('%d tokens' % len(v['ids']))
EOF
  ); then pass "perplexity_tokenizes_text_$vid ($out)"
  else fail "perplexity_tokenizes_text_$vid" "$out"; fi
done

bad() { # name, expected message, args...
  local name=$1 want=$2 out rc
  shift 2
  out=$("$BIN" perplexity -m "$M" --quiet "$@" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && echo "$out" | grep -qF -- "$want"; then pass "perplexity_refuses_$name"
  else fail "perplexity_refuses_$name" "rc=$rc $out"; fi
}
bad id_outside_vocab "token 999999 at index 1 is outside the vocabulary" --ids 1,999999
bad one_token "the text has 1 token: perplexity needs at least 2" --ids 5
bad stride_over_ctx "--stride (9) must not exceed --ctx (4)" --ids 1,2 --ctx 4 --stride 9
bad id_list "--ids: 'x2' at offset 2 is not a token id" --ids 1,x2
bad no_text "missing -p PROMPT" --ctx 8
bad compare_value "--compare must be q8, compute-bf16 or kv-bf16, got 'int4'" --ids 1,2 --compare int4
bad compare_twice "--compare q8 scores bf16 weights against q8" --ids 1,2 --compare q8 --weights q8
