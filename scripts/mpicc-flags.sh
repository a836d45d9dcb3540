#!/usr/bin/env bash
# scripts/mpicc-flags.sh cflags|libs: the compile or link flags of the MPI
# compiler wrapper on PATH (${MPICC:-mpicc}), for building the MPI binding
# with -tags mpicc where MPI has no pkg-config module: Open MPI answers
# --showme:compile / --showme:link; MPICH, Intel MPI and MVAPICH answer
# -show with the whole command line, of which the -I/-D (cflags) or
# -L/-l/-Wl (libs) words are kept.
set -euo pipefail
mpicc=${MPICC:-mpicc}
what=${1:?usage: mpicc-flags.sh cflags|libs}
if out=$("$mpicc" --showme:compile 2>/dev/null) && [ "$what" = cflags ]; then
	echo "$out"
	exit 0
fi
if "$mpicc" --showme:link >/dev/null 2>&1 && [ "$what" = libs ]; then
	"$mpicc" --showme:link
	exit 0
fi
line=$("$mpicc" -show)
keep=()
for w in $line; do
	case "$what:$w" in
	cflags:-I* | cflags:-D*) keep+=("$w") ;;
	libs:-L* | libs:-l* | libs:-Wl,*) keep+=("$w") ;;
	esac
done
echo "${keep[*]}"
