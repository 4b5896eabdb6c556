#!/usr/bin/env python3
"""compare.py — side-by-side view of two or more `phi4mm bench --json` result files.

Usage: bench/compare.py OLD.json NEW.json [MORE.json ...]

Rows are matched by (section, name), plus the batch size or token count where a row has one (the
speedup rows repeat a name per batch size). For each file the value and the ratio against the machine
limit measured in that same run are shown, then the change of the last file versus the first.
Compare ratios rather than raw values across machines or across differently loaded runs: the
ratio is relative to the bandwidth / compute peak measured in the same run. Standard library only.
"""
import json
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = {}
    for r in doc.get("rows", []):
        name = r["name"]
        if "batch" in r and "batch" not in name:
            name += f" (batch {r['batch']})"
        elif "tokens" in r and "tokens" not in name:
            name += f" ({r['tokens']} tokens)"
        rows[(r["section"], name)] = r
    return doc.get("machine", {}), rows


def fmt(v):
    if v is None:
        return "-"
    return f"{v:.3g}"


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    runs = [load(p) for p in argv[1:]]
    for p, (m, _) in zip(argv[1:], runs):
        print(f"# {p}: {m.get('host', '?')} {m.get('date', '?')} threads={m.get('threads', '?')} "
              f"bw={fmt(m.get('read_bw_gbs'))} GB/s sgemm={fmt(m.get('sgemm_gflops'))} "
              f"compute peak={fmt(m.get('compute_peak_gflops', m.get('sgemm_gflops')))} GFLOP/s")
    keys = []
    for _, rows in runs:
        for k in rows:
            if k not in keys:
                keys.append(k)
    head = f"{'section':<10} {'measurement':<36}"
    for i in range(len(runs)):
        head += f" {'value' + str(i):>10} {'ratio' + str(i):>7}"
    head += f" {'change':>8}"
    print(head)
    for k in keys:
        line = f"{k[0]:<10} {k[1]:<36}"
        vals = []
        for _, rows in runs:
            r = rows.get(k)
            v = r.get("value") if r else None
            vals.append(v)
            line += f" {fmt(v):>10} {fmt(r.get('ratio') if r else None):>7}"
        if vals[0] and vals[-1] is not None:
            line += f" {100.0 * (vals[-1] / vals[0] - 1.0):+7.1f}%"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
