#!/bin/sh
# Run the peer (torch all_gather_object / mpi4py allgather) gather benchmark.
# Usage: tools/gatherbench/run.sh [NP] [peers.py args...]
#   e.g. tools/gatherbench/run.sh 2 --boxes 1000000 --out tools/gatherbench/peers-result.json
#        tools/gatherbench/run.sh 2 --boxes 10000          # quick check
# GATHERBENCH_TIMEOUT overrides the 600 s limit (e.g. on a loaded host).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
np=${1:-2}
[ $# -gt 0 ] && shift
root_flags=""
[ "$(id -u)" = 0 ] && root_flags="--allow-run-as-root"
GATHERBENCH_COMMAND="tools/gatherbench/run.sh $np $*"
export GATHERBENCH_COMMAND
exec timeout "${GATHERBENCH_TIMEOUT:-600}" mpirun $root_flags --oversubscribe -np "$np" \
    -x GATHERBENCH_COMMAND -x OMP_NUM_THREADS=1 \
    /usr/bin/python3 "$here/peers.py" "$@"
