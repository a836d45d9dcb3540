#!/usr/bin/env bash
# scripts/check-cuda.sh (make check-cuda, part of make test): the cuda build
# on a machine without a GPU, as CI is.
#   1. Debian's CUDA 11.8 headers and nvcc (scripts/install-cuda.sh);
#   2. kernels.fatbin is what kernels.cu compiles to (go generate, byte for
#      byte) and holds compute_80 PTX and sm_90 code (cuobjdump);
#   3. go vet and go build of the cuda build's two binaries (docs/design.md,
#      "The cuda build without a GPU"): the front (-tags cudafront,
#      bin/canopy-cuda), which links no CUDA library, and the engine (-tags
#      cuda, bin/canopy-cuda-engine), which the front execs on a node with a
#      GPU; and both with nompi,noblas,nogdal (what the GPU check carries):
#      the front then needs only libc, the engine libc and libcuda.so.1;
#   4. without a GPU, the engine stops before gorgonia.org/cu's init with
#      exit 5 and says why;
#   5. without a GPU the front serves: --help, version and doctor say what
#      they see; predict --device cpu and --device auto give the default
#      build's predictions.csv bytes, auto with one note (also under mpirun
#      -np 2); --device cuda exits 5 saying what the probe saw. Three
#      ways: the machine's libcuda.so.1 as it is (here Debian's driver
#      library: cuInit finds no device), the toolkit's stub as libcuda.so.1
#      (cuInit: CUDA_ERROR_STUB_LIBRARY), and libcuda.so.1 hidden from the
#      loader (a mount namespace with an empty tmpfs over its folder; the
#      loader then says "cannot open shared object file");
#   6. the retinanet, crop and treeformer tests compile with -tags cuda
#      (they run on a GPU: tools/gpu/check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
scripts/install-cuda.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp infer/cuda/kernels/kernels.cu infer/cuda/kernels/nhwc.cu infer/cuda/kernels/shim.h infer/cuda/kernels/gen.sh "$tmp/"
sh "$tmp/gen.sh"
for fb in kernels nhwc; do
	if ! cmp -s "$tmp/$fb.fatbin" infer/cuda/kernels/$fb.fatbin; then
		echo "check-cuda: infer/cuda/kernels/$fb.fatbin is stale: run make generate-kernels and commit it" >&2
		exit 1
	fi
	list=$(cuobjdump --list-ptx --list-elf infer/cuda/kernels/$fb.fatbin)
	for want in 'sm_80.ptx' 'sm_90.cubin'; do
		grep -q "$want" <<<"$list" || { echo "check-cuda: $fb.fatbin lacks $want:"; echo "$list"; exit 1; } >&2
	done
done

$GO vet -tags cuda ./...
$GO vet -tags cudafront ./...
$GO vet -tags cuda,nompi,noblas,nogdal ./...
$GO vet -tags cudafront,nompi,noblas,nogdal ./...
mkdir -p bin
$GO build -tags cudafront -o bin/canopy-cuda .
$GO build -tags cuda -o bin/canopy-cuda-engine .
$GO build -tags cudafront,nompi,noblas,nogdal -o bin/canopy-cuda-nompi .
$GO build -tags cuda,nompi,noblas,nogdal -o bin/canopy-cuda-nompi-engine .
$GO build -o bin/canopy-check-ref . # the default build, for the bytes
for b in canopy-cuda canopy-cuda-nompi; do
	if ldd bin/$b | grep -E 'libcuda|libcudart|libcublas|libcudnn'; then
		echo "check-cuda: the front bin/$b links a CUDA library: it must open libcuda.so.1 at run time only" >&2
		exit 1
	fi
done
libs=$(ldd bin/canopy-cuda-nompi-engine)
if grep -E 'libmpi|openblas|libcudart|libcublas|libgdal' <<<"$libs"; then
	echo "check-cuda: the cuda,nompi,noblas,nogdal engine links more than libc and libcuda.so.1" >&2
	exit 1
fi
grep -q 'libcuda.so.1' <<<"$libs" || { echo "check-cuda: the engine does not link libcuda.so.1" >&2; exit 1; }
if ldd bin/canopy-cuda-nompi | grep -E 'libmpi|openblas|libgdal'; then
	echo "check-cuda: the cudafront,nompi,noblas,nogdal front links more than libc" >&2
	exit 1
fi

if nvidia-smi -L >/dev/null 2>&1; then
	echo "check-cuda: this machine has a GPU: run tools/gpu/check.sh for the GPU checks"
