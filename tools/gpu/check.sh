#!/usr/bin/env bash
# tools/gpu/check.sh: the GPU check of the cuda backend and its cuDNN path,
# one run of at most 8 minutes on a GPU machine that has no Go (an H100 or
# H200 with PyTorch, torchvision and cuDNN 9 in a Python environment). Build
# here first (make gpu-bundle: bin/canopy-cuda-nompi, the cuda build's front,
# and bin/canopy-cuda-nompi-engine, which the front execs on a GPU node;
# bin/retinanet-cuda.test, bin/retinanet-images, bin/gpu-demo), carry bin/,
# then run from the
# repository root:
#   OUT=/some/dir PYTHON=/path/to/venv/bin/python tools/gpu/check.sh
# cuDNN: the library of that Python's nvidia.cudnn package (the
# nvidia-cudnn-cu12/cu13 wheel PyTorch uses), passed as --cudnn and
# CANOPY_CUDNN; or CUDNN=/path/to/lib to choose another.
# Writes to $OUT (default bin/gpu-out):
#   gpu.txt            nvidia-smi; the cuDNN found
#   tests.txt          parity on the GPU: conv_f32 bit-identical to the host
#                      shim; every kernel vs the CPU engine; the golden
#                      fixtures; the network FP32 and TF32 vs the CPU; batch
#                      invariance; layer times; and on the real cuDNN: every
#                      conv shape and the NHWC kernels vs the CPU engine in
#                      fp32/tf32/bf16, the network vs the CPU, the plan-file
#                      round trip, and slot invariance (each image in every
#                      slot of a batch of 8 with random batch-mates, bits
#                      compared per level and head output); the non-finite
#                      checks of head outputs, boxes, scores and losses
#   plan-tf32.json,    canopy gpu-plan, R50, batch 8, 400x400 images
#   plan-bf16.json       (800x800 after the transform); *.txt its table
#   parity.json        canopy predict fp32/tf32/bf16 against torchvision
#                      FP32, TF32 and BF16 autocast + channels_last on the
#                      same weights and images: matches, box and score
#                      differences
#   demo-metrics.txt   canopy eval on the demo set, every precision, the
#                      metrics against exact (canopy compare)
#   split.txt          two processes each taking half the images (whole
#                      global batches) against one process, byte for byte
#   bench-canopy.txt   BenchmarkGPUDetect: R50, batch 1/8/32, exact, fp32,
#                      tf32, bf16 (heuristic engines), images/s
#   bench-torch.json   torchvision fp32, tf32, tf32 + cudnn.benchmark, bf16
#                      autocast + channels_last, batch 1/8/32, and the table
#                      of ratios canopy/torchvision
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
# CHECK selects the parts (default "base cudnn stages", all of them; one
# part fits one 8-minute lease): base = the kernel tests and the
# benchmarks against torchvision, cudnn = issue 24's (gpu-plan, parity,
# demo metrics, two processes against one), stages = issue 25's (stage
# times and end to end), crops = issue 36's (the crop classifier on both
# devices; crops-*/ and crops-*.log).
# points = issue 46's (DeepForest's point model, TreeFormer, on the GPU
# engine; points/, about 3 minutes, at most 7.5: CHECK=points runs it
# alone in one 10-minute command).
#   points/tests.txt   infer/treeformer's GPU tests on the GPU: every tf_*
#                      kernel against the CPU kernel (bits), the attention
#                      GEMM, the one-block model's stages against the CPU
#                      engine (exact, fp32, tf32) and DeepForest's points,
#                      planted bugs, determinism
#   points/points.txt  canopy predict (2 images), predict --tile 512/0.1
#                      (1249x1035, 9 windows) and a 3000x3000 raster (49
#                      windows) with the seeded pvt_v2_b3 (bin/testmodel
#                      -arch treeformer -seed 46: reference.py's weights),
#                      --device cpu and --device cuda at exact, fp32 and
#                      tf32: each run's points against the CPU's (and
#                      DeepForest's, from bin/treeformer-ref-points.json
#                      when gpu-bundle found make treeformer-ref's) by
#                      issue 46's rule, and windows/s (tf_points.py;
#                      points.json)
# Each step has its own time limit, and a failed step does not stop the
# others.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-bin/gpu-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
step() { echo "== $* ($(date +%T))"; }
{ nvidia-smi; nvidia-smi -L; } >"$OUT/gpu.txt" 2>&1

# cuDNN: where the environment's PyTorch has it (libcudnn.so.9 loads its
# sub-libraries from its own folder; cuDNN works through the CUDA runtime,
# which uses the device's primary context, the one canopy retains).
if [ -z "${CUDNN:-}" ]; then
	CUDNN=$("$PY" -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>>"$OUT/gpu.txt")
