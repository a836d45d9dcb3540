#!/usr/bin/env bash
# scripts/netns-cluster.sh -- a cluster of N "hosts" on this machine: each host
# is a network namespace with its own address, hostname and /etc/hosts, joined
# by a bridge that lives in a namespace of its own; real TCP between them.
# For canopy's multi-node tests (scripts/test-multinode.sh, make
# test-multinode); see docs/benchmarks.md "Several nodes".
#
#   scripts/netns-cluster.sh up N [--slurm]   # hosts h1..hN (N 1..50); --slurm:
#                                             # slurmctld in h1, slurmd nI in hI
#   scripts/netns-cluster.sh run HOST CMD...  # run CMD inside HOST (nsrun)
#   scripts/netns-cluster.sh mpirun ARGS...   # mpirun from h1 over the hosts
#   scripts/netns-cluster.sh srun ARGS...     # srun from h1 (needs --slurm)
#   scripts/netns-cluster.sh bytes            # "HOST RX TX" of each host's eth0
#   scripts/netns-cluster.sh link HOST up|down
#   scripts/netns-cluster.sh pids [HOST]      # processes inside the namespaces
#   scripts/netns-cluster.sh down             # kill by PID, remove namespaces
#
# Network: namespace ${P}br holds bridge br0; host hI is namespace ${P}hI with
# eth0 = ${NET}.I/24 (a veth whose peer vbI is a bridge port in ${P}br) and lo.
# Both veth ends live in namespaces: the machine's own namespace, links and
# routes are never touched, and the only route in a host is the /24, so no
# traffic leaves the cluster. P=${CANOPY_NETNS_PREFIX:-canopy-},
# NET=${CANOPY_NETNS_NET:-10.77.0}.
#
# run HOST: `ip netns exec ${P}HOST unshare --uts`, then hostname HOST and
# bind mounts of the cluster's hosts file over /etc/hosts and a resolv.conf
# naming 127.0.0.1 over /etc/resolv.conf (both only in that process's mount
# namespace), then exec CMD with the caller's environment (plus SLURM_CONF
# when the cluster has Slurm).
#
# mpirun: Open MPI 4.1 from h1 (the daemons must be able to reach mpirun),
# through scripts/mpirun.sh (root flags, --oversubscribe, --bind-to none,
# timeout -k ${CANOPY_MPIRUN_KILL_AFTER:-10} ${CANOPY_MPIRUN_TIMEOUT:-120},
# oob keepalive 5/2/3), adding, unless the caller gives the same MCA name:
#   --mca plm_rsh_agent DIR/bin/rsh-agent   (this script's `run`, in place of ssh)
#   --mca plm_rsh_no_tree_spawn 1           (mpirun starts every daemon itself)
#   --mca btl tcp,vader,self                (TCP between hosts, shared memory within)
#   --mca btl_tcp_if_include NET.0/24 --mca oob_tcp_if_include NET.0/24
#   --mca orte_tmpdir_base DIR/ompi
# Example: scripts/netns-cluster.sh mpirun --host h1:2,h2:2,h3:2 -np 6 bin/canopy eval ...
#
# --slurm: Slurm 22.05 with munge and PMIx (install: scripts/install-deps.sh
# slurm-wlm munge): munged in the machine's namespace (a Unix socket under
# DIR, nothing else), slurmctld in h1 (SlurmctldHost=h1(NET.1)), slurmd -N hI
# in hI (the Slurm node is named as its host, so srun's messages name hosts) (entered with nsenter --net + unshare --mount --uts: `ip netns exec`
# remounts /sys and hides the cgroup mounts slurmd needs). slurm.conf as in
# scripts/slurm-local.sh but MpiDefault=pmix, per-node SlurmdSpoolDir,
# SlurmdPidFile, SlurmdLogFile and TmpFS (PMIx's per-step folders; a shared
# one collides), SlurmdTimeout=20, nodes h[1-N] with
# NodeAddr=NET.I, partition debug. Clients run inside a host: `run h1 sinfo`.
#
# down: SIGTERM, SIGCONT, then after 3 s SIGKILL to every PID `ip netns pids`
# lists for the cluster's namespaces (nothing outside them), munged by its PID
# file, then `ip netns del` of every namespace, the shared-memory segments of
# Open MPI ranks killed on the hosts (/dev/shm/vader_segment.hI.*: a fresh
# Slurm reuses job ids, hence names) and the state folder. FirstJobId is
# random for the same reason. Safe to
# run twice, and after a failed `up`.
#
# DIR=${CANOPY_NETNS_DIR:-/tmp/canopy-netns} (absolute, no spaces: slurm.conf).
# Exit codes: 0 ok; 1 a step failed (what is printed); 2 usage, not root, a
# program missing, or no cluster up.
set -euo pipefail

