#!/usr/bin/env bash
# scripts/mutate.sh [target...] -- mutation testing with gremlins (make
# mutate; not in CI: it runs a package's tests once per mutant).
#
# Targets (default: all, in this order):
#   wire plan parts metrics lsap     internal/wire, internal/plan,
#                                    internal/parts, metrics, metrics/lsap
#                                    (the assignment solvers): the whole
#                                    package and its tests
#   nms anchors transform loss post  infer/retinanet, one file (or two) at a
#                                    time (post: forward.go's postprocess and
#                                    finite.go's checks): the others are excluded from
#                                    mutation and only the tests that exercise
#                                    the file run (GOFLAGS=-run=...), since the
#                                    package's full suite takes minutes
#   tile torchfile config            infer/tile, infer/torchfile,
#                                    internal/config: the whole package
#   dataset                          internal/dataset's voc.go (VOC, WKT)
#                                    and coco.go (COCO, its polygons)
#   gdalvec                          infer/gdal's vector reader (vector.go,
#                                    vecread.go, readfile.go)
#
# Each target writes bin/mutate/<target>.txt (gremlins' report) and
# bin/mutate/<target>.json; docs/testing.md records the scores and the reason
# each surviving mutant is equivalent. One worker and a generous timeout
# coefficient (MUTATE_WORKERS, MUTATE_TIMEOUT_COEF): the build machines are
# small and shared.
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS=${GREMLINS:-github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0}
WORKERS=${MUTATE_WORKERS:-1}
COEF=${MUTATE_TIMEOUT_COEF:-10}
out=bin/mutate
mkdir -p "$out"

# files TARGET DIR FILES RUN: mutate only FILES (space-separated base
# names) of the package in DIR, running only the tests matching RUN (all
# when empty).
files() {
	local name=$1 dir=$2 keep=" $3 " run=$4 ex=() f b
	for f in "$dir"/*.go; do
		b=$(basename "$f")
		case $b in *_test.go) continue ;; esac
		if [[ $keep != *" $b "* ]]; then ex+=(-E "(^|/)${b%.go}\\.go\$"); fi
	done
	unleash "$name" "$run" "./$dir" "${ex[@]}"
}

# retinanet TARGET FILES RUN: files of infer/retinanet.
retinanet() { files "$1" infer/retinanet "$2" "$3"; }

unleash() {
	local name=$1 run=$2 pkg=$3
	shift 3
	echo "mutate: $name ($pkg${run:+, tests $run}) -> $out/$name.txt"
	GOFLAGS="${run:+-run=$run}" go run "$GREMLINS" unleash --workers "$WORKERS" --test-cpu 1 \
		--timeout-coefficient "$COEF" -o "$out/$name.json" "$@" "$pkg" 2>&1 | tee "$out/$name.txt" | tail -6
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(wire plan parts metrics lsap nms anchors transform loss post tile torchfile config dataset gdalvec)
for t in "${targets[@]}"; do
	case $t in
	wire | plan | parts | config) unleash "$t" "" "./internal/$t" ;;
	tile | torchfile) unleash "$t" "" "./infer/$t" ;;
	dataset) files dataset internal/dataset "voc.go coco.go" "" ;;
	gdalvec) files gdalvec infer/gdal "vector.go vecread.go readfile.go" "" ;;
	metrics) unleash metrics "" ./metrics ;;
	lsap) unleash lsap "" ./metrics/lsap ;;
	nms) retinanet nms "nms.go torchsort.go" '^(TestNMSTies|TestBatchedNMSTies|TestTorchSortDesc)$' ;;
	anchors) retinanet anchors "anchors.go" '^(TestGoldenDemoModel|TestGoldenDemoOnSample|TestLossThreads|TestTargets)$' ;;
	transform) retinanet transform "transform.go" '^(TestResizeSizeTable|TestParseRules|TestBlendFixture|TestGoldenDemoModel|TestGoldenLegacyResize/demo)$' ;;
	loss) retinanet loss "loss.go" '^(TestLossGolden|TestLossThreads|TestTargets)$' ;;
	post) retinanet post "forward.go finite.go" '^(TestGoldenDemoModel|TestGoldenDemoOnSample|TestNMSTies|TestBatchedNMSTies|TestNonFiniteOutputs|TestDecodeClampsScale)$' ;;
	*)
		echo "mutate: unknown target $t" >&2
		exit 2
		;;
	esac
done
