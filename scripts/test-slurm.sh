#!/usr/bin/env bash
# scripts/test-slurm.sh -- the Slurm tests (make test-slurm): start a one-node
# Slurm 22.05 (scripts/slurm-local.sh, fake GPUs), submit scripts/slurm/*.sbatch
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
#   k  scancel of a running canopy-1node.sbatch job (CANOPY_TEST_SLOW_MS makes
#      it last seconds), once both ranks' part files hold records: state
#      CANCELLED, no report, canopy logged "interrupted by a signal"; the same
#      script resubmitted with the same CANOPY_OUT and --resume: exit 0, equal
#      metrics, and report.json run.resume shows images taken from the part
#      files (attempt 1, images_from_parts > 0, from_parts + computed = all)
#   t  canopy-1node.sbatch with CANOPY_RASTERS (predict --tile over a raster
#      list, CANOPY_TEST_SLOW_MS per window), requeued part way: the script
#      adds --resume, the job exits 0 and rasters/* and predictions.csv equal
#      mpirun -np 1's, with windows or rasters kept from the first attempt
#   p  canopy-1node.sbatch with CANOPY_IMAGES (plain predict) over a folder
#      and over an image_path list: exit 0, predictions.csv equal mpirun -np
#      1's; CANOPY_IMAGES without CANOPY_MODEL exits 2, a missing folder 3
#   q  scontrol requeue of such a job submitted with --requeue
#      --open-mode=append: it runs again by itself (Restarts=1; the test lifts
#      the ~2 minutes BeginTime hold Slurm puts on a requeued job with
#      scontrol update StartTime=now), the script adds --resume (banner
#      "restart 1: --resume added"), exit 0, equal metrics, images reused as
#      in k; the log holds both attempts
# Every path handed to the jobs holds a space and a quote.
#
# Variables: CANOPY_SLURM_TEST_DIR (scratch; default "/tmp/canopy slurm 'test'",
# wiped first), CANOPY_SLURM_DIR (the cluster's state; default
# /tmp/canopy-slurm-test; no spaces: slurm.conf), CANOPY_SLURM_JOB_TIMEOUT
# (120: seconds to wait for one job), CANOPY_SLURM_SLOW_MS (25: the
# replay detector's sleep per image in k and q; testdata/sets/multi has 300
# images, 150 per rank: about 4 s of detection).
set -euo pipefail
cd "$(dirname "$0")/.."

S=${CANOPY_SLURM_TEST_DIR:-"/tmp/canopy slurm 'test'"}
export CANOPY_SLURM_DIR=${CANOPY_SLURM_DIR:-/tmp/canopy-slurm-test}
job_timeout=${CANOPY_SLURM_JOB_TIMEOUT:-120}
slow_ms=${CANOPY_SLURM_SLOW_MS:-25}
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
unset CANOPY_TEST_FAIL_RANK CANOPY_TEST_SLOW_MS CANOPY_TEST_INTERRUPT CANOPY_RANK_LOGS CANOPY_OUT CANOPY_CSV CANOPY_PREDICTIONS CANOPY_LIST CANOPY_BIN CANOPY_IMAGES CANOPY_RASTERS CANOPY_MODEL

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
DEMO_MODEL="$PWD/testdata/models/canopy-demo-r18"
CSV="$S/in 'put'/truth's.csv"
PRED="$S/in 'put'/pred 1.csv"

fails=0
pass() { echo "PASS $1: $2"; }
fail() {
	echo "FAIL $1: $2"
	fails=$((fails + 1))
}

# metrics FILE: the exact bytes of the "metrics" object of a report.json.
metrics() { python3 scripts/report-metrics.py "$1"; }

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

# resume_info FILE: "attempt images_from_parts images_computed" from the
# run.resume object of a report.json.
resume_info() {
	python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["run"]["resume"]
print(r["attempt"], r["images_from_parts"], r["images_computed"])
EOF
}

# wait_parts ID DIR: poll every 0.1 s until both ranks' first part files in
# DIR/parts hold a record (non-empty), while job ID is queued or running.
wait_parts() {
	local t0=$SECONDS
	while ((SECONDS - t0 < job_timeout)); do
		[ -s "$2/parts/part-000-00000.part" ] && [ -s "$2/parts/part-000-00001.part" ] && return 0
		[ -n "$(squeue -h -j "$1" -o %A 2>/dev/null)" ] || return 1
		sleep 0.1
	done
	return 1
}

