#!/usr/bin/env bash
# scripts/slurm-local.sh start|stop|status|env [DIR] -- a one-node Slurm 22.05
# cluster on this machine, every file of it under one scratch folder, for
# canopy's Slurm tests (scripts/test-slurm.sh) and for trying scripts/slurm/.
#
#   eval "$(scripts/slurm-local.sh start)"   # start; stdout is: export SLURM_CONF=...
#   sbatch -n 2 scripts/slurm/canopy-1node.sbatch ...
#   scripts/slurm-local.sh stop              # kill by PID file, wait; safe twice
#
# DIR defaults to ${CANOPY_SLURM_DIR:-/tmp/canopy-slurm}. It must be an
# absolute path without spaces, commas or '#' (slurm.conf cannot quote them).
# `start` wipes DIR's state first (a previous instance is stopped by its PID
# files), so every start is a fresh cluster with no jobs.
#
# What runs (no systemd; root is needed: SlurmUser=root, munged as "munge"):
#   munged     as user munge, private socket DIR/munge/munge.socket.2 (dir mode
#              711), its own key DIR/munge/munge.key (made with mungekey);
#   slurmctld  -f DIR/slurm.conf;
#   slurmd     -f DIR/slurm.conf -N localhost (the node is named localhost).
# The node: CPUs=${CANOPY_SLURM_CPUS:-nproc} (1 socket, 1 thread per core),
# RealMemory=20000, Gres=gpu:${CANOPY_SLURM_GPUS:-2} -- fake GPUs: gres.conf has
# AutoDetect=off and "Name=gpu File=DIR/dev/nvidia[0-N]", character devices
# made by mknod as clones of /dev/null (c 1 3), so --gpus-per-task=1 and
# --gres=gpu:N schedule and each task gets its own CUDA_VISIBLE_DEVICES;
# nothing can compute on them. CANOPY_SLURM_GRES=file (also the fallback when
# mknod is refused) uses empty regular files instead: jobs schedule, but
# slurmd binds no GPU, so no CUDA_VISIBLE_DEVICES is set. ("Name=gpu Count=N"
# without File= makes 22.05 mark the node INVAL.)
# Partition "debug" (default, no time limit). Accounting: none (so no sacct;
# use squeue / scontrol show job / sbatch --wait).
# JobRequeue=1 (Slurm's default, written out): batch jobs may be requeued
# (scontrol requeue); a requeued job is held until about 121 s after the
# requeue (Reason=BeginTime), `scontrol update jobid=ID StartTime=now` starts
# it at once; its log is truncated unless it was submitted with
# --open-mode=append (JobFileAppend stays 0).
#
# Other variables: CANOPY_SLURM_CTLD_PORT (6817), CANOPY_SLURM_SLURMD_PORT
# (6818), CANOPY_SLURM_WAIT (30: seconds to wait for the node to be idle).
#
# Exit codes: 0 ok; 1 a daemon failed to start or the node did not become idle
# (the log tails are printed); 2 usage (bad command or DIR, not root, a
# program missing: install with scripts/install-deps.sh slurm-wlm munge).
set -euo pipefail

