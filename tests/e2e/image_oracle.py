#!/usr/bin/python3
"""image_oracle.py — differential tests of the C image front-end against real Pillow and PyTorch.

Run by tests/e2e/image_diff.sh with the path of a compiled tests/e2e/image_driver.c. Uses Debian's
python3-pil (Pillow 9.x) and python3-torch; torchvision is not needed (its resize on a PIL image is
PIL's Image.resize(..., BILINEAR), its pad is a white canvas paste). Prints PASS/FAIL lines.

Groups:
  resize   random RGB images of odd sizes (1x1, 1xN, Nx1, 4000x3, up/down/mixed, one side kept),
           PIL Image.resize(BILINEAR) vs pm_resize_bilinear_u8, byte-equal.
  decode   files in every mode PIL converts (1, L, LA, P, RGB, RGBA, I;16 grey, 16-bit RGB/RGBA/LA,
           2/4-bit grey, 1/2/4-bit palette with a short PLTE, interlaced, tRNS), JPEG (4:2:0, 4:4:4,
           grey, CMYK, progressive), WebP (lossy, lossless, alpha), BMP, GIF (Pillow's, animated, and
           written here: a first image smaller than the screen or past it, transparency, short, local
           and no palettes, interlaced): Image.open().convert('RGB') vs pm_image_read_file, then
           resized, byte-equal.
  bicubic  random float canvases, torch F.interpolate(bicubic, align_corners=False) vs
           pm_hd_bicubic_f32, bit-equal.
  grid     crop-grid choice, resized size and num_img_tokens for ordinary and extreme aspect ratios
           (> 36 crops, ties, rejections) against a transcription of the official formula.
  hd       whole preprocessing of random images against a transcription of the official
           dynamic_preprocess + preprocess (PIL + torch).
  errors   bad files (truncated PNG/JPEG/GIF, JPEG with a wrong header, 0x0, 20000x20000, text file
           renamed .png, a GIF without an image or with a short control block): an ERR line naming the
           file, no crash.
  mutated  randomly corrupted files of every format: answered, never a crash.
"""
import io
import math
import os
import struct
import subprocess
import sys
import tempfile
import warnings
import zlib

import numpy as np
import torch
from PIL import Image

warnings.filterwarnings("ignore")  # PIL warns about palette tRNS conversions; irrelevant here
DRIVER = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="pm_image_diff_")
rng = np.random.RandomState(20240611)
results = []


def report(name, ok, detail=""):
    results.append(ok)
    print(("PASS " if ok else "FAIL ") + name + ((" — " + detail) if detail else ""))


def run_driver(cmds):
    p = subprocess.run([DRIVER], input="\n".join(cmds) + "\n", capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError("driver exited %d: %s" % (p.returncode, p.stderr[-2000:]))
    out = p.stdout.splitlines()
    if len(out) != len(cmds):
        raise RuntimeError("driver answered %d lines for %d commands: %s" % (len(out), len(cmds), p.stderr[-2000:]))
    return out


def tmp(name):
    return os.path.join(TMP, name)


def read_u8(path, shape):
    return np.fromfile(path, np.uint8).reshape(shape)


# ------------------------------------------------------------------------------------- PNG writer

def _chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def _pack_rows(samples, depth):
    """samples [h, w, c] ints -> list of packed row bytes (no filter byte)."""
    h, w, c = samples.shape
    rows = []
    for y in range(h):
        flat = samples[y].reshape(-1)
        if depth == 16:
            rows.append(flat.astype(">u2").tobytes())
        elif depth == 8:
            rows.append(flat.astype(np.uint8).tobytes())
        else:
            per = 8 // depth
            n = (len(flat) + per - 1) // per
            b = bytearray(n)
            for i, v in enumerate(flat):
                b[i // per] |= (int(v) & ((1 << depth) - 1)) << (8 - depth * (i % per + 1))
            rows.append(bytes(b))
    return rows


def png_bytes(samples, ctype, depth, plte=None, trns=None, interlace=False):
    """A minimal PNG encoder (filter 0) so that every colour type / bit depth can be produced."""
    h, w, _ = samples.shape
    raw = b""
    if not interlace:
        raw = b"".join(b"\x00" + r for r in _pack_rows(samples, depth))
    else:
        for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] == 0 or sub.shape[1] == 0:
                continue
            raw += b"".join(b"\x00" + r for r in _pack_rows(sub, depth))
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0))
    if plte is not None:
        out += _chunk(b"PLTE", bytes(plte))
    if trns is not None:
        out += _chunk(b"tRNS", trns)
    out += _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")
    return out


# ----------------------------------------------------------------------------------------- resize