# requeue_now ID: scontrol requeue the running job ID (requeued=1 when
# done) and start it again at once (released=1): Slurm 22.05 holds a
# requeued job until requeue + ~121 s (Reason=BeginTime).
requeue_now() {
	requeued=0
	released=0
	scontrol requeue "$1" && requeued=1
	for ((i = 0; i < 200 && requeued == 1; i++)); do
		case $(squeue -h -j "$1" -o %T 2>/dev/null) in
		PENDING) scontrol update jobid="$1" StartTime=now 2>/dev/null && released=1 && break ;;
		RUNNING | COMPLETING | CONFIGURING) ;;
		*) break ;;
		esac
		sleep 0.1
	done
}

# want CHECK: whether CANOPY_SLURM_CHECKS (a comma list; default all)
# names it (the tile check t only, for now).
want() { [ -z "${CANOPY_SLURM_CHECKS:-}" ] || [[ ",$CANOPY_SLURM_CHECKS," == *",$1,"* ]]; }

# elapsed T0: seconds since date +%s.%N printed T0, two decimals.
elapsed() { python3 -c "import sys, time; print('%.2f' % (time.time() - float(sys.argv[1])))" "$1"; }

echo "== starting the local Slurm in $CANOPY_SLURM_DIR"
eval "$(scripts/slurm-local.sh start "$CANOPY_SLURM_DIR")"
export SLURM_CONF
sinfo -N -o '%N %T %c %G'

echo "== reference: scripts/mpirun.sh -np 2 bin/canopy eval"
scripts/mpirun.sh -np 2 "$BIN" eval --csv "$CSV" --predictions "$PRED" --out "$S/ref" >/dev/null
ref=$(metrics "$S/ref/report.json")
[ -n "$ref" ] || { echo "test-slurm: no reference metrics" >&2; exit 1; }
read -r _ _ ref_images < <(resume_info "$S/ref/report.json")

common=(CANOPY_BIN="$BIN" CANOPY_CSV="$CSV" CANOPY_PREDICTIONS="$PRED")

