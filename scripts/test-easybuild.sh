#!/usr/bin/env bash
# scripts/test-easybuild.sh (make test-easybuild): canopy installed as an HPC
# site installs it, then run from the loaded module.
#   1. EasyBuild 5.4.1 from PyPI into a venv outside the repository
#      (CANOPY_EB_VENV, default /opt/canopy-eb/venv) and Debian's Lmod;
#   2. the source tarball by `git archive` of this checkout (its uncommitted
#      changes and new files included, as `git add -A` would take them);
#   3. Go as an external module (a modulefile for the Go on PATH and
#      EasyBuild's external-module metadata), Open MPI, OpenBLAS and GDAL
#      from the OS (the easyconfigs' osdependencies);
#   4. `eb` installs easybuild/canopy-VERSION.eb and
#      canopy-VERSION-CUDA-11.8.eb into bin/easybuild (their sanity checks
#      run canopy --help, doctor and a one-rank predict on the demo model);
#   5. `module use` + `module load canopy`, then mpirun -np 2 canopy eval on
#      the demo set (make demo's set and model): the metrics must be the
#      demo's (canopy compare with testdata/golden/demo/report.json, as make
#      demo does); and the module's predict gives the same predictions.csv
#      bytes as `make build`'s binary. Then the same with the cuda module
#      (on a machine without a GPU its canopy runs on the CPU).
# Needs root for apt (Lmod) or Lmod already installed; EasyBuild runs as root
# only with --allow-use-as-root-and-accept-consequences, which is passed
# when uid is 0. CANOPY_EB_ONLY=cpu skips the cuda variant.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
start=$(date +%s)
say() { echo "test-easybuild: $* ($(( $(date +%s) - start )) s)"; }

version=$(sed -n 's/^var Version = "\(.*\)"$/\1/p' internal/output/run.go)
for ec in easybuild/canopy-$version.eb easybuild/canopy-$version-CUDA-11.8.eb; do
	[ -f "$ec" ] || { echo "test-easybuild: $ec missing (output.Version is $version: rename the easyconfigs)" >&2; exit 1; }
	grep -q "^version = '$version'$" "$ec" || { echo "test-easybuild: $ec does not say version = '$version'" >&2; exit 1; }
done

# 1. EasyBuild and Lmod.
venv=${CANOPY_EB_VENV:-/opt/canopy-eb/venv}
# The OS's Python (a Python on PATH may lack modules EasyBuild and pip need).
py=${CANOPY_EB_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
export EB_PYTHON=$venv/bin/python # eb's wrapper would take the first python on PATH
if ! "$venv/bin/eb" --version 2>/dev/null | grep -q 'EasyBuild 5\.4\.1'; then
	say "installing EasyBuild 5.4.1 into $venv"
	"$py" -m venv --clear "$venv"
	"$venv/bin/pip" install -q easybuild-framework==5.4.1 easybuild-easyblocks==5.4.1
fi
if [ ! -f /usr/share/lmod/lmod/init/bash ]; then
	[ "${CANOPY_NO_INSTALL:-0}" = 1 ] && { echo "test-easybuild: Lmod missing" >&2; exit 1; }
	sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo)
	"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends lmod
fi
set +u
# shellcheck disable=SC1091
source /usr/share/lmod/lmod/init/bash
set -u
scripts/install-cuda.sh # the cuda variant's osdependencies (cuda.h, nvcc)

# 2. The source tarball.
eb_root=$root/bin/easybuild
rm -rf "$eb_root/software" "$eb_root/modules" "$eb_root/ebfiles_repo" "$eb_root/sources" "$eb_root/run"
mkdir -p "$eb_root/sources" "$eb_root/site-modules/Go" "$eb_root/run"
# the working tree as git sees it (committed, changed and new files that
# are not ignored), through an index of its own
idx=$(mktemp)
trap 'rm -f "$idx"' EXIT
GIT_INDEX_FILE=$idx git read-tree HEAD
GIT_INDEX_FILE=$idx git add -A
tree=$(GIT_INDEX_FILE=$idx git write-tree)
git archive --prefix="canopy-$version/" -o "$eb_root/sources/canopy-$version.tar.gz" "$tree"
say "source: git archive of the working tree (tree $tree, HEAD $(git rev-parse --short HEAD); $(du -h "$eb_root/sources/canopy-$version.tar.gz" | cut -f1))"

