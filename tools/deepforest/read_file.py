"""What DeepForest's utilities.read_file makes of canopy's annotation
fixtures (internal/dataset/testdata/readfile): each file's rows as
image_path, the box (the geometry's bounds, as DeepForest's BoxDataset
takes them) and label, in file order. A folder is its .xml files read one by
one in name order (canopy's reading of a folder; DeepForest reads files).

    /opt/canopy-peers/venv/bin/python tools/deepforest/read_file.py \
        internal/dataset/testdata/readfile > internal/dataset/testdata/readfile/expected.json
"""
import json
import os
import sys
import warnings

import deepforest
from deepforest import utilities


def rows(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = utilities.read_file(path)
    out = []
    for _, r in df.iterrows():
        xmin, ymin, xmax, ymax = r["geometry"].bounds
        out.append([os.path.basename(str(r["image_path"])), xmin, ymin, xmax, ymax, str(r["label"])])
    return out


def main():
    base = sys.argv[1]
    res = {"deepforest": deepforest.__version__, "command": "python tools/deepforest/read_file.py " + " ".join(sys.argv[1:]), "files": {}}
    for name in sorted(os.listdir(base)):
        p = os.path.join(base, name)
        if os.path.isdir(p):
            res["files"][name] = [r for f in sorted(os.listdir(p)) if f.endswith(".xml") for r in rows(os.path.join(p, f))]
        elif name.endswith((".xml", ".csv")) and not name.startswith("missing"):
            res["files"][name] = rows(p)
        elif name.startswith("missing"):
            try:
                rows(p)
                res["files"][name] = "accepted"
            except Exception as e:  # the refusal, as DeepForest words it
                res["files"][name] = "error: " + type(e).__name__
    json.dump(res, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