usage() {
	echo "usage: scripts/slurm-local.sh start|stop|status|env [DIR]" >&2
	exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
cmd=$1
D=${2:-${CANOPY_SLURM_DIR:-/tmp/canopy-slurm}}
case $D in
/*) ;;
*) echo "slurm-local: DIR must be an absolute path: $D" >&2; exit 2 ;;
esac
case $D in
*[[:space:],#=]*) echo "slurm-local: DIR must not contain spaces, commas, '#' or '=' (slurm.conf cannot quote them): $D" >&2; exit 2 ;;
esac
D=${D%/}
CONF=$D/slurm.conf
WAIT=${CANOPY_SLURM_WAIT:-30}

log() { echo "slurm-local: $*" >&2; }

# pid_of NAME: the PID recorded in DIR/run/NAME.pid (munged: DIR/munge/) when
# that process is alive and is NAME (so a reused PID is never killed).
pid_of() {
	local f=$D/run/$1.pid p
	[ "$1" = munged ] && f=$D/munge/munged.pid
	[ -s "$f" ] || return 0
	p=$(tr -dc 0-9 <"$f")
	[ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
	[ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$1" ] && echo "$p"
	return 0
}

# stop_one NAME: SIGTERM the recorded PID, wait up to 10 s, then SIGKILL.
stop_one() {
	local p i
	p=$(pid_of "$1")
	if [ -z "$p" ]; then
		return 0
	fi
	kill -TERM "$p" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$p" 2>/dev/null; then
		log "$1 (pid $p) ignored SIGTERM for 10 s; SIGKILL"
		kill -KILL "$p" 2>/dev/null || true
		sleep 0.2
	fi
	log "stopped $1 (pid $p)"
}

do_stop() {
	[ -d "$D" ] || { log "nothing to stop in $D"; return 0; }
	# Cancel what is still queued or running (our private cluster only), so
	# no job step outlives slurmd; then slurmd, the controller, munge.
	local ids i
	if [ -n "$(pid_of slurmctld)" ]; then
		ids=$(SLURM_CONF=$CONF timeout 10 squeue -h -o %A 2>/dev/null || true)
		if [ -n "$ids" ]; then
			# shellcheck disable=SC2086
			SLURM_CONF=$CONF timeout 10 scancel $ids 2>/dev/null || true
			for ((i = 0; i < 100; i++)); do
				[ -z "$(SLURM_CONF=$CONF timeout 5 squeue -h -o %A 2>/dev/null || true)" ] && break
				sleep 0.1
			done
		fi
	fi
	stop_one slurmd
	stop_one slurmctld
	stop_one munged
}

tails() {
	local f
	for f in "$D"/log/*.log; do
		[ -f "$f" ] || continue
		echo "----- tail $f" >&2
		tail -n 25 "$f" >&2 || true
	done
}

fail() {
	log "$*"
	tails
	do_stop || true
	exit 1
}

# wait_pid NAME SECONDS: wait for the daemon's PID file to name a live process.
wait_pid() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[ -n "$(pid_of "$1")" ] && return 0
		sleep 0.1
	done
	return 1
}

node_state() { SLURM_CONF=$CONF sinfo -h -N -n localhost -o %T 2>/dev/null | head -n 1; }

do_start() {
	[ "$(id -u)" = 0 ] || { log "start needs root (SlurmUser=root, munged as user munge)"; exit 2; }
	local p
	for p in munged mungekey slurmctld slurmd sinfo runuser; do
		command -v "$p" >/dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || {
			log "$p not found: install with scripts/install-deps.sh slurm-wlm munge"
			exit 2
		}
	done
	id munge >/dev/null 2>&1 || { log "user munge missing (install the munge package)"; exit 2; }
	local port_ctld=${CANOPY_SLURM_CTLD_PORT:-6817} port_d=${CANOPY_SLURM_SLURMD_PORT:-6818}
	local cpus=${CANOPY_SLURM_CPUS:-$(nproc)} gpus=${CANOPY_SLURM_GPUS:-2}

	# A fresh cluster: stop what a previous start left (by PID file), wipe.
	do_stop
	rm -rf "$D"
	mkdir -p "$D"/{run,log,state,spool,dev,munge}
	chmod 755 "$D" "$D/run" "$D/log"

	# munge: private socket dir 711 (700 is refused), own key and files.
	"$(dirname "$0")/munge-start.sh" "$D/munge" "$D/log/munged.log" || fail "munged failed to start"
	wait_pid munged 10 || fail "munged wrote no live PID within 10 s"

	# Fake GPUs. "dev" (default): character devices made with mknod as
	# clones of /dev/null (major 1, minor 3) -- slurmd refuses regular files
	# ("not a valid character or block device") and then binds no GPU, so
	# CUDA_VISIBLE_DEVICES stays empty; with real device nodes each task gets
	# its own index. "file": empty regular files (slurmd logs "not a valid
	# character or block device" but the jobs run, without
	# CUDA_VISIBLE_DEVICES); the fallback when mknod is not permitted.
	# ("Name=gpu Count=N" without File= is NOT accepted by 22.05 for gpu: the
	# node goes INVAL, "gres/gpu count reported lower than configured".)
	local i last=$((gpus - 1)) gres_node="" mode=${CANOPY_SLURM_GRES:-dev}
	if [ "$gpus" -gt 0 ] && [ "$mode" = dev ]; then
		for ((i = 0; i < gpus; i++)); do
			if ! mknod -m 666 "$D/dev/nvidia$i" c 1 3 2>/dev/null; then
				log "mknod not permitted: fake GPUs as regular files (no CUDA_VISIBLE_DEVICES)"
				mode="file"
				break
			fi
		done
	fi
	if [ "$gpus" -gt 0 ] && [ "$mode" != dev ]; then
		mode="file"
		for ((i = 0; i < gpus; i++)); do : >"$D/dev/nvidia$i"; done
	fi
	if [ "$gpus" -gt 0 ]; then
		gres_node="Gres=gpu:$gpus"
		{
			echo "# fake GPUs for tests ($mode): nothing can compute on them"
			echo "AutoDetect=off"
			if [ "$gpus" -eq 1 ]; then
				echo "NodeName=localhost Name=gpu File=$D/dev/nvidia0"
			else
				echo "NodeName=localhost Name=gpu File=$D/dev/nvidia[0-$last]"
			fi
		} >"$D/gres.conf"
	else
		: >"$D/gres.conf"
	fi

	cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a one-node test cluster under $D.
ClusterName=canopy-local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port_ctld
SlurmdPort=$port_d
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket.2
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
MinJobAge=300
JobRequeue=1
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=20000 $gres_node State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

	slurmctld -f "$CONF" || fail "slurmctld failed to start"
	wait_pid slurmctld 10 || fail "slurmctld wrote no live PID within 10 s"
	slurmd -f "$CONF" -N localhost || fail "slurmd failed to start"
	wait_pid slurmd 10 || fail "slurmd wrote no live PID within 10 s"

	local s="" t0=$SECONDS
	while ((SECONDS - t0 < WAIT)); do
		s=$(node_state)
		case $s in
		idle*) break ;;
		down* | drain*) SLURM_CONF=$CONF scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
		esac
		[ -n "$(pid_of slurmctld)" ] || fail "slurmctld exited"
		[ -n "$(pid_of slurmd)" ] || fail "slurmd exited"
		sleep 0.2
	done
	case $s in
	idle*) ;;
	*) fail "node localhost not idle after ${WAIT} s (sinfo state: '${s:-none}')" ;;
	esac
	log "up in $D: node localhost idle, $cpus CPUs, gpu:$gpus (fake), $((SECONDS - t0)) s to idle"
	printf 'export SLURM_CONF=%q\n' "$CONF"
}

do_status() {
	local n p rc=0
	for n in munged slurmctld slurmd; do
		p=$(pid_of "$n")
		if [ -n "$p" ]; then
			echo "$n: running (pid $p)"
		else
			echo "$n: not running"
			rc=3
		fi
	done
	if [ $rc = 0 ]; then
		echo "node localhost: $(node_state)"
		printf 'export SLURM_CONF=%q\n' "$CONF"
	fi
	return $rc
}

case $cmd in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
env) printf 'export SLURM_CONF=%q\n' "$CONF" ;;
*) usage ;;
esac
