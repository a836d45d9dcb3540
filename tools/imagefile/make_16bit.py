#!/usr/bin/env python3
"""16-bit PNG and TIFF fixtures for infer/imagefile, with what Pillow's
Image.open(path).convert("RGB") (DeepForest's image reader) makes of each,
or the error Pillow raises when it cannot open or convert one.

  cd infer/imagefile/testdata && \
      /opt/canopy-peers/venv/bin/python ../../../tools/imagefile/make_16bit.py --out pil_16bit.json

The files are written by hand (struct + zlib), not by Pillow, so the
samples are exactly the ones listed: 0, 1, 255, 256, 257, 0x7fff, 0x8000,
0xff00, 0xff7f, 0xff80, 0xffff, 1000 and their rotations.
"""
import argparse
import hashlib
import json
import platform
import struct
import os
import sys
import zlib


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_meta import torch_meta  # noqa: E402

import PIL
from PIL import Image

VALS = [0, 1, 255, 256, 257, 0x7FFF, 0x8000, 0xFF00, 0xFF7F, 0xFF80, 0xFFFF, 1000]
W, H = len(VALS), 2


def sample(x, y, c):
    return VALS[(x + 3 * c + 5 * y) % len(VALS)]


def pixels(channels):
    return [[[sample(x, y, c) for c in range(channels)] for x in range(W)] for y in range(H)]


def png(bitdepth, colortype, channels):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b""
    for row in pixels(channels):
        raw += b"\x00" + b"".join(struct.pack(">%dH" % channels, *p) for p in row)
    ihdr = struct.pack(">IIBBBBB", W, H, bitdepth, colortype, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def tiff(order, photometric, channels, extra=None):
    """An uncompressed one-strip TIFF of 16-bit samples; order '<' or '>'."""
    data = b"".join(struct.pack(order + "%dH" % channels, *p) for row in pixels(channels) for p in row)
    tags = [(256, 3, 1, W), (257, 3, 1, H), (258, 3, channels, None), (259, 3, 1, 1), (262, 3, 1, photometric),
            (273, 4, 1, None), (277, 3, 1, channels), (278, 3, 1, H), (279, 4, 1, len(data)), (284, 3, 1, 1)]
    if extra is not None:
        tags.append((338, 3, 1, extra))
    tags.append((339, 3, channels, None))
    n = len(tags)
    ifd_at = 8
    after = ifd_at + 2 + 12 * n + 4
    bps_at = after
    blob = b""
    if channels > 2:  # BitsPerSample and SampleFormat arrays do not fit in the entry
        blob = struct.pack(order + "%dH" % channels, *([16] * channels)) + struct.pack(order + "%dH" % channels, *([1] * channels))
    data_at = after + len(blob)
    head = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, ifd_at)
    ifd = struct.pack(order + "H", n)
    for tag, typ, count, val in tags:
        if tag == 258 or tag == 339:
            if channels > 2:
                off = bps_at if tag == 258 else bps_at + 2 * channels
                ifd += struct.pack(order + "HHII", tag, typ, count, off)
            else:
                v = 16 if tag == 258 else 1
                vals = struct.pack(order + "%dH" % channels, *([v] * channels)).ljust(4, b"\0")
                ifd += struct.pack(order + "HHI", tag, typ, count) + vals
            continue
        if tag == 273:
            val = data_at
        if typ == 3:
            ifd += struct.pack(order + "HHIH", tag, typ, count, val) + b"\0\0"
        else:
            ifd += struct.pack(order + "HHII", tag, typ, count, val)
    ifd += struct.pack(order + "I", 0)
    return head + ifd + blob + data


FILES = {
    "gray16.png": lambda: png(16, 0, 1),
    "rgb16.png": lambda: png(16, 2, 3),
    "rgba16.png": lambda: png(16, 6, 4),
    "gray16a.png": lambda: png(16, 4, 2),
    "gray16.tif": lambda: tiff("<", 1, 1),
    "gray16be.tif": lambda: tiff(">", 1, 1),
    "rgb16.tif": lambda: tiff("<", 2, 3),
    "rgb16be.tif": lambda: tiff(">", 2, 3),
    "rgba16.tif": lambda: tiff("<", 2, 4, extra=2),
    "rgba16p.tif": lambda: tiff("<", 2, 4, extra=1),
    "gray16a.tif": lambda: tiff("<", 1, 2, extra=2),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cases = []
    for name, make in FILES.items():
        b = make()
        with open(name, "wb") as f:
            f.write(b)
        c = {"file": name, "sha256": hashlib.sha256(b).hexdigest()}
        try:
            im = Image.open(name)
            c["mode"] = im.mode
            rgb = im.convert("RGB")
            c["size"] = list(rgb.size)
            c["rgb"] = rgb.tobytes().hex()  # row-major R,G,B bytes
        except Exception as e:  # what Pillow says is what canopy must say
            c["error"] = "%s: %s" % (type(e).__name__, e)
        cases.append(c)
    meta = {"pillow": PIL.__version__, "python": platform.python_version(),
            "reader": 'PIL.Image.open(path).convert("RGB").tobytes()',
            "command": "cd infer/imagefile/testdata && /opt/canopy-peers/venv/bin/python ../../../tools/imagefile/make_16bit.py --out pil_16bit.json"}
    meta.update(torch_meta())
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