fi
echo "cudnn: ${CUDNN:-none found}" | tee -a "$OUT/gpu.txt"
export CANOPY_CUDNN="$CUDNN"
# The CUDA runtime and cuBLAS cuDNN needs sit beside it in the same
# environment (nvidia/*/lib); put them on the loader path.
extra=$("$PY" -c 'import glob, os, nvidia; print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2>/dev/null)
export LD_LIBRARY_PATH="${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CANOPY=bin/canopy-cuda-nompi
# The front must have become the engine here (its version says "cuda engine").
"$CANOPY" version >>"$OUT/gpu.txt" 2>&1
grep -q '^build: cuda engine' "$OUT/gpu.txt" || echo "FAIL: the cuda front did not start its engine on this GPU (gpu.txt)" | tee -a "$OUT/gpu.txt"

CHECK=${CHECK:-base cudnn stages crops points}
has() { case " $CHECK " in *" $1 "*) return 0 ;; esac; return 1; }

base() {
step tests
(cd infer/retinanet && timeout 150 ../../bin/retinanet-cuda.test -test.v -test.timeout 145s \
	-test.run 'TestFP32BitsMatchShim|TestKernelsMatchCPU|TestGoldenHostShim|TestGoldenTF32|TestGPUEngineMatchesCPU|TestParityCatchesPlantedBugs|TestGPUBatchInvariance|TestGPULayerTimes|TestCUDNN|TestGPUNonFiniteOutputs') \
	>"$OUT/tests.txt" 2>&1
echo "rc=$?" >>"$OUT/tests.txt"
grep -E '^(--- |ok|FAIL|rc=)|slot .* changes' "$OUT/tests.txt"

step bench canopy
(cd infer/retinanet && timeout 90 ../../bin/retinanet-cuda.test -test.run '^$' \
	-test.bench BenchmarkGPUDetect -test.benchtime 10x -test.count 2) >"$OUT/bench-canopy.txt" 2>&1
echo "rc=$?" >>"$OUT/bench-canopy.txt"
grep -E 'Benchmark|rc=' "$OUT/bench-canopy.txt" | head -n 30

step bench torchvision
timeout 90 "$PY" tools/gpu/torch_gpu.py --repeat 10 --count 2 --go "$OUT/bench-canopy.txt" \
	--out "$OUT/bench-torch.json" bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0001.png 2>&1 |
	tail -n 16
step predict
for dev in cuda cpu; do
	timeout 60 bin/canopy-cuda-nompi predict --model testdata/models/canopy-demo-r18 --images bin/retinanet-images \
		--device "$dev" --out "$OUT/predict-$dev" --force >"$OUT/predict-$dev.log" 2>&1
	echo "predict --device $dev: rc=$?"
done
grep -h -A6 '"devices"' "$OUT/predict-cuda/report.json" | head -n 12

}