else
	set +e
	msg=$(bin/canopy-cuda-nompi-engine --help 2>&1 >/dev/null)
	rc=$?
	set -e
	if [ $rc -ne 5 ] || ! grep -q 'finds no usable GPU' <<<"$msg"; then
		echo "check-cuda: without a GPU the cuda engine exited $rc (want 5), saying: $msg" >&2
		exit 1
	fi
	# the default build's predictions, which the front must give byte for byte
	$GO run ./cmd/forestgen -out "$tmp/images" -n 3 -seed 4 -prefix new_ >/dev/null
	rm -f "$tmp/images/annotations.csv"
	bin/canopy-check-ref predict --model testdata/models/canopy-demo-r18 --images "$tmp/images" --out "$tmp/ref" >/dev/null 2>&1
	export CHECK_IMAGES=$tmp/images CHECK_REF=$tmp/ref/predictions.csv CHECK_TMP=$tmp
	scripts/check-cuda-front.sh as-is
	stub=/usr/lib/x86_64-linux-gnu/stubs/libcuda.so
	[ -f "${CUDA_HOME:-/nonexistent}/lib64/stubs/libcuda.so" ] && stub=$CUDA_HOME/lib64/stubs/libcuda.so
	if [ -f "$stub" ]; then
		mkdir -p "$tmp/stub" && cp "$stub" "$tmp/stub/libcuda.so.1"
		LD_LIBRARY_PATH="$tmp/stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" scripts/check-cuda-front.sh stub
	else
		echo "check-cuda: no CUDA stub libcuda.so here: the stub case is not checked"
	fi
	# libcuda.so.1 hidden: an empty tmpfs over the folder of the file the
	# loader would open, in a mount namespace of this command alone
	real=$( (ldconfig -p | sed -n 's/^[[:space:]]*libcuda\.so\.1 (.*) => //p' | head -1 | xargs -r readlink -f) || true)
	if [ -z "$real" ]; then
		echo "check-cuda: this machine has no libcuda.so.1: the as-is case above was the absent case"
	elif ! unshare -m --propagation private true 2>/dev/null; then
		echo "check-cuda: SKIP the hidden-libcuda case: unshare -m needs root (CI runs it as root)"
	else
		dir=$(dirname "$real")
		if ls "$dir" | grep -vqE '^lib(cuda|nvidia)'; then
			echo "check-cuda: $dir holds more than the NVIDIA driver's libraries; hiding it would hide others" >&2
			exit 1
		fi
		unshare -m --propagation private bash -c "mount -t tmpfs canopy-no-libcuda '$dir' && exec scripts/check-cuda-front.sh hidden"
	fi
	# A GPU as the front sees it (a fake libcuda.so.1 whose cuInit succeeds
	# with one device): it execs the engine, in the same process, with its
	# arguments and environment; an engine that cannot start leaves --help,
	# version, doctor and --device cpu working, and --device auto/cuda exit 5.
	mkdir -p "$tmp/fakegpu"
	cat >"$tmp/fakegpu/fake.c" <<'C'
int cuInit(unsigned int f) { (void)f; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDriverGetVersion(int *v) { *v = 12020; return 0; }
C
	${CC:-cc} -shared -fPIC -o "$tmp/fakegpu/libcuda.so.1" "$tmp/fakegpu/fake.c"
	printf '#!/bin/sh\necho "engine pid $$ args $* env $CANOPY_CHECK_MARK"\n' >"$tmp/fakegpu/engine"
	chmod +x "$tmp/fakegpu/engine"
	fake() { LD_LIBRARY_PATH="$tmp/fakegpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CANOPY_CUDA_ENGINE="$1" "${@:2}"; }
	got=$(fake "$tmp/fakegpu/engine" env CANOPY_CHECK_MARK=m1 bash -c 'echo "shell pid $$"; exec bin/canopy-cuda predict --device cuda x y')
	pid=$(sed -n 's/^shell pid //p' <<<"$got")
	grep -qx "engine pid $pid args predict --device cuda x y env m1" <<<"$got" ||
		{ echo "check-cuda: with a GPU the front did not exec the engine in its own process with its arguments: $got" >&2; exit 1; }
	fake "$tmp/none" bin/canopy-cuda version | grep -q 'engine .*/none cannot start' ||
		{ echo "check-cuda: version does not say the engine cannot start" >&2; exit 1; }
	set +e
	msg=$(fake "$tmp/none" bin/canopy-cuda predict --model testdata/models/canopy-demo-r18 --images "$CHECK_IMAGES" --out "$tmp/p-noengine" --device auto 2>&1)
	rc=$?
	set -e
	if [ $rc -ne 5 ] || ! grep -q '1 GPU(s) but the cuda build.s engine .* cannot start' <<<"$msg"; then
		echo "check-cuda: a GPU node without the engine: --device auto exited $rc (want 5): $msg" >&2
		exit 1
	fi
	fake "$tmp/none" bin/canopy-cuda predict --model testdata/models/canopy-demo-r18 --images "$CHECK_IMAGES" --out "$tmp/p-noengine-cpu" --device cpu >/dev/null 2>&1
	cmp "$CHECK_REF" "$tmp/p-noengine-cpu/predictions.csv"
	echo "check-cuda (fake GPU): the front execs the engine in its own process (pid $pid); without the engine, --device auto exits 5 and --device cpu runs"
fi
$GO test -tags cuda,nompi,noblas -c -o bin/retinanet-cuda.test ./infer/retinanet
$GO test -tags cuda,nompi,noblas -c -o bin/crop-cuda.test ./infer/crop
$GO test -tags cuda,nompi,noblas -c -o bin/treeformer-cuda.test ./infer/treeformer
echo "check-cuda: ok (fatbin up to date: compute_80 PTX + sm_90; -tags cuda and cudafront vet and build; without a GPU the engine stops with exit 5 and the front serves --help, version, doctor, --device cpu/auto with the default build's bytes, --device cuda exit 5, with libcuda.so.1 as it is, the stub and hidden)"
