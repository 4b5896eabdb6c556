#!/usr/bin/python3
"""MP4 / M4A and WebM / Matroska audio (src/audio/wave_av.c) against the WAV path and the ffmpeg CLI.

- lossless streams (ALAC in M4A, FLAC in MKA, PCM in MKV) made from the fixture clips, a stereo 44.1 kHz
  clip and a 24-bit one decode to the very samples (and rate) of the WAV they were made from through
  libsndfile: the normalisation and the channel mean are the WAV path's;
- lossy streams (AAC in M4A, Opus and Vorbis in WebM, MP3 in MP4, AAC beside a video track) decode to the
  samples the ffmpeg CLI gives (each channel as 64-bit floats, averaged here), at its rate and length;
- damaged payloads are refused with a message naming the file: cut in half (moov at the end or first,
  WebM, MKA), their first 40 bytes, a video without audio, a rate below 8 kHz.

Usage: audio_containers.py DRIVER WORKDIR FIXTURE_INPUTS (tests/e2e/audio_diff.sh builds DRIVER).
Prints PASS/FAIL lines; exit status 1 on any failure.
"""
import os
import subprocess
import sys
import wave

import numpy as np

DRIVER, WORK, INPUTS = sys.argv[1], sys.argv[2], sys.argv[3]
FAILED = 0


def report(ok, name, detail):
    global FAILED
    print(("PASS " if ok else "FAIL ") + "audio_containers/" + name + "  " + detail)
    FAILED += 0 if ok else 1


def ffmpeg(*args):
    r = subprocess.run(["ffmpeg", "-v", "error", "-y", *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("ffmpeg %s: %s" % (" ".join(args), r.stderr[-300:]))


def path(name):
    return os.path.join(WORK, name)


def decode_all(files):
    """The driver's decode of each file: (samples or None, rate or None, the result line)."""
    jobs = path("containers.jobs")
    with open(jobs, "w") as f:
        for i, fn in enumerate(files):
            f.write("decode %s %s\n" % (fn, path("dec%d.f64" % i)))
    out = subprocess.run([DRIVER, jobs], capture_output=True, text=True)
    lines = out.stdout.splitlines()
    res = []
    for i, fn in enumerate(files):
        line = lines[i] if i < len(lines) else "ERR (no result: driver exit %d)" % out.returncode
        if line.startswith("OK "):
            kv = dict(t.split("=") for t in line[3:].split())
            res.append((np.fromfile(path("dec%d.f64" % i), dtype="<f8"), int(kv["sr"]), line))
        else:
            res.append((None, None, line))
    return res


def cli_decode(fn):
    """The ffmpeg CLI's decode: every channel as float64, averaged; its rate."""
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries", "stream=sample_rate,channels",
                            "-of", "csv=p=0", fn], capture_output=True, text=True).stdout.split(",")
    rate, ch = int(probe[0]), int(probe[1])
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", fn, "-vn", "-map", "0:a:0", "-f", "f64le", "-c:a", "pcm_f64le", "-"],
                         capture_output=True).stdout
    x = np.frombuffer(raw, dtype="<f8").reshape(-1, ch)
    return x.sum(axis=1) / ch if ch > 1 else x[:, 0], rate