# (a) + (b): 1 node, 2 tasks, 1 GPU each, per-rank logs.
echo "== a, b: canopy-1node.sbatch -n 2 --gpus-per-task=1"
t0=$(date +%s.%N)
id=$(submit "canopy a" "${common[@]}" CANOPY_OUT="$S/out a" CANOPY_RANK_LOGS=1 CANOPY_LOG_DIR="$S/logs/ranks 'a'" -- -n 2 --gpus-per-task=1 scripts/slurm/canopy-1node.sbatch --metrics all)
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
id=$(submit "canopy c" "${common[@]}" CANOPY_OUT="$S/out c" CANOPY_TEST_FAIL_RANK=1 -- -n 2 scripts/slurm/canopy-1node.sbatch)
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
id=$(submit "canopy d" "${common[@]}" CANOPY_OUT="$S/out d" CANOPY_BIND=core -- -n 2 scripts/slurm/canopy-mpirun.sbatch)
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
id=$(submit "canopy m" "${common[@]}" CANOPY_OUT="$S/out m" -- --nodes=1 --ntasks-per-node=2 scripts/slurm/canopy-multinode.sbatch)
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
arr=$(submit "canopy e" CANOPY_BIN="$BIN" CANOPY_CSV="$CSV" CANOPY_LIST="$list" CANOPY_OUT="$S/out e" -- --array=0-1 scripts/slurm/canopy-array.sbatch)
sum=$(submit "canopy e-sum" -- --dependency=afterany:"$arr" scripts/slurm/summarize.sh "$S/out e")
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
direct=$(scripts/slurm/summarize.sh "$S/out e" || true)
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
for f in scripts/slurm/*.sbatch; do
	rc=0
	msg=$(env -u SLURM_JOB_ID "${common[@]}" "$f" 2>&1 >/dev/null) || rc=$?
	if [ $rc != 2 ] || ! grep -q SLURM_JOB_ID <<<"$msg"; then
		okf=0
		echo "$f: rc=$rc message: $msg"
	fi
done
if [ $okf = 1 ]; then
	pass f "all $(ls scripts/slurm/*.sbatch | wc -l) scripts exit 2 outside Slurm: $msg"
else
	fail f "a script outside Slurm did not exit 2 with a clear message"
fi

# (g): missing input.
echo "== g: missing CANOPY_CSV file"
id=$(submit "canopy g" "${common[@]}" CANOPY_CSV="$S/in 'put'/no such.csv" CANOPY_OUT="$S/out g" -- -n 2 scripts/slurm/canopy-1node.sbatch)
wait_job "$id" || true
node_ok g
if [ "$JOB_RC" = 3 ] && grep -q "no readable file" "$S/logs/canopy g-$id.out"; then
	pass g "missing input: job exit 3: $(grep -h "no readable file" "$S/logs/canopy g-$id.out")"
else
	fail g "state=$JOB_STATE rc=$JOB_RC (want 3)"
	show_log "canopy g-$id"
fi

# (k): scancel a running job, then resubmit it with --resume.
echo "== k: scancel during the run, resubmit with --resume (CANOPY_TEST_SLOW_MS=$slow_ms)"
outk="$S/out k"
id=$(submit "canopy k" "${common[@]}" CANOPY_OUT="$outk" CANOPY_TEST_SLOW_MS="$slow_ms" -- -n 2 scripts/slurm/canopy-1node.sbatch)
parts_k=0
wait_parts "$id" "$outk" && parts_k=1
sleep 0.5 # a few more batches into the part files
tk=$(date +%s.%N)
scancel "$id" || true
wait_job "$id" || true
node_ok k
state_k="$JOB_STATE"
report_k=no
[ -e "$outk/report.json" ] && report_k=yes
log_k="$S/logs/canopy k-$id.out"
id2=$(submit "canopy k-resume" "${common[@]}" CANOPY_OUT="$outk" -- -n 2 scripts/slurm/canopy-1node.sbatch --resume)
wait_job "$id2" || true
wall_k=$(elapsed "$tk")
node_ok k
res_k=$(resume_info "$outk/report.json" 2>/dev/null || true)
read -r att_k from_k comp_k <<<"${res_k:-none 0 0}"
eq_k=no
[ -f "$outk/report.json" ] && [ "$(metrics "$outk/report.json")" = "$ref" ] && eq_k=yes
if [ $parts_k = 1 ] && [ "$state_k" = CANCELLED ] && [ $report_k = no ] && grep -q "interrupted by a signal" "$log_k" &&
	[ "$JOB_STATE $JOB_RC" = "COMPLETED 0" ] && [ $eq_k = yes ] &&
	[ "$att_k" = 1 ] && [ "$from_k" -gt 0 ] && [ $((from_k + comp_k)) = "$ref_images" ] &&
	grep -q -- "--resume" "$S/logs/canopy k-resume-$id2.out"; then
	pass k "scancel -> CANCELLED (part files flushed); resubmitted --resume: exit 0, equal metrics, $from_k of $ref_images images from the part files, $comp_k computed; scancel -> resumed job finished ${wall_k} s"
else
	fail k "parts=$parts_k cancelled state=$state_k report=$report_k; resumed state=$JOB_STATE rc=$JOB_RC metrics equal=$eq_k resume(attempt from_parts computed)=${res_k:-none} (want CANCELLED, COMPLETED 0, equal metrics, 1 N>0 $ref_images-N)"
	show_log "canopy k"
	ls -la "$outk" "$outk/parts" 2>&1 || true
fi

# (q): scontrol requeue a running job; the script resumes by itself.
echo "== q: scontrol requeue during the run (--requeue --open-mode=append, CANOPY_TEST_SLOW_MS=$slow_ms)"
outq="$S/out q"
id=$(submit "canopy q" "${common[@]}" CANOPY_OUT="$outq" CANOPY_TEST_SLOW_MS="$slow_ms" -- --requeue --open-mode=append -n 2 scripts/slurm/canopy-1node.sbatch)
log_q="$S/logs/canopy q-$id.out"
parts_q=0
wait_parts "$id" "$outq" && parts_q=1
sleep 0.5
tq=$(date +%s.%N)
requeue_now "$id"
wait_job "$id" || true
wall_q=$(elapsed "$tq")
node_ok q
restarts=$(scontrol show job -o "$id" 2>/dev/null | sed -n 's/.* Restarts=\([0-9]*\) .*/\1/p')
res_q=$(resume_info "$outq/report.json" 2>/dev/null || true)
read -r att_q from_q comp_q <<<"${res_q:-none 0 0}"
eq_q=no
[ -f "$outq/report.json" ] && [ "$(metrics "$outq/report.json")" = "$ref" ] && eq_q=yes
n_banner=$(grep -c "^=== canopy-1node: job $id " "$log_q" 2>/dev/null || true)
if [ $parts_q = 1 ] && [ $requeued = 1 ] && [ $released = 1 ] && [ "$restarts" = 1 ] &&
	[ "$JOB_STATE $JOB_RC" = "COMPLETED 0" ] && [ $eq_q = yes ] &&
	[ "$att_q" = 1 ] && [ "$from_q" -gt 0 ] && [ $((from_q + comp_q)) = "$ref_images" ] &&
	[ "$n_banner" = 2 ] && grep -q "restarts=0: first attempt" "$log_q" && grep -q "interrupted by a signal" "$log_q" &&
	grep -q "restarts=1: restart 1: --resume added" "$log_q"; then
	pass q "scontrol requeue: job ran again (Restarts=1), the script added --resume: exit 0, equal metrics, $from_q of $ref_images images from the part files, $comp_q computed; both attempts in the log; requeue -> finished ${wall_q} s"
