#!/usr/bin/env bash
# scripts/test-multinode.sh -- the multi-node tests (make test-multinode): a
# 3-host cluster in network namespaces with a 3-node Slurm
# (scripts/netns-cluster.sh up 3 --slurm), canopy over real TCP between the
# hosts, and faults on h2. Needs root. Installs slurm-wlm and munge through
# scripts/install-deps.sh when missing; builds bin/canopy when missing. The
# cluster is torn down on exit, failure and signals included; every job runs
# under `timeout -k 5`.
#
# Sets (generated under $S): "demo", 12 images of cmd/forestgen seed 3 at
# 200x200 for the demo model (testdata/models/canopy-demo-r18); "replay",
# cmd/synth -big with 600 images x 30 boxes.
# References: bin/canopy eval with no launcher (1 rank, this host).
#
# Checks (each prints PASS/FAIL; exit 1 when any failed):
#   model    mpirun --host h1:2,h2:2,h3:2 -np 6 canopy eval --model: exit 0,
#            report.json "metrics" bytes equal the 1-rank run's; per_rank lists
#            ranks 2k,2k+1 on host h(k+1) with local ranks 0,1 of 2; then the
#            same 6 ranks on this host (scripts/mpirun.sh) for the wall time
#   replay   the same with --predictions; and every host's eth0 received at
#            least the wire bytes (per_rank bytes_sent) of the ranks on the
#            other hosts (veth counters), printed against the wire total
#   srun     srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n6 under the 3-node
#            Slurm, model and replay: exit 0, equal metrics, same placement
#   sbatch   scripts/slurm/canopy-multinode.sbatch (srun) and canopy-mpirun.sbatch
#            (mpirun in the allocation), -N3 -n6, replay: exit 0, equal
#            metrics, same placement; their command lines hold
#            --kill-on-bad-exit=1 and the oob keepalive flags
#   faults   mpirun, on the slowed replay (CANOPY_TEST_SLOW_MS,
#            --collective-timeout ${FAULT_CT}s), each on h2 once rank 0 is
#            detecting: a rank SIGKILLed, h2's orted SIGKILLed, a rank
#            SIGSTOPped, a rank stopped before the first collective
#            (CANOPY_TEST_STOP_RANK=2:start), h2's link down: the job exits
#            non-zero within ${FAULT_BOUND} s of the fault (more when the load
#            stretched rank 0's detection: fault_bound), its output names h2,
#            and no process of the job is left on any host (a cut-off host's
#            ranks must end while its link is still down)
#   srun-faults  the same under srun: a rank killed, h2's slurmstepd killed,
#            a rank stopped, h2's link down
#   flap     h2's link down for 5 s, then up, during detection: exit 0, equal
#            metrics
#   resume   a slowed 3-host job whose h2 dies (every process in h2 SIGKILLed)
#            once each rank's part file holds records; then --resume with
#            --host h1:3,h3:3 -np 6 (2 hosts): exit 0, equal metrics, images
#            taken from the part files
# Timings (wall of 3-host vs 1-host 6-rank eval, fault-to-exit, veth bytes)
# are printed as "TIME"/"BYTES" lines for docs/benchmarks.md. A job that
# Open MPI fails to start (see startup_flake) is run once more, with a
# "RETRY" line; a second failure fails the check.
#
# Variables: CANOPY_MULTINODE_DIR (scratch, default /tmp/canopy-multinode,
# wiped first), CANOPY_NETNS_DIR (the cluster's state, default
# /tmp/canopy-netns-test), CANOPY_MULTINODE_ONLY (space-separated check names
# to run, default all).
set -euo pipefail
cd "$(dirname "$0")/.."

S=${CANOPY_MULTINODE_DIR:-/tmp/canopy-multinode}
export CANOPY_NETNS_DIR=${CANOPY_NETNS_DIR:-/tmp/canopy-netns-test}
only=" ${CANOPY_MULTINODE_ONLY:-model replay srun sbatch faults srun-faults flap resume} "
FAULT_CT=${FAULT_CT:-5}   # --collective-timeout of the fault jobs, seconds
FAULT_BOUND=30            # seconds from a fault to the job's exit, at the nominal detection time (fault_bound)
C=scripts/netns-cluster.sh
T0=$SECONDS

if [ "$(id -u)" != 0 ]; then
	echo "test-multinode: needs root (network namespaces, Slurm as root)" >&2
	exit 2