# ---------------------------------------------------------------------------------------------
# sources: the fixture clips, a stereo 44.1 kHz clip and a 24-bit one
rng = np.random.default_rng(7)
sources = [os.path.join(INPUTS, c) for c in ("clip_a_16k.wav", "clip_b_8k.wav", "clip_c_48k.wav", "clip_d_22k.wav")]
t = np.arange(44100 * 3 // 2) / 44100.0
stereo = np.stack([0.4 * np.sin(2 * np.pi * 440 * t), 0.3 * np.sin(2 * np.pi * 660 * t) + 0.05 * rng.standard_normal(t.size)], axis=1)
with wave.open(path("stereo_44k.wav"), "wb") as w:
    w.setnchannels(2), w.setsampwidth(2), w.setframerate(44100)
    w.writeframes(np.round(stereo * 32767).astype("<i2").tobytes())
sources.append(path("stereo_44k.wav"))
ffmpeg("-i", sources[0], "-af", "volume=0.9", "-c:a", "pcm_s24le", path("deep_24bit.wav"))
sources.append(path("deep_24bit.wav"))

# ---------------------------------------------------------------------------------------------
# lossless: the WAV's own samples
lossless = []
for src in sources:
    base = os.path.splitext(os.path.basename(src))[0]
    deep = "24bit" in base
    made = [(path(base + "_alac.m4a"), ["-c:a", "alac"] + (["-sample_fmt", "s32p"] if deep else [])),
            (path(base + "_flac.mka"), ["-c:a", "flac"] + (["-sample_fmt", "s32"] if deep else [])),
            (path(base + "_pcm.mkv"), ["-c:a", "pcm_s24le" if deep else "pcm_s16le"])]
    for fn, codec in made:
        ffmpeg("-i", src, *codec, fn)
        lossless.append((src, fn))
res = decode_all([s for s, _ in lossless] + [f for _, f in lossless])
n = len(lossless)
for k, (src, fn) in enumerate(lossless):
    (ref, rr, rl), (got, gr, gl) = res[k], res[n + k]
    ok = ref is not None and got is not None and rr == gr and got.size == ref.size and np.array_equal(got, ref)
    report(ok, "lossless " + os.path.basename(fn), "%s vs %s (the WAV through libsndfile)" % (gl, rl))

# ---------------------------------------------------------------------------------------------
# lossy: the ffmpeg CLI's samples
src = sources[0]
lossy = [(path("a_aac.m4a"), ["-i", src, "-c:a", "aac", "-b:a", "48k"]),
         (path("a_aac_fast.m4a"), ["-i", src, "-c:a", "aac", "-movflags", "+faststart"]),
         (path("a_opus.webm"), ["-i", src, "-c:a", "libopus"]),
         (path("s_opus.webm"), ["-i", sources[4], "-c:a", "libopus"]),
         (path("s_vorbis.webm"), ["-i", sources[4], "-c:a", "libvorbis"]),
         (path("a_mp3.mp4"), ["-i", src, "-c:a", "libmp3lame"]),
         (path("a_video.mp4"), ["-f", "lavfi", "-i", "testsrc=size=64x64:rate=5", "-i", src, "-shortest", "-c:v", "mpeg4", "-c:a", "aac"])]
for fn, args in lossy:
    ffmpeg(*args, fn)
res = decode_all([f for f, _ in lossy])
for (fn, _), (got, gr, gl) in zip(lossy, res):
    ref, rr = cli_decode(fn)
    ok = got is not None and gr == rr and got.size == ref.size and np.abs(got - ref).max() <= 1e-12
    report(ok, "lossy " + os.path.basename(fn), "%s vs the ffmpeg CLI's %d samples at %d Hz" % (gl, ref.size, rr))

# ---------------------------------------------------------------------------------------------
# damaged payloads: refused, naming the file
bad = []
for fn in (path("a_aac.m4a"), path("a_aac_fast.m4a"), path("a_opus.webm"), path("clip_a_16k_flac.mka")):
    data = open(fn, "rb").read()
    for cut, tag in ((len(data) // 2, "half"), (40, "head40")):
        out = path("%s_%s%s" % (os.path.splitext(os.path.basename(fn))[0], tag, os.path.splitext(fn)[1]))
        open(out, "wb").write(data[:cut])
        bad.append((out, None))
ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x64:rate=5:duration=1", "-c:v", "mpeg4", path("video_only.mp4"))
bad.append((path("video_only.mp4"), "no audio stream"))
ffmpeg("-f", "lavfi", "-i", "sine=frequency=300:sample_rate=6000:duration=1", "-c:a", "pcm_s16le", path("low_rate.mkv"))
bad.append((path("low_rate.mkv"), "below the supported minimum"))
junk = bytearray(open(path("a_aac.m4a"), "rb").read()[:64]) + bytes(rng.integers(0, 256, 4000, dtype=np.uint8))
open(path("junk.m4a"), "wb").write(junk)
bad.append((path("junk.m4a"), None))
res = decode_all([f for f, _ in bad])
for (fn, want), (got, _, line) in zip(bad, res):
    ok = got is None and line.startswith("ERR " + fn + ": ") and (want is None or want in line)
    report(ok, "refused " + os.path.basename(fn), line[:200])

sys.exit(1 if FAILED else 0)
