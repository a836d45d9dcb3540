#!/usr/bin/env bash
# scripts/check-cuda-front.sh CASE: the cuda build's front (bin/canopy-cuda)
# on a machine without a usable GPU, as scripts/check-cuda.sh sets it up
# (CASE names the driver's state: as-is, stub, hidden). It must:
#   - run --help, version and doctor (exit 0), saying it is the cuda front
#     and what the probe of libcuda.so.1 saw;
#   - predict --device cpu: the default build's predictions.csv bytes
#     (CHECK_REF, from the images in CHECK_IMAGES);
#   - predict --device auto: the same bytes, and one note on stderr, also
#     under mpirun -np 2;
#   - predict --device cuda: exit 5, naming what the probe saw.
set -euo pipefail
cd "$(dirname "$0")/.."
case=${1:?usage: check-cuda-front.sh CASE}
bin=bin/canopy-cuda
model=testdata/models/canopy-demo-r18
out=$CHECK_TMP/front-$case
mkdir -p "$out"
fail() { echo "check-cuda ($case): $*" >&2; exit 1; }
run() { # run NAME ARGS...: stdout, stderr and the exit code into $out/NAME.*
	local name=$1
	shift
	set +e
	"$@" >"$out/$name.out" 2>"$out/$name.err"
	echo $? >"$out/$name.rc"
	set -e
}
rc() { cat "$out/$1.rc"; }
want=(); case $case in
	as-is) want=('libcuda.so.1 ') ;;
	stub) want=('CUDA_ERROR_STUB_LIBRARY') ;;
	hidden) want=('libcuda.so.1 cannot be loaded' 'cannot open shared object file') ;;
esac
probe_said() { # the probe's line, in file $1
	for w in "${want[@]}"; do
		grep -qF -- "$w" "$1" || fail "$(basename "$1") lacks \"$w\": $(cat "$1")"
	done
}

run help "$bin" --help
[ "$(rc help)" = 0 ] && grep -q 'USAGE' "$out/help.out" && grep -q -- '--device' <("$bin" predict --help) ||
	fail "--help: exit $(rc help): $(cat "$out/help.err")"
run version "$bin" version
[ "$(rc version)" = 0 ] && grep -q '^build: cuda front' "$out/version.out" && grep -q '^GPU: none usable' "$out/version.out" ||
	fail "version: exit $(rc version): $(cat "$out/version.out" "$out/version.err")"
probe_said "$out/version.out"
run doctor "$bin" doctor
[ "$(rc doctor)" = 0 ] && grep -q 'build: cuda front' "$out/doctor.out" && grep -qE '^0 .* cpu ' "$out/doctor.out" ||
	fail "doctor: exit $(rc doctor): $(cat "$out/doctor.out" "$out/doctor.err")"
probe_said "$out/doctor.out"

for dev in cpu auto; do
	run "predict-$dev" "$bin" predict --model "$model" --images "$CHECK_IMAGES" --out "$out/p-$dev" --device "$dev"
	[ "$(rc "predict-$dev")" = 0 ] || fail "predict --device $dev: exit $(rc "predict-$dev"): $(cat "$out/predict-$dev.err")"
	cmp "$CHECK_REF" "$out/p-$dev/predictions.csv" || fail "predict --device $dev: predictions.csv differs from the default build's"
done
n=$(grep -c 'note: --device auto' "$out/predict-auto.err" || true)
[ "$n" = 1 ] || fail "predict --device auto printed $n notes, want 1: $(cat "$out/predict-auto.err")"
probe_said "$out/predict-auto.err"
if grep -q 'note: --device auto' "$out/predict-cpu.err"; then fail "--device cpu printed the auto note"; fi

run predict-mpi scripts/mpirun.sh -np 2 "$bin" predict --model "$model" --images "$CHECK_IMAGES" --out "$out/p-mpi" --device auto
[ "$(rc predict-mpi)" = 0 ] || fail "mpirun -np 2 predict --device auto: exit $(rc predict-mpi): $(cat "$out/predict-mpi.err")"
cmp "$CHECK_REF" "$out/p-mpi/predictions.csv" || fail "mpirun -np 2 predict --device auto: predictions.csv differs from the default build's"
n=$(grep -c 'note: --device auto' "$out/predict-mpi.err" || true)
[ "$n" = 1 ] && grep -q 'every rank runs on the CPU' "$out/predict-mpi.err" ||
	fail "mpirun -np 2 --device auto: $n notes, want 1 for every rank: $(cat "$out/predict-mpi.err")"

run predict-cuda "$bin" predict --model "$model" --images "$CHECK_IMAGES" --out "$out/p-cuda" --device cuda
[ "$(rc predict-cuda)" = 5 ] && grep -q 'no CUDA device is visible' "$out/predict-cuda.err" ||
	fail "predict --device cuda: exit $(rc predict-cuda) (want 5): $(cat "$out/predict-cuda.err")"
probe_said "$out/predict-cuda.err"
[ ! -e "$out/p-cuda/predictions.csv" ] || fail "predict --device cuda wrote predictions"
echo "check-cuda ($case): the front serves without a GPU: $(grep '^GPU:' "$out/version.out")"