fi
scripts/install-deps.sh slurm-wlm munge iproute2
[ -x bin/canopy ] || go build -o bin/canopy .
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_|OMPI_|PMIX_)' || true)
unset CANOPY_TEST_FAIL_RANK CANOPY_TEST_SLOW_MS CANOPY_TEST_INTERRUPT CANOPY_TEST_STOP_RANK

cleanup() { $C down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf -- "$S"
mkdir -p "$S"
fails=0
pass() { echo "PASS $1: $2"; }
fail() {
	echo "FAIL $1: $2"
	fails=$((fails + 1))
	[ -f "$S/$1.log" ] && tail -n 15 "$S/$1.log"
	return 0
}
want() { case $only in *" $1 "*) return 0 ;; esac; return 1; }

# metrics FILE: the exact bytes of the "metrics" object of a report.json.
metrics() { python3 scripts/report-metrics.py "$1"; }

# placement FILE: "rank:host:local/size ..." from report.json run.per_rank.
placement() {
	python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["run"]["per_rank"]
print(" ".join("%d:%s:%d/%d" % (x["rank"], x["host"], x["local_rank"], x["local_size"]) for x in r))
EOF
}
want_place="0:h1:0/2 1:h1:1/2 2:h2:0/2 3:h2:1/2 4:h3:0/2 5:h3:1/2"

now() { date +%s.%N; }
since() { python3 -c "import sys, time; print('%.2f' % (time.time() - float(sys.argv[1])))" "$1"; }

[ -x bin/forestgen ] || go build -o bin/forestgen ./cmd/forestgen
[ -x bin/synth ] || go build -o bin/synth ./cmd/synth
bin/forestgen -out "$S/demo" -n 12 -seed 3 -sizes 200x200 >/dev/null
bin/synth -big "$S/replay" -images 600 -boxes 30 >/dev/null
MODEL=(--model testdata/models/canopy-demo-r18 --csv "$S/demo/annotations.csv")
REPLAY=(--csv "$S/replay/truth.csv" --predictions "$S/replay/predictions.csv")

echo "== references: bin/canopy eval, 1 rank on this host"
timeout -k 5 120 bin/canopy eval "${MODEL[@]}" --out "$S/ref-model" >/dev/null
timeout -k 5 120 bin/canopy eval "${REPLAY[@]}" --out "$S/ref-replay" >/dev/null
ref_model=$(metrics "$S/ref-model/report.json")
ref_replay=$(metrics "$S/ref-replay/report.json")

echo "== cluster: $C up 3 --slurm"
$C up 3 --slurm
HOSTS=(--host h1:2,h2:2,h3:2 -np 6)

# check_run NAME REF OUT RC [PLACE]: exit 0, metrics bytes equal REF, and
# (when PLACE is given) the report's placement equals it.
check_run() {
	local name=$1 ref=$2 out=$3 rc=$4 place=${5:-} got
	if [ "$rc" != 0 ] || [ ! -f "$out/report.json" ]; then
		fail "$name" "exit $rc, no report"
		return
	fi
	if [ "$(metrics "$out/report.json")" != "$ref" ]; then
		fail "$name" "metrics differ from the 1-rank run's"
		return
	fi
	got=$(placement "$out/report.json")
	if [ -n "$place" ] && [ "$got" != "$place" ]; then
		fail "$name" "placement '$got', want '$place'"
		return
	fi
	pass "$name" "exit 0, metrics bytes equal 1 rank's; ranks rank:host:local/size $got"
}

# startup_flake LOG: Open MPI 4.1 failed while starting the ranks, before
# canopy ran (seen under srun on this loaded 2-core machine, about one launch
# in ten when the load average is ~12: a SIGSEGV inside MPI_Init_thread, then
# the peers' "shared memory initialization" / "failed to TCP connect").
startup_flake() {
	grep -q -e 'cmpi._Cfunc_MPI_Init_thread' -e 'failed to TCP connect' -e 'during shared memory initialization' "$1"
}

# job NAME OUT CMD...: run CMD (bounded by the caller), output in $S/NAME.log,
# exit code in rc; a start-up failure of Open MPI (startup_flake) is retried
# once, with a RETRY line and the first log kept as NAME.log.1.
job() {
	local name=$1 out=$2 try
	shift 2
	for try in 1 2; do
		rc=0
		"$@" >"$S/$name.log" 2>&1 || rc=$?
		if [ "$rc" != 0 ] && [ $try = 1 ] && startup_flake "$S/$name.log"; then
			echo "RETRY $name: Open MPI failed while starting the ranks (exit $rc; $S/$name.log.1)"
			mv "$S/$name.log" "$S/$name.log.1"
			rm -rf -- "$out"
			continue
		fi
		break
	done
}

