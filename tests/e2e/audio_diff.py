#!/usr/bin/python3
"""Differential test of phi4mm's audio front-end against the real libraries, beyond the fixture clips.

- resample_poly: phi4mm's port vs scipy.signal.resample_poly (and its FIR vs scipy.signal.firwin) for many
  up/down pairs and signal lengths, including 1-3 sample signals;
- log-mel and magnitude spectra: phi4mm vs an independent numpy/scipy model of the extractor written here
  from the semantics in shared/spec/PIPELINE.md section 2 (not from the official code), on random signals at
  8, 11.025, 16, 22.05, 24, 32, 44.1, 48 and 96 kHz and many lengths, incl. the shortest accepted ones; clips
  that give fewer than two frames must be refused with the minimum stated.

Usage: audio_diff.py DRIVER WORKDIR (tests/e2e/audio_diff.sh builds DRIVER from tests/tools/audio_diff_driver.c).
Prints PASS/FAIL lines; exit status 1 on any failure.
"""
import os
import subprocess
import sys

import numpy as np
import scipy.signal

DRIVER, WORK = sys.argv[1], sys.argv[2]
RNG = np.random.default_rng(20240611)
FAILED = 0


def report(ok, name, detail):
    global FAILED
    print(("PASS " if ok else "FAIL ") + "audio_diff/" + name + "  " + detail)
    FAILED += 0 if ok else 1


# ---------------------------------------------------------------------------------------------
# The model of the extractor, from the semantics.

def model_mel_matrix():
    """Triangles on the 1127*ln(1+f/700) scale between 0 and 7690 Hz, 80 filters, 82 evenly spaced
    edges, over the FFT bins 1..245 of a 512-point transform at 16 kHz; returned as [257, 80] float32."""
    to_mel = lambda f: 1127.0 * np.log(1.0 + f / 700.0)
    top = to_mel(7690.0)
    edges = np.linspace(0.0, top, 82)
    spacing = top / 81
    out = np.zeros((257, 80), dtype=np.float32)
    bins = np.arange(1, 246)
    bin_mel = to_mel(bins * 16000 / 512.0)
    for j in range(80):
        lo, mid, hi = edges[j], edges[j + 1], edges[j + 2]
        inside = (bin_mel > lo) & (bin_mel < hi)
        out[bins[inside], j] = 1.0 - np.abs(mid - bin_mel[inside]) / spacing
    return out


MEL = model_mel_matrix()


