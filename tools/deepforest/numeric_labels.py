"""DeepForest's per-class key names for numeric labels, on the SJER sample
(../shared/data/deepforest): the truth and prediction CSVs with their label
column replaced by 0 (one class), by 0/1 by row parity (two classes), and
by 10/2 by row parity (numeric, not text, order),
read with utilities.read_file and scored by evaluate.evaluate_boxes(iou 0.4).
The class rows become f"{row['label']}_Recall" as DeepForest's scripts and
RecallPrecision name them.

    PYTHONPATH=<DeepForest 1bad4419>/src /opt/canopy-peers/venv/bin/python \
        tools/deepforest/numeric_labels.py > testdata/golden/numeric/sjer_numeric_labels.json

jobs.TestNumericLabelNamesSJER compares canopy with it.
"""
import json
import os
import sys
import tempfile
import warnings

import pandas as pd

import deepforest
from deepforest import utilities
from deepforest.evaluate import evaluate_boxes

HERE = os.path.dirname(os.path.abspath(__file__))
D = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "data", "deepforest"))


def case(relabel):
    truth = pd.read_csv(os.path.join(D, "2018_SJER_3_252000_4107000_image_477_truth.csv"))
    pred = pd.read_csv(os.path.join(D, "2018_SJER_3_252000_4107000_image_477.csv"))
    truth["label"] = [relabel(i) for i in range(len(truth))]
    pred["label"] = [relabel(i) for i in range(len(pred))]
    with tempfile.TemporaryDirectory() as tmp:
        t, p = os.path.join(tmp, "t.csv"), os.path.join(tmp, "p.csv")
        truth.to_csv(t, index=False)
        pred.to_csv(p, index=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = utilities.read_file(t, root_dir=D)
            q = utilities.read_file(p, root_dir=D)
            r = evaluate_boxes(q, g, iou_threshold=0.4)
        out = {"box_recall": r["box_recall"], "box_precision": r["box_precision"], "classes": []}
    for _, row in r["class_recall"].iterrows():
        out["classes"].append([f"{row['label']}_Recall", row["recall"], f"{row['label']}_Precision", row["precision"]])
    return out


def main():
    res = {"deepforest": deepforest.__version__, "pandas": pd.__version__,
           "deepforest_source": os.path.dirname(deepforest.__file__),
           "command": "PYTHONPATH=<DeepForest 1bad4419>/src /opt/canopy-peers/venv/bin/python "
                      "tools/deepforest/numeric_labels.py > testdata/golden/numeric/sjer_numeric_labels.json",
           "one_class": case(lambda i: 0), "two_classes": case(lambda i: i % 2),
           "ten_and_two": case(lambda i: [10, 2][i % 2])}
    json.dump(res, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