else
	fail q "parts=$parts_q requeued=$requeued released=$released restarts=${restarts:-?} state=$JOB_STATE rc=$JOB_RC metrics equal=$eq_q resume(attempt from_parts computed)=${res_q:-none} banners=$n_banner (want Restarts=1, COMPLETED 0, equal metrics, 1 N>0 $ref_images-N, 2 banners)"
	show_log "canopy q-$id"
	ls -la "$outq" "$outq/parts" 2>&1 || true
fi

# (t): a predict --tile job over a raster list, requeued part way; the
# script resumes it by itself and its outputs equal mpirun -np 1's.
if want t; then
echo "== t: predict --tile over a raster list, scontrol requeue during the run (CANOPY_TEST_SLOW_MS=$((slow_ms * 8)) per window)"
td="$S/rasters t"
mkdir -p -- "$td"
printf 'image_path\n' >"$td/list.csv"
for i in 0 1 2 3; do
	go run ./cmd/forestgen -out "$td/src$i" -n 1 -sizes "$((380 + 40 * i))x$((300 + 30 * i))" -seed $((40 + i)) >/dev/null
	gdal_translate -q -co TILED=YES "$td/src$i/img_0000.png" "$td/r$i.tif"
	echo "r$i.tif" >>"$td/list.csv"
done
tile_flags=(--patch-size 200 --patch-overlap 0.1 --batch-size 1 --round-windows 4)
scripts/mpirun.sh -np 1 "$BIN" predict --tile --csv "$td/list.csv" --model "$DEMO_MODEL" --out "$S/ref t" "${tile_flags[@]}" >/dev/null
outt="$S/out t"
id=$(submit "canopy t" CANOPY_BIN="$BIN" CANOPY_RASTERS="$td/list.csv" CANOPY_MODEL="$DEMO_MODEL" CANOPY_OUT="$outt" CANOPY_TEST_SLOW_MS=$((slow_ms * 8)) \
	-- --requeue --open-mode=append -n 2 scripts/slurm/canopy-1node.sbatch "${tile_flags[@]}")