# bytes_map: "h1 RX TX h2 RX TX ..." of the hosts' eth0.
bytes_map() { $C bytes | tr '\n' ' '; }

# crossed NAME OUT BEFORE AFTER INPUT_FILES...: every host received at least
# the wire bytes (encoded boxes) of the ranks on the other hosts, and a host
# without rank 0 also the input files rank 0 broadcasts; prints the veth
# bytes against those sizes.
crossed() {
	python3 - "$@" <<'EOF'
import json, os, sys
name, out, before, after = sys.argv[1:5]
inputs = sum(os.path.getsize(f) for f in sys.argv[5:])
def parse(s):
    w = s.split()
    return {w[i]: (int(w[i+1]), int(w[i+2])) for i in range(0, len(w), 3)}
b, a = parse(before), parse(after)
ranks = json.load(open(out + "/report.json"))["run"]["per_rank"]
wire = sum(r["bytes_sent"] for r in ranks)
root = ranks[0]["host"]
ok, parts, rx_total, need_total = True, [], 0, 0
for h in sorted(a):
    rx = a[h][0] - b[h][0]
    need = sum(r["bytes_sent"] for r in ranks if r["host"] != h) + (inputs if h != root else 0)
    rx_total += rx
    need_total += need
    parts.append("%s rx %d >= %d" % (h, rx, need))
    ok &= rx >= need
print("BYTES %s: wire %d bytes (the 6 ranks' encoded boxes), inputs %d bytes (broadcast from %s); "
      "veth rx %d bytes in all = %.3fx the %d bytes the hosts had to receive (wire from the other hosts "
      "+ inputs to the hosts without rank 0); %s"
      % (name, wire, inputs, root, rx_total, rx_total / need_total, need_total, ", ".join(parts)))
sys.exit(0 if ok else 1)
EOF
}

if want model; then
	echo "== model: mpirun ${HOSTS[*]} canopy eval --model"
	t=$(now)
	job model-3h "$S/model-3h" timeout -k 5 180 $C mpirun "${HOSTS[@]}" bin/canopy eval "${MODEL[@]}" --out "$S/model-3h"
	w3=$(since "$t")
	check_run model "$ref_model" "$S/model-3h" $rc "$want_place"
	t=$(now)
	job model-1h "$S/model-1h" timeout -k 5 180 scripts/mpirun.sh -np 6 bin/canopy eval "${MODEL[@]}" --out "$S/model-1h"
	w1=$(since "$t")
	check_run model-1host "$ref_model" "$S/model-1h" $rc
	echo "TIME eval --model, 6 ranks: 3 hosts ${w3} s, 1 host ${w1} s"
fi

if want replay; then
	echo "== replay: mpirun ${HOSTS[*]} canopy eval --predictions"
	before=$(bytes_map)
	t=$(now)
	job replay-3h "$S/replay-3h" timeout -k 5 180 $C mpirun "${HOSTS[@]}" bin/canopy eval "${REPLAY[@]}" --out "$S/replay-3h"
	after=$(bytes_map)
	check_run replay "$ref_replay" "$S/replay-3h" $rc "$want_place"
	if [ -f "$S/replay-3h/report.json" ] && crossed replay "$S/replay-3h" "$before" "$after" "$S/replay/truth.csv" "$S/replay/predictions.csv"; then
		pass replay-bytes "each host received at least the other hosts' wire bytes (and the inputs)"
	else
		fail replay-bytes "veth counters below the wire size (or no report)"
	fi
fi

if want srun; then
	for kind in model replay; do
		echo "== srun: srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n6 canopy eval ($kind)"
		if [ $kind = model ]; then args=("${MODEL[@]}") ref=$ref_model; else args=("${REPLAY[@]}") ref=$ref_replay; fi
		t=$(now)
		job "srun-$kind" "$S/srun-$kind" timeout -k 5 180 $C srun --mpi=pmix --kill-on-bad-exit=1 -N3 -n6 bin/canopy eval "${args[@]}" \
			--out "$S/srun-$kind"
		echo "TIME srun -N3 -n6 eval ($kind): $(since "$t") s"
		check_run "srun-$kind" "$ref" "$S/srun-$kind" $rc "$want_place"
	done
