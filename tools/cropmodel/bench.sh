#!/bin/sh
# Paired, alternated crops/s and CPU seconds per crop: canopy's crop step
# (infer/crop BenchmarkCropsR50 / BenchmarkCropsR18) against DeepForest
# 2.1.0's (_predict_crop_model_, tools/cropmodel/bench.py) on the same
# CropModel network (ResNet-50: the parity checkpoint; ResNet-18: the
# parity state dict), the same boxes and the same threads.
#
#   [BENCH_SETTLE=0.8] tools/cropmodel/bench.sh ROUNDS THREADS CROPS [MODELS]
#
# MODELS is "r50 r18" (the default), "r50" or "r18". Each process runs
# under /usr/bin/time (wall, user and system CPU seconds, peak RSS); the
# load average is printed before each run, and a round whose 1-minute
# load before either side was 1 or more (on 2 cores) is marked LOADED.
# Each side runs 3 timed repeats (canopy after a warm-up run) and both are
# reported by the same statistics: the fastest repeat's crops/s and the
# cheapest repeat's CPU seconds per crop (user+sys of the whole process,
# every thread), loading excluded; then, second, the means over the 3
# repeats. (Until 2026-12-07 canopy's figures were its means against
# DeepForest's fastest and cheapest, which favoured DeepForest.)
# The last lines give, per model, the median canopy/DeepForest crops/s
# ratio of the quiet rounds (fastest against fastest; the means' median
# beside it), or, when no round was quiet, the median ratio of CPU seconds
# per crop (DeepForest/canopy), which other load disturbs far less. The ISA
# of each side is printed: canopy's kernels (CANOPY_SIMD forces avx2; its
# crop step uses no OpenBLAS) and torch's CPU capability
# (ATEN_CPU_CAPABILITY=avx2 forces it).
set -eu
rounds=${1:-3}
threads=${2:-2}
crops=${3:-64}
models=${4:-r50 r18}
py=${CANOPY_PEER_PYTHON:-/opt/canopy-peers/venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/crop.test" ./infer/crop
# The parity files (the checkpoints and the raster), rebuilt once.
go run ./cmd/cropmodel -out "$work/files" >/dev/null
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, avx512f: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
load1() { cut -d' ' -f1 /proc/loadavg; }
# BENCH_SETTLE=L waits, before each side, until the 1-minute load is
# below L (at most BENCH_SETTLE_MAX seconds, default 180). On 2 cores a
# side that ran 2 threads leaves the 1-minute average near 2 for about a
# minute, so without it every round after the first reads as loaded by
# the benchmark itself. The load printed is the one after the wait.
settle() {
	[ -n "${BENCH_SETTLE:-}" ] || return 0
	waited=0
	while awk -v l="$(load1)" -v t="$BENCH_SETTLE" 'BEGIN { exit !(l >= t) }' && [ "$waited" -lt "${BENCH_SETTLE_MAX:-180}" ]; do
		sleep 5
		waited=$((waited + 5))
	done
}
: >"$work/summary"
for model in $models; do
	case $model in
	r50) bench=BenchmarkCropsR50 extra="" ;;
	r18) bench=BenchmarkCropsR18 extra="--r18 $work/files/crop-r18.pt" ;;
	*) echo "bench.sh: unknown model $model (r50 or r18)" >&2; exit 2 ;;
	esac
	for r in $(seq "$rounds"); do
		order="deepforest canopy"
		[ $((r % 2)) -eq 0 ] && order="canopy deepforest"
		quiet=yes
		for side in $order; do
			settle
			l=$(load1)
			echo "$model round $r $side load: $(cut -d' ' -f1-3 /proc/loadavg)"
			awk -v l="$l" 'BEGIN { exit !(l >= 1) }' && quiet=no
			if [ "$side" = canopy ]; then
				(cd infer/crop && CANOPY_BENCH_CROPS=$crops CANOPY_BENCH_THREADS=$threads GOMAXPROCS=$((threads + 1)) \
					/usr/bin/time -f "canopy wall %e user %U sys %S maxrss_kb %M" \
					"$work/crop.test" -test.run '^$' -test.bench "^$bench\$" -test.benchtime 3x) 2>&1 | tee "$work/canopy.out"
				metric() { awk -v u="$1" '/^Benchmark/ { for (i = 2; i <= NF; i++) if ($i == u) print $(i-1) }' "$work/canopy.out"; }
				c_rate=$(metric best-crops/s)
				c_cpu=$(metric best-cpu-s/crop)
				c_mrate=$(metric crops/s)
				c_mcpu=$(metric cpu-s/crop)
			else
				# shellcheck disable=SC2086
				/usr/bin/time -f "deepforest wall %e user %U sys %S maxrss_kb %M" \
					"$py" tools/cropmodel/bench.py --ckpt "$work/files/crop.ckpt" --raster "$work/files/img_0000.png" \
					--threads "$threads" --crops "$crops" --repeat 3 $extra 2>&1 | grep -v -i warn | tee "$work/df.out"
				field() { "$py" -c 'import json,sys; [print(json.loads(l)[sys.argv[2]]) for l in open(sys.argv[1]) if l.startswith("{")]' "$work/df.out" "$1"; }
				d_rate=$(field crops_per_s)
				d_cpu=$(field cpu_s_per_crop)
				d_mrate=$(field crops_per_s_all)
				d_mcpu=$(field cpu_s_per_crop_all)
			fi
		done
		mark=$([ $quiet = yes ] && echo quiet || echo LOADED)
		line=$(awk -v m="$model" -v r="$r" -v cr="$c_rate" -v dr="$d_rate" -v cc="$c_cpu" -v dc="$d_cpu" -v q="$mark" \
			-v mcr="$c_mrate" -v mdr="$d_mrate" -v mcc="$c_mcpu" -v mdc="$d_mcpu" \
			'BEGIN { printf "%s round %d %s: crops/s canopy %.2f deepforest %.2f (%.2fx); cpu-s/crop canopy %.4f deepforest %.4f (%.2fx); means: crops/s %.2f / %.2f (%.2fx), cpu-s/crop %.4f / %.4f (%.2fx)\n", m, r, q, cr, dr, cr/dr, cc, dc, dc/cc, mcr, mdr, mcr/mdr, mcc, mdc, mdc/mcc }')
		echo "$line"
		echo "$line" >>"$work/summary"
	done
done
echo "== summary"
cat "$work/summary"
for model in $models; do
	grep "^$model " "$work/summary" | awk -v m="$model" '
		{ for (i = 1; i <= NF; i++) { if ($i == "(crops/s") continue }
		  q = ($4 == "quiet:"); split($0, a, "[()]"); w = a[2] + 0; c = a[4] + 0; mw = a[6] + 0
		  if (q) { wq[++nq] = w; mq[nq] = mw }; cs[++nc] = c }
		function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
			return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
		END { if (nq > 0) printf "%s: median canopy/DeepForest crops/s over %d quiet rounds: %.2fx, fastest repeats (means: %.2fx; CPU s per crop, cheapest repeats, all %d rounds: %.2fx)\n", m, nq, med(wq, nq), med(mq, nq), nc, med(cs, nc)
		      else printf "%s: no quiet round (load >= 1): median DeepForest/canopy CPU s per crop over %d rounds: %.2fx\n", m, nc, med(cs, nc) }'
done
