#!/usr/bin/env bash
# scripts/check-cuda.sh (make check-cuda, part of make test): the cuda build
# on a machine without a GPU, as CI is.
#   1. Debian's CUDA 11.8 headers and nvcc (scripts/install-cuda.sh);
#   2. kernels.fatbin is what kernels.cu compiles to (go generate, byte for
#      byte) and holds compute_80 PTX and sm_90 code (cuobjdump);
#   3. go vet and go build with -tags cuda, and cuda,nompi,noblas,nogdal:
#      the latter needs only libc and the driver's libcuda.so.1 (no
#      libcudart, no cuBLAS, no MPI, no OpenBLAS, no GDAL): it is what the
#      GPU check carries;
#   4. without a GPU, the cuda binary stops before gorgonia.org/cu's init
#      with exit 5 and says why;
#   5. the retinanet tests compile with -tags cuda (they run on a GPU:
#      tools/gpu/check.sh).
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
$GO vet -tags cuda,nompi,noblas,nogdal ./...
mkdir -p bin
$GO build -tags cuda -o bin/canopy-cuda .
$GO build -tags cuda,nompi,noblas,nogdal -o bin/canopy-cuda-nompi .
libs=$(ldd bin/canopy-cuda-nompi)
if grep -E 'libmpi|openblas|libcudart|libcublas|libgdal' <<<"$libs"; then
	echo "check-cuda: the cuda,nompi,noblas,nogdal binary links more than libc and libcuda.so.1" >&2
	exit 1
fi
grep -q 'libcuda.so.1' <<<"$libs" || { echo "check-cuda: the cuda binary does not link libcuda.so.1" >&2; exit 1; }

if nvidia-smi -L >/dev/null 2>&1; then
	echo "check-cuda: this machine has a GPU: run tools/gpu/check.sh for the GPU checks"
else
	set +e
	msg=$(bin/canopy-cuda-nompi --help 2>&1 >/dev/null)
	rc=$?
	set -e
	if [ $rc -ne 5 ] || ! grep -q 'finds no usable GPU' <<<"$msg"; then
		echo "check-cuda: without a GPU the cuda build exited $rc (want 5), saying: $msg" >&2
		exit 1
	fi
fi
$GO test -tags cuda,nompi,noblas -c -o bin/retinanet-cuda.test ./infer/retinanet
echo "check-cuda: ok (fatbin up to date: compute_80 PTX + sm_90; -tags cuda vets, builds, and stops with exit 5 without a GPU)"