fi

# sbatch_job SCRIPT: submit scripts/slurm/SCRIPT.sbatch on the 3 nodes (replay,
# out $S/sbatch-SCRIPT), wait for it (squeue every 0.1 s, at most 180 s;
# sbatch --wait polls only every few seconds), print its log; the job's exit
# code is the function's.
sbatch_job() {
	local id i
	id=$(CANOPY_CSV=$S/replay/truth.csv CANOPY_PREDICTIONS=$S/replay/predictions.csv CANOPY_OUT=$S/sbatch-$1 \
		timeout -k 5 30 $C run h1 sbatch --parsable -N3 -n6 --ntasks-per-node=2 --gpus-per-task=0 --job-name="$1" \
		--output="$S/logs/$1-%j.out" "scripts/slurm/$1.sbatch") || return 1
	for ((i = 0; i < 1800; i++)); do
		[ -z "$($C run h1 squeue -h -j "$id" -o %A 2>/dev/null)" ] && break
		sleep 0.1
	done
	[ $i -lt 1800 ] || $C run h1 scancel "$id"
	cat "$S/logs/$1-$id.out"
	return "$($C run h1 scontrol show job -o "$id" | sed -n 's/.* ExitCode=\([0-9]*\):.*/\1/p')"
}

if want sbatch; then
	mkdir -p "$S/logs"
	for script in canopy-multinode canopy-mpirun; do
		echo "== sbatch: -N3 -n6 --ntasks-per-node=2 --gpus-per-task=0 (no GPUs here) scripts/slurm/$script.sbatch (replay)"
		t=$(now)
		job "sbatch-$script" "$S/sbatch-$script" sbatch_job $script
		echo "TIME sbatch -N3 $script.sbatch: $(since "$t") s"
		check_run "sbatch-$script" "$ref_replay" "$S/sbatch-$script" $rc "$want_place"
	done
	grep -q -- '--kill-on-bad-exit=1' "$S/sbatch-canopy-multinode.log" &&
		grep -q -- 'oob_tcp_keepalive_time 5' "$S/sbatch-canopy-mpirun.log" &&
		pass sbatch-flags "the srun script passes --kill-on-bad-exit=1, the mpirun one the oob keepalive flags" ||
		fail sbatch-flags "--kill-on-bad-exit=1 or the keepalive flags missing from the job logs' command lines"
fi

# comm_pids HOST NAME: the PIDs of processes named NAME inside HOST.
comm_pids() { for p in $($C pids "$1"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = "$2" ] && echo "$p"; done; return 0; }

# job_pids [canopy]: the processes inside the hosts but Slurm's daemons
# (with "canopy": only the ranks).
job_pids() {
	local p c
	for p in $($C pids); do
		c=$(cat "/proc/$p/comm" 2>/dev/null) || continue
		case $c in slurmctld | slurmscriptd | slurmd) continue ;; esac
		[ "${1:-}" = canopy ] && [ "$c" != canopy ] && continue
		echo "$p"
	done
}

# left [canopy]: the job's processes still inside any host ("pid comm@host").
left() { for p in $(job_pids "$@"); do echo "$p $(cat /proc/$p/comm 2>/dev/null)"; done; }

# wait_gone SECONDS [canopy]: poll until left is empty; true when it is.
wait_gone() {
	local i
	for ((i = 0; i < $1 * 10; i++)); do
		[ -z "$(job_pids "${2:-}")" ] && return 0
		sleep 0.1
	done
	return 1
}

# nodes_idle: after a Slurm job, every node idle again (a node cut off
# longer than SlurmdTimeout is down*: resumed here, as an admin would).
nodes_idle() {
	local i s
	for ((i = 0; i < 300; i++)); do
		s=$($C run h1 sinfo -h -o '%D %T' 2>/dev/null | tr '\n' ' ')
		[ "$s" = "3 idle " ] && return 0
		case $s in *down* | *drain*) $C run h1 scontrol update nodename=h[1-3] state=resume >/dev/null 2>&1 || true ;; esac
		sleep 0.1
	done
	echo "test-multinode: nodes not idle: $s" >&2
	return 1
}

