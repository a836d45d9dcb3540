#!/usr/bin/env bash
# scripts/test-isa.sh (make test-isa): the GPU-shim and parity tests with
# the CPU kernels forced to each path this machine can run, so that an
# AVX-512 machine also runs what an AVX2 machine would (docs/testing.md,
# "Forced kernel paths"):
#   - OpenBLAS's SGEMM kernels (OPENBLAS_CORETYPE), which set the last bits
#     of the CPU engine's results: SkylakeX and Cooperlake where the CPU has
#     AVX-512 (and BF16), Haswell and Zen where it has AVX2 and FMA,
#     Sandybridge (AVX) and Prescott (SSE3) everywhere, except the set
#     test-unit runs (OpenBLAS's own pick, or OPENBLAS_CORETYPE if set);
#   - with each, the widest clone of canopy's C kernels that set implies
#     (CANOPY_SIMD: avx512, avx2, generic), and the generic clone once more
#     under the default SGEMM;
#   - -tags noblas (gonum's SGEMM, Go kernels).
# Under each: canopy's kernels (infer/gemm, infer/cpu), the detector's
# golden and GPU-shim tests (infer/retinanet), the crop classifier's parity
# and GPU-shim tests (infer/crop) and the point model's (infer/treeformer).
# TestForcedKernels (infer/gemm) fails a run whose forced path did not take.
# The detector's products are canopy's FMA chains (gemm.Chain), so its
# bytes must not depend on the path: TestClonesSameBytes logs the digest of
# its detections under each, and they must all be one.
# Usage: scripts/test-isa.sh [go test flags...]; TAGS as the Makefile's.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TAGS=${TAGS:-}
RUN_RN='^(TestClonesSameBytes|TestKernelsMatchCPU|TestGPUEngineMatchesCPU|TestCUDNNLayersMatchCPU|TestCUDNNEngineMatchesCPU|TestGoldenResNet18|TestGoldenDemoModel)$'
# -tags noblas runs the detector's products as Chain's scalar Go twin,
# too slow for the full-size golden and GPU-shim tests on a shared
# machine: there TestClonesSameBytes alone, whose digest (equal to every
# other path's) shows the same bytes, so those tests' outcome too.
RUN_RN_NOBLAS='^TestClonesSameBytes$'
RUN_CPU='^(TestWinogradMatchesDirect|TestWinogradBoundCatchesPlantedBugs|TestBatchImagesIndependent|TestConvPairSameBits)$'
# The crop classifier: the parity test against DeepForest's CropModel
# fixtures (ResNet-50 and ResNet-18 on the parity raster's 31 crops at
# 224×224, the checkpoint, hub folder and .pt alike), the transform against
# torch, and the host-shim GPU against the CPU engine (canopy's kernels,
# the fake cuDNN). The parity test runs where canopy's AVX2 or AVX-512
# clone runs (13-17 CPU-seconds); with the generic clone it takes over 110
# CPU-seconds, and on Go's SGEMM (-tags noblas) over 12 minutes, so there
# the transform and GPU-shim tests only (6-12 CPU-seconds).
RUN_CROP='^(TestClassifierMatchesDeepForest|TestTransformMatchesTorch|TestGPUCropMatchesCPU|TestGPUCropCUDNN)$'
RUN_CROP_FAST='^(TestTransformMatchesTorch|TestGPUCropMatchesCPU|TestGPUCropCUDNN)$'
# The point model (TreeFormer): the one-block model against DeepForest's
# forward (testdata/small.json), and the host-shim GPU's kernels and stages
# against the CPU engine: 5-10 CPU-seconds a path.
RUN_TF='^(TestSmallStages|TestGPUKernelsMatchCPU|TestGPUStagesMatchCPU)$'
RUN_GEMM='^(TestForcedKernels|TestAgainstNaive|TestChainMatchesGo|TestChainColumnsIndependent|TestWinoMatchesGo|TestWinoLanesMatchPlanes|TestIm2colLanesMatchPlanes|TestMaxPoolLanesMatchPlanes)$'
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }

mkdir -p bin/isa
build() { # tags suffix
	for p in retinanet cpu gemm crop treeformer; do
		$GO test -tags "$1" -c -o "bin/isa/$p$2.test" "./infer/$p/"
	done
}
build "$TAGS" ""
build "${TAGS:+$TAGS,}noblas" "-noblas"

