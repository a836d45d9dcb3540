#!/usr/bin/env bash
# Create the peer venv for tools/deepforest/golden.py and install a DeepForest
# checkout (with its declared dependencies) into it.
#
#   usage: tools/deepforest/setup.sh /path/to/DeepForest-checkout [VENV_DIR]
#
# VENV_DIR defaults to $CANOPY_PEER_VENV or /opt/canopy-peers/venv (keep it
# outside the repository). Torch comes from the ordinary Python package index
# (the default Linux wheel; CPU is enough).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 DEEPFOREST_CHECKOUT [VENV_DIR]" >&2
  exit 2
fi
SRC=$(cd "$1" && pwd)
VENV=${2:-${CANOPY_PEER_VENV:-/opt/canopy-peers/venv}}
PY=${PYTHON:-python3}
[ -f "$SRC/pyproject.toml" ] || { echo "no pyproject.toml in $SRC" >&2; exit 2; }
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip
# DeepForest's own dependencies (torch, torchvision, pytorch-lightning ->
# torchmetrics, shapely, scipy, pandas, geopandas, ...), then the checkout.
"$VENV/bin/python" -m pip install "$SRC"
"$VENV/bin/python" -m pip install torchmetrics
"$VENV/bin/python" - <<'PY'
import importlib
for m in ["deepforest", "torch", "torchmetrics", "shapely", "scipy", "pandas", "numpy"]:
    mod = importlib.import_module(m)
    print(m, getattr(mod, "__version__", "?"))
from deepforest.metrics import RecallPrecision  # noqa: F401
from deepforest.evaluate import evaluate_boxes  # noqa: F401
print("ok")
PY
