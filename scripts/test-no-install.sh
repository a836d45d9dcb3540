#!/usr/bin/env bash
# scripts/test-no-install.sh (make test-no-install): `make build` with
# CANOPY_NO_INSTALL=1 against libraries the default search does not find,
# as on a cluster where MPI, OpenBLAS, GDAL and GEOS come from modules, with no
# apt. The system's libraries are put in a prefix of their own (links to
# their headers and shared objects, .pc files naming the prefix), the
# default pkg-config path is switched off (PKG_CONFIG_LIBDIR, an empty
# folder), and apt-get and sudo on PATH fail and leave a mark. Then:
#   1. without PKG_CONFIG_PATH the build stops (install-deps says what is
#      missing) and apt is not called; go build itself, run past
#      install-deps, finds no module either (every cgo package compiled
#      afresh, not taken from go's cache: see "fresh" below);
#   2. PKG_CONFIG_PATH=prefix/lib/pkgconfig: make build succeeds, and the
#      binary loads libmpi, libopenblas and libgdal from the prefix (the
#      LD_LIBRARY_PATH a module sets) and runs doctor under mpirun -np 2;
#   3. MPI without a .pc file: mpicc on PATH (a wrapper answering for the
#      prefix) gives the flags (-tags mpicc), the same checks;
#   4. the two builds' predict gives the default build's predictions.csv
#      bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
mkdir -p "$prefix/include" "$prefix/lib/pkgconfig" "$tmp/empty" "$tmp/bin" "$tmp/pc-nompi"
fail() { echo "test-no-install: $*" >&2; exit 1; }

# The system's modules, re-homed: each -I folder becomes a link under
# prefix/include, each library a link in prefix/lib.
libdirs=$(gcc -print-search-dirs | sed -n 's/^libraries: =//p' | tr ':' ' ')
rehome() { # rehome MODULE: write prefix/lib/pkgconfig/MODULE.pc
	local m=$1 cflags=() libs=() i=0 d l name dirs f
	for d in $(pkg-config --cflags-only-I "$m" | sed 's/-I//g'); do
		ln -s "$d" "$prefix/include/$m$i"
		cflags+=("-I\${includedir}/$m$i")
		i=$((i + 1))
	done
	dirs=$(pkg-config --libs-only-L "$m" | sed 's/-L//g')
	for l in $(pkg-config --libs-only-l "$m" | sed 's/-l//g'); do
		name=lib$l.so
		for d in $dirs $libdirs; do
			if [ -e "$d/$name" ]; then
				f=$(readlink -f "$d/$name")
				ln -sf "$f" "$prefix/lib/$name"
				# and its soname, which the loader looks for at run time
				so=$(objdump -p "$f" | sed -n 's/^ *SONAME *//p')
				[ -z "$so" ] || ln -sf "$f" "$prefix/lib/$so"
				break
			fi
		done
		[ -e "$prefix/lib/$name" ] || fail "lib$l.so of $m not found"
		libs+=("-l$l")
	done
	cat >"$prefix/lib/pkgconfig/$m.pc" <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib
Name: $m
Description: the system's $m, re-homed for canopy's test-no-install
Version: $(pkg-config --modversion "$m")
Cflags: ${cflags[*]}
Libs: -L\${libdir} ${libs[*]}
PC
}
for m in mpi openblas gdal geos; do rehome $m; done
cp "$prefix/lib/pkgconfig/openblas.pc" "$prefix/lib/pkgconfig/gdal.pc" "$prefix/lib/pkgconfig/geos.pc" "$tmp/pc-nompi/"
# A site's mpicc for the prefix's MPI: Open MPI's answers, the prefix's paths.
cat >"$tmp/bin/mpicc" <<SH
#!/bin/sh
case "\$1" in
--showme:compile) echo "$(pkg-config --cflags-only-I mpi | sed 's/-I//g' | awk -v p="$prefix" '{for (i=1; i<=NF; i++) printf "-I%s/include/mpi%d ", p, i-1}')" ;;
--showme:link) echo "-L$prefix/lib -lmpi" ;;
*) echo "mpicc wrapper for canopy's test-no-install" >&2; exit 2 ;;
esac
SH
for c in apt-get apt sudo; do
	printf '#!/bin/sh\necho "%s $*" >>%s/apt-called\nexit 99\n' "$c" "$tmp" >"$tmp/bin/$c"
done
chmod +x "$tmp/bin/"*
# the mpicc wrapper is only on PATH in case 3
mkdir -p "$tmp/bin-mpicc" && mv "$tmp/bin/mpicc" "$tmp/bin-mpicc/"