# wait_detecting OUT PID: until rank 0's part file holds a record (ranks are
# detecting) or the job PID ended.
wait_detecting() {
	local i
	for ((i = 0; i < 600; i++)); do
		[ -s "$1/parts/part-000-00000.part" ] && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# start_slow LAUNCHER NAME SLOW_MS [launcher args...]: the replay on the 3
# hosts (LAUNCHER mpirun: --host h1:2,h2:2,h3:2 -np 6; srun: --mpi=pmix
# --kill-on-bad-exit=1 -N3 -n6) in the background, each image taking
# SLOW_MS; sets JOB (its PID).
start_slow() {
	local launcher=$1 name=$2 slow=$3 la
	shift 3
	if [ $launcher = srun ]; then la=(--mpi=pmix --kill-on-bad-exit=1 -N3 -n6); else la=("${HOSTS[@]}"); fi
	CANOPY_TEST_SLOW_MS=$slow CANOPY_MPIRUN_TIMEOUT=150 timeout -k 5 160 \
		$C $launcher "${la[@]}" "$@" bin/canopy eval "${REPLAY[@]}" --out "$S/$name" \
		--collective-timeout "${FAULT_CT}s" >"$S/$name.log" 2>&1 &
	JOB=$!
}

# fault_bound PART T0: the seconds a fault may take to end the job. A rank
# frozen while detecting (or a daemon lost under srun) is found by the
# watchdog at the gather after detection, which waits --collective-timeout
# + 2 D0 (D0: rank 0's detection time; a rank slower to detect is late, not
# hung, until then), and rank 0 reaches the gather up to D0 after the
# fault: 3 D0 in all. FAULT_BOUND holds that at the nominal D0 of 2 s (100
# images a rank at 20 ms); the load stretches D0 (5.6 s once: the job ended
# 28.4 s after the fault), and each second more of it adds 3 to the bound.
# D0 is measured apart from the job's own numbers: from T0, when rank 0's
# part file PART first held a record, to its last write (rank 0's last
# batch); no T0 (a rank stopped before detection) is no D0.
fault_bound() {
	python3 - "$1" "${2:-}" "$FAULT_BOUND" <<'EOF'
import os, sys
part, t0, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
try:
    d0 = os.stat(part).st_mtime - float(t0)
except (OSError, ValueError):
    d0 = 0
print("%.1f" % (bound + 3 * max(d0 - 2, 0)))
EOF
}

# fault LAUNCHER ACTION: start the slowed job (100 images per rank x 20 ms =
# 2 s of detection), inject ACTION on h2 once detecting, check the job's end:
# non-zero exit within FAULT_BOUND s of the fault, h2 named in its output,
# and no process of the job left on any host (a cut-off host's ranks must
# end by themselves while its link is still down).
fault() {
	local launcher=$1 action=$2 name=fault-$1-$2 tf rc dt l ranks_gone="" daemon=orted bound t0=""
	[ $launcher = srun ] && daemon=slurmstepd
	local extra=()
	[ $action = stop-start ] && extra=(-x CANOPY_TEST_STOP_RANK=2:start)
	[ $action = stop-start ] && [ $launcher = srun ] && extra=(--export=ALL,CANOPY_TEST_STOP_RANK=2:start)
	start_slow $launcher "$name" 20 "${extra[@]}"
	if [ $action != stop-start ] && ! wait_detecting "$S/$name" $JOB; then
		wait $JOB || true
		if ! startup_flake "$S/$name.log"; then
			fail "$name" "the job never started detecting"
			return
		fi
		echo "RETRY $name: Open MPI failed while starting the ranks ($S/$name.log.1)"
		mv "$S/$name.log" "$S/$name.log.1"
		rm -rf -- "${S:?}/$name"
		start_slow $launcher "$name" 20 "${extra[@]}"
		if ! wait_detecting "$S/$name" $JOB; then
			wait $JOB || true
			fail "$name" "the job never started detecting"
			return
		fi
	fi
	[ $action != stop-start ] && t0=$(now)
	sleep 0.5
	tf=$(now)
	case $action in
	kill-rank) kill -KILL $(comm_pids h2 canopy | head -n 1) ;;
	kill-daemon) kill -KILL $(comm_pids h2 $daemon) ;;
	stop-rank) kill -STOP $(comm_pids h2 canopy | head -n 1) ;;
	stop-start) ;; # rank 2 (on h2) stopped itself before the first collective
	link-down) $C link h2 down ;;
	esac
	rc=0
	wait $JOB || rc=$?
	dt=$(since "$tf")
	if [ $action = link-down ]; then
		wait_gone 45 canopy && ranks_gone=" (h2's ranks ended, cut off, $(since "$tf") s after the fault)"
		$C link h2 up
	fi
	wait_gone 20 || true
	l=$(left)
	bound=$(fault_bound "$S/$name/parts/part-000-00000.part" "$t0")
	echo "TIME fault $launcher $action on h2: exit $rc after ${dt} s (bound $bound s)$ranks_gone"
	if [ "$rc" = 0 ] || [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ $action != kill-rank ]; }; then
		fail "$name" "exit $rc (want a failure before the timeout)"
	elif ! python3 -c "import sys; sys.exit(float(sys.argv[1]) > float(sys.argv[2]))" "$dt" "$bound" || ! grep -q 'h2' "$S/$name.log"; then
		fail "$name" "exit $rc after $dt s (bound $bound s) or no message naming h2"
	elif [ -n "$l" ]; then
		fail "$name" "exit $rc after $dt s, but processes are left: $(echo $l)"
	elif [ $action = link-down ] && [ -z "$ranks_gone" ]; then
		fail "$name" "exit $rc after $dt s, but h2's ranks outlived the cut by 45 s"
	else
		pass "$name" "exit $rc after $dt s (bound $bound s), h2 named: $(grep -m1 -o '.\{0,70\}h2.\{0,50\}' "$S/$name.log")"
	fi
	# a failed check may leave stopped or orphaned processes: clean for the next one
	for p in $(job_pids); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null || true; done
	[ $launcher = srun ] && nodes_idle
	return 0
}