# 3. Go as an external module: the Go on PATH.
goroot=$($GO env GOROOT)
gover=$($GO env GOVERSION)
gover=${gover#go}
cat >"$eb_root/site-modules/Go/$gover.lua" <<LUA
-- The site's Go (external to EasyBuild), as a site would offer it.
whatis("Go $gover")
prepend_path("PATH", "$goroot/bin")
LUA
cat >"$eb_root/external-modules.cfg" <<CFG
[Go]
name = Go
version = $gover
prefix = $goroot
CFG
module use "$eb_root/site-modules"

ebopts=(--prefix="$eb_root" --sourcepath="$eb_root/sources" --buildpath="${TMPDIR:-/tmp}/canopy-eb-build"
	--modules-tool=Lmod --module-syntax=Lua --external-modules-metadata="$eb_root/external-modules.cfg"
	--detect-loaded-modules=ignore)
[ "$(id -u)" = 0 ] && ebopts+=(--allow-use-as-root-and-accept-consequences)
# The module cache of the Go on PATH (what the module proxy filled), so
# that a rerun downloads nothing; GoPackage puts GOPATH in its build folder.
export GOMODCACHE=${CANOPY_EB_GOMODCACHE:-$($GO env GOMODCACHE)}
export GOFLAGS="-modcacherw -buildvcs=false"

# 4. eb.
variants=("canopy-$version.eb")
[ "${CANOPY_EB_ONLY:-}" = cpu ] || variants+=("canopy-$version-CUDA-11.8.eb")
for ec in "${variants[@]}"; do
	say "eb $ec"
	if ! "$venv/bin/eb" "easybuild/$ec" "${ebopts[@]}" >"$eb_root/run/${ec%.eb}.log" 2>&1; then
		tail -40 "$eb_root/run/${ec%.eb}.log"
		for l in $(grep -o '/[^ ]*easybuild-canopy-[^ ]*\.log' "$eb_root/run/${ec%.eb}.log" | sort -u); do
			echo "== $l"; tail -60 "$l"
		done
		echo "test-easybuild: eb $ec failed" >&2
		exit 1
	fi
	grep -E 'sanity check|COMPLETED' "$eb_root/run/${ec%.eb}.log" || true
done

# 5. The loaded module under mpirun: the demo's metrics.
say "generating the demo set (make demo's: 40 images, seed 3)"
$GO run ./cmd/forestgen -out bin/eb-demo -n 40 -seed 3 >/dev/null
$GO run ./cmd/forestgen -out bin/eb-demo-unlabelled -n 4 -seed 4 -prefix new_ >/dev/null
rm -f bin/eb-demo-unlabelled/annotations.csv
$GO build -o bin/canopy-eb-ref . # make build's binary, for the bytes

module use "$eb_root/modules/all"
check_module() { # $1 module to load; $2 the binary it must put first on PATH
	module purge
	module load "$1"
	local bin
	bin=$(command -v canopy)
	case "$bin" in "$eb_root"/software/canopy/*) ;; *)
		echo "test-easybuild: after module load $1, canopy is $bin, not the module's" >&2; exit 1 ;;
	esac
	[ "$(readlink -f "$bin")" = "$(readlink -f "$EBROOTCANOPY/bin/$2")" ] || {
		echo "test-easybuild: module $1's canopy is $(readlink -f "$bin"), want bin/$2" >&2; exit 1; }
	say "module load $1: canopy is $bin; mpirun -np 2 canopy eval on the demo set"
	local out=bin/eb-out-${1//\//_}
	scripts/mpirun.sh -np 2 --bind-to core canopy eval --model testdata/models/canopy-demo-r18 \
		--csv bin/eb-demo/annotations.csv --out "$out" --force
	canopy compare --fail-on worse --tolerance default=0.02 testdata/golden/demo/report.json "$out"
	# the same metrics as the golden report's, each within the tolerance
	# either way (compare --fail-on worse alone passes a better metric)
	canopy compare --fail-on change --tolerance default=0.02 testdata/golden/demo/report.json "$out" >/dev/null
	canopy predict --model testdata/models/canopy-demo-r18 --images bin/eb-demo-unlabelled --out "$out-predict" --force
	bin/canopy-eb-ref predict --model testdata/models/canopy-demo-r18 --images bin/eb-demo-unlabelled --out "$out-predict-ref" --force
	cmp "$out-predict/predictions.csv" "$out-predict-ref/predictions.csv" || {
		echo "test-easybuild: module $1's predictions.csv differs from make build's" >&2; exit 1; }
}
check_module canopy/"$version" canopy
# `module load canopy` (no version) takes the default: the CPU build.
module purge
module load canopy
[ "$(module -t list 2>&1 | grep '^canopy/')" = "canopy/$version" ] || {
	echo "test-easybuild: module load canopy loaded $(module -t list 2>&1 | grep '^canopy/'), want canopy/$version" >&2; exit 1; }
[ "${CANOPY_EB_ONLY:-}" = cpu ] || check_module canopy/"$version"-CUDA-11.8 canopy-cuda
say "ok"
