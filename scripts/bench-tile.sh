#!/usr/bin/env bash
# scripts/bench-tile.sh (make bench-tile): canopy predict --tile at scale.
#  1. For each size in BENCH_TILE_SIZES (default "20000"): a forest raster
#     of SIZE x SIZE, tiled (256x256) and deflated, made of a 2000x2000
#     forestgen image repeated through a VRT; then mpirun -np 2 canopy
#     predict --tile with the demo model, each rank under /usr/bin/time (peak
#     RSS per rank) and --gdal-cache 64; rank 0's progress lines give windows
#     done and ETA. BENCH_TILE_SIZES="4000 8000" shows RSS against size in
#     minutes rather than hours; BENCH_TILE_SIZES="" runs none.
#  2. BENCH_TILE_PEER=1: canopy against DeepForest's predict_tile on a
#     760x760 forestgen raster (4 windows of 400; BENCH_TILE_PEER_SIZE=2000:
#     36 windows), one process each, the
#     same threads (BENCH_TILE_THREADS, default 2) and the same R50 test
#     weights (cmd/testmodel seed 0 = tools/retinanet/weights.py seed 0),
#     alternating, BENCH_TILE_REPEAT rounds (default 2).
# The machine's load average is printed with every run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PEER_PY=${PEER_PY:-/opt/canopy-peers/venv/bin/python}
W=bin/bench-tile
mkdir -p "$W"
$GO build -o bin/canopy .
[ -f "$W/src/img_0000.png" ] || $GO run ./cmd/forestgen -n 1 -sizes 2000x2000 -seed 27 -out "$W/src" >/dev/null

raster() { # SIZE -> path of the tiled, deflated GeoTIFF
	local n=$1 f="$W/forest-$1.tif"
	if [ ! -f "$f" ]; then
		local vrt="$W/forest-$n.vrt"
		scripts/forest-vrt.sh "$n" >"$vrt"
		gdal_translate -q -co TILED=YES -co COMPRESS=DEFLATE -co BIGTIFF=IF_SAFER "$vrt" "$f"
	fi
	echo "$f"
}

for n in ${BENCH_TILE_SIZES-20000}; do
	f=$(raster "$n")
	echo "bench-tile: ${n}x${n} ($(du -h "$f" | cut -f1) on disk), load $(cut -d' ' -f1-3 /proc/loadavg)"
	rm -rf "$W/out-$n"
	CANOPY_MPIRUN_TIMEOUT=${CANOPY_MPIRUN_TIMEOUT:-36000} scripts/mpirun.sh -np 2 \
		/usr/bin/time -f "bench-tile: ${n}x${n}: a rank's peak RSS %M KiB, wall %e s" \
		bin/canopy predict --tile --raster "$f" --model testdata/models/canopy-demo-r18 --threads 1 --gdal-cache 64 --out "$W/out-$n"
done

if [ "${BENCH_TILE_PEER:-0}" = 1 ]; then
	t=${BENCH_TILE_THREADS:-2}
	[ -f "$W/r50/model.safetensors" ] || $GO run ./cmd/testmodel -arch resnet50 -seed 0 -out "$W/r50"
	ps=${BENCH_TILE_PEER_SIZE:-760}
	[ -f "$W/peer-$ps/img_0000.png" ] || $GO run ./cmd/forestgen -n 1 -sizes "${ps}x${ps}" -seed 27 -out "$W/peer-$ps" >/dev/null
	for ((r = 0; r < ${BENCH_TILE_REPEAT:-2}; r++)); do
		rm -rf "$W/out-peer"
		s=$(date +%s.%N)
		bin/canopy predict --tile --raster "$W/peer-$ps/img_0000.png" --model "$W/r50" --threads "$t" --out "$W/out-peer" >/dev/null
		e=$(date +%s.%N)
		echo "bench-tile: canopy predict --tile, R50, $t threads, ${ps}x${ps}: $(echo "$e - $s" | bc) s (whole process), detection $(grep -o '"detect": [0-9.]*' "$W/out-peer/report.json" | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
		"$PEER_PY" tools/tile/bench.py --raster "$W/peer-$ps/img_0000.png" --threads "$t"
	done
fi