if want faults; then
	for f in kill-rank kill-daemon stop-rank stop-start link-down; do
		echo "== fault: mpirun, $f on h2"
		fault mpirun "$f"
	done
fi
if want srun-faults; then
	for f in kill-rank kill-daemon stop-rank link-down; do
		echo "== fault: srun, $f on h2"
		fault srun "$f"
	done
fi

if want flap; then
	echo "== flap: h2's link down 5 s during detection"
	start_slow mpirun flap 60
	if wait_detecting "$S/flap" $JOB; then
		$C link h2 down
		sleep 5
		$C link h2 up
	fi
	rc=0
	wait $JOB || rc=$?
	check_run flap "$ref_replay" "$S/flap" $rc "$want_place"
fi

if want resume; then
	echo "== resume: h2 dies mid-run (3 hosts), --resume on h1 and h3"
	start_slow mpirun resume 40
	ok=no
	for ((i = 0; i < 600; i++)); do
		n=0
		for r in 0 1 2 3 4 5; do [ -s "$S/resume/parts/part-000-0000$r.part" ] && n=$((n + 1)); done
		[ $n = 6 ] && { ok=yes; break; }
		kill -0 $JOB 2>/dev/null || break
		sleep 0.1
	done
	[ $ok = yes ] && for p in $($C pids h2); do kill -KILL "$p" 2>/dev/null || true; done
	rc=0
	wait $JOB || rc=$?
	echo "resume: the first attempt exited $rc after h2 died"
	for p in $(job_pids); do kill -KILL "$p" 2>/dev/null || true; done
	rc=0
	timeout -k 5 120 $C mpirun --host h1:3,h3:3 -np 6 bin/canopy eval "${REPLAY[@]}" --out "$S/resume" --resume \
		>"$S/resume-2.log" 2>&1 || rc=$?
	check_run resume "$ref_replay" "$S/resume" $rc
	if [ -f "$S/resume/report.json" ]; then
		info=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['run']; print(r['resume']['attempt'], r['resume']['images_from_parts'], r['resume']['images_computed'], ','.join(sorted(set(x['host'] for x in r['per_rank']))))" "$S/resume/report.json")
		read -r att from comp hosts <<<"$info"
		if [ "$att" -ge 1 ] && [ "$from" -gt 0 ] && [ $((from + comp)) = 600 ] && [ "$hosts" = h1,h3 ]; then
			pass resume-parts "attempt $att on $hosts: $from images from the part files, $comp computed"
		else
			fail resume-parts "attempt $att, from parts $from, computed $comp, hosts $hosts"
		fi
	fi
fi

echo "TIME test-multinode: $((SECONDS - T0)) s"
if [ $fails -gt 0 ]; then
	echo "test-multinode: $fails check(s) failed; logs in $S"
	exit 1
fi
echo "test-multinode: all checks passed"
