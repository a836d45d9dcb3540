#!/usr/bin/env bash
# scripts/bench-scale.sh -- make bench-scale: issue 34's scale benchmark of
# predict --tile over many generated rasters, on np 2 with the demo model.
#
# The set: BENCH_SCALE_N rasters (default 1000) of mixed sizes (400x400 to
# 1200x1200, in turn), raster i made from forest image i mod
# BENCH_SCALE_UNIQUE (300; cmd/forestgen, seed 11: its 1,000 images take
# about 45 minutes on a loaded 2-core machine), every fifth one a GeoTIFF
# with a nodata border (gdal_translate -srcwin past its left edge,
# -a_nodata 0), the others PNG (hard links); the first 100 form the small
# set. Each
# raster is one window (--patch-size 1200: min(patch, side)), which the
# demo model resizes to 400 (its min_size and max_size), so a raster costs
# about one detection and the run stays in minutes.
#
# Runs (each under scripts/mpirun.sh -np 2, --threads 1, /usr/bin/time per
# rank for peak RSS and CPU seconds, uptime's load before and after):
#   new-100, new-N   this canopy at 100 and N rasters: peak RSS per rank
#                    (the two must be within 10%), seconds to the first
#                    raster's outputs (OUT/rasters/*.csv), windows/s
#   pairs            new and old alternated, 3 runs each, on the 100 set
#                    (the windows/s ratio, paired on a loaded machine)
#   old-100, old-N   the pre-change one-shot path (BENCH_SCALE_OLD, a canopy
#                    built from main's 681de57; skipped when unset), same set
#   stop-resume      new-100 stopped by SIGTERM (rank 0 after 25 batches,
#                    the CANOPY_TEST_INTERRUPT hook), then --resume: the
#                    extra seconds over new-100
#   balance-static, balance-dealt
#                    the balance set (below) with --skip-empty, each round's
#                    windows in fixed blocks per rank (CANOPY_TILE_DEAL=static,
#                    the "before") and dealt at run time by the shared
#                    counter: the slowest rank's detection seconds against
#                    the mean (report.json per_rank seconds.detect)
#   BENCH_SCALE_RUNS picks runs (default "new-100 new-N old-100 old-N
#   stop-resume balance-static balance-dealt").
#
# The balance set: 24 forestgen rasters of 800x800 to 1600x1200 at patch
# 400; its first 8 are mostly nodata (the image beside a nodata band three
# times its width, -a_nodata 0), as the edge of a region is, so with
# --skip-empty their windows cost nothing and a fixed block of them leaves
# its rank idle.
# Results: one line per run in bin/bench-scale/results.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${BENCH_SCALE_N:-1000}
U=${BENCH_SCALE_UNIQUE:-300} # distinct forest images; raster i is image i mod U
BIN=${BENCH_SCALE_BIN:-bin/canopy}
OLD=${BENCH_SCALE_OLD:-}
RUNS=${BENCH_SCALE_RUNS:-"new-100 new-N old-100 old-N stop-resume balance-static balance-dealt"}
MODEL=testdata/models/canopy-demo-r18
W=bin/bench-scale
FLAGS=(--model "$MODEL" --patch-size 1200 --patch-overlap 0.05 --threads 1 --batch-size 1)
export CANOPY_MPIRUN_TIMEOUT=${CANOPY_MPIRUN_TIMEOUT:-3600}

[ -x "$BIN" ] || go build -o "$BIN" .
mkdir -p "$W"

# The set, made once.
if [ ! -f "$W/set/all.csv" ] || [ "$(($(wc -l <"$W/set/all.csv") - 1))" -lt "$N" ]; then
	mkdir -p "$W/set/src"
	find "$W/set" -maxdepth 1 -name 'r_*' -delete
	last=$(printf '%s/set/src/img_%04d.png' "$W" $((U - 1)))
	if [ ! -f "$last" ]; then
		echo "bench-scale: generating $U forest images (forestgen, seed 11)"
		go run ./cmd/forestgen -out "$W/set/src" -n "$U" -seed 11 \
			-sizes 400x400,560x480,720x640,880x720,1040x960,1200x1200 >/dev/null
	fi
	echo "bench-scale: $N rasters from them"
	printf 'image_path\n' >"$W/set/all.csv"
	ws=(400 560 720 880 1040 1200)
	hs=(400 480 640 720 960 1200)
	for ((i = 0; i < N; i++)); do
		k=$((i % U))
		src=$(printf '%s/set/src/img_%04d.png' "$W" "$k")
		f=$(printf 'r_%04d' "$i")
		if ((i % 5 == 4)); then
			w=${ws[k % 6]} h=${hs[k % 6]}
			b=$((w / 4))
			gdal_translate -q -srcwin -$b 0 $((w + b)) "$h" -a_nodata 0 -co TILED=YES "$src" "$W/set/$f.tif" 2>/dev/null
			echo "$f.tif" >>"$W/set/all.csv"
		else
			ln -f "$src" "$W/set/$f.png"
			echo "$f.png" >>"$W/set/all.csv"
		fi
	done
