#!/usr/bin/env bash
#SBATCH --job-name=canopy-summary
#SBATCH --ntasks=1
#SBATCH --output=%x-%j.out
#
# scripts/slurm/summarize.sh DIR -- one line per task folder DIR/task-K/ of a
# canopy-array.sbatch run, in task order, tab-separated:
#   PATH  box_recall=V  map=V  STATE
# PATH is the task folder; V is the value in its report.json "metrics"
# ("-" when absent, "null" where canopy reports null; map only with the coco
# family); STATE is
#   ok          exit_code 0 and a report.json
#   exit N      the task ended with canopy's exit code N (4 model error, ...)
#   no-report   exit_code 0 but no report.json
#   unfinished  no exit_code yet (running, pending, or killed hard)
#
# Run it yourself after the array, or as a job that starts when every array
# task has ended (any state):
#   sbatch --dependency=afterany:$ARRAY_JOB_ID scripts/slurm/summarize.sh DIR
# (its #SBATCH lines make it a 1-task job logging to %x-%j.out).
#
# Reads no variables. Needs python3 to read report.json when present
# (falls back to sed otherwise).
# Exit codes: 0 every task ok; 1 some task not ok; 2 usage; 3 DIR missing or
# holding no task-K folder.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: scripts/slurm/summarize.sh DIR   (DIR: the CANOPY_OUT of canopy-array.sbatch)" >&2
	exit 2
fi
dir=${1%/}
[ -d "$dir" ] || { echo "summarize: no folder '$dir'" >&2; exit 3; }

# metric FILE KEY: the value of "metrics".KEY in report.json, or "-".
metric() {
	if command -v python3 >/dev/null 2>&1; then
		python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    with open(sys.argv[1]) as f:
        m = json.load(f).get("metrics", {})
except Exception:
    print("-")
    sys.exit(0)
v = m.get(sys.argv[2], "-")
print("null" if v is None else ("%r" % v if isinstance(v, float) else v))
EOF
	else
		sed -n 's/.*"metrics": *{[^}]*"'"$2"'": *\([^,}]*\).*/\1/p' "$1" | head -n 1 | grep . || echo -
	fi
}

tasks=()
for t in "$dir"/task-*; do
	[ -d "$t" ] || continue
	k=${t##*/task-}
	case $k in '' | *[!0-9]*) continue ;; esac
	tasks+=("$k")
done
if [ ${#tasks[@]} -eq 0 ]; then
	echo "summarize: no task-K folder in '$dir'" >&2
	exit 3
fi

bad=0
while IFS= read -r k; do
	t=$dir/task-$k
	recall=- map=-
	if [ -f "$t/report.json" ]; then
		recall=$(metric "$t/report.json" box_recall)
		map=$(metric "$t/report.json" map)
	fi
	if [ -f "$t/exit_code" ]; then
		code=$(tr -dc 0-9 <"$t/exit_code")
		if [ "$code" = 0 ] && [ -f "$t/report.json" ]; then
			state=ok
		elif [ "$code" = 0 ]; then
			state=no-report
		else
			state="exit ${code:-?}"
		fi
	else
		state=unfinished
	fi
	[ "$state" = ok ] || bad=1
	printf '%s\tbox_recall=%s\tmap=%s\t%s\n' "$t" "$recall" "$map" "$state"
done < <(printf '%s\n' "${tasks[@]}" | sort -n)
exit "$bad"
