#!/usr/bin/env python3
# SSIM of pepd's transcodes (testbed/quality, make optimize-quality).
#
#   python3 ssim.py LIST [WORKERS]
#
# LIST holds one pair a line: "key<TAB>original<TAB>webp". For each pair
# the script prints "key<TAB>ssim<TAB>WxH<TAB>mode" or
# "key<TAB>skip<TAB>reason", in LIST order, flushed line by line (the
# caller counts them for progress). mode is the original's Pillow mode
# ("RGB", "CMYK", "P", ...), with "+icc" when its ICC profile was applied
# and "+icc-failed" when littlecms refused it. A CMYK JPEG without a
# profile is converted naively (255-C-K...), as Chromium shows it.
# Both images are decoded with Pillow; the original as a browser shows it:
# EXIF orientation applied, an embedded ICC profile converted to sRGB
# (littlecms, as libvips does for the WebP), 16-bit grey cut to 8 bits.
# Both are composited over white (alpha) and compared in RGB with
# scikit-image's structural_similarity (Wang et al. 2004; 7x7 uniform
# window, data_range 255, channel_axis=2). Images under 7x7 pixels are
# skipped ("smaller than 7x7"). An animated original (mode "...+animN",
# N frames) is compared frame by frame with the frame of the transcode on
# screen at the same moment, and its SSIM is its worst frame's.
# Consecutive pairs with the same original
# decode it once. WORKERS (default 2) processes share the work.
import io
import sys
from multiprocessing import Pool

import numpy as np
from PIL import Image, ImageCms, ImageOps
from skimage.metrics import structural_similarity

SRGB = None


def srgb_profile():
    global SRGB
    if SRGB is None:
        SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
    return SRGB


def over_white(im):
    im = im.convert("RGBA")
    bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
    bg.alpha_composite(im)
    return np.asarray(bg.convert("RGB"))


def original(path):
    im = Image.open(path)
    if getattr(im, "is_animated", False):
        return shown(im), f"{im.mode}+anim{im.n_frames}"
    im.seek(0)
    im.load()
    mode = im.mode
    icc = im.info.get("icc_profile")
    im = ImageOps.exif_transpose(im)
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        a = np.asarray(im).astype(np.uint32) >> 8
        im = Image.fromarray(a.clip(0, 255).astype(np.uint8), "L")
    if icc:
        try:
            src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            if im.mode == "P":
                im = im.convert("RGBA")
            alpha = im.getchannel("A") if im.mode in ("RGBA", "LA") else None
            base = im.convert("RGB") if im.mode in ("RGBA", "LA") else im
            out = ImageCms.profileToProfile(base, src, srgb_profile(), outputMode="RGB")
            if alpha is not None:
                out.putalpha(alpha)
            im = out
            mode += "+icc"
        except Exception:  # a profile littlecms refuses: shown without it
            mode += "+icc-failed"
    return over_white(im), mode


def shown(im):
    """The frames of an animated image as a browser shows them: each one
    composed (Pillow applies a GIF's disposal and transparency), over white,
    with its duration in ms (a duration of 10 ms or less is shown for 100,
    as Chromium and Firefox do)."""
    out = []
    for i in range(im.n_frames):
        im.seek(i)
        im.load()  # Pillow's WebP reader sets a frame's duration on load
        d = im.info.get("duration") or 0
        out.append((over_white(im), 100 if d <= 10 else d))
    return out


def webp(path):
    im = Image.open(path)
    if getattr(im, "is_animated", False):
        return shown(im)
    im.load()
    return over_white(im)


def animated_ssim(a, b):
    """The lowest SSIM over an animation's frames: at the start of each
    frame of a, the frame of b then on screen (an encoder may merge a frame
    into the one before it, adding its duration); None when b's frames
    differ in size."""
    worst, t, j, j_end = 1.0, 0, 0, b[0][1]
    for frame, d in a:
        while t >= j_end and j + 1 < len(b):
            j += 1
            j_end += b[j][1]
        if frame.shape != b[j][0].shape:
            return None
        worst = min(worst, structural_similarity(frame, b[j][0], channel_axis=2, data_range=255))
        t += d
    return worst


def group(pairs):
    orig = pairs[0][1]
    try:
        a, mode = original(orig)
    except Exception as e:  # an original Pillow cannot read: reported, not fatal
        return [f"{k}\tskip\tdecode original: {type(e).__name__}" for k, _, _ in pairs]
    out = []
    for key, _, wp in pairs:
        try:
            b = webp(wp)
        except Exception as e:
            out.append(f"{key}\tskip\tdecode webp: {type(e).__name__}")
            continue
        if isinstance(a, list):  # an animation: its worst frame
            if not isinstance(b, list):
                b = [(b, 1)]  # one frame shown for the whole animation
            h, w = a[0][0].shape[:2]
            s = animated_ssim(a, b) if min(h, w) >= 7 else None
            if min(h, w) < 7:
                out.append(f"{key}\tskip\tsmaller than 7x7")
            elif s is None:
                out.append(f"{key}\tskip\tframes of different shapes")
            else:
                out.append(f"{key}\t{s:.6f}\t{w}x{h}\t{mode}")
            continue
        if isinstance(b, list):
            b = b[0][0]
        if a.shape != b.shape:
            out.append(f"{key}\tskip\tshape {a.shape[1]}x{a.shape[0]} vs {b.shape[1]}x{b.shape[0]}")
        elif min(a.shape[0], a.shape[1]) < 7:
            out.append(f"{key}\tskip\tsmaller than 7x7")
        else:
            s = structural_similarity(a, b, channel_axis=2, data_range=255)
            out.append(f"{key}\t{s:.6f}\t{a.shape[1]}x{a.shape[0]}\t{mode}")
    return out


def main():
    groups = []
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            key, orig, wp = line.split("\t")
            if groups and groups[-1][0][1] == orig:
                groups[-1].append((key, orig, wp))
            else:
                groups.append([(key, orig, wp)])
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    with Pool(workers) as p:
        for lines in p.imap(group, groups, chunksize=4):
            for l in lines:
                print(l, flush=True)


if __name__ == "__main__":
    main()
