#!/usr/bin/env bash
# scripts/install-cuda.sh: Debian's CUDA 11.8 headers, link stubs and nvcc, for
# building and vetting `-tags cuda` (make build-cuda, make check-cuda).
#   - Enables the contrib and non-free components in a sources file of its
#     own (/etc/apt/sources.list.d/canopy-cuda.*), derived from the machine's
#     existing Debian sources, so no mirror is named here.
#   - Installs nvidia-cuda-dev (1.5 GB download) and nvidia-cuda-toolkit (nvcc).
# Skips everything when cuda.h and nvcc are already there. Set
# CANOPY_NO_INSTALL=1 to only check. Uses sudo when not root.
set -euo pipefail

have() { [ -f /usr/include/cuda.h ] && command -v nvcc >/dev/null 2>&1; }
if have; then exit 0; fi
if [ "${CANOPY_NO_INSTALL:-0}" = 1 ]; then
	echo "install-cuda: missing: CUDA headers (cuda.h) and/or nvcc" >&2
	exit 1
fi
sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo)

d=/etc/apt/sources.list.d
if [ -f $d/debian.sources ] && [ ! -f $d/canopy-cuda.sources ]; then
	# deb822 format: same URIs and suites, other components.
	sed 's/^Components:.*/Components: contrib non-free/' $d/debian.sources |
		"${sudo[@]}" tee $d/canopy-cuda.sources >/dev/null
elif [ -f /etc/apt/sources.list ] && [ ! -f $d/canopy-cuda.list ]; then
	# one-line format: each "deb URI suite main" line again with contrib non-free.
	grep -E '^deb .* main' /etc/apt/sources.list |
		sed -E 's/ main.*$/ contrib non-free/' |
		"${sudo[@]}" tee $d/canopy-cuda.list >/dev/null
fi
echo "install-cuda: installing nvidia-cuda-dev nvidia-cuda-toolkit (about 1.9 GB)" >&2
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends nvidia-cuda-dev
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends nvidia-cuda-toolkit
have
