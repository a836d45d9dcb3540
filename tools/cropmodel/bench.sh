#!/bin/sh
# Paired, alternated crops/s: canopy's crop step (infer/crop
# BenchmarkCropsR50) against DeepForest 2.1.0's (_predict_crop_model_,
# tools/cropmodel/bench.py) on the same ResNet-50 CropModel, the same
# boxes and the same threads. Each process runs under /usr/bin/time
# (wall, user and system CPU seconds, peak RSS); the load average is
# printed before each run.
#
#   tools/cropmodel/bench.sh ROUNDS THREADS CROPS
set -eu
rounds=${1:-4}
threads=${2:-2}
crops=${3:-128}
py=${CANOPY_PEER_PYTHON:-/opt/canopy-peers/venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/crop.test" ./infer/crop
# The parity files (the checkpoint and the raster), rebuilt once.
go run ./cmd/cropmodel -out "$work/files"
for r in $(seq "$rounds"); do
	for side in deepforest canopy; do
		[ $((r % 2)) -eq 0 ] && side=$([ "$side" = canopy ] && echo deepforest || echo canopy)
		echo "round $r $side load: $(cut -d' ' -f1-3 /proc/loadavg)"
		if [ "$side" = canopy ]; then
			(cd infer/crop && CANOPY_BENCH_CROPS=$crops CANOPY_BENCH_THREADS=$threads GOMAXPROCS=$((threads + 1)) \
				/usr/bin/time -f "canopy wall %e user %U sys %S maxrss_kb %M" \
				"$work/crop.test" -test.run '^$' -test.bench BenchmarkCropsR50 -test.benchtime 3x)
		else
			/usr/bin/time -f "deepforest wall %e user %U sys %S maxrss_kb %M" \
				"$py" tools/cropmodel/bench.py --ckpt "$work/files/crop.ckpt" --raster "$work/files/img_0000.png" \
				--threads "$threads" --crops "$crops" --repeat 3
		fi
	done
done