def test_resize():
    sizes = [((1, 1), (1, 1)), ((1, 1), (7, 5)), ((1, 9), (1, 3)), ((9, 1), (4, 1)), ((1, 37), (5, 448)),
             ((4000, 3), (448, 1)), ((4000, 3), (896, 448)), ((3, 4000), (2, 336)), ((17, 13), (448, 448)),
             ((640, 480), (896, 672)), ((1000, 999), (448, 447)), ((333, 777), (192, 448)), ((5, 7), (5, 700)),
             ((700, 5), (3, 5)), ((1023, 1), (1, 1)), ((2, 2), (3, 3)), ((896, 600), (896, 600)), ((448, 3001), (448, 2688)),
             ((251, 97), (2688, 1036)), ((2689, 13), (2688, 13))]
    for _ in range(10):
        sw, sh = rng.randint(1, 300, 2)
        dw, dh = rng.randint(1, 500, 2)
        sizes.append(((int(sw), int(sh)), (int(dw), int(dh))))
    cmds, exp = [], []
    for k, ((sw, sh), (dw, dh)) in enumerate(sizes):
        a = rng.randint(0, 256, (sh, sw, 3)).astype(np.uint8)
        if k % 3 == 0:  # smooth content too, not only noise
            yy, xx = np.mgrid[0:sh, 0:sw]
            a[..., 0] = (xx * 255 // max(sw - 1, 1)).astype(np.uint8)
            a[..., 1] = (yy * 255 // max(sh - 1, 1)).astype(np.uint8)
        a.tofile(tmp("rs%d.raw" % k))
        cmds.append("resize %s %d %d %d %d %s" % (tmp("rs%d.raw" % k), sw, sh, dw, dh, tmp("rs%d.out" % k)))
        exp.append(np.asarray(Image.fromarray(a, "RGB").resize((dw, dh), Image.BILINEAR)))
    out = run_driver(cmds)
    bad = []
    for k, ((sw, sh), (dw, dh)) in enumerate(sizes):
        if out[k] != "OK":
            bad.append("%dx%d->%dx%d: %s" % (sw, sh, dw, dh, out[k]))
            continue
        got = read_u8(tmp("rs%d.out" % k), (dh, dw, 3))
        if not np.array_equal(got, exp[k]):
            d = np.abs(got.astype(int) - exp[k].astype(int))
            bad.append("%dx%d->%dx%d: %d bytes differ (max %d)" % (sw, sh, dw, dh, int((d > 0).sum()), int(d.max())))
    report("image_resize_vs_pillow (%d size pairs, byte-equal)" % len(sizes), not bad, "; ".join(bad[:5]))


# ----------------------------------------------------------------------------------------- GIF

def gif_lzw(indices, min_bits):
    """GIF image data for a list of palette indices: LZW codes that never grow the table (a clear
    code before it would), packed LSB first, in sub-blocks of at most 255 bytes."""
    clear, end = 1 << min_bits, (1 << min_bits) + 1
    size = min_bits + 1
    room = (1 << size) - end - 1  # literals before the decoder's table would widen the codes
    codes = []
    for k in range(0, len(indices), room):
        codes.append(clear)
        codes.extend(int(v) for v in indices[k:k + room])
    codes.append(end)
    acc = nbits = 0
    out = bytearray()
    for c in codes:
        acc |= c << nbits
        nbits += size
        while nbits >= 8:
            out.append(acc & 255)
            acc >>= 8
            nbits -= 8
    if nbits:
        out.append(acc & 255)
    blocks = bytearray([min_bits])
    for k in range(0, len(out), 255):
        blocks += bytes([len(out[k:k + 255])]) + out[k:k + 255]
    return bytes(blocks + b"\0")


def gif_bytes(screen, frames, gpal=None, bg=0):
    """A GIF: screen (w, h), an optional global palette (entries x 3 uint8), frames of
    (x0, y0, indices[h, w], local palette or None, transparency index or None, interlaced)."""
    def table(p):
        n = 2
        while n < len(p):
            n *= 2
        return n.bit_length() - 2, bytes(np.asarray(p, np.uint8).ravel()) + b"\0" * (3 * (n - len(p)))

    out = bytearray(b"GIF89a" + struct.pack("<HH", *screen))
    if gpal is not None:
        bits, data = table(gpal)
        out += bytes([0x80 | bits, bg, 0]) + data
    else:
        out += bytes([0, bg, 0])
    for x0, y0, idx, lpal, transp, interlaced in frames:
        if transp is not None:
            out += b"\x21\xf9\x04" + bytes([1]) + b"\0\0" + bytes([transp]) + b"\0"
        h, w = idx.shape
        flags = 0x40 if interlaced else 0
        data = b""
        if lpal is not None:
            bits, data = table(lpal)
            flags |= 0x80 | bits
        out += b"," + struct.pack("<HHHH", x0, y0, w, h) + bytes([flags]) + data
        rows = list(range(0, h, 8)) + list(range(4, h, 8)) + list(range(2, h, 4)) + list(range(1, h, 2)) if interlaced else range(h)
        out += gif_lzw(np.concatenate([idx[y] for y in rows]), 8)
    return bytes(out + b";")


def gif_cases(rgb, grey):
    """GIFs as Pillow writes them, and written here for what it does not write: a first image
    smaller than the screen or past it, a transparency index filling the canvas, short and local
    palettes, no palette, an interlaced partial image."""
    def pil_bytes(im, **kw):
        b = io.BytesIO()
        im.save(b, "GIF", **kw)
        return b.getvalue()

    im = Image.fromarray(rgb, "RGB")
    frames = [Image.fromarray(np.roll(rgb, k, axis=1), "RGB") for k in range(3)]
    pal = rng.randint(0, 256, (256, 3)).astype(np.uint8)
    h, w = grey.shape
    idx = rng.randint(0, 256, (h, w)).astype(np.uint8)
    small = rng.randint(0, 8, (h // 2, w // 2)).astype(np.uint8)
    return [
        ("p.gif", pil_bytes(im.convert("P", palette=Image.ADAPTIVE, colors=200))),
        ("l.gif", pil_bytes(Image.fromarray(grey, "L"))),
        ("1.gif", pil_bytes(Image.fromarray(grey, "L").convert("1"))),
        ("trns.gif", pil_bytes(im.convert("P", palette=Image.ADAPTIVE, colors=16), transparency=5)),
        ("interlaced.gif", pil_bytes(im.convert("P", palette=Image.ADAPTIVE, colors=64), interlace=True)),
        ("anim.gif", pil_bytes(frames[0], save_all=True, append_images=frames[1:], duration=100, loop=0)),
        ("partial.gif", gif_bytes((w, h), [(3, 2, small, None, None, False)], gpal=pal[:8], bg=4)),
        ("partial_trns.gif", gif_bytes((w, h), [(5, 1, small, None, 6, False)], gpal=pal[:8])),
        ("past_screen.gif", gif_bytes((w // 2, h // 2), [(w // 3, h // 3, small, None, None, False)], gpal=pal[:8])),
        ("short_pal.gif", gif_bytes((w, h), [(0, 0, idx, None, None, False)], gpal=pal[:5])),
        ("local_pal.gif", gif_bytes((w, h), [(2, 3, small, pal[100:108], None, True)], gpal=pal[:8])),
        ("no_pal.gif", gif_bytes((w, h), [(0, 0, idx, None, 9, False)])),
        ("interlaced_partial.gif", gif_bytes((w, h), [(1, 1, rng.randint(0, 256, (h - 1, w - 2)).astype(np.uint8), None, None, True)],
                                             gpal=pal)),
    ]


# ----------------------------------------------------------------------------------------- decode

def make_decode_cases():
    cases = []  # (name, bytes)
    w, h = 37, 23
    rgb = rng.randint(0, 256, (h, w, 3)).astype(np.uint8)
    alpha = rng.randint(0, 256, (h, w)).astype(np.uint8)
    grey = rng.randint(0, 256, (h, w)).astype(np.uint8)

    def pil_bytes(im, fmt, **kw):
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        return b.getvalue()

    rgba = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
    cases.append(("rgb.png", pil_bytes(Image.fromarray(rgb, "RGB"), "PNG")))
    cases.append(("rgba.png", pil_bytes(rgba, "PNG")))
    cases.append(("l.png", pil_bytes(Image.fromarray(grey, "L"), "PNG")))
    cases.append(("la.png", pil_bytes(Image.fromarray(np.dstack([grey, alpha]), "LA"), "PNG")))
    cases.append(("1.png", pil_bytes(Image.fromarray(grey, "L").convert("1"), "PNG")))
    cases.append(("p.png", pil_bytes(Image.fromarray(rgb, "RGB").convert("P", palette=Image.ADAPTIVE, colors=200), "PNG")))
    cases.append(("p_trns.png", pil_bytes(Image.fromarray(rgb, "RGB").convert("P", palette=Image.ADAPTIVE, colors=16), "PNG",
                                          transparency=3)))
    cases.append(("i16.png", pil_bytes(Image.fromarray((rng.randint(0, 700, (h, w))).astype(np.uint16)), "PNG")))
    # colour types / depths PIL does not write
    s16 = rng.randint(0, 65536, (h, w, 4)).astype(np.int64)
    cases.append(("rgb16.png", png_bytes(s16[..., :3], 2, 16)))
    cases.append(("rgba16.png", png_bytes(s16, 6, 16)))
    cases.append(("la16.png", png_bytes(s16[..., :2], 4, 16)))
    cases.append(("g16_trns.png", png_bytes(rng.randint(0, 400, (h, w, 1)), 0, 16, trns=struct.pack(">H", 7))))
    cases.append(("g2.png", png_bytes(rng.randint(0, 4, (h, w, 1)), 0, 2)))
    cases.append(("g4_interlaced.png", png_bytes(rng.randint(0, 16, (h, w, 1)), 0, 4, interlace=True)))
    cases.append(("rgb_trns.png", png_bytes(rgb.astype(np.int64), 2, 8, trns=struct.pack(">HHH", 1, 2, 3))))
    cases.append(("rgba_interlaced.png", png_bytes(np.dstack([rgb, alpha]).astype(np.int64), 6, 8, interlace=True)))
    pl = rng.randint(0, 256, 3 * 5)  # short palette: indices 5.. read PIL's grey ramp
    cases.append(("p1.png", png_bytes(rng.randint(0, 2, (h, w, 1)), 3, 1, plte=pl[:6])))
    cases.append(("p2.png", png_bytes(rng.randint(0, 4, (h, w, 1)), 3, 2, plte=pl[:12])))
    cases.append(("p4_short_plte.png", png_bytes(rng.randint(0, 5, (h, w, 1)), 3, 4, plte=pl)))
    cases.append(("p8_trns.png", png_bytes(rng.randint(0, 5, (h, w, 1)), 3, 8, plte=pl, trns=bytes([0, 128, 255]))))
    # JPEG (libjpeg-turbo, same library as PIL)
    im = Image.fromarray(rgb, "RGB")
    cases.append(("q90_420.jpg", pil_bytes(im, "JPEG", quality=90)))
    cases.append(("q75_444.jpg", pil_bytes(im, "JPEG", quality=75, subsampling=0)))
    cases.append(("progressive.jpg", pil_bytes(im, "JPEG", quality=85, progressive=True)))
    cases.append(("grey.jpg", pil_bytes(Image.fromarray(grey, "L"), "JPEG", quality=80)))
    cases.append(("cmyk.jpg", pil_bytes(Image.fromarray(np.dstack([rgb, alpha]), "CMYK"), "JPEG", quality=90)))
    # WebP
    cases.append(("lossy.webp", pil_bytes(im, "WEBP", quality=80)))
    cases.append(("lossless_rgba.webp", pil_bytes(rgba, "WEBP", lossless=True)))
    cases.append(("lossy_rgba.webp", pil_bytes(rgba, "WEBP", quality=70)))
    # BMP
    cases.append(("rgb.bmp", pil_bytes(im, "BMP")))
    cases.append(("l.bmp", pil_bytes(Image.fromarray(grey, "L"), "BMP")))
    cases.append(("p.bmp", pil_bytes(im.convert("P", palette=Image.ADAPTIVE, colors=50), "BMP")))
    cases.append(("1.bmp", pil_bytes(Image.fromarray(grey, "L").convert("1"), "BMP")))
    # GIF: the first frame
    cases.extend(gif_cases(rgb, grey))
    # a bigger photo-like image (smooth gradients) through the JPEG/PNG paths
    yy, xx = np.mgrid[0:301, 0:433]
    photo = np.dstack([(xx * 7 + yy) % 256, (yy * 3) % 256, ((xx + yy) // 3) % 256]).astype(np.uint8)
    cases.append(("photo.jpg", pil_bytes(Image.fromarray(photo, "RGB"), "JPEG", quality=92)))
    cases.append(("photo.png", pil_bytes(Image.fromarray(photo, "RGB"), "PNG")))
    return cases


def test_decode():
    cases = make_decode_cases()
    cmds, exp, sizes = [], [], []
    for k, (name, data) in enumerate(cases):
        path = tmp("dec_" + name)
        with open(path, "wb") as f:
            f.write(data)
        ref = Image.open(path).convert("RGB")
        dw, dh = int(rng.randint(1, 2 * ref.width + 2)), int(rng.randint(1, 2 * ref.height + 2))
        exp.append((np.asarray(ref), np.asarray(ref.resize((dw, dh), Image.BILINEAR))))
        sizes.append((dw, dh))
        cmds.append("decode %s %s" % (path, tmp("dec_%d.raw" % k)))
        cmds.append("decode_resize %s %d %d %s" % (path, dw, dh, tmp("decrs_%d.raw" % k)))
    out = run_driver(cmds)
    bad_dec, bad_rs = [], []
    for k, (name, _) in enumerate(cases):
        a, b = exp[k]
        o1, o2 = out[2 * k], out[2 * k + 1]
        if o1 != "OK %d %d" % (a.shape[1], a.shape[0]):
            bad_dec.append("%s: %s" % (name, o1))
        else:
            got = read_u8(tmp("dec_%d.raw" % k), a.shape)
            if not np.array_equal(got, a):
                bad_dec.append("%s: %d bytes differ" % (name, int((got != a).sum())))
        dw, dh = sizes[k]
        if not o2.startswith("OK"):
            bad_rs.append("%s: %s" % (name, o2))
        else:
            got = read_u8(tmp("decrs_%d.raw" % k), (dh, dw, 3))
            if not np.array_equal(got, b):
                bad_rs.append("%s -> %dx%d: %d bytes differ" % (name, dw, dh, int((got != b).sum())))
    report("image_decode_vs_pil_convert_rgb (%d files: PNG all modes, JPEG, WebP, BMP, GIF)" % len(cases), not bad_dec,
           "; ".join(bad_dec[:6]))
    report("image_decode_then_resize_vs_pillow (%d files)" % len(cases), not bad_rs, "; ".join(bad_rs[:6]))


# ---------------------------------------------------------------------------------------- bicubic

def test_bicubic():
    shapes = [(896, 896), (448, 896), (1344, 2240), (2688, 448), (448, 448), (3, 5), (1, 1), (1000, 37), (50, 60),
              (5, 3), (17, 3), (7, 9), (449, 448), (447, 1343)]
    outs = [(448, 448)] * 9 + [(3, 5), (3, 17), (13, 11), (448, 448), (448, 448)]
    cmds, exp = [], []
    for k, ((sh, sw), (dh, dw)) in enumerate(zip(shapes, outs)):
        x = (rng.rand(3, sh, sw).astype(np.float32) * 2 - 1)
        if k % 2 == 0:  # values on the normalised 8-bit grid, as the real canvases are
            x = ((rng.randint(0, 256, (3, sh, sw)).astype(np.float32) / 255.0 - 0.5) / 0.5).astype(np.float32)
        x.tofile(tmp("bc%d.f32" % k))
        cmds.append("bicubic %s 3 %d %d %d %d %s" % (tmp("bc%d.f32" % k), sh, sw, dh, dw, tmp("bc%d.out" % k)))
        exp.append(torch.nn.functional.interpolate(torch.from_numpy(x)[None], size=(dh, dw), mode="bicubic",
                                                   align_corners=False)[0].numpy())
    out = run_driver(cmds)
    worst, bad = 0.0, []
    for k, e in enumerate(exp):
        if out[k] != "OK":
            bad.append(out[k])
            continue
        got = np.fromfile(tmp("bc%d.out" % k), np.float32).reshape(e.shape)
        d = float(np.abs(got - e).max())
        worst = max(worst, d)
        if d > 0:
            bad.append("%s->%s max %.3g (%d values)" % (shapes[k], outs[k], d, int((got != e).sum())))
    report("image_bicubic_vs_torch_interpolate (%d canvases, bit-equal; max|d|=%.3g)" % (len(exp), worst), not bad,
           "; ".join(bad[:5]))


# --------------------------------------------------------------------- official formula, transcribed

def official_find_closest_aspect_ratio(aspect_ratio, target_ratios, width, height, image_size):
    best_ratio_diff = float("inf")
    best_ratio = (1, 1)
    area = width * height
    for ratio in target_ratios:
        target_aspect_ratio = ratio[0] / ratio[1]
        ratio_diff = abs(aspect_ratio - target_aspect_ratio)
        if ratio_diff < best_ratio_diff:
            best_ratio_diff = ratio_diff
            best_ratio = ratio
        elif ratio_diff == best_ratio_diff:
            if area > 0.5 * image_size * image_size * ratio[0] * ratio[1]:
                best_ratio = ratio
    return best_ratio


def official_geometry(orig_width, orig_height, max_num=36, image_size=448, min_num=1):
    """dynamic_preprocess up to the resize, plus the num_img_tokens formula of preprocess.
    Returns (w_crops, h_crops, new_w, new_h, tokens, mask) or None where the official code raises."""
    mask_size = image_size // 14
    w_crop_num = math.ceil(orig_width / float(image_size))
    h_crop_num = math.ceil(orig_height / float(image_size))
    if w_crop_num * h_crop_num > max_num:
        aspect_ratio = orig_width / orig_height
        target_ratios = set((i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                            if i * j <= max_num and i * j >= min_num)
        target_ratios = sorted(target_ratios, key=lambda x: x[0] * x[1])
        target_aspect_ratio = official_find_closest_aspect_ratio(aspect_ratio, target_ratios, orig_width, orig_height,
                                                                 image_size)
        target_width = image_size * target_aspect_ratio[0]
        target_height = image_size * target_aspect_ratio[1]
    else:
        target_width = image_size * w_crop_num
        target_height = image_size * h_crop_num
        target_aspect_ratio = (w_crop_num, h_crop_num)
    ratio_width = target_width / orig_width
    ratio_height = target_height / orig_height
    if ratio_width < ratio_height:
        new_size = (target_width, int(orig_height * ratio_width))
        padding_width = 0
        padding_height = target_height - int(orig_height * ratio_width)
    else:
        new_size = (int(orig_width * ratio_height), target_height)
        padding_width = target_width - int(orig_width * ratio_height)
        padding_height = 0
    attention_mask = torch.ones((int(mask_size * target_aspect_ratio[1]), int(mask_size * target_aspect_ratio[0])))
    if padding_width >= 14:
        attention_mask[:, -math.floor(padding_width / 14):] = 0
    if padding_height >= 14:
        attention_mask[-math.floor(padding_height / 14):, :] = 0
    if attention_mask.sum() <= 0:
        return None
    if min(new_size[1], target_height) < 10 or min(new_size[0], target_width) < 10:
        return None
    # num_img_tokens as preprocess computes it
    m = mask_size
    h, w = attention_mask.shape
    crops = attention_mask.reshape(1, h // m, m, w // m, m).permute(0, 1, 3, 2, 4).reshape(-1, m, m)
    ds = crops[:, 0::2, 0::2].reshape(1, h // m, w // m, m // 2 + m % 2, m // 2 + m % 2).permute(0, 1, 3, 2, 4)
    ds = ds.reshape(ds.size(1) * ds.size(2), ds.size(3) * ds.size(4))
    tokens = 256 + 1 + int(ds.sum().item()) + int(ds[:, 0].sum().item()) + 16
    return target_aspect_ratio[0], target_aspect_ratio[1], new_size[0], new_size[1], tokens, attention_mask, \
        (padding_width, padding_height)


def test_grid():
    sizes = [(640, 480), (448, 448), (1, 1), (447, 449), (896, 896), (2688, 2688), (2689, 2688), (3000, 3000),
             (20000, 448), (448, 20000), (16128, 448), (16129, 448), (10000, 10), (10, 10000), (1000, 1), (36 * 448 + 1, 448),
             (4000, 3), (3, 4000), (50000, 1400), (1920, 1080), (1080, 1920), (4032, 3024), (7680, 4320), (12000, 9000),
             (4480, 448), (4481, 449), (3135, 100), (100, 3135), (6000, 999), (17000, 472), (2, 1), (1, 2)]
    # exact aspect ties between grids of different products (i/j == k/l), and near-ties
    for (i, j) in [(1, 1), (2, 1), (3, 2), (4, 3), (6, 1), (5, 4), (9, 4), (12, 3), (2, 3), (1, 6)]:
        for s in [448, 900, 1344, 2000, 2688, 3001]:
            sizes.append((i * s, j * s))
    for _ in range(1500):
        ar = math.exp(rng.uniform(-5, 5))
        area = math.exp(rng.uniform(math.log(1e4), math.log(4e7)))
        w = max(1, int(math.sqrt(area * ar)))
        h = max(1, int(math.sqrt(area / ar)))
        sizes.append((w, h))
    cmds = ["plan %d %d 36 448" % (w, h) for (w, h) in sizes]
    # a smaller crop budget exercises the closest-ratio search much more often
    sizes2 = [(int(w), int(h)) for w, h in zip(rng.randint(1, 6000, 400), rng.randint(1, 6000, 400))]
    cmds += ["plan %d %d 6 448" % (w, h) for (w, h) in sizes2]
    out = run_driver(cmds)
    bad, n_over, n_rej = [], 0, 0
    for k, (w, h) in enumerate(sizes + sizes2):
        maxc = 36 if k < len(sizes) else 6
        ref = official_geometry(w, h, max_num=maxc)
        if math.ceil(w / 448) * math.ceil(h / 448) > maxc:
            n_over += 1
        if ref is None:
            n_rej += 1
            if not out[k].startswith("ERR"):
                bad.append("%dx%d/%d: official raises, C says %s" % (w, h, maxc, out[k]))
            continue
        want = "OK %d %d %d %d %d" % ref[:5]
        if out[k] != want:
            bad.append("%dx%d/%d: want %s got %s" % (w, h, maxc, want, out[k]))
    report("image_crop_grid_vs_official_formula (%d sizes, %d over the crop budget, %d rejected)"
           % (len(sizes) + len(sizes2), n_over, n_rej), not bad, "; ".join(bad[:5]))


def official_preprocess(img, max_num=36, base=448):
    """The official preprocess for one image with PIL + torch (torchvision's resize/pad/ToTensor/
    Normalize written out)."""
    img = img.convert("RGB")
    geo = official_geometry(img.width, img.height, max_num=max_num, image_size=base)
    gw, gh, nw, nh, tokens, attention_mask, (pw, ph) = geo
    resized = img.resize((nw, nh), Image.BILINEAR) if (nw, nh) != img.size else img
    canvas = Image.new("RGB", (nw + pw, nh + ph), (255, 255, 255))
    canvas.paste(resized, (0, 0))
    t = torch.from_numpy(np.array(canvas, np.uint8)).permute(2, 0, 1).contiguous().float().div(255)
    t = (t - torch.tensor([0.5, 0.5, 0.5])[:, None, None]) / torch.tensor([0.5, 0.5, 0.5])[:, None, None]
    glob = torch.nn.functional.interpolate(t.unsqueeze(0).float(), size=(base, base), mode="bicubic")
    h, w = t.shape[1], t.shape[2]
    subs = t.reshape(1, 3, h // base, base, w // base, base).permute(0, 2, 4, 1, 3, 5).reshape(-1, 3, base, base)
    m = base // 14
    mh, mw = attention_mask.shape
    masks = attention_mask.reshape(1, mh // m, m, mw // m, m).permute(0, 1, 3, 2, 4).reshape(-1, m, m)
    pixels = torch.cat([glob, subs], 0)
    cmask = torch.cat([torch.ones((1, m, m)), masks], 0)
    return np.array(canvas), pixels.numpy(), cmask.numpy(), attention_mask.numpy(), tokens


def test_hd():
    cases = [(640, 480), (333, 1001), (2000, 97), (97, 2000), (448, 448), (1, 1), (5000, 300), (1200, 1199)]
    cmds, exp = [], []
    for k, (w, h) in enumerate(cases):
        a = rng.randint(0, 256, (h, w, 3)).astype(np.uint8)
        yy, xx = np.mgrid[0:h, 0:w]
        a[..., 1] = ((xx + 2 * yy) % 256).astype(np.uint8)
        path = tmp("hd%d.png" % k)
        Image.fromarray(a, "RGB").save(path)
        exp.append(official_preprocess(Image.open(path)))
        cmds.append("hd %s 36 448 %s" % (path, tmp("hd%d" % k)))
    out = run_driver(cmds)
    bad, worst = [], 0.0
    for k, (w, h) in enumerate(cases):
        canvas, pixels, cmask, amask, tokens = exp[k]
        want = "OK %d %d %d %d" % (pixels.shape[0], canvas.shape[0], canvas.shape[1], tokens)
        if out[k] != want:
            bad.append("%dx%d: want %s got %s" % (w, h, want, out[k]))
            continue
        p = tmp("hd%d" % k)
        c_canvas = read_u8(p + ".canvas.u8", canvas.shape)
        c_pix = np.fromfile(p + ".pixels.f32", np.float32).reshape(pixels.shape)
        c_cm = np.fromfile(p + ".crop_mask.f32", np.float32).reshape(cmask.shape)
        c_am = np.fromfile(p + ".canvas_mask.f32", np.float32).reshape(amask.shape)
        d = float(np.abs(c_pix - pixels).max())
        worst = max(worst, d)
        if not np.array_equal(c_canvas, canvas):
            bad.append("%dx%d: canvas differs" % (w, h))
        if d > 1e-5:
            bad.append("%dx%d: pixels max|d| %.3g" % (w, h, d))
        if not np.array_equal(c_cm, cmask) or not np.array_equal(c_am, amask):
            bad.append("%dx%d: masks differ" % (w, h))
    report("image_hd_preprocess_vs_official (%d images; pixels max|d|=%.3g)" % (len(cases), worst), not bad,
           "; ".join(bad[:5]))


# ----------------------------------------------------------------------------------------- errors

def test_errors():
    good = io.BytesIO()
    Image.fromarray(rng.randint(0, 256, (64, 64, 3)).astype(np.uint8), "RGB").save(good, "PNG")
    good = good.getvalue()
    goodj = io.BytesIO()
    Image.fromarray(rng.randint(0, 256, (64, 64, 3)).astype(np.uint8), "RGB").save(goodj, "JPEG")
    goodj = goodj.getvalue()
    bad = {
        "truncated.png": good[:len(good) // 2],
        "header_only.png": good[:20],
        "bad_crc.png": good[:40] + bytes([good[40] ^ 0xFF]) + good[41:],
        "zero.png": png_bytes(np.zeros((1, 1, 3), np.int64), 2, 8)[:16] + struct.pack(">II", 0, 0) + b"\x08\x02\x00\x00\x00" + b"\0" * 40,
        "huge.png": b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)),
        "text.png": b"hello, this is not an image\n" * 3,
        "empty.png": b"",
        "wrong_header.jpg": b"\xff\xd8\xff\xe0" + b"\x00\x10JFIF\x00" + b"\x01" * 200,
        "truncated.jpg": goodj[:len(goodj) * 2 // 3],
        "garbage_after_soi.jpg": goodj[:3] + bytes(rng.randint(0, 256, 500).astype(np.uint8)),
        "anim.gif": b"GIF89a" + b"\0" * 20,
        "truncated.gif": None,
        "screen_only.gif": b"GIF89a" + struct.pack("<HH", 8, 8) + b"\0\0\0;",
        "short_gce.gif": b"GIF89a" + struct.pack("<HH", 8, 8) + b"\0\0\0" + b"\x21\xf9\x02\x01\x00\x00" + b";",
        "huge.gif": b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\0\0\0" + b"," + struct.pack("<HHHH", 0, 0, 65535, 65535) + b"\0\x08;",
        "huge.jpg": None,
        "truncated.webp": None,
    }
    # a JPEG header claiming 30000 x 30000
    j = bytearray(goodj)
    i = j.find(b"\xff\xc0")
    struct.pack_into(">HH", j, i + 5, 30000, 30000)
    bad["huge.jpg"] = bytes(j)
    wb = io.BytesIO()
    Image.fromarray(rng.randint(0, 256, (64, 64, 3)).astype(np.uint8), "RGB").save(wb, "WEBP")
    bad["truncated.webp"] = wb.getvalue()[: len(wb.getvalue()) // 2]
    gb = io.BytesIO()
    Image.fromarray(rng.randint(0, 256, (64, 64, 3)).astype(np.uint8), "RGB").convert("P", palette=Image.ADAPTIVE).save(gb, "GIF")
    bad["truncated.gif"] = gb.getvalue()[: len(gb.getvalue()) // 2]
    cmds = []
    for name, data in bad.items():
        with open(tmp(name), "wb") as f:
            f.write(data)
        cmds.append("decode %s %s" % (tmp(name), tmp(name + ".raw")))
    cmds.append("decode %s %s" % (tmp("does_not_exist.png"), tmp("x.raw")))
    out = run_driver(cmds)
    problems = []
    for (name, _), line in zip(list(bad.items()) + [("does_not_exist.png", None)], out):
        if not line.startswith("ERR") or name not in line:
            problems.append("%s: %s" % (name, line))
    for line in out:
        print("    " + line.replace(TMP + "/", ""))
    report("image_bad_files_rejected (%d files, ERR naming the file, no crash)" % len(cmds), not problems,
           "; ".join(problems[:5]))


def test_mutations():
    """Randomly corrupted PNG/JPEG/WebP/BMP/GIF files: every one answered (OK or ERR), no crash."""
    a = rng.randint(0, 256, (40, 50, 3)).astype(np.uint8)
    seeds = []
    for fmt, kw in [("PNG", {}), ("JPEG", {"quality": 80}), ("JPEG", {"progressive": True}), ("WEBP", {}),
                    ("WEBP", {"lossless": True}), ("BMP", {}), ("GIF", {}), ("GIF", {"interlace": True})]:
        b = io.BytesIO()
        Image.fromarray(a).convert("P", palette=Image.ADAPTIVE).save(b, fmt, **kw) if fmt == "GIF" else Image.fromarray(a).save(b, fmt, **kw)
        seeds.append(b.getvalue())
    cmds = []
    for k in range(300):
        s = bytearray(seeds[k % len(seeds)])
        for _ in range(rng.randint(1, 6)):
            op = rng.randint(3)
            if op == 0:
                s[rng.randint(len(s))] = rng.randint(256)
            elif op == 1:
                s = s[:rng.randint(1, len(s))]
            else:
                i = rng.randint(len(s))
                s[i:i] = bytes(rng.randint(0, 256, rng.randint(1, 20)).astype(np.uint8))
        with open(tmp("mut%d.bin" % k), "wb") as f:
            f.write(s)
        cmds.append("decode %s %s" % (tmp("mut%d.bin" % k), tmp("mut.raw")))
    out = run_driver(cmds)
    n_ok = sum(1 for line in out if line.startswith("OK"))
    odd = [line for line in out if not (line.startswith("OK") or line.startswith("ERR"))]
    report("image_mutated_files_no_crash (%d files: %d decoded, %d rejected)" % (len(cmds), n_ok, len(cmds) - n_ok),
           not odd, "; ".join(odd[:3]))


def main():
    for t in (test_resize, test_decode, test_bicubic, test_grid, test_hd, test_errors, test_mutations):
        try:
            t()
        except Exception as ex:  # a crash of the driver or the oracle is a failure, not an abort
            report(t.__name__, False, "exception: %r" % (ex,))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
