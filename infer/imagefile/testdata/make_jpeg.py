"""Write JPEG fixtures and PIL's decoding of them, for imagefile's JPEG parity.

Each image is 50x33, made of 16x16 blocks of random colour (so the last
chroma column and row, in a block of their own, differ from their
neighbours), saved at quality 100 with 4:4:4, 4:2:2 and 4:2:0 chroma
subsampling. Every 8x8 DCT block is then flat, so Go's and libjpeg's
inverse DCTs agree exactly, and what is left to compare is the chroma
upsampling (libjpeg interpolates across the block edges) and the YCbCr to
RGB conversion. jpeg_SS.rgb holds
numpy.asarray(Image.open("jpeg_SS.jpg").convert("RGB")).tobytes(): H rows of
W pixels of R, G, B bytes. Run from the repository root:

    /usr/bin/python3 infer/imagefile/testdata/make_jpeg.py

cmyk.jpg is an 8x8 CMYK JPEG, which imagefile refuses.

Written with Pillow 9.4.0 (Debian 12's libjpeg62-turbo 2.1.5), numpy 1.24.2.
"""

import os

import numpy as np
from PIL import Image

W, H = 50, 33
here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(1)
blocks = rng.integers(0, 256, (H // 16 + 1, W // 16 + 1, 3)).astype(np.uint8)
img = Image.fromarray(np.repeat(np.repeat(blocks, 16, 0), 16, 1)[:H, :W], "RGB")
for ss, name in [(0, "444"), (1, "422"), (2, "420")]:
    path = os.path.join(here, "jpeg_%s.jpg" % name)
    img.save(path, quality=100, subsampling=ss)
    rgb = np.asarray(Image.open(path).convert("RGB"))
    assert rgb.shape == (H, W, 3)
    with open(os.path.join(here, "jpeg_%s.rgb" % name), "wb") as f:
        f.write(rgb.tobytes())
    print(path, os.path.getsize(path), "bytes")
Image.new("CMYK", (8, 8), (10, 20, 30, 40)).save(os.path.join(here, "cmyk.jpg"))
