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
#   crops-tests.txt, (issue 44 item 3) the crop classifier on the GPU engine
#   crops-bench.txt,   against the CPU engine: the tests with derived
#   crops.tsv          bounds (crops cut from held detector windows too),
#                      crops/s side by side, predict --crop-model and
#                      eval-crops on both devices (crops())
# CHECK selects the parts (default "base cudnn stages", all of them; one
# part fits one 8-minute lease): base = the kernel tests and the
# benchmarks against torchvision, cudnn = issue 24's (gpu-plan, parity,
# demo metrics, two processes against one), stages = issue 25's (stage
# times and end to end), crops = issues 36 and 44's (the crop classifier
# on the GPU engine against the CPU engine; crops*).
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

# crops (issues 36, 44 item 3): the crop classifier on the GPU engine
# (infer/crop/gpu.go: the crops cut and resized on the device, the ResNet
# through the detector's engine, pool, fc, softmax and argmax on the
# device). About 5 minutes; bin/crop-cuda.test (make check-cuda) and
# bin/crop-files (make gpu-bundle) carried.
#  1. crops-tests.txt: infer/crop's GPU tests on the GPU (the same tests CI
#     runs on the host shim): the device transform bit for bit the CPU's;
#     exact and kernel-tf32, and the real cuDNN (CANOPY_CUDNN) at fp32,
#     tf32 and bf16, against the CPU engine layer by layer and through the
#     head within their derived bounds (internal/testsupport/bound), every
#     unambiguous label equal; planted bugs caught; a crop's bytes the same
#     in any batch; non-finite logits refused.
#  2. crops-bench.txt: BenchmarkGPUCrops, ResNet-50 and ResNet-18 at
#     224x224, 256 crops: crops/s on the device (exact, tf32, bf16) and on
#     the CPU engine (every core of this machine), side by side.
#  3. crops.tsv: canopy predict --crop-model on the crop parity raster
#     (as an image) with --device cuda (--precision exact and tf32) and
#     --device cpu: the crop step's crops/s from each report.json, and the crop
#     columns against the CPU's: rows, labels equal, the largest score
#     difference. The labels must all be equal; the scores' bound is
#     certified per layer by step 1 (a bound carried through the whole
#     network is rigorous but far too loose to mean anything:
#     infer/retinanet/bound_test.go), so here the difference is recorded.
#     TestGPUCropFromHeldWindows (step 1) is the tile path's: crops cut
#     from the windows the detector holds on the device give the bits of
#     crops uploaded from their images, and the device is sent exactly
#     their bytes less (predict --tile itself needs GDAL, which the
#     carried nompi,noblas,nogdal build lacks).
#  4. crops.tsv, eval-crops: canopy eval-crops --device cuda (exact, tf32)
#     and --device cpu on the parity raster's boxes DeepForest labelled
#     (infer/crop/testdata/parity.json's tile rows): crops/s (report.json's crops over per_rank's classify
#     seconds) and crops.csv's labels and scores against the CPU's (labels
#     all equal).
crops() {
	step crops tests
	(cd infer/crop && timeout 150 ../../bin/crop-cuda.test -test.v -test.timeout 145s -test.run 'TestGPUCrop') \
		>"$OUT/crops-tests.txt" 2>&1
	echo "rc=$?" >>"$OUT/crops-tests.txt"
	grep -E '^(--- |ok|FAIL|rc=)|values outside' "$OUT/crops-tests.txt" | sed 's/^ *gpu_test.go:[0-9]*: //' | head -n 30

	step crops bench
	(cd infer/crop && timeout 150 ../../bin/crop-cuda.test -test.run '^$' -test.bench BenchmarkGPUCrops \
		-test.benchtime 3x -test.count 1) >"$OUT/crops-bench.txt" 2>&1
	echo "rc=$?" >>"$OUT/crops-bench.txt"
	grep -E 'Benchmark|rc=' "$OUT/crops-bench.txt" | head -n 12

	step crops predict
	# predict --images, not --tile: the carried build has no GDAL (nogdal),
	# and whole images are the path that cuts the crops on the device.
	mkdir -p bin/crop-images
	cp bin/crop-files/img_0000.png bin/crop-images/
	local runs=("cuda exact" "cuda tf32" "cpu exact") r dev prec
	printf 'run\tcrops\tseconds\tcrops_per_s\tdevice\trc\n' >"$OUT/crops.tsv"
	for r in "${runs[@]}"; do
		read -r dev prec <<<"$r"
		local args=(--device "$dev")
		[ "$dev" = cuda ] && args+=(--precision "$prec")
		timeout 90 $CANOPY predict --images bin/crop-images --model testdata/models/canopy-demo-r18 \
			--crop-model bin/crop-files/crop.ckpt "${args[@]}" \
			--out "$OUT/crops-$dev-$prec" --force >"$OUT/crops-$dev-$prec.log" 2>&1
		local rc=$?
		"$PY" - "$OUT/crops-$dev-$prec/report.json" "$dev $prec" $rc >>"$OUT/crops.tsv" <<'PY' || echo "$dev $prec: no report (rc $rc)"
import json, sys
c = json.load(open(sys.argv[1])).get("crops") or {}
n, s = c.get("classified", 0), c.get("seconds", 0)
print("%s\t%d\t%.3f\t%.1f\t%s\t%s" % (sys.argv[2], n, s, n / s if s else 0, c.get("device", "?"), sys.argv[3]))
PY
	done
	column -t -s $'\t' "$OUT/crops.tsv" 2>/dev/null || cat "$OUT/crops.tsv"
	for prec in exact tf32; do
		"$PY" - "$OUT/crops-cpu-exact/predictions.csv" "$OUT/crops-cuda-$prec/predictions.csv" "$prec" <<'PY' 2>&1 | tee -a "$OUT/crops.tsv"
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
key = lambda r: tuple(r[k] for k in ("xmin", "ymin", "xmax", "ymax"))
bb = {key(r): r for r in b}
same = [(r, bb[key(r)]) for r in a if key(r) in bb]
lab = sum(r["cropmodel_label"] == s["cropmodel_label"] for r, s in same)
d = max((abs(float(r["cropmodel_score"]) - float(s["cropmodel_score"])) for r, s in same), default=float("nan"))
ok = "ok" if same and lab == len(same) else "FAIL"
print("crop columns cuda %s vs cpu: %s: %d cpu rows, %d cuda rows, %d boxes in both, labels equal %d, largest |score difference| %.3g"
      % (sys.argv[3], ok, len(a), len(b), len(same), lab, d))
PY
	done

	step crops eval-crops
	# eval-crops --device (no detector: the crop model on a GPU engine of
	# its own) on the parity raster's boxes that DeepForest's predict_tile
	# labelled (infer/crop/testdata/parity.json: its crop labels as the
	# truth): crops/s from report.json, and crops.csv's predicted labels and
	# scores of each GPU run against the CPU's.
	"$PY" - infer/crop/testdata/parity.json bin/crop-images/truth.csv <<'PY' || echo "eval-crops: no truth CSV"
import csv, json, sys
rows = json.load(open(sys.argv[1]))["tile"]["rows"]
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["image_path", "xmin", "ymin", "xmax", "ymax", "label"])
    for r in rows:
        w.writerow(["img_0000.png"] + r[:4] + [r[6]])
