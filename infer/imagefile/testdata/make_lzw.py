"""Write the TIFF fixtures that Go's encoder cannot: 3-sample RGB, compressed
with LZW (with and without the horizontal predictor) and with PackBits.

Pixel (x, y) of every fixture, 40 wide and 30 high, is

    R = (7x + 3y) % 256,  G = (x*y) % 256,  B = (255 - 2x + 5y) % 256

which imagefile_test.go recomputes (fixtureRGB). Run from the repository root:

    /usr/bin/python3 infer/imagefile/testdata/make_lzw.py

Written with Pillow 9.4.0 (libtiff 4.5.0), numpy 1.24.2, Debian 12.
"""

import os

import numpy as np
from PIL import Image

W, H = 40, 30
here = os.path.dirname(os.path.abspath(__file__))
y, x = np.mgrid[0:H, 0:W]
rgb = np.stack([(7 * x + 3 * y) % 256, (x * y) % 256, (255 - 2 * x + 5 * y) % 256], axis=-1)
img = Image.fromarray(rgb.astype(np.uint8), "RGB")
for name, kw in [
    ("lzw_rgb.tif", dict(compression="tiff_lzw")),
    ("lzw_pred_rgb.tif", dict(compression="tiff_lzw", tiffinfo={317: 2})),
    ("packbits_rgb.tif", dict(compression="packbits")),
]:
    path = os.path.join(here, name)
    img.save(path, **kw)
    back = Image.open(path)
    print(name, back.info.get("compression"), "predictor", back.tag_v2.get(317), os.path.getsize(path), "bytes")
    assert (np.asarray(back) == rgb).all()