P=${CANOPY_NETNS_PREFIX:-canopy-}
NET=${CANOPY_NETNS_NET:-10.77.0}
D=${CANOPY_NETNS_DIR:-/tmp/canopy-netns}
D=${D%/}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/$(basename "${BASH_SOURCE[0]}")

log() { echo "netns-cluster: $*" >&2; }
die() { log "$*"; exit 2; }
usage() {
	sed -n '2,16p' "$self" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

case $D in
/*) ;;
*) die "CANOPY_NETNS_DIR must be an absolute path: $D" ;;
esac
case $D in
*[[:space:],#=]*) die "CANOPY_NETNS_DIR must not hold spaces, commas, '#' or '=': $D" ;;
esac

nhosts() { [ -s "$D/n" ] && cat "$D/n" || echo 0; }

# ns_of HOST: the namespace of host hI (an exit 2 for an unknown host).
ns_of() {
	local h=$1 n
	n=$(nhosts)
	case $h in
	h[0-9] | h[0-9][0-9]) ;;
	*) die "unknown host '$h' (hosts are h1..h$n)" ;;
	esac
	[ "${h#h}" -ge 1 ] && [ "${h#h}" -le "$n" ] || die "unknown host '$h' (hosts are h1..h$n)"
	echo "${P}$h"
}

# The cluster's namespaces: the bridge's and every host's that exists.
all_ns() {
	local i n
	n=$(nhosts)
	for ((i = 1; i <= n; i++)); do echo "${P}h$i"; done
	echo "${P}br"
}

ns_exists() { [ -e "/run/netns/$1" ]; }

do_run() {
	[ $# -ge 2 ] || usage
	local h=$1 ns
	shift
	ns=$(ns_of "$h")
	ns_exists "$ns" || die "no namespace $ns: run 'up' first"
	[ -f "$D/slurm/slurm.conf" ] && export SLURM_CONF=$D/slurm/slurm.conf
	exec ip netns exec "$ns" unshare --uts -- sh -c \
		'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /etc/resolv.conf || exit 2; shift 3; exec "$@"' \
		sh "$h" "$D/hosts" "$D/resolv.conf" "$@"
}

# has_mca NAME ARGS...: whether ARGS give MCA parameter NAME.
has_mca() {
	local name=$1 prev=
	shift
	for a in "$@"; do
		case $prev in --mca | -mca | --gmca | -gmca) [ "$a" = "$name" ] && return 0 ;; esac
		prev=$a
	done
	return 1
}

do_mpirun() {
	[ "$(nhosts)" -ge 1 ] || die "no cluster up in $D"
	local extra=() kv
	for kv in "plm_rsh_agent $D/bin/rsh-agent" "plm_rsh_no_tree_spawn 1" "btl tcp,vader,self" \
		"btl_tcp_if_include $NET.0/24" "oob_tcp_if_include $NET.0/24" "orte_tmpdir_base $D/ompi"; do
		has_mca "${kv%% *}" "$@" || extra+=(--mca "${kv%% *}" "${kv#* }")
	done
	do_run h1 "$here/mpirun.sh" "${extra[@]}" "$@"
}

do_bytes() {
	local i n rx tx
	n=$(nhosts)
	for ((i = 1; i <= n; i++)); do
		rx=$(ip netns exec "${P}h$i" cat /sys/class/net/eth0/statistics/rx_bytes)
		tx=$(ip netns exec "${P}h$i" cat /sys/class/net/eth0/statistics/tx_bytes)
		echo "h$i $rx $tx"
	done
}

do_link() {
	[ $# = 2 ] || usage
	local ns
	ns=$(ns_of "$1")
	case $2 in
	up | down) ip -n "$ns" link set eth0 "$2" ;;
	*) usage ;;
	esac
}

do_pids() {
	local ns
	if [ $# -ge 1 ]; then
		ns=$(ns_of "$1")
		ip netns pids "$ns" 2>/dev/null || true
		return 0
	fi
	for ns in $(all_ns); do
		ns_exists "$ns" && ip netns pids "$ns" 2>/dev/null || true
	done
}

munged_pid() {
	local f=$D/slurm/munge/munged.pid p
	[ -s "$f" ] || return 0
	p=$(tr -dc 0-9 <"$f")
	[ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = munged ] && echo "$p"
	return 0
}

do_down() {
	local ns pids p i left
	# Every process in the cluster's namespaces, by PID: SIGTERM, SIGCONT
	# (a stopped process acts on SIGTERM only once continued), SIGKILL.
	for i in 1 2; do
		pids=$(do_pids | sort -u)
		[ -n "$pids" ] || break
		for p in $pids; do
			if [ "$i" = 1 ]; then kill -TERM "$p" 2>/dev/null || true; fi
			kill -CONT "$p" 2>/dev/null || true
		done
		for ((left = 0; left < 30; left++)); do
			[ -n "$(do_pids)" ] || break
			sleep 0.1
		done
	done
	pids=$(do_pids | sort -u)
	if [ -n "$pids" ]; then
		log "SIGKILL to what ignored SIGTERM: $(echo $pids)"
		for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
		for ((left = 0; left < 30; left++)); do
			[ -n "$(do_pids)" ] || break
			sleep 0.1
		done
	fi
	p=$(munged_pid)
	if [ -n "$p" ]; then
		kill -TERM "$p" 2>/dev/null || true
		for ((left = 0; left < 30; left++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
	fi
	for ns in $(all_ns); do
		ns_exists "$ns" && ip netns del "$ns" 2>/dev/null || true
	done
	# Hosts a crashed run left beyond the recorded count.
	for ns in /run/netns/"${P}"h*; do
		[ -e "$ns" ] || continue
		pids=$(ip netns pids "${ns##*/}" 2>/dev/null || true)
		for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
		ip netns del "${ns##*/}" 2>/dev/null || true
	done
	# The empty /run/netns mount `ip netns add` leaves, when no other
	# namespace is in it.
	if [ -d /run/netns ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
		umount /run/netns 2>/dev/null || true
		rmdir /run/netns 2>/dev/null || true
	fi
	# Shared-memory segments of ranks killed on the hosts: Open MPI names
	# them vader_segment.HOST.UID.JOBID.LOCALRANK, and a fresh Slurm starts
	# at the same job ids, so a stale one would collide with a new job's.
	rm -f /dev/shm/vader_segment.h[0-9].* /dev/shm/vader_segment.h[0-9][0-9].*
	rm -rf -- "$D"
}