runs=0
digests=()
run() { # label suffix simd env...
	local label=$1 sfx=$2 simd=$3
	shift 3
	echo "test-isa: $label"
	for p in gemm cpu crop treeformer retinanet; do
		local re=$RUN_RN out=bin/isa/out-$p.txt
		[ -n "$sfx" ] && re=$RUN_RN_NOBLAS
		[ $p = cpu ] && re=$RUN_CPU
		[ $p = gemm ] && re=$RUN_GEMM
		[ $p = crop ] && re=$RUN_CROP
		[ $p = crop ] && { [ -n "$sfx" ] || [ "$simd" = generic ]; } && re=$RUN_CROP_FAST
		[ $p = treeformer ] && re=$RUN_TF
		(cd "infer/$p" && env "$@" "../../bin/isa/$p$sfx.test" -test.run "$re" -test.count=1 -test.timeout 1200s -test.v) >"$out" 2>&1 ||
			{ grep -v '^=== RUN' "$out" | tail -40; echo "test-isa: FAIL under $label"; exit 1; }
		grep -E '^(--- |ok|PASS|FAIL)' "$out" | grep -v '^--- PASS' || true
		# a name in a filter that matches no test would pass silently: every
		# test named ran (or skipped, saying why)
		local want got
		want=$(tr -cd '|' <<<"$re" | wc -c)
		got=$(grep -cE '^--- (PASS|SKIP)' "$out" || true)
		[ "$got" -ge $((want + 1)) ] || { echo "test-isa: $p ran $got of the $((want + 1)) tests of $re under $label"; exit 1; }
	done
	local d
	d=$(sed -n 's/.*detection digest \([0-9a-f]*\).*/\1/p' bin/isa/out-retinanet.txt)
	[ -n "$d" ] || { echo "test-isa: no detection digest under $label"; exit 1; }
	digests+=("$d $label")
	runs=$((runs + 1))
}

# core_of ENV...: the OpenBLAS kernel set the gemm tests run under ENV.
core_of() {
	(cd infer/gemm && env "$@" ../../bin/isa/gemm.test -test.run '^TestForcedKernels$' -test.v 2>/dev/null |
		sed -n 's/.*openblas SGEMM, \([A-Za-z0-9]*\) kernels.*/\1/p' | head -1) || true
}
default=$(core_of)
echo "test-isa: test-unit runs OpenBLAS's ${default:-?} kernels here; forcing the others"
cores=(Prescott:generic Sandybridge:generic)
has avx2 fma && cores+=(Haswell:avx2 Zen:avx2)
has avx512f avx512bw avx512dq avx512vl && cores+=(SkylakeX:avx512)
has avx512f avx512bw avx512dq avx512vl avx512_bf16 && cores+=(Cooperlake:avx512)
probe=Prescott
[ "${default,,}" = prescott ] && probe=Sandybridge
if [ -n "$default" ] && [ "$(core_of OPENBLAS_CORETYPE=$probe)" != $probe ]; then
	# An OpenBLAS built for one CPU (no DYNAMIC_ARCH) has one kernel set.
	echo "test-isa: this OpenBLAS ignores OPENBLAS_CORETYPE (built without DYNAMIC_ARCH): its $default kernels only"
	cores=()
fi
for cs in "${cores[@]}"; do
	core=${cs%%:*} simd=${cs##*:}
	[ "${core,,}" = "${default,,}" ] && continue
	run "OPENBLAS_CORETYPE=$core CANOPY_SIMD=$simd" "" "$simd" OPENBLAS_CORETYPE="$core" CANOPY_SIMD="$simd"
done
run "CANOPY_SIMD=generic (the default SGEMM)" "" generic CANOPY_SIMD=generic
run "-tags noblas" "-noblas" "" CANOPY_SIMD=
if [ "$(printf '%s\n' "${digests[@]}" | cut -d' ' -f1 | sort -u | wc -l)" != 1 ]; then
	printf 'test-isa: the detector gives other bytes on other paths:\n'
	printf '  %s\n' "${digests[@]}"
	exit 1
fi
echo "test-isa: $runs forced paths pass; detection digest ${digests[0]%% *} on every one"
