#!/usr/bin/env bash
# scripts/test-slurm.sh -- the Slurm tests (make test-slurm): start a one-node
# Slurm 22.05 (scripts/slurm-local.sh, fake GPUs), submit jobs/slurm/*.sbatch
# against testdata/sets/multi and check what they do. Needs root (the local
# Slurm runs as root). Installs slurm-wlm and munge through
# scripts/install-deps.sh when missing; builds bin/canopy only when it is missing
# (go build -o bin/canopy .). The local Slurm is stopped on exit, failure
# included.
#
# Checks (each prints PASS/FAIL; the exit code is 1 when any failed):
#   a  canopy-1node.sbatch, 2 tasks x 1 GPU: exit 0, report.json "metrics"
#      bytes equal those of scripts/mpirun.sh -np 2 bin/canopy eval (and the
#      wall time from sbatch to the finished job is printed)
#   b  per-rank logs (CANOPY_RANK_LOGS=1): %x-%j-0.out and -1.out exist, rank 0's
#      holds the metrics table
#   c  CANOPY_TEST_FAIL_RANK=1: the job fails with canopy's exit code 4
#      (scontrol ExitCode=4:0)
#   d  canopy-mpirun.sbatch, 2 tasks: exit 0, equal metrics
#   m  canopy-multinode.sbatch run as --nodes=1 --ntasks-per-node=2 (the one
#      node there is): exit 0, equal metrics
#   e  canopy-array.sbatch over a 2-line list: both tasks exit 0 with equal
#      metrics; summarize.sh prints 2 "ok" lines, run directly and as a job
#      with --dependency=afterany on the array
#   f  every script run outside Slurm (no SLURM_JOB_ID) exits 2 with a message
#      naming SLURM_JOB_ID
#   g  a missing CANOPY_CSV file: the job exits 3
#   s  SIGUSR1 sent to the batch shell (scancel --signal=USR1 --batch, what
#      --signal=B:USR1@360 does) reaches every rank, under srun and under
#      mpirun (a stub stands in for canopy: it records the signal and exits 8)
# Every path handed to the jobs holds a space and a quote.
#
# Variables: CANOPY_SLURM_TEST_DIR (scratch; default "/tmp/canopy slurm 'test'",
# wiped first), CANOPY_SLURM_DIR (the cluster's state; default
# /tmp/canopy-slurm-test; no spaces: slurm.conf), CANOPY_SLURM_JOB_TIMEOUT
# (120: seconds to wait for one job).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

S=${CANOPY_SLURM_TEST_DIR:-"/tmp/canopy slurm 'test'"}
export CANOPY_SLURM_DIR=${CANOPY_SLURM_DIR:-/tmp/canopy-slurm-test}
job_timeout=${CANOPY_SLURM_JOB_TIMEOUT:-120}
t_start=$SECONDS

if [ "$(id -u)" != 0 ]; then
	echo "test-slurm: needs root (the local Slurm runs SlurmUser=root and munged as munge)" >&2
	exit 2
fi
scripts/install-deps.sh slurm-wlm munge
if [ ! -x bin/canopy ]; then
	echo "test-slurm: bin/canopy missing; go build -o bin/canopy ." >&2
	go build -o bin/canopy .
fi

# Never inherit a surrounding job's identity (e.g. when run inside salloc).
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_)' || true)
unset CANOPY_TEST_FAIL_RANK CANOPY_RANK_LOGS CANOPY_OUT CANOPY_CSV CANOPY_PREDICTIONS CANOPY_LIST CANOPY_BIN

stop_slurm() { scripts/slurm-local.sh stop "$CANOPY_SLURM_DIR" >/dev/null 2>&1 || true; }
trap stop_slurm EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf -- "$S"
mkdir -p -- "$S/logs" "$S/bin dir" "$S/in 'put'"
# The binary's own file name stays "canopy": Slurm's proctrack/linuxproc reads
# /proc/PID/stat, whose comm field is the file name, and loses a process whose
# name holds a space -- a rank it cannot find is never killed, the step hangs
# and the node drains ("Kill task failed"). Its folder holds spaces and quotes.
cp bin/canopy "$S/bin dir/canopy"
cp testdata/sets/multi/truth.csv "$S/in 'put'/truth's.csv"
cp testdata/sets/multi/predictions.csv "$S/in 'put'/pred 1.csv"
cp testdata/sets/multi/predictions.csv "$S/in 'put'/pred '2'.csv"
BIN="$S/bin dir/canopy"
CSV="$S/in 'put'/truth's.csv"
PRED="$S/in 'put'/pred 1.csv"

fails=0
pass() { echo "PASS $1: $2"; }
fail() {
	echo "FAIL $1: $2"
	fails=$((fails + 1))
}