log_t="$S/logs/canopy t-$id.out"
parts_t=0
wait_parts "$id" "$outt" && parts_t=1
sleep 1
requeue_now "$id"
wait_job "$id" || true
node_ok t
restarts=$(scontrol show job -o "$id" 2>/dev/null | sed -n 's/.* Restarts=\([0-9]*\) .*/\1/p')
same_t=yes
for f in "$S/ref t"/rasters/* "$S/ref t/predictions.csv"; do
	cmp -s "$f" "$outt/${f#"$S/ref t/"}" || same_t=no
done
saved_t=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["tile"].get("resume") or {}; print(r.get("windows_from_parts", 0) + r.get("rasters_finished_before", 0))' "$outt/report.json" 2>/dev/null || echo 0)
if [ $parts_t = 1 ] && [ $requeued = 1 ] && [ $released = 1 ] && [ "$restarts" = 1 ] &&
	[ "$JOB_STATE $JOB_RC" = "COMPLETED 0" ] && [ $same_t = yes ] && [ "$saved_t" -gt 0 ] &&
	grep -q "restarts=1: restart 1: --resume added" "$log_t"; then
	pass t "predict --tile requeued (Restarts=1), the script added --resume: exit 0, rasters/* and predictions.csv equal mpirun -np 1's, $saved_t windows/rasters kept from the first attempt"
else
	fail t "parts=$parts_t requeued=$requeued released=$released restarts=${restarts:-?} state=$JOB_STATE rc=$JOB_RC same=$same_t saved=$saved_t"
	show_log "canopy t-$id"
	ls -la "$outt" "$outt/parts" 2>&1 || true
fi
fi

# (p): plain predict over a folder of images (CANOPY_IMAGES), and over an
# image_path list; its predictions.csv equals mpirun -np 1's. And the
# script's refusals: CANOPY_IMAGES without CANOPY_MODEL (exit 2), a missing
# folder (exit 3).
if want p; then
echo "== p: plain predict (CANOPY_IMAGES: a folder, then an image list)"
pd="$S/images 'p'"
go run ./cmd/forestgen -out "$pd" -n 6 -seed 5 >/dev/null
rm -f -- "$pd/annotations.csv"
printf 'image_path\n' >"$pd/list p.csv" # paths relative to the list's folder (the root)
for f in "$pd"/*.png; do echo "${f##*/}" >>"$pd/list p.csv"; done
scripts/mpirun.sh -np 1 "$BIN" predict --images "$pd" --model "$DEMO_MODEL" --out "$S/ref p" >/dev/null
res_p=
for mode in folder list; do
	src=$pd
	[ $mode = list ] && src="$pd/list p.csv"
	id=$(submit "canopy p $mode" CANOPY_BIN="$BIN" CANOPY_IMAGES="$src" CANOPY_MODEL="$DEMO_MODEL" CANOPY_OUT="$S/out p $mode" -- -n 2 scripts/slurm/canopy-1node.sbatch)
	wait_job "$id" || true
	node_ok p
	same=no
	cmp -s "$S/ref p/predictions.csv" "$S/out p $mode/predictions.csv" && same=yes
	res_p="$res_p $mode:$JOB_STATE/$JOB_RC/$same"
	[ "$JOB_STATE $JOB_RC $same" = "COMPLETED 0 yes" ] || show_log "canopy p $mode-$id"
done
id=$(submit "canopy p nomodel" CANOPY_BIN="$BIN" CANOPY_IMAGES="$pd" CANOPY_OUT="$S/out p2" -- -n 2 scripts/slurm/canopy-1node.sbatch)
wait_job "$id" || true
res_p="$res_p nomodel:$JOB_STATE/$JOB_RC"
id=$(submit "canopy p missing" CANOPY_BIN="$BIN" CANOPY_IMAGES="$S/no such folder" CANOPY_MODEL="$DEMO_MODEL" CANOPY_OUT="$S/out p3" -- -n 2 scripts/slurm/canopy-1node.sbatch)
wait_job "$id" || true
res_p="$res_p missing:$JOB_STATE/$JOB_RC"
if [ "$res_p" = " folder:COMPLETED/0/yes list:COMPLETED/0/yes nomodel:FAILED/2 missing:FAILED/3" ]; then
	pass p "plain predict over a folder and over a list: exit 0, predictions.csv equal mpirun -np 1's; no CANOPY_MODEL exit 2, a missing folder exit 3"
else
	fail p "$res_p"
fi
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
	id=$(submit "canopy s $script" "${common[@]}" CANOPY_BIN="$stub" CANOPY_STUB_DIR="$sd" CANOPY_OUT="$S/out s" -- -n 2 "scripts/slurm/$script.sbatch")
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

echo "== timing: sbatch -> finished job (a, 2 tasks): ${wall_a} s; scancel -> resumed job finished (k): ${wall_k} s; requeue -> finished (q): ${wall_q} s; whole run $((SECONDS - t_start)) s"
if [ $fails -gt 0 ]; then
	echo "test-slurm: $fails check(s) FAILED (logs in $S/logs)"
	exit 1
fi
echo "test-slurm: all checks passed"