fi
if [ ! -f "$W/balance/list.csv" ]; then
	rm -rf "$W/balance" && mkdir -p "$W/balance/src"
	go run ./cmd/forestgen -out "$W/balance/src" -n 24 -seed 12 -sizes 800x800,1200x800,1600x1200 >/dev/null
	printf 'image_path\n' >"$W/balance/list.csv"
	bw=(800 1200 1600)
	bh=(800 800 1200)
	for ((i = 0; i < 24; i++)); do
		f=$(printf 'img_%04d' "$i")
		w=${bw[i % 3]} h=${bh[i % 3]}
		if ((i < 8)); then
			gdal_translate -q -srcwin -$((3 * w)) 0 $((4 * w)) "$h" -a_nodata 0 -co TILED=YES "$W/balance/src/$f.png" "$W/balance/$f.tif" 2>/dev/null
		else
			gdal_translate -q -co TILED=YES "$W/balance/src/$f.png" "$W/balance/$f.tif"
		fi
		echo "$f.tif" >>"$W/balance/list.csv"
	done
	rm -rf "$W/balance/src"
fi
head -101 "$W/set/all.csv" >"$W/set/100.csv"
head -$((N + 1)) "$W/set/all.csv" >"$W/set/N.csv"

# run NAME BIN LIST OUT [env...] -- [flags...]: prints "wall rank-RSS-MB... cpu-s first-s"
run() {
	local name=$1 bin=$2 list=$3 out=$4
	shift 4
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	local t="$W/time-$name"
	rm -rf "$t" && mkdir -p "$t"
	local load0 load1
	load0=$(cut -d' ' -f1 /proc/loadavg)
	local t0
	t0=$(date +%s.%N)
	local rc=0
	env "${envs[@]}" scripts/mpirun.sh -np 2 sh -c 'exec /usr/bin/time -o "$0/rank-${OMPI_COMM_WORLD_RANK:-0}" -f "%M %e %U %S" "$@"' "$t" \
		"$bin" predict --tile --csv "$list" --out "$out" "${FLAGS[@]}" "$@" >"$t/stdout" 2>"$t/stderr" || rc=$?
	local t1
	t1=$(date +%s.%N)
	load1=$(cut -d' ' -f1 /proc/loadavg)
	python3 - "$name" "$t" "$t0" "$t1" "$rc" "$load0" "$load1" "$out" <<'EOF'
import glob, json, os, sys
name, t, t0, t1, rc, l0, l1, out = sys.argv[1:]
t0, t1 = float(t0), float(t1)
rss, cpu = [], 0.0
for f in sorted(glob.glob(os.path.join(t, "rank-*"))):
    for line in open(f):
        p = line.split()
        if len(p) == 4 and p[0].isdigit():
            rss.append(int(p[0]) / 1024)
            cpu += float(p[2]) + float(p[3])
first = None  # the first raster's outputs: the oldest rasters/*.csv of this run
csvs = [os.path.getmtime(f) for f in glob.glob(os.path.join(out, "rasters", "*.csv"))]
csvs = [m for m in csvs if m >= t0]
if csvs:
    first = min(csvs) - t0
wins = None
try:
    rep = json.load(open(os.path.join(out, "report.json")))
    wins = rep["tile"]["windows"]
except Exception:
    pass
wall = t1 - t0
det = []
try:
    det = [round(r["seconds"]["detect"], 1) for r in rep["per_rank"]]
except Exception:
    pass
line = {"run": name, "exit": int(rc), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "peak_rss_mb_per_rank": [round(r) for r in rss], "first_raster_s": None if first is None else round(first, 1),
        "windows": wins, "windows_per_s": None if not wins else round(wins / wall, 2), "load": [float(l0), float(l1)],
        "detect_s_per_rank": det, "slowest_over_mean": round(max(det) / (sum(det) / len(det)), 3) if det and sum(det) > 0 else None,
        "skipped": (rep.get("tile", {}).get("skipped_windows") if wins else None)}
print(json.dumps(line))
EOF
}

: >"$W/results.txt"
for r in $RUNS; do
	case $r in
	pairs) # new and old alternated, 3 times each, on the 100-raster set
		for k in 1 2 3; do
			run "pair-new-$k" "$BIN" "$W/set/100.csv" "$W/out-pair-new" -- --force
			[ -n "$OLD" ] && run "pair-old-$k" "$OLD" "$W/set/100.csv" "$W/out-pair-old" -- --force
		done ;;
	new-100) run new-100 "$BIN" "$W/set/100.csv" "$W/out-new-100" -- --force ;;
	new-N) run "new-$N" "$BIN" "$W/set/N.csv" "$W/out-new-N" -- --force ;;
	old-100) [ -n "$OLD" ] && run old-100 "$OLD" "$W/set/100.csv" "$W/out-old-100" -- --force ;;
	old-N) [ -n "$OLD" ] && run "old-$N" "$OLD" "$W/set/N.csv" "$W/out-old-N" -- --force ;;
	balance-static) FLAGS=(--model "$MODEL" --patch-size 400 --patch-overlap 0.05 --threads 1 --batch-size 1 --skip-empty)
		run balance-static "$BIN" "$W/balance/list.csv" "$W/out-balance-static" CANOPY_TILE_DEAL=static -- --force ;;
	balance-dealt) FLAGS=(--model "$MODEL" --patch-size 400 --patch-overlap 0.05 --threads 1 --batch-size 1 --skip-empty)
		run balance-dealt "$BIN" "$W/balance/list.csv" "$W/out-balance-dealt" -- --force ;;
	stop-resume)
		rm -rf "$W/out-stop"
		run stop-100 "$BIN" "$W/set/100.csv" "$W/out-stop" CANOPY_TEST_INTERRUPT=0:25 --
		run resume-100 "$BIN" "$W/set/100.csv" "$W/out-stop" -- --resume
		;;
	esac
done | tee "$W/results.txt"