# metrics FILE: the exact bytes of the "metrics" object of a report.json.
metrics() {
	python3 - "$1" <<'EOF'
import json, sys
t = open(sys.argv[1]).read()
i = t.index('"metrics"')
j = t.index('{', i)
_, end = json.JSONDecoder().raw_decode(t, j)
sys.stdout.write(t[j:end])
EOF
}

# job_state ID: "STATE EXITCODE" from scontrol (accounting is none: no sacct).
job_state() {
	scontrol show job -o "$1" 2>/dev/null |
		sed -n 's/.*JobState=\([A-Z_]*\) .*ExitCode=\([0-9]*:[0-9]*\).*/\1 \2/p' | head -n 1
}

# wait_job ID: poll every 0.1 s until the job (every task of an array) has
# ended, bounded by job_timeout; sets JOB_STATE and JOB_RC (the exit code).
wait_job() {
	local t0=$SECONDS s
	JOB_STATE=TIMEOUT JOB_RC=-1
	while ((SECONDS - t0 < job_timeout)); do
		case $(sinfo -h -N -n localhost -o %T 2>/dev/null) in
		drain* | down* | fail*)
			if [ -n "$(squeue -h -j "$1" -t PD -o %A 2>/dev/null)" ]; then
				echo "test-slurm: node localhost is $(sinfo -h -N -o '%T: %E'); job $1 cannot start; cancelled" >&2
				scancel "$1" 2>/dev/null || true
				return 1
			fi
			;;
		esac
		if [ -z "$(squeue -h -j "$1" -o %A 2>/dev/null)" ]; then
			s=$(job_state "$1")
			JOB_STATE=${s%% *}
			JOB_RC=${s##* }
			JOB_RC=${JOB_RC%%:*}
			return 0
		fi
		sleep 0.1
	done
	scancel "$1" 2>/dev/null || true
	echo "test-slurm: job $1 still queued or running after ${job_timeout} s; cancelled" >&2
	return 1
}

# node_ok CHECK: after a job, the node must be usable again (a job step that
# cannot be killed drains it: "Kill task failed"); a drained node fails CHECK
# and is resumed so that the later checks still run.
node_ok() {
	local s i
	for ((i = 0; i < 100; i++)); do
		s=$(sinfo -h -N -n localhost -o %T 2>/dev/null)
		case $s in idle | mixed | allocated) return 0 ;; esac
		case $s in drain* | down* | fail*) break ;; esac
		sleep 0.1
	done
	fail "$1" "node localhost is $s after the job ($(sinfo -h -N -o %E)); resuming it"
	ps -eo pid,ppid,stat,etime,args | grep -E 'slurmstepd|canopy|srun|mpirun' | grep -v grep || true
	scontrol update nodename=localhost state=resume 2>/dev/null || true
}

# submit NAME [VAR=VALUE...] -- [sbatch args...] SCRIPT [script args...]:
# sbatch --parsable with those variables in its environment (exported into the
# job) and the job's log in $S/logs; prints the job id.
submit() {
	local name=$1 envs=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	shift
	env "${envs[@]}" sbatch --parsable --job-name="$name" --chdir="$S" --output="$S/logs/%x-%j.out" "$@" | cut -d';' -f1
}

show_log() {
	local f
	for f in "$S/logs/$1"*; do
		[ -f "$f" ] || continue
		echo "----- $f"
		tail -n 30 "$f"
	done
}

echo "== starting the local Slurm in $CANOPY_SLURM_DIR"
eval "$(scripts/slurm-local.sh start "$CANOPY_SLURM_DIR")"
export SLURM_CONF
sinfo -N -o '%N %T %c %G'

echo "== reference: scripts/mpirun.sh -np 2 bin/canopy eval"
scripts/mpirun.sh -np 2 "$BIN" eval --csv "$CSV" --predictions "$PRED" --out "$S/ref" >/dev/null
ref=$(metrics "$S/ref/report.json")
[ -n "$ref" ] || { echo "test-slurm: no reference metrics" >&2; exit 1; }

common=(CANOPY_BIN="$BIN" CANOPY_CSV="$CSV" CANOPY_PREDICTIONS="$PRED")

# (a) + (b): 1 node, 2 tasks, 1 GPU each, per-rank logs.
echo "== a, b: canopy-1node.sbatch -n 2 --gpus-per-task=1"
t0=$(date +%s.%N)
id=$(submit "canopy a" "${common[@]}" CANOPY_OUT="$S/out a" CANOPY_RANK_LOGS=1 CANOPY_LOG_DIR="$S/logs/ranks 'a'" -- -n 2 --gpus-per-task=1 jobs/slurm/canopy-1node.sbatch --metrics all)
wait_job "$id" || true
t1=$(date +%s.%N)
node_ok a
wall_a=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")
if [ "$JOB_STATE $JOB_RC" = "COMPLETED 0" ] && [ -f "$S/out a/report.json" ] && [ "$(metrics "$S/out a/report.json")" = "$ref" ]; then
	pass a "1-node job (2 tasks) exit 0, metrics bytes equal mpirun -np 2's; sbatch -> finished ${wall_a} s"
