#!/usr/bin/env python3
# SSIM of pepd's transcodes (testbed/quality, make optimize-quality):
# reads "index<TAB>original<TAB>webp" lines on stdin, prints
# "index<TAB>ssim" (or "index<TAB>skip<TAB>reason") lines. Both images are
# decoded with Pillow, composited over white (alpha), compared in RGB with
# scikit-image's structural_similarity (Wang et al. 2004; 7x7 window,
# data_range 255, channel_axis=2). Images under 7x7 are skipped.
import sys
from multiprocessing import Pool

import numpy as np
from PIL import Image
from skimage.metrics import structural_similarity


def rgb(path):
    im = Image.open(path)
    im.seek(0)
    im = im.convert("RGBA")
    bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
    bg.alpha_composite(im)
    return np.asarray(bg.convert("RGB"))


def one(line):
    idx, orig, webp = line.rstrip("\n").split("\t")
    try:
        a, b = rgb(orig), rgb(webp)
    except Exception as e:  # an original Pillow cannot read: reported, not fatal
        return f"{idx}\tskip\tdecode: {type(e).__name__}"
    if a.shape != b.shape:
        return f"{idx}\tskip\tshape {a.shape} vs {b.shape}"
    if min(a.shape[0], a.shape[1]) < 7:
        return f"{idx}\tskip\tsmaller than 7x7"
    return f"{idx}\t{structural_similarity(a, b, channel_axis=2, data_range=255):.5f}"


if __name__ == "__main__":
    lines = sys.stdin.readlines()
    with Pool(int(sys.argv[1]) if len(sys.argv) > 1 else 2) as p:
        for out in p.imap(one, lines, chunksize=16):
            print(out, flush=False)