# The system's own mpicc stays on PATH (Debian's is Open MPI's): hide it in
# cases 1 and 2 so that MPI can only come from the .pc file.
nompicc=$tmp/path-nompicc
mkdir -p "$nompicc"
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
	[ -d "$d" ] || continue
	for f in "$d"/*; do
		b=$(basename "$f")
		case $b in mpicc | mpicc.* | mpicxx | mpiCC) continue ;; esac
		[ -e "$nompicc/$b" ] || ln -s "$f" "$nompicc/$b" 2>/dev/null || true
	done
done

# go's build cache keys a cgo package by CGO_CFLAGS and the like, not by
# what pkg-config answers: a package built earlier against the system's .pc
# files would be taken from the cache whatever PKG_CONFIG_PATH says. A
# define of this run's own in CGO_CFLAGS makes every cgo package compile
# afresh here, so pkg-config is asked (and the rest comes from the cache).
fresh="-O2 -g -DCANOPY_TEST_NO_INSTALL_${tmp##*.}"
build() { # build NAME PATHDIRS PKG_CONFIG_PATH: make build into $tmp/NAME
	env -u CGO_LDFLAGS CGO_CFLAGS="$fresh" PATH="$2" CANOPY_NO_INSTALL=1 PKG_CONFIG_LIBDIR="$tmp/empty" PKG_CONFIG_PATH="$3" \
		make --no-print-directory build BIN="$tmp/$1" GO="$(command -v "$GO")"
}

# 1. Nothing found: the build stops, apt is not called.
set +e
out=$(build none "$tmp/bin:$nompicc" "" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q 'install-deps: missing: .*libopenmpi-dev' <<<"$out" || fail "without PKG_CONFIG_PATH: exit $rc: $out"
[ ! -e "$tmp/apt-called" ] || fail "apt was called: $(cat "$tmp/apt-called")"
echo "test-no-install: without PKG_CONFIG_PATH the build stops: $(grep 'install-deps' <<<"$out")"
# and go build itself, past install-deps, finds nothing: what the builds
# below find can only come from the prefix
set +e
out=$(env -u CGO_LDFLAGS CGO_CFLAGS="$fresh" PKG_CONFIG_LIBDIR="$tmp/empty" PKG_CONFIG_PATH= PATH="$tmp/bin:$nompicc" "$GO" build -o "$tmp/none" . 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q 'was not found in the pkg-config search path' <<<"$out" || fail "go build without PKG_CONFIG_PATH: exit $rc: $out"
echo "test-no-install: go build without PKG_CONFIG_PATH: $(grep -m1 'was not found' <<<"$out")"

check() { # check NAME: the binary links the prefix's libraries and runs
	local b=$tmp/$1 libs
	libs=$(LD_LIBRARY_PATH="$prefix/lib" ldd "$b")
	for l in libmpi.so libopenblas.so libgdal.so; do
		grep -q "$l[^ ]* => $prefix/lib/" <<<"$libs" || fail "$1: $l is not the prefix's: $(grep "$l" <<<"$libs")"
	done
	LD_LIBRARY_PATH="$prefix/lib" scripts/mpirun.sh -np 2 -x LD_LIBRARY_PATH "$b" doctor | grep -q '2 rank(s)' || fail "$1: doctor under mpirun -np 2"
	LD_LIBRARY_PATH="$prefix/lib" "$b" predict --model testdata/models/canopy-demo-r18 --images "$tmp/images" --out "$tmp/p-$1" >/dev/null 2>&1
	cmp "$tmp/ref/predictions.csv" "$tmp/p-$1/predictions.csv" || fail "$1: predictions.csv differs from the default build's"
}
$GO run ./cmd/forestgen -out "$tmp/images" -n 2 -seed 4 -prefix new_ >/dev/null
rm -f "$tmp/images/annotations.csv"
$GO build -o "$tmp/canopy-ref" .
"$tmp/canopy-ref" predict --model testdata/models/canopy-demo-r18 --images "$tmp/images" --out "$tmp/ref" >/dev/null 2>&1

# 2. Through PKG_CONFIG_PATH.
build canopy-pc "$tmp/bin:$nompicc" "$prefix/lib/pkgconfig" >"$tmp/pc.log" 2>&1 || { cat "$tmp/pc.log"; fail "make build with PKG_CONFIG_PATH failed"; }
check canopy-pc
echo "test-no-install: PKG_CONFIG_PATH=prefix/lib/pkgconfig: built, links the prefix's libmpi, libopenblas, libgdal, runs under mpirun"

# 3. MPI through mpicc (no mpi.pc), OpenBLAS and GDAL through PKG_CONFIG_PATH.
build canopy-mpicc "$tmp/bin:$tmp/bin-mpicc:$nompicc" "$tmp/pc-nompi" >"$tmp/mpicc.log" 2>&1 || { cat "$tmp/mpicc.log"; fail "make build with mpicc failed"; }
grep -q "tags 'mpicc'" "$tmp/mpicc.log" || fail "the mpicc build did not use -tags mpicc: $(cat "$tmp/mpicc.log")"
check canopy-mpicc
[ ! -e "$tmp/apt-called" ] || fail "apt was called: $(cat "$tmp/apt-called")"
echo "test-no-install: mpicc (no mpi.pc): built with -tags mpicc, the same checks; apt never called"
