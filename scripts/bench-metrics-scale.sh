#!/usr/bin/env bash
# scripts/bench-metrics-scale.sh -- make bench-metrics-scale: issue 45's
# many-image metric benchmark (DeepForest #1152's shape scaled down to this
# machine): the metric stage of a replayed eval at np 1 and np 2, each rank
# with GOMAXPROCS=1, and a projection to 64 ranks from the measured bytes
# and times.
#
# The set (cmd/synth -big, seeded): BENCH_MS_IMAGES images (5,000) of
# BENCH_MS_BOXES truth boxes (72: 360,000) and BENCH_MS_DETS predictions
# (30: 150,000), 3 classes.
#
# Each run: scripts/mpirun.sh -np N, every rank under /usr/bin/time (peak
# RSS, user and system CPU seconds) with GOMAXPROCS=1, --html=false, the
# load average (/proc/loadavg) before and after. From report.json's
# run.per_rank: seconds.metrics (the stage, wall) and its parts
# metrics_match, metrics_gather, metrics_reduce, metrics_cpu (the process's
# CPU seconds over the stage: the figure to compare on a loaded machine),
# and metrics_bytes_sent. A run whose 1-minute load average exceeded the
# core count before or after is marked LOADED.
#
# BENCH_MS_RUNS picks runs (default "new-np1 new-np2"; old-np1 old-np2 need
# BENCH_MS_OLD, a canopy built from before the sharded metrics, e.g.
# cf97083); BENCH_MS_REPS repeats each (3); BENCH_MS_SEMANTICS (validation).
# Results: bin/bench-metrics-scale/results.txt, one line per rank per run,
# then the ratio and the projection (tools/benchmetrics/summary.py).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGES=${BENCH_MS_IMAGES:-5000}
BOXES=${BENCH_MS_BOXES:-72}
DETS=${BENCH_MS_DETS:-30}
BIN=${BENCH_MS_BIN:-bin/canopy}
OLD=${BENCH_MS_OLD:-}
RUNS=${BENCH_MS_RUNS:-"new-np1 new-np2"}
REPS=${BENCH_MS_REPS:-3}
SEM=${BENCH_MS_SEMANTICS:-validation}
W=bin/bench-metrics-scale
export CANOPY_MPIRUN_TIMEOUT=${CANOPY_MPIRUN_TIMEOUT:-1800}

[ -x "$BIN" ] || go build -o "$BIN" .
mkdir -p "$W"
SET=$W/set-${IMAGES}x${BOXES}x${DETS}
if [ ! -f "$SET/predictions.csv" ]; then
	go run ./cmd/synth -big "$SET" -images "$IMAGES" -boxes "$BOXES" -dets "$DETS" -classes 3
fi
: >"$W/results.txt"
echo "# set $SET: $IMAGES images, $((IMAGES * BOXES)) truth, $((IMAGES * DETS)) predictions; semantics $SEM; $(nproc) cores" | tee -a "$W/results.txt"

for run in $RUNS; do
	kind=${run%-np*}
	np=${run#*-np}
	bin=$BIN
	if [ "$kind" = old ]; then
		[ -n "$OLD" ] || { echo "skip $run: BENCH_MS_OLD is not set"; continue; }
		bin=$OLD
	fi
	for rep in $(seq 1 "$REPS"); do
		out=$W/out-$run-$rep
		t=$W/time-$run-$rep
		rm -rf "$t" && mkdir -p "$t"
		before=$(cut -d' ' -f1-3 /proc/loadavg)
		scripts/mpirun.sh -np "$np" sh -c 'GOMAXPROCS=1 exec /usr/bin/time -o "$0/rank-${OMPI_COMM_WORLD_RANK:-0}" -f "%M %e %U %S" "$@"' "$t" \
			"$bin" eval --csv "$SET/truth.csv" --predictions "$SET/predictions.csv" --semantics "$SEM" \
			--html=false --out "$out" --force >/dev/null
		after=$(cut -d' ' -f1-3 /proc/loadavg)
		python3 tools/benchmetrics/summary.py line "$run" "$rep" "$out/report.json" "$t" "$before" "$after" "$(nproc)" | tee -a "$W/results.txt"
	done
done
python3 tools/benchmetrics/summary.py summary "$W/results.txt" | tee -a "$W/results.txt"
