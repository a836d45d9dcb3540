#!/usr/bin/env bash
# scripts/install-deps.sh: install what canopy needs to build and test on a
# fresh Debian/Ubuntu machine, skipping what is already there.
#   - Open MPI (openmpi-bin, libopenmpi-dev) and pkg-config: the cgo MPI binding
#     and mpirun. On a cluster with a module-loaded MPI nothing is installed:
#     the binding finds MPI through pkg-config (PKG_CONFIG_PATH).
#   - GDAL (libgdal-dev, gdal-bin): predict --tile's raster reads.
#   - GEOS (libgeos-dev): polygon intersection and union areas (eval on polygons).
#   - Go >= 1.26 must already be on PATH (it is not installed here).
# Uses sudo when not root. Set CANOPY_NO_INSTALL=1 to only check.
set -euo pipefail

need=()
extra_ok() { dpkg -s "$1" >/dev/null 2>&1; }
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
# MPI's headers and library: its pkg-config module, or an MPI compiler
# wrapper (the Makefile then builds with -tags mpicc).
pkg-config --exists "${CANOPY_MPI_PKG:-mpi}" 2>/dev/null || command -v "${MPICC:-mpicc}" >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
# OpenBLAS: the SGEMM under the CPU RetinaNet (infer/gemm; -tags noblas does without).
pkg-config --exists openblas 2>/dev/null || need+=(libopenblas-dev)
# GDAL: windowed raster reads of predict --tile (infer/gdal; -tags nogdal does
# without); gdal_translate writes infer/gdal's test rasters.
pkg-config --exists gdal 2>/dev/null || need+=(libgdal-dev)
command -v gdal_translate >/dev/null 2>&1 || need+=(gdal-bin)
# GEOS: the polygon areas of eval on polygons (internal/geos; -tags nogeos
# or nogdal does without). Debian 12 has 3.11.1.
pkg-config --exists geos 2>/dev/null || need+=(libgeos-dev)
for p in "$@"; do extra_ok "$p" || need+=("$p"); done

if ! command -v go >/dev/null 2>&1; then
	echo "install-deps: Go 1.26 or newer is required on PATH" >&2
	exit 1
fi

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "${CANOPY_NO_INSTALL:-0}" = 1 ]; then
	echo "install-deps: missing: ${need[*]}" >&2
	exit 1
fi
sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo)
echo "install-deps: installing ${need[*]}" >&2
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${need[@]}"
