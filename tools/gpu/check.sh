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
step done