fail_up() {
	log "$*"
	local f
	for f in "$D"/slurm/log/*.log; do
		[ -f "$f" ] || continue
		echo "----- tail $f" >&2
		tail -n 20 "$f" >&2 || true
	done
	do_down || true
	exit 1
}

write_slurm_conf() {
	local n=$1 S=$D/slurm i
	mkdir -p "$S"/{run,log,state,spool,tmp,munge}
	for ((i = 1; i <= n; i++)); do mkdir -p "$S/tmp/h$i" "$S/spool/h$i"; done
	{
		cat <<EOF
# Written by scripts/netns-cluster.sh: $n nodes in network namespaces, under $S.
ClusterName=canopy-netns
SlurmctldHost=h1($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.socket.2
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.%n.log
TmpFS=$S/tmp/%n
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=20
InactiveLimit=0
KillWait=5
MinJobAge=300
FirstJobId=$((RANDOM * 100 + 1000))
EOF
		for ((i = 1; i <= n; i++)); do
			echo "NodeName=h$i NodeAddr=$NET.$i CPUs=$(nproc) Sockets=1 CoresPerSocket=$(nproc) ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN"
		done
		echo "PartitionName=debug Nodes=h[1-$n] Default=YES MaxTime=INFINITE State=UP"
	} >"$S/slurm.conf"
}

# in_ns_daemon HOST CMD...: start a daemon in HOST's network namespace with
# its own mount and UTS namespaces (hostname HOST, the cluster's hosts file),
# keeping the machine's /sys and cgroup mounts.
in_ns_daemon() {
	local h=$1
	shift
	nsenter --net="/run/netns/${P}$h" unshare --mount --uts -- sh -c \
		'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /etc/resolv.conf || exit 2; shift 3; exec "$@"' \
		sh "$h" "$D/hosts" "$D/resolv.conf" "$@"
}

up_slurm() {
	local n=$1 S=$D/slurm p i s t0
	for p in munged mungekey slurmctld slurmd sinfo srun runuser; do
		command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] ||
			fail_up "$p not found: install with scripts/install-deps.sh slurm-wlm munge"
	done
	write_slurm_conf "$n"
	chmod 755 "$S" "$S/run" "$S/log"
	"$here/munge-start.sh" "$S/munge" "$S/log/munged.log" || fail_up "munged failed to start"
	in_ns_daemon h1 slurmctld -f "$S/slurm.conf" || fail_up "slurmctld failed to start"
	for ((i = 1; i <= n; i++)); do
		in_ns_daemon "h$i" slurmd -f "$S/slurm.conf" -N "h$i" || fail_up "slurmd h$i failed to start"
	done
	t0=$SECONDS
	while ((SECONDS - t0 < ${CANOPY_SLURM_WAIT:-30})); do
		s=$(SLURM_CONF=$S/slurm.conf ip netns exec "${P}h1" sinfo -h -o '%D %T' 2>/dev/null | tr '\n' ' ' || true)
		[ "$s" = "$n idle " ] && break
		sleep 0.3
	done
	[ "$s" = "$n idle " ] || fail_up "the $n nodes are not idle after ${CANOPY_SLURM_WAIT:-30} s (sinfo: '$s')"
	log "slurm: nodes h1..h$n idle after $((SECONDS - t0)) s; clients: $self run h1 sinfo"
}

do_up() {
	[ $# -ge 1 ] || usage
	local n=$1 slurm=no i
	shift
	case $n in '' | *[!0-9]*) usage ;; esac
	[ "$n" -ge 1 ] && [ "$n" -le 50 ] || usage
	for a in "$@"; do
		case $a in
		--slurm) slurm=yes ;;
		*) usage ;;
		esac
	done
	[ "$(id -u)" = 0 ] || die "up needs root (network namespaces)"
	for p in ip unshare nsenter; do command -v "$p" >/dev/null 2>&1 || die "$p not found"; done
	# A fresh cluster: whatever a previous one left goes first.
	if [ -d "$D" ] || ls /run/netns/"${P}"* >/dev/null 2>&1; then
		[ -s "$D/n" ] || { mkdir -p "$D"; ls /run/netns/"${P}"h* 2>/dev/null | wc -l >"$D/n"; }
		do_down
	fi
	mkdir -p "$D/bin" "$D/ompi"
	echo "$n" >"$D/n"
	{
		echo "127.0.0.1 localhost"
		for ((i = 1; i <= n; i++)); do echo "$NET.$i h$i"; done
	} >"$D/hosts"
	echo "nameserver 127.0.0.1" >"$D/resolv.conf"
	cat >"$D/bin/rsh-agent" <<EOF
#!/bin/sh
# Open MPI's rsh agent for the netns cluster: AGENT HOST WORDS... runs the
# words as one shell command (as sshd would) inside HOST.
h=\$1
shift
exec "$self" run "\$h" sh -c "\$*"
EOF
	chmod 755 "$D/bin/rsh-agent"

	ip netns add "${P}br" || fail_up "ip netns add ${P}br failed"
	ip -n "${P}br" link add br0 type bridge || fail_up "bridge"
	ip -n "${P}br" link set br0 up
	ip -n "${P}br" link set lo up
	for ((i = 1; i <= n; i++)); do
		ip netns add "${P}h$i" || fail_up "ip netns add ${P}h$i failed"
		ip link add eth0 netns "${P}h$i" type veth peer name "vb$i" netns "${P}br" || fail_up "veth h$i"
		ip -n "${P}br" link set "vb$i" master br0
		ip -n "${P}br" link set "vb$i" up
		ip -n "${P}h$i" addr add "$NET.$i/24" dev eth0
		ip -n "${P}h$i" link set eth0 up
		ip -n "${P}h$i" link set lo up
	done
	# The links come up asynchronously: wait until every eth0 is up.
	local ok
	for ((i = 1; i <= n; i++)); do
		ok=no
		for _ in $(seq 50); do
			if [ "$(ip netns exec "${P}h$i" cat /sys/class/net/eth0/operstate)" = up ]; then ok=yes; break; fi
			sleep 0.1
		done
		[ $ok = yes ] || fail_up "eth0 of h$i is not up after 5 s"
	done
	[ $slurm = yes ] && up_slurm "$n"
	log "up: h1..h$n ($NET.1-$n) in namespaces ${P}h1..${P}h$n, bridge in ${P}br, state in $D"
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
up) do_up "$@" ;;
down) do_down ;;
run | nsrun) do_run "$@" ;;
mpirun) do_mpirun "$@" ;;
srun)
	[ -f "$D/slurm/slurm.conf" ] || die "no Slurm in this cluster: up N --slurm"
	do_run h1 srun "$@"
	;;
bytes) do_bytes ;;
link) do_link "$@" ;;
pids) do_pids "$@" ;;
*) usage ;;
esac
