#!/usr/bin/env bash
# tools/gpu/check.sh: the GPU check of the cuda backend, one run on a GPU
# machine that has no Go (an H200 with PyTorch and torchvision). Build here
# first (make gpu-bundle: bin/canopy-cuda-nompi, bin/retinanet-cuda.test,
# bin/retinanet-images), carry bin/, then run from the repository root:
#   OUT=/some/dir tools/gpu/check.sh
# Writes to $OUT (default bin/gpu-out):
#   gpu.txt          nvidia-smi
#   tests.txt        (a) parity on the GPU: conv_f32 bit-identical to the
#                    host shim; every kernel vs the CPU engine; torchvision's
#                    r18 golden fixture in FP32 (the CPU tolerances) and TF32
#                    (match rate, worst differences); the whole network FP32
#                    and TF32 vs the CPU; batch invariance (bytes); (c) the
#                    time per layer group, R50, FP32 and TF32
#   bench-canopy.txt (b) BenchmarkGPUDetect: R50, 400x400, batch 1 and 8,
#                    FP32 and TF32, images/s
#   bench-torch.json (b) torchvision on the same GPU, same weights and
#                    images, with the ratio canopy/torchvision
#   predict-*/       canopy predict end to end on the GPU (report: device
#                    name, UUID) and on the CPU, the demo model
#   stages.txt       (issue 25) the device transform, postprocess and losses
#                    against the host's bits on the GPU, CUDA graphs against
#                    launch by launch, and the time per stage and image
#                    (decode, upload, transform, backbone, FPN, heads,
#                    postprocess, losses, download) at batch 1 and 8
#   e2e/             (issue 25) canopy predict and eval --model on 256
#                    generated 400x400 PNGs (R50, resized to 800x800, batch
#                    8, tf32 and bf16) against torchvision's loop with PIL
#                    decoding (torch_e2e.py), images/s side by side with
#                    the GPU's mean SM utilisation (nvidia-smi dmon) in
#                    e2e/e2e.tsv
# Each step has its own time limit, and a failed step does not stop the
# others. Total under 8 minutes on an H200.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-bin/gpu-out}
mkdir -p "$OUT"
step() { echo "== $* ($(date +%T))"; }
{ nvidia-smi; nvidia-smi -L; } >"$OUT/gpu.txt" 2>&1
step tests
(cd infer/retinanet && timeout 240 ../../bin/retinanet-cuda.test -test.v -test.timeout 235s \
	-test.run 'TestFP32BitsMatchShim|TestKernelsMatchCPU|TestGoldenHostShim|TestGoldenTF32|TestGPUEngineMatchesCPU|TestGPUBatchInvariance|TestGPULayerTimes') \
	>"$OUT/tests.txt" 2>&1
echo "rc=$?" >>"$OUT/tests.txt"
grep -E '^(--- |ok|FAIL|rc=)' "$OUT/tests.txt"
step bench canopy
(cd infer/retinanet && timeout 150 ../../bin/retinanet-cuda.test -test.run '^$' \
	-test.bench BenchmarkGPUDetect -test.benchtime 20x -test.count 3) >"$OUT/bench-canopy.txt" 2>&1
echo "rc=$?" >>"$OUT/bench-canopy.txt"
grep -E 'Benchmark|rc=' "$OUT/bench-canopy.txt"
step bench torchvision
timeout 150 python3 tools/gpu/torch_gpu.py --repeat 20 --count 3 --go "$OUT/bench-canopy.txt" \
	--out "$OUT/bench-torch.json" bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0001.png 2>&1 |
	tail -n 8
step predict
for dev in cuda cpu; do
	timeout 60 bin/canopy-cuda-nompi predict --model testdata/models/canopy-demo-r18 --images bin/retinanet-images \
		--device "$dev" --out "$OUT/predict-$dev" --force >"$OUT/predict-$dev.log" 2>&1
	echo "predict --device $dev: rc=$?"
done
grep -h -A6 '"devices"' "$OUT/predict-cuda/report.json" | head -n 12

# --- issue 25: the stages around the network, and canopy end to end ---
# Needs bin/testmodel and bin/forestgen (make gpu-bundle builds them).

