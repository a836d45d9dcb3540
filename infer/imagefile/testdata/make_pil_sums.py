"""Record what DeepForest's image loading gives for the sample images in
shared/data/deepforest, for imagefile's TestSamples, in pil_sums.json.

For each .tif, .png and .jpg there, a = numpy.asarray(Image.open(path)
.convert("RGB")) and t = (a / 255.0).astype("float32"), as DeepForest loads
them; the JSON holds the width and height, per channel the integer sum of a
("sum8") and the float64 sum of t ("sum"), and the SHA-256 of a.tobytes()
(H rows of W pixels of R, G, B bytes). Run from the repository root:

    /usr/bin/python3 infer/imagefile/testdata/make_pil_sums.py

The Pillow and numpy versions are recorded in the JSON.
"""

import glob
import hashlib
import json
import os

import numpy as np
import PIL
from PIL import Image, features

here = os.path.dirname(os.path.abspath(__file__))
folder = os.path.normpath(os.path.join(here, "../../../../shared/data/deepforest"))
out = {
    "command": "/usr/bin/python3 infer/imagefile/testdata/make_pil_sums.py",
    "pillow": PIL.__version__,
    "numpy": np.__version__,
    "jpeglib": features.version("jpg"),
    "libjpeg_turbo": features.check_feature("libjpeg_turbo"),
    "libtiff": features.version("libtiff"),
    "folder": "shared/data/deepforest",
    "files": [],
}
for path in sorted(glob.glob(os.path.join(folder, "*"))):
    if os.path.splitext(path)[1].lower() not in (".tif", ".png", ".jpg"):
        continue
    a = np.asarray(Image.open(path).convert("RGB"))
    t = (a / 255.0).astype("float32")
    out["files"].append({
        "name": os.path.basename(path),
        "width": a.shape[1],
        "height": a.shape[0],
        "sum8": [int(v) for v in a.sum(axis=(0, 1), dtype=np.int64)],
        "sum": [float(v) for v in t.sum(axis=(0, 1), dtype=np.float64)],
        "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
    })
with open(os.path.join(here, "pil_sums.json"), "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(len(out["files"]), "files")