cudnn_checks() {
step model
timeout 60 "$PY" tools/gpu/make_model.py bin/model-r50 2>&1 | tail -n 1

step gpu-plan
for p in tf32 bf16; do
	timeout 60 $CANOPY gpu-plan --model bin/model-r50 --batch-size 8 --precision "$p" --image-size 400x400 \
		--cudnn "$CUDNN" --repeat 5 --out "$OUT/plan-$p.json" >"$OUT/plan-$p.txt" 2>&1
	echo "gpu-plan $p: rc=$?"
	tail -n 1 "$OUT/plan-$p.txt"
done

step parity
mkdir -p bin/parity-images
cp bin/retinanet-images/forest_000[01].png bin/parity-images/ 2>/dev/null
runs=()
for p in fp32 tf32 bf16; do
	plan=()
	[ -f "$OUT/plan-$p.json" ] && plan=(--plan "$OUT/plan-$p.json")
	timeout 45 $CANOPY predict --model bin/model-r50 --images bin/parity-images --device cuda --precision "$p" \
		--batch-size 8 --cudnn "$CUDNN" "${plan[@]}" --out "$OUT/predict-$p" --force >"$OUT/predict-$p.log" 2>&1
	echo "predict --precision $p: rc=$?"
	runs+=("$p=$OUT/predict-$p/predictions.csv")
done
timeout 60 "$PY" tools/gpu/cudnn_parity.py --model bin/model-r50 --images bin/parity-images --out "$OUT/parity.json" "${runs[@]}" 2>&1 | tail -n 4
grep -h -A8 '"cudnn"' "$OUT/predict-tf32/report.json" | head -n 10

step demo metrics
for p in exact fp32 tf32 bf16; do
	timeout 40 $CANOPY eval --model testdata/models/canopy-demo-r18 --csv bin/gpu-demo/annotations.csv --device cuda \
		--precision "$p" --batch-size 8 --cudnn "$CUDNN" --out "$OUT/demo-$p" --force >"$OUT/demo-$p.log" 2>&1
	echo "eval --precision $p: rc=$?"
done
for p in fp32 tf32 bf16; do
	echo "== $p against exact"
	$CANOPY compare --tolerance default=0.02 "$OUT/demo-exact" "$OUT/demo-$p" 2>&1 | tail -n 25
done >"$OUT/demo-metrics.txt"
grep -E '^== |worse|better|regress' "$OUT/demo-metrics.txt" | head -n 12

step two processes against one
# Global batches of 8: the first 16 images are batches 0-1, the rest 2-4;
# each half, run alone, puts every image in the slot it has in the whole.
ls bin/gpu-demo/*.png | sort >"$OUT/split-all.txt"
head -n 16 "$OUT/split-all.txt" >"$OUT/split-a.txt"
tail -n +17 "$OUT/split-all.txt" >"$OUT/split-b.txt"
for part in all a b; do
	mkdir -p "bin/split-$part"
	rm -f bin/split-"$part"/*.png
	xargs -a "$OUT/split-$part.txt" cp -t "bin/split-$part/"
done
# Half b alone has positions 0..23, in the whole 16..39: the same slots
# (16 is two whole batches) and the same batch-mates.
timeout 40 $CANOPY predict --model testdata/models/canopy-demo-r18 --images bin/split-all --device cuda --precision tf32 \
	--batch-size 8 --cudnn "$CUDNN" --out "$OUT/split-one" --force >"$OUT/split-one.log" 2>&1 &
one=$!
timeout 40 $CANOPY predict --model testdata/models/canopy-demo-r18 --images bin/split-a --device cuda --precision tf32 \
	--batch-size 8 --cudnn "$CUDNN" --out "$OUT/split-a" --force >"$OUT/split-a.log" 2>&1 &
a=$!
timeout 40 $CANOPY predict --model testdata/models/canopy-demo-r18 --images bin/split-b --device cuda --precision tf32 \
	--batch-size 8 --cudnn "$CUDNN" --out "$OUT/split-b" --force >"$OUT/split-b.log" 2>&1 &
b=$!
wait $one; r1=$?
wait $a; ra=$?
wait $b; rb=$?
{
	echo "rc one=$r1 a=$ra b=$rb"
	sort "$OUT/split-one/predictions.csv" | sed 's|^[^,]*/||' >"$OUT/split-one.sorted"
	cat "$OUT/split-a/predictions.csv" "$OUT/split-b/predictions.csv" | grep -v '^image_path' | sed 's|^[^,]*/||' |
		{ echo "image_path,xmin,ymin,xmax,ymax,label,score"; cat; } | sort >"$OUT/split-two.sorted"
	if cmp -s "$OUT/split-one.sorted" "$OUT/split-two.sorted"; then
		echo "two processes = one process: byte-identical ($(wc -l <"$OUT/split-one.sorted") lines)"
	else
		echo "two processes differ from one:"
		diff "$OUT/split-one.sorted" "$OUT/split-two.sorted" | head -n 10
	fi
} >"$OUT/split.txt" 2>&1
cat "$OUT/split.txt" | head -n 4

}

# --- issue 25: the stages around the network, and canopy end to end ---
# Needs bin/testmodel and bin/forestgen (make gpu-bundle builds them).

# stage_times: the device stages' bits against the host on the GPU, the
# CUDA graphs against launch by launch, the time per stage (about 1 min).
stage_times() {
	step stage times
	(cd infer/retinanet && timeout 150 ../../bin/retinanet-cuda.test -test.v -test.timeout 145s \
		-test.run 'TestDeviceTransformBits|TestDevicePostprocessBits|TestDeviceTorchSort|TestDeviceLosses|TestGraphsMatchEager|TestGPUStageTimes') \
		>"$OUT/stages.txt" 2>&1
	echo "rc=$?" >>"$OUT/stages.txt"
	grep -E '^(--- |ok|FAIL|rc=)| stage ' "$OUT/stages.txt" | sed 's/^ *gpu_postprocess_test.go:[0-9]*: //'
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
	timeout 150 "$PY" tools/gpu/torch_e2e.py --images "$d/images" --batch 8 --modes tf32,bf16 --out "$d/torch.json" \
		>"$d/torch.log" 2>&1
	rc=$?
	kill "$dm" 2>/dev/null
	wait "$dm" 2>/dev/null
	"$PY" - "$d/torch.json" "$(dmon_mean "$d/dmon-torch.txt")" $rc >>"$d/e2e.tsv" <<'PY' || tail -n 5 "$d/torch.log"
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print("torchvision loop (PIL)\t%s\t%d\t%.2f\t%.1f\t%s (both modes)\t%s" % (r["mode"], r["images"], r["seconds"], r["img_per_s"], sys.argv[2], sys.argv[3]))
PY
	column -t -s $'\t' "$d/e2e.tsv" 2>/dev/null || cat "$d/e2e.tsv"
}

