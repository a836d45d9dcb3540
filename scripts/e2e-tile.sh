#!/usr/bin/env bash
# scripts/e2e-tile.sh (make e2e-tile): issue 27's end-to-end parity of
# canopy predict --tile with DeepForest's predict_tile on a 2000x2000
# raster. The raster is regenerated (forestgen seed 27) and checked by
# sha256 against the one DeepForest ran on; canopy runs the same R50 test
# weights (cmd/testmodel seed 0 = tools/retinanet/weights.py seed 0) at
# predict_tile's defaults (patch 400, overlap 0.05, iou 0.15: 36 windows);
# tools/tile/e2e.py compares predictions.csv with the fixture's rows
# (infer/tile/testdata/e2e2000.json) and fails unless the box counts are
# equal, every DeepForest row is matched, at least 99% of the matched boxes
# have equal integer coordinates and the scores are within 1e-5. Prints
# canopy's wall time and the load average beside the fixture's
# predict_tile time. E2E_TILE_THREADS (default 2) sets --threads.
# Over a minute of CPU: not part of make test (jobs.TestTileE2EDeepForest
# runs the raster's corner there).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PY=${PY:-python3}
W=bin/e2e-tile
T=${E2E_TILE_THREADS:-2}
want=6421362e8623b1989bc09022bf4caa9de79d446a355580350b2b7a775c0f44af
mkdir -p "$W"
$GO build -o bin/canopy .
[ -f "$W/src/img_0000.png" ] || $GO run ./cmd/forestgen -n 1 -sizes 2000x2000 -seed 27 -out "$W/src" >/dev/null
sum=$(sha256sum "$W/src/img_0000.png" | cut -d' ' -f1)
if [ "$sum" != "$want" ]; then
	echo "e2e-tile: forestgen's raster has sha256 $sum, not $want (the one DeepForest ran on): make infer/tile/testdata/e2e2000.json again (its README)" >&2
	exit 1
fi
[ -f "$W/r50/model.safetensors" ] || $GO run ./cmd/testmodel -arch resnet50 -seed 0 -out "$W/r50"
rm -rf "$W/out"
echo "e2e-tile: canopy predict --tile, 2000x2000, R50, $T threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -f "e2e-tile: canopy wall %e s, user %U s, peak RSS %M KiB" \
	bin/canopy predict --tile --raster "$W/src/img_0000.png" --model "$W/r50" --threads "$T" \
	--patch-size 400 --patch-overlap 0.05 --tile-iou 0.15 --out "$W/out"
echo "e2e-tile: load after $(cut -d' ' -f1-3 /proc/loadavg)"
$PY tools/tile/e2e.py infer/tile/testdata/e2e2000.json "$W/out/predictions.csv"
