#!/usr/bin/env bash
# The big-tile half of `make bench-metrics-scale`: canopy eval --semantics
# evaluate_boxes on one generated tile (cmd/bigtile: integer crowns, tied
# duplicates) at 5,000, 20,000 and 50,000 crowns, beside DeepForest
# 1bad4419's evaluate_boxes on the same CSVs (tools/deepforest/bigtile.py),
# each a whole process under /usr/bin/time -v: wall, user + system CPU
# seconds, peak RSS. canopy runs with --metrics recall (what evaluate_boxes
# computes) and with every family. The peer runs one at a time, and only
# up to BENCH_PEER_MAX_CROWNS: its three dense float64 truth × prediction
# matrices take about 24·n·m bytes (20,000 crowns: 8.6 GB, 50,000: 54 GB,
# more than this machine's 24 GiB).
#
#   BENCH_TILE_CROWNS="5000 20000 50000" BENCH_RUNS=3 scripts/bench-metrics-tile.sh
#
# Output: bin/bench-metrics-tile/times.txt (one line per run, with the load
# average before it) and the peer's JSON per size.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${BENCH_TILE_CROWNS:-"5000 20000 50000"}
RUNS=${BENCH_RUNS:-3}
PEER_MAX=${BENCH_PEER_MAX_CROWNS:-20000}
PY=${PEER_PY:-/opt/canopy-peers/venv/bin/python}
DF_SRC=${DF_SRC:-/tmp/deepforest/src}
OUT=bin/bench-metrics-tile
mkdir -p "$OUT"
go build -o bin/canopy .
times="$OUT/times.txt"
stamp() { echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$times"; }
timed() { # label, command...
	local label=$1
	shift
	stamp
	/usr/bin/time -f "$label wall_s=%e user_s=%U sys_s=%S peak_rss_kb=%M exit=%x" -a -o "$times" "$@" >/dev/null 2>&1 || true
	tail -1 "$times"
}
for n in $SIZES; do
	go run ./cmd/bigtile -crowns "$n" -out "bin/bigtile-$n"
	for r in $(seq "$RUNS"); do
		for fam in recall all; do
			rm -rf "$OUT/canopy-$n-$fam"
			timed "canopy crowns=$n metrics=$fam run=$r" bin/canopy eval --csv "bin/bigtile-$n/truth.csv" \
				--predictions "bin/bigtile-$n/predictions.csv" --semantics evaluate_boxes --metrics "$fam" \
				--out "$OUT/canopy-$n-$fam"
		done
	done
	if [ "$n" -le "$PEER_MAX" ] && [ -x "$PY" ]; then
		timed "deepforest crowns=$n evaluate_boxes" env PYTHONPATH="$DF_SRC" "$PY" tools/deepforest/bigtile.py \
			--dir "bin/bigtile-$n" --crowns "$n" --out "$OUT/deepforest-$n.json"
		python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  deepforest evaluate_boxes call alone:', d['evaluate_boxes_seconds'], 'peak', d['peak_rss_bytes'])" "$OUT/deepforest-$n.json" | tee -a "$times"
	else
		echo "# deepforest crowns=$n: not run (its dense matrices need about $((24 * n * n * 9 / 10 / 1000000000)) GB)" | tee -a "$times"
	fi
done