# crops (issue 36): canopy predict --tile --crop-model in the cuda build,
# on the GPU and on the CPU, on the crop parity raster (bin/crop-files,
# go run ./cmd/cropmodel): the crop columns must be equal byte for byte
# (today the classifier runs on the CPU in both; once it runs on the GPU
# engine this is its parity check), and the crop step's seconds.
crops() {
	step crops
	for dev in cuda cpu; do
		timeout 90 $CANOPY predict --tile --raster bin/crop-files/img_0000.png --patch-size 300 --patch-overlap 0.25 \
			--model testdata/models/canopy-demo-r18 --crop-model bin/crop-files/crop.ckpt --device "$dev" \
			--out "$OUT/crops-$dev" --force >"$OUT/crops-$dev.log" 2>&1
		echo "predict --tile --crop-model --device $dev: rc=$?"
		grep -h -A6 '"crops"' "$OUT/crops-$dev/report.json" | head -n 7
	done
	if cmp -s <(cut -d, -f8- "$OUT/crops-cuda/predictions.csv") <(cut -d, -f8- "$OUT/crops-cpu/predictions.csv"); then
		echo "crop columns: cuda = cpu"
	else
		echo "crop columns: DIFFER"
	fi
}

# points (issue 46): TreeFormer on both devices. Its predict runs share a
# budget of 330 s (each run's limit is cut to what is left), so the part
# ends within 7.5 minutes whatever hangs.
points() {
	step points
	local d="$OUT/points" m=bin/tf-b3 t0 left
	mkdir -p "$d"
	{ bin/testmodel -arch treeformer -seed 46 -out "$m" &&
		bin/forestgen -out bin/tf-images -n 3 -seed 3 -sizes 1249x1035,400x400,625x518 &&
		bin/forestgen -out bin/tf-big -n 1 -seed 5 -sizes 3000x3000; } >"$d/setup.log" 2>&1 ||
		{ echo "points: setup failed:"; tail -n 5 "$d/setup.log"; return; }
	mkdir -p bin/tf-whole
	cp bin/tf-images/img_0001.png bin/tf-images/img_0002.png bin/tf-whole/
	(cd infer/treeformer && timeout 100 ../../bin/treeformer-cuda.test -test.v -test.timeout 95s -test.run 'TestGPU') >"$d/tests.txt" 2>&1
	echo "rc=$?" >>"$d/tests.txt"
	grep -E '^(--- |ok|FAIL|rc=)|worst error|points, largest' "$d/tests.txt"
	t0=$(date +%s)
	local v dev p n kind
	for kind in image tile big; do
		for v in cpu:exact cuda:exact cuda:fp32 cuda:tf32; do
			dev=${v%%:*} p=${v#*:} n="$kind-$dev-$p"
			left=$((330 - ($(date +%s) - t0)))
			[ $left -gt 5 ] || { echo "points: out of time before $n"; continue; }
			local args=(--images bin/tf-whole)
			[ $kind = tile ] && args=(--tile --patch-size 512 --patch-overlap 0.1 --raster bin/tf-images/img_0000.png)
			[ $kind = big ] && args=(--tile --patch-size 512 --patch-overlap 0.1 --raster bin/tf-big/img_0000.png)
			timeout $((left < 120 ? left : 120)) $CANOPY predict --model "$m" "${args[@]}" --device "$dev" --precision "$p" \
				--out "$d/$n" --force >"$d/$n.log" 2>&1
			echo "predict $n: rc=$?"
		done
	done
	{
		for kind in image tile big; do
			local df=()
			[ $kind != big ] && df=(--deepforest bin/treeformer-ref-points.json)
			[ $kind = tile ] && df+=(--tiled)
			echo "== $kind"
			"$PY" tools/gpu/tf_points.py compare --ref cpu-exact="$d/$kind-cpu-exact" "${df[@]}" --out "$d/points-$kind.json" \
				cuda-exact="$d/$kind-cuda-exact" cuda-fp32="$d/$kind-cuda-fp32" cuda-tf32="$d/$kind-cuda-tf32"
			echo "rc=$?"
		done
	} >"$d/points.txt" 2>&1
	cat "$d/points.txt"
}

has base && base
has cudnn && cudnn_checks
has crops && crops
has points && points
if has stages; then
	stage_times
	e2e
fi
step done
