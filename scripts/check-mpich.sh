#!/usr/bin/env bash
# scripts/check-mpich.sh: build canopy's MPI binding and binary against MPICH 4
# (Debian libmpich-dev, pkg-config "mpich", build tag "mpich") and run the
# conformance suite on 2 ranks with MPICH's launcher. Open MPI stays the
# default: Debian's alternatives rank it above MPICH, which this checks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh libmpich-dev mpich
go vet -tags mpich ./...
go build -tags mpich -o bin/canopy-mpich .
go test -tags mpich -c -o bin/cmpi-mpich.test ./mpi/cmpi
for n in 1 2; do
	MPIRUN=mpirun.mpich scripts/mpirun.sh -np $n bin/cmpi-mpich.test -test.count=1
done
MPIRUN=mpirun.mpich scripts/mpirun.sh -np 2 bin/canopy-mpich eval --csv testdata/sets/three/truth.csv \
	--predictions testdata/sets/three/predictions.csv --out bin/mpich-out --force >/dev/null
grep -q '"mpi": "MPICH' bin/mpich-out/report.json || { echo "check-mpich: report does not name MPICH" >&2; exit 1; }
case "$(pkg-config --modversion mpi)" in
4.1.*) ;;
*) echo "check-mpich: the default MPI is no longer Open MPI: $(pkg-config --modversion mpi)" >&2; exit 1 ;;
esac
echo "check-mpich: ok ($(grep -o '"mpi": "[^"]*"' bin/mpich-out/report.json))"