# stage_times: the device stages' bits against the host on the GPU, the
# CUDA graphs against launch by launch, the time per stage (about 1 min).
stage_times() {
	step stage times
	(cd infer/retinanet && timeout 150 ../../bin/retinanet-cuda.test -test.v -test.timeout 145s \
		-test.run 'TestDeviceTransformBits|TestDevicePostprocessBits|TestDeviceLosses|TestGraphsMatchEager|TestGPUStageTimes') \
		>"$OUT/stages.txt" 2>&1
	echo "rc=$?" >>"$OUT/stages.txt"
	grep -E '^(--- |ok|FAIL|rc=)| stage ' "$OUT/stages.txt" | sed 's/^ *gpupost_test.go:[0-9]*: //'
}

# dmon_mean is the mean SM utilisation (%) in an nvidia-smi dmon -o T log.
dmon_mean() { awk '$1 !~ /^#/ && $3 ~ /^[0-9]+$/ {s += $3; n++} END {if (n) printf "%.0f", s / n; else printf "n/a"}' "$1"; }

# e2e: canopy predict and eval --model against torchvision's loop, 256
# images, tf32 and bf16 (about 2 min; at most 6.5).
e2e() {
	step e2e
	local d="$OUT/e2e" n=256
	mkdir -p "$d"
	bin/testmodel -arch resnet50 -classes 1 -out "$d/model-r50" >"$d/setup.log" 2>&1 &&
		bin/forestgen -out "$d/images" -n $n -seed 25 -sizes 400x400 >>"$d/setup.log" 2>&1 ||
		{ echo "e2e: setup failed:"; tail -n 5 "$d/setup.log"; return; }
	# The model has one class, Tree: forestgen's Dead boxes are counted as trees.
	sed 's/,Dead$/,Tree/' "$d/images/annotations.csv" >"$d/annotations-tree.csv"
	printf 'run\tprecision\timages\tseconds\timg_per_s\tsm_mean_pct\trc\n' >"$d/e2e.tsv"
	local prec cmd rc t0 t1 dm
	for prec in tf32 bf16; do
		for cmd in predict eval; do
			local args=(--images "$d/images")
			[ "$cmd" = eval ] && args=(--csv "$d/annotations-tree.csv" --root-dir "$d/images")
			nvidia-smi dmon -s u -d 1 -o T >"$d/dmon-$cmd-$prec.txt" 2>&1 &
			dm=$!
			t0=$(date +%s.%N)
			timeout 60 bin/canopy-cuda-nompi "$cmd" --model "$d/model-r50" "${args[@]}" --device cuda \
				--precision "$prec" --batch-size 8 --out "$d/$cmd-$prec" --force >"$d/$cmd-$prec.log" 2>&1
			rc=$?
			t1=$(date +%s.%N)
			kill "$dm" 2>/dev/null
			wait "$dm" 2>/dev/null
			awk -v r="canopy $cmd" -v p="$prec" -v n=$n -v a="$t0" -v b="$t1" -v sm="$(dmon_mean "$d/dmon-$cmd-$prec.txt")" -v rc=$rc \
				'BEGIN {printf "%s\t%s\t%d\t%.2f\t%.1f\t%s\t%d\n", r, p, n, b - a, n / (b - a), sm, rc}' >>"$d/e2e.tsv"
		done
	done
	nvidia-smi dmon -s u -d 1 -o T >"$d/dmon-torch.txt" 2>&1 &
	dm=$!
	timeout 150 python3 tools/gpu/torch_e2e.py --images "$d/images" --batch 8 --modes tf32,bf16 --out "$d/torch.json" \
		>"$d/torch.log" 2>&1
	rc=$?
	kill "$dm" 2>/dev/null
	wait "$dm" 2>/dev/null
	python3 - "$d/torch.json" "$(dmon_mean "$d/dmon-torch.txt")" $rc >>"$d/e2e.tsv" <<'PY' || tail -n 5 "$d/torch.log"
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print("torchvision loop (PIL)\t%s\t%d\t%.2f\t%.1f\t%s (both modes)\t%s" % (r["mode"], r["images"], r["seconds"], r["img_per_s"], sys.argv[2], sys.argv[3]))
PY
	column -t -s $'\t' "$d/e2e.tsv" 2>/dev/null || cat "$d/e2e.tsv"
}

stage_times
e2e
step done
