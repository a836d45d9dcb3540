#!/usr/bin/env bash
# scripts/mpirun.sh [mpirun args...] -- run an MPI job the way canopy's tests
# and benchmarks expect, on a laptop, a CI container or a cluster node.
#
# It execs "${MPIRUN:-mpirun}" with the caller's arguments, adding:
#   --allow-run-as-root   Open MPI only, and only when running as root (uid 0);
#   --oversubscribe       Open MPI only: more ranks than cores is fine for tests;
#   --bind-to none        unless the caller gave a --bind-to/-bind-to (Open MPI
#                         spells it --bind-to, MPICH's Hydra -bind-to);
#   --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2
#   --mca oob_tcp_keepalive_probes 3
#                         Open MPI only, each unless the caller gave it: a
#                         daemon whose host vanished (link cut, node dead) is
#                         noticed in about 11 s and the job aborts, where the
#                         defaults hang (docs/benchmarks.md, "Several nodes");
# and bounds the whole job with
#   timeout -k ${CANOPY_MPIRUN_KILL_AFTER:-10} ${CANOPY_MPIRUN_TIMEOUT:-120}
# (SIGTERM at the timeout, SIGKILL that many seconds later; exit code 124 on a
# timeout). Any rank exiting non-zero makes mpirun, and so this, exit non-zero.
#
# Example: scripts/mpirun.sh -np 4 /tmp/cmpi.test -test.v
set -euo pipefail

mpirun=${MPIRUN:-mpirun}
version=$("$mpirun" --version 2>&1 || true)

extra=()
bind=yes
mca_given=" "
prev=
for a in "$@"; do
	case $a in
	--bind-to | -bind-to | --bind-to=* | -bind-to=*) bind=no ;;
	esac
	case $prev in --mca | -mca) mca_given+="$a " ;; esac
	prev=$a
done

if grep -q "Open MPI\|OpenRTE" <<<"$version"; then
	if [ "$(id -u)" = 0 ]; then
		extra+=(--allow-run-as-root)
	fi
	extra+=(--oversubscribe)
	[ $bind = yes ] && extra+=(--bind-to none)
	for kv in oob_tcp_keepalive_time=5 oob_tcp_keepalive_intvl=2 oob_tcp_keepalive_probes=3; do
		case $mca_given in *" ${kv%%=*} "*) ;; *) extra+=(--mca "${kv%%=*}" "${kv#*=}") ;; esac
	done
else
	[ $bind = yes ] && extra+=(-bind-to none)
fi

exec timeout -k "${CANOPY_MPIRUN_KILL_AFTER:-10}" "${CANOPY_MPIRUN_TIMEOUT:-120}" \
	"$mpirun" "${extra[@]}" "$@"