else
	fail a "state=$JOB_STATE rc=$JOB_RC (want COMPLETED 0 and equal metrics)"
	show_log "canopy a-$id"
fi
r0="$S/logs/ranks 'a'/canopy a-$id-0.out"
r1="$S/logs/ranks 'a'/canopy a-$id-1.out"
if [ -f "$r0" ] && [ -f "$r1" ] && grep -q box_recall "$r0"; then
	pass b "per-rank logs canopy a-$id-0.out, -1.out exist; rank 0's holds the metrics"
else
	fail b "per-rank logs missing in '$S/logs/ranks 'a''"
	ls -la "$S/logs/ranks 'a'" 2>&1 || true
fi
if grep -q "gpus-per-task=1" "$S/logs/canopy a-$id.out" 2>/dev/null; then :; else
	fail a "banner lacks gpus-per-task=1"
fi

# (c): a failing rank.
echo "== c: CANOPY_TEST_FAIL_RANK=1"
id=$(submit "canopy c" "${common[@]}" CANOPY_OUT="$S/out c" CANOPY_TEST_FAIL_RANK=1 -- -n 2 jobs/slurm/canopy-1node.sbatch)
wait_job "$id" || true
node_ok c
if [ "$JOB_RC" = 4 ] && [ "$JOB_STATE" = FAILED ] && [ ! -f "$S/out c/report.json" ]; then
	pass c "failing rank 1: job FAILED with ExitCode=4:0 (canopy's model error), no report"
else
	fail c "state=$JOB_STATE rc=$JOB_RC (want FAILED 4)"
	show_log "canopy c-$id"
fi

# (d): mpirun inside the allocation.
echo "== d: canopy-mpirun.sbatch -n 2"
id=$(submit "canopy d" "${common[@]}" CANOPY_OUT="$S/out d" CANOPY_BIND=core -- -n 2 jobs/slurm/canopy-mpirun.sbatch)
wait_job "$id" || true
node_ok d
if [ "$JOB_STATE $JOB_RC" = "COMPLETED 0" ] && [ -f "$S/out d/report.json" ] && [ "$(metrics "$S/out d/report.json")" = "$ref" ]; then
	pass d "mpirun in the allocation (bind-to core) exit 0, equal metrics"
else
	fail d "state=$JOB_STATE rc=$JOB_RC (want COMPLETED 0 and equal metrics)"
	show_log "canopy d-$id"
fi

# (m): the multinode body, on the one node there is.
echo "== m: canopy-multinode.sbatch --nodes=1 --ntasks-per-node=2"
id=$(submit "canopy m" "${common[@]}" CANOPY_OUT="$S/out m" -- --nodes=1 --ntasks-per-node=2 jobs/slurm/canopy-multinode.sbatch)
wait_job "$id" || true
node_ok m
if [ "$JOB_STATE $JOB_RC" = "COMPLETED 0" ] && [ -f "$S/out m/report.json" ] && [ "$(metrics "$S/out m/report.json")" = "$ref" ]; then
	pass m "multinode script (1 node x 2 tasks here) exit 0, equal metrics"
else
	fail m "state=$JOB_STATE rc=$JOB_RC (want COMPLETED 0 and equal metrics)"
	show_log "canopy m-$id"
fi

# (e): the array and its summary.
echo "== e: canopy-array.sbatch --array=0-1, summarize.sh"
list="$S/in 'put'/list of preds.txt"
printf '%s\n' "$S/in 'put'/pred 1.csv" "$S/in 'put'/pred '2'.csv" >"$list"
arr=$(submit "canopy e" CANOPY_BIN="$BIN" CANOPY_CSV="$CSV" CANOPY_LIST="$list" CANOPY_OUT="$S/out e" -- --array=0-1 jobs/slurm/canopy-array.sbatch)
sum=$(submit "canopy e-sum" -- --dependency=afterany:"$arr" jobs/slurm/summarize.sh "$S/out e")
wait_job "$arr" || true
arr_state=$JOB_STATE
wait_job "$sum" || true
sum_state="$JOB_STATE $JOB_RC"
node_ok e
ok=1
for k in 0 1; do
	r="$S/out e/task-$k/report.json"
	if [ ! -f "$r" ] || [ "$(metrics "$r")" != "$ref" ] || [ "$(cat "$S/out e/task-$k/exit_code" 2>/dev/null)" != 0 ]; then
		ok=0
		echo "task $k: no report, other metrics or exit_code not 0"
	fi
