#!/usr/bin/env bash
# scripts/bench-skip-empty.sh (make bench-skip-empty): what --skip-empty
# gains on a raster with an orthomosaic's nodata border.
#  1. The raster, bin/bench-skip-empty/ortho-SIZE[-alpha].tif: a 2000x2000
#     forestgen image (seed 27) repeated to SIZE x SIZE (BENCH_SKIP_SIZE,
#     default 4000) through a VRT, given a geotransform rotated by 30
#     degrees in EPSG:32617 (10 cm pixels) and warped north-up by gdalwarp
#     (nearest): the imagery is a tilted square, the corners are nodata,
#     about 46% of the area, as a flight block's mosaic. Nodata is 0 on
#     every band (-dstnodata 0), or with BENCH_SKIP_ALPHA=1 an alpha band
#     (-dstalpha) instead. Tiled 256x256, deflate.
#  2. The Go benchmarks, BENCH_SKIP_COUNT rounds (default 6), the
#     sub-benchmarks in turn each round (paired), summarised by benchstat
#     when it is on PATH (go install golang.org/x/perf/cmd/benchstat):
#     infer/tile BenchmarkWindowCost (the check per window against GDAL's
#     read and the demo model's detection of a 400x400 window) and
#     BenchmarkOrthoScan (every window of the raster read and checked:
#     windows and empty windows). BENCH_SKIP_GO=0 leaves them out.
#  3. When canopy predict has --skip-empty: predict --tile of the raster with
#     the demo model on one rank, --threads BENCH_SKIP_THREADS (default 2),
#     without and with --skip-empty in turn, BENCH_SKIP_ROUNDS rounds
#     (default 2), each under /usr/bin/time (wall and CPU seconds), the
#     skipped windows from report.json, and predictions.csv compared.
#     CANOPY_BIN names another canopy binary (default: bin/canopy, built).
# The machine's load average is printed with every run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
W=bin/bench-skip-empty
N=${BENCH_SKIP_SIZE:-4000}
mkdir -p "$W"
[ -f "$W/src/img_0000.png" ] || $GO run ./cmd/forestgen -n 1 -sizes 2000x2000 -seed 27 -out "$W/src" >/dev/null
suffix=""
warp=(-dstnodata 0)
if [ "${BENCH_SKIP_ALPHA:-0}" = 1 ]; then
	suffix="-alpha"
	warp=(-dstalpha)
fi
R="$W/ortho-$N$suffix.tif"
if [ ! -f "$R" ]; then
	# 30 degrees: cos 0.8660254, sin 0.5; pixel 0.1 m.
	scripts/forest-vrt.sh "$N" EPSG:32617 "404000.0, 0.08660254037844387, 0.05, 3285000.0, 0.05, -0.08660254037844387" >"$W/ortho-$N.vrt"
	gdalwarp -q -r near -tr 0.1 0.1 "${warp[@]}" -co TILED=YES -co COMPRESS=DEFLATE -co BIGTIFF=IF_SAFER "$W/ortho-$N.vrt" "$R"
fi
echo "bench-skip-empty: $R: $(gdalinfo "$R" | grep -m1 '^Size is'), load $(cut -d' ' -f1-3 /proc/loadavg)"

out="$W/bench.txt"
[ "${BENCH_SKIP_GO:-1}" = 1 ] && CANOPY_BENCH_RASTER="$PWD/$R" $GO test ./infer/tile/ -run '^$' -bench 'BenchmarkWindowCost|BenchmarkOrthoScan' \
	-benchtime "${BENCH_SKIP_BENCHTIME:-5x}" -count "${BENCH_SKIP_COUNT:-6}" | tee "$out"
if [ "${BENCH_SKIP_GO:-1}" = 1 ]; then
	echo "bench-skip-empty: load after the Go benchmarks $(cut -d' ' -f1-3 /proc/loadavg)"
	if command -v benchstat >/dev/null; then benchstat "$out"; fi
fi

BIN=${CANOPY_BIN:-bin/canopy}
[ -n "${CANOPY_BIN:-}" ] || $GO build -o bin/canopy .
if ! "$BIN" predict --help 2>&1 | grep -q -- '--skip-empty'; then
	echo "bench-skip-empty: this canopy has no --skip-empty yet: the end-to-end runs are left out"
	exit 0
fi
t=${BENCH_SKIP_THREADS:-2}
for ((r = 0; r < ${BENCH_SKIP_ROUNDS:-2}; r++)); do
	for mode in plain skip; do
		flag=()
		[ "$mode" = skip ] && flag=(--skip-empty)
		o="$W/out-$mode"
		rm -rf "$o"
		/usr/bin/time -f "bench-skip-empty: $mode: wall %e s, cpu %U+%S s, peak RSS %M KiB" \
			"$BIN" predict --tile --raster "$R" --model testdata/models/canopy-demo-r18 --threads "$t" "${flag[@]}" --out "$o" >/dev/null
		echo "bench-skip-empty: $mode: load $(cut -d' ' -f1-3 /proc/loadavg); report: $(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["tile"]; print({k: v for k, v in t.items() if "skip" in k or k == "windows"})' "$o/report.json")"
	done
	if cmp -s "$W/out-plain/predictions.csv" "$W/out-skip/predictions.csv"; then
		echo "bench-skip-empty: predictions.csv identical with and without --skip-empty"
	else
		echo "bench-skip-empty: predictions.csv differs: $(diff "$W/out-plain/predictions.csv" "$W/out-skip/predictions.csv" | grep -c '^[<>]') lines"
	fi
done