PY
	printf 'eval-crops\tcrops\tseconds\tcrops_per_s\tdevice\trc\n' >>"$OUT/crops.tsv"
	for r in "${runs[@]}"; do
		read -r dev prec <<<"$r"
		local args=(--device "$dev")
		[ "$dev" = cuda ] && args+=(--precision "$prec")
		timeout 60 $CANOPY eval-crops --csv bin/crop-images/truth.csv --crop-model bin/crop-files/crop.ckpt "${args[@]}" \
			--out "$OUT/evalcrops-$dev-$prec" --force >"$OUT/evalcrops-$dev-$prec.log" 2>&1
		local rc=$?
		"$PY" - "$OUT/evalcrops-$dev-$prec/report.json" "$dev $prec" $rc >>"$OUT/crops.tsv" <<'PY' || echo "eval-crops $dev $prec: no report (rc $rc)"
import json, sys
r = json.load(open(sys.argv[1]))
n, s = r.get("crops", 0), sum(p["seconds"].get("classify", 0) for p in r.get("per_rank", []))
print("%s\t%d\t%.3f\t%.1f\t%s\t%s" % (sys.argv[2], n, s, n / s if s else 0, r.get("device", "?"), sys.argv[3]))
PY
	done
	for prec in exact tf32; do
		"$PY" - "$OUT/evalcrops-cpu-exact/crops.csv" "$OUT/evalcrops-cuda-$prec/crops.csv" "$prec" <<'PY' 2>&1 | tee -a "$OUT/crops.tsv"
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
lab = sum(r["predicted_label"] == s["predicted_label"] for r, s in zip(a, b))
d = max((abs(float(r["score"]) - float(s["score"])) for r, s in zip(a, b)), default=float("nan"))
ok = "ok" if a and len(a) == len(b) and lab == len(a) else "FAIL"
print("eval-crops cuda %s vs cpu: %s: %d crops, %d on cuda, labels equal %d, largest |score difference| %.3g" % (sys.argv[3], ok, len(a), len(b), lab, d))
PY
	done
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