def model_policy(x, sr):
    if sr > 16000:
        return scipy.signal.resample_poly(x, 1, sr // 16000), 16000
    if sr == 16000:
        return x, 16000
    if sr >= 8000:
        return scipy.signal.resample_poly(x, 1, sr // 8000), 8000
    raise ValueError("rate")


def model_features(x, sr):
    """(resampled, magnitude [T, 257] f32, logmel [T, 80] f32) or None when fewer than 2 frames."""
    y, used = model_policy(x, sr)
    nfft, win, hop = (512, 400, 160) if used == 16000 else (256, 200, 80)
    if len(y) < win:
        return y, None, None
    t = (len(y) - win) // hop + 1
    if t < 2:
        return y, None, None
    idx = np.arange(win)[None, :] + hop * np.arange(t)[:, None]
    fr = y[idx].astype(np.float32)
    prev = np.concatenate([fr[:, :1], fr[:, :-1]], axis=1)
    fr = (fr - np.float32(0.97) * prev) * np.float32(32768)
    spec = np.fft.rfft(np.hamming(win) * fr.astype(np.float64), n=nfft, axis=1).astype(np.complex64)
    if used == 8000:
        wide = np.zeros((t, 257), dtype=np.complex128)
        wide[:, :nfft // 2] = spec[:, :nfft // 2]
        mag = np.abs(wide).astype(np.float32)
    else:
        mag = np.abs(spec).astype(np.float32)
    energy = (mag.astype(np.float64) ** 2) @ MEL.astype(np.float64)
    logmel = np.log(np.maximum(energy, 1.0)).astype(np.float32)
    return y, mag, logmel


# ---------------------------------------------------------------------------------------------
# Driver plumbing: one job file, one run.

jobs, checks = [], []


def path(name):
    return os.path.join(WORK, name)


def add_job(line, check):
    jobs.append(line)
    checks.append(check)


def run_jobs():
    with open(path("jobs.txt"), "w") as f:
        f.write("\n".join(jobs) + "\n")
    out = subprocess.run([DRIVER, path("jobs.txt")], capture_output=True, text=True, timeout=300)
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != len(jobs):
        report(False, "driver", "exit %d, %d/%d result lines; stderr: %s" % (out.returncode, len(lines), len(jobs), out.stderr[-500:]))
        return
    for line, check in zip(lines, checks):
        check(line)


# ---------------------------------------------------------------------------------------------
# 1. The FIR design, bit for bit.

design = {}
for r in list(range(2, 13)) + [16, 24, 441]:
    def check_design(line, r=r):
        h = np.fromfile(path("design_%d.f64" % r))
        ref = scipy.signal.firwin(20 * r + 1, 1.0 / r, window=("kaiser", 5.0))
        d = float(np.max(np.abs(h - ref))) if h.shape == ref.shape else float("inf")
        design[r] = (d, int(np.sum(h != ref)) if h.shape == ref.shape else -1)
    add_job("design %d %s" % (r, path("design_%d.f64" % r)), check_design)

# ---------------------------------------------------------------------------------------------
# 2. resample_poly for many ratios and lengths.

RATIOS = [(1, 2), (1, 3), (1, 5), (1, 6), (2, 3), (3, 2), (2, 1), (1, 1), (4, 4), (160, 441), (147, 160), (7, 13)]
LENGTHS = [1, 2, 3, 5, 9, 30, 61, 100, 257, 1000, 4801]
resample_stats = {}
for up, down in RATIOS:
    for n in LENGTHS:
        x = RNG.standard_normal(n) * RNG.choice([1e-3, 0.3, 1.0])
        fin, fout = path("rs_%d_%d_%d.in" % (up, down, n)), path("rs_%d_%d_%d.out" % (up, down, n))
        x.tofile(fin)

        def check_rs(line, up=up, down=down, n=n, x=x, fout=fout):
            st = resample_stats.setdefault((up, down), [0.0, 0, 0, []])
            ref = scipy.signal.resample_poly(x, up, down)
            if not line.startswith("OK"):
                st[3].append("n=%d: %s" % (n, line))
                return
            y = np.fromfile(fout)
            if y.shape != ref.shape:
                st[3].append("n=%d: %d samples, scipy %d" % (n, y.size, ref.size))
                return
            st[0] = max(st[0], float(np.max(np.abs(y - ref))) if y.size else 0.0)
            st[1] += int(np.sum(y != ref))
            st[2] += y.size
        add_job("resample %d %d %s %s" % (up, down, fin, fout), check_rs)

# ---------------------------------------------------------------------------------------------
# 3. The extractor at every rate.

RATES = [8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000, 96000]
feature_stats = {}


def min_accepted(sr):
    """Fewest input samples that give two frames, from the policy."""
    if sr > 16000:
        d, need = sr // 16000, 560
    elif sr == 16000:
        d, need = 1, 560
    else:
        d, need = sr // 8000, 280
    return need if d == 1 else (need - 1) * d + 1


for sr in RATES:
    m = min_accepted(sr)
    lengths = [1, 50, m - 1, m, m + 1, m + 7]
    lengths += [int(RNG.integers(m, 3 * sr // 10)) for _ in range(4)] + [int(sr * 1.5) + 3]
    for i, n in enumerate(lengths):
        t = np.arange(n) / sr
        kind = i % 3
        if kind == 0:   # noise
            x = RNG.standard_normal(n) * 0.2
        elif kind == 1:  # tones + a little noise, int16-quantised as a WAV would be
            f = RNG.uniform(50, min(sr / 2, 9000), 3)
            x = sum(0.2 * np.sin(2 * np.pi * fk * t + RNG.uniform(0, 6)) for fk in f) + 0.01 * RNG.standard_normal(n)
            x = np.round(x * 32768) / 32768
        else:           # very quiet (mel energies near the clamp at 1)
            x = RNG.standard_normal(n) * 1e-4
        base = path("ft_%d_%d" % (sr, i))
        x.tofile(base + ".in")

        def check_ft(line, sr=sr, n=n, x=x, base=base):
            st = feature_stats.setdefault(sr, {"res": 0.0, "mag": 0.0, "mel": 0.0, "cases": 0, "refused": 0, "errors": []})
            y_ref, mag_ref, mel_ref = model_features(x, sr)
            if mel_ref is None:
                if line.startswith("ERR") and "needs at least %d samples at %d Hz" % (min_accepted(sr), sr) in line:
                    st["refused"] += 1
                else:
                    st["errors"].append("n=%d should be refused with the minimum %d stated, got: %s" % (n, min_accepted(sr), line))
                return
            if not line.startswith("OK"):
                st["errors"].append("n=%d: %s" % (n, line))
                return
            y = np.fromfile(base + ".res")
            mag = np.fromfile(base + ".mag", dtype=np.float32)
            mel = np.fromfile(base + ".mel", dtype=np.float32)
            if y.shape != y_ref.shape or mag.size != mag_ref.size or mel.size != mel_ref.size:
                st["errors"].append("n=%d: sizes %d/%d/%d, model %d/%d/%d" % (n, y.size, mag.size, mel.size, y_ref.size, mag_ref.size, mel_ref.size))
                return
            st["res"] = max(st["res"], float(np.max(np.abs(y - y_ref))))
            st["mag"] = max(st["mag"], float(np.max(np.abs(mag - mag_ref.ravel())) / max(1e-30, float(np.max(np.abs(mag_ref))))))
            st["mel"] = max(st["mel"], float(np.max(np.abs(mel - mel_ref.ravel()))))
            st["cases"] += 1
        add_job("features %d %s.in %s.res %s.mag %s.mel" % (sr, base, base, base, base), check_ft)

# ---------------------------------------------------------------------------------------------
# 4. Tables.

def check_mel(line):
    m = np.fromfile(path("mel.f32"), dtype=np.float32).reshape(257, 80)
    d = float(np.max(np.abs(m - MEL)))
    detail = "max_abs=%.3e vs the model" % d
    fx = os.environ.get("PHI4MM_FIXTURES")
    ok = d <= 1e-6
    if fx:
        ref_path = os.path.join(fx, "phi4mm-tiny", "ref", "audio", "mel_filterbank_257x80.npy")
        if os.path.exists(ref_path):
            df = float(np.max(np.abs(m - np.load(ref_path))))
            detail += ", %.3e vs the fixture" % df
            ok = ok and df == 0.0
    report(ok, "mel_matrix", detail)


add_job("mel %s" % path("mel.f32"), check_mel)
for n in (1, 2, 200, 400, 401):
    def check_h(line, n=n):
        w = np.fromfile(path("ham_%d.f64" % n))
        ref = np.hamming(n)
        d = float(np.max(np.abs(w - ref))) if w.shape == ref.shape else float("inf")
        report(d <= 1e-15, "hamming%d" % n, "max_abs=%.3e vs numpy.hamming" % d)
    add_job("hamming %d %s" % (n, path("ham_%d.f64" % n)), check_h)

run_jobs()

worst = max(d for d, _ in design.values()) if design else float("inf")
report(len(design) > 0 and worst <= 1e-15, "firwin",
       "%d designs, max_abs=%.3e vs scipy.signal.firwin, %d taps differ in any bit" % (len(design), worst, sum(c for _, c in design.values())))
for (up, down), (d, nd, tot, errs) in sorted(resample_stats.items()):
    ok = not errs and d <= 1e-12
    report(ok, "resample_poly up=%d down=%d" % (up, down),
           "%d lengths, max_abs=%.3e, %d/%d samples not bit-identical%s" % (len(LENGTHS), d, nd, tot, ("; " + "; ".join(errs[:3])) if errs else ""))
for sr in RATES:
    st = feature_stats.get(sr)
    if st is None:
        report(False, "features %d Hz" % sr, "no results")
        continue
    ok = not st["errors"] and st["res"] <= 1e-12 and st["mag"] <= 1e-5 and st["mel"] <= 1e-3 and st["refused"] >= 3
    report(ok, "features %d Hz" % sr,
           "%d clips: resampled max_abs=%.3e, magnitude max_rel=%.3e, logmel max_abs=%.3e; %d short clips refused%s"
           % (st["cases"], st["res"], st["mag"], st["mel"], st["refused"], ("; " + "; ".join(st["errors"][:3])) if st["errors"] else ""))

sys.exit(1 if FAILED else 0)