done
direct=$(jobs/slurm/summarize.sh "$S/out e" || true)
echo "$direct"
n_ok=$(grep -c $'\tok$' <<<"$direct" || true)
n_lines=$(grep -c . <<<"$direct" || true)
sum_log="$S/logs/canopy e-sum-$sum.out"
n_job=$(grep -c $'\tok$' "$sum_log" 2>/dev/null || true)
if [ $ok = 1 ] && [ "$arr_state" = COMPLETED ] && [ "$n_lines" = 2 ] && [ "$n_ok" = 2 ] &&
	[ "$sum_state" = "COMPLETED 0" ] && [ "$n_job" = 2 ]; then
	pass e "array of 2 completed with equal metrics; summarize.sh prints 2 ok lines, directly and as the afterany job"
else
	fail e "array=$arr_state tasks_ok=$ok summarize lines=$n_lines ok=$n_ok; summary job=$sum_state ok lines=$n_job"
	show_log "canopy e"
fi

# (f): outside Slurm.
echo "== f: scripts run without SLURM_JOB_ID"
okf=1
for f in jobs/slurm/*.sbatch; do
	rc=0
	msg=$(env -u SLURM_JOB_ID "${common[@]}" "$f" 2>&1 >/dev/null) || rc=$?
	if [ $rc != 2 ] || ! grep -q SLURM_JOB_ID <<<"$msg"; then
		okf=0
		echo "$f: rc=$rc message: $msg"
	fi
done
if [ $okf = 1 ]; then
	pass f "all $(ls jobs/slurm/*.sbatch | wc -l) scripts exit 2 outside Slurm: $msg"
else
	fail f "a script outside Slurm did not exit 2 with a clear message"
fi

# (g): missing input.
echo "== g: missing CANOPY_CSV file"
id=$(submit "canopy g" "${common[@]}" CANOPY_CSV="$S/in 'put'/no such.csv" CANOPY_OUT="$S/out g" -- -n 2 jobs/slurm/canopy-1node.sbatch)
wait_job "$id" || true
node_ok g
if [ "$JOB_RC" = 3 ] && grep -q "no readable file" "$S/logs/canopy g-$id.out"; then
	pass g "missing input: job exit 3: $(grep -h "no readable file" "$S/logs/canopy g-$id.out")"
else
	fail g "state=$JOB_STATE rc=$JOB_RC (want 3)"
	show_log "canopy g-$id"
fi

# (s): SIGUSR1 to the batch shell reaches every rank (srun and mpirun).
stub="$S/bin dir/canopy-stub"
cat >"$stub" <<'EOF'
#!/usr/bin/env bash
# Stands in for canopy in test-slurm.sh: records a signal per rank, exits 8.
m=${CANOPY_STUB_DIR:?}
r=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-x}}
got() { echo "$1" >"$m/signal.$r"; exit 8; }
trap 'got USR1' USR1
trap 'got TERM' TERM
echo started >"$m/started.$r"
for ((i = 0; i < 600; i++)); do sleep 0.1; done
exit 0
EOF
chmod +x "$stub"
for script in canopy-1node canopy-mpirun; do
	echo "== s: SIGUSR1 forwarding, $script"
	sd="$S/stub $script"
	mkdir -p -- "$sd"
	id=$(submit "canopy s $script" "${common[@]}" CANOPY_BIN="$stub" CANOPY_STUB_DIR="$sd" CANOPY_OUT="$S/out s" -- -n 2 "jobs/slurm/$script.sbatch")
	for ((i = 0; i < 300; i++)); do
		[ -f "$sd/started.0" ] && [ -f "$sd/started.1" ] && break
		sleep 0.1
	done
	sleep 0.3
	scancel --signal=USR1 --batch "$id" || true
	wait_job "$id" || true
	node_ok s
	if [ "$JOB_RC" = 8 ] && [ "$(cat "$sd/signal.0" 2>/dev/null)" = USR1 ] && [ "$(cat "$sd/signal.1" 2>/dev/null)" = USR1 ]; then
		pass s "$script: SIGUSR1 to the batch shell reached ranks 0 and 1; job exit 8"
	else
		fail s "$script: rc=$JOB_RC, ranks signalled: $(cat "$sd"/signal.* 2>/dev/null | tr '\n' ' ')"
		show_log "canopy s $script-$id"
	fi
done

echo "== timing: sbatch -> finished job (a, 2 tasks): ${wall_a} s; whole run $((SECONDS - t_start)) s"
if [ $fails -gt 0 ]; then
	echo "test-slurm: $fails check(s) FAILED (logs in $S/logs)"
	exit 1
fi
echo "test-slurm: all checks passed"
