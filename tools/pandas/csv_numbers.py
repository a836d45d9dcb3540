#!/usr/bin/env python3
"""How pandas.read_csv (DeepForest's CSV reader, default C parser) reads
number cells: which spellings give a finite float, NaN, +-inf, or leave the
column as text. canopy's dataset package must accept exactly the finite
ones, with the same value, and refuse the rest.

  /opt/canopy-peers/venv/bin/python tools/pandas/csv_numbers.py \
      --out internal/dataset/testdata/pandas_numbers.json
"""
import argparse
import io
import json
import math
import platform
import os
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_meta import torch_meta  # noqa: E402

import numpy as np
import pandas as pd

CANDIDATES = [
    "1.5", " 1.5", "1.5 ", " 1.5 ", "\t1.5", "1.5\t", "+1.5", "-1.5", "1.", "+.5", ".5", ".", "-.5e-1",
    "1e5", "1E5", "1e+5", "1e-5", "1.e5", ".5e1", "1E+05", "00012", "-0", "0.1", "123456789.123456789",
    "1e", "e5", "1e5.5", "1e+", "1e-", "+e1", "1e 5", "1.5.5", "++1", "+-1", "- 1", "+", "-",
    "0x10", "0x1p4", "1_0", "1_000", "0b1", "1d5", "1.5L", "1.5f", "1,5", "1 5", "\u0661", "1\u00a0", "\u00a01",
    "inf", "-inf", "+inf", "Inf", "INF", "Infinity", "-Infinity", "+Infinity", "infinity", "iNf", "infinit", "infj",
    "nan", "NaN", "NAN", "-nan", "-NaN", "+nan", "NA", "N/A", "null", "NULL", "None", "1.#IND", "1.#QNAN",
    "-1.#IND", "#N/A", "<NA>", "n/a", "", "  ", " inf", "inf ", " nan", "nan ", "NA ",
    "1e400", "-1e400", "1e-400", "1e-320", "2.2250738585072014e-308", "9007199254740993",
    "0.30000000000000004", "1.7976931348623157e308",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cases = []
    for c in CANDIDATES:
        # the cell quoted, beside a plain number, as one CSV column
        df = pd.read_csv(io.StringIO('a,b\n"' + c + '",1\n2,1\n'))
        col = df["a"]
        v = col.iloc[0]
        if col.dtype.kind in "fi":
            f = float(v)
            kind = "nan" if math.isnan(f) else ("inf" if math.isinf(f) else "finite")
            cases.append({"text": c, "kind": kind, "value": repr(f) if kind == "finite" else None})
        else:
            cases.append({"text": c, "kind": "text", "value": None})
    meta = {
        "pandas": pd.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "reader": "pandas.read_csv(default C parser), one quoted cell beside a plain number",
        "command": "/opt/canopy-peers/venv/bin/python tools/pandas/csv_numbers.py --out internal/dataset/testdata/pandas_numbers.json",
    }
    meta.update(torch_meta())
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "cases": cases}, f, indent=1, ensure_ascii=True)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
