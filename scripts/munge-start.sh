#!/usr/bin/env bash
# scripts/munge-start.sh DIR LOG -- start a private munged for a test Slurm
# (scripts/slurm-local.sh, scripts/netns-cluster.sh --slurm): as user munge,
# its socket DIR/munge.socket.2 (slurm.conf: AuthInfo=socket=DIR/munge.socket.2),
# a fresh key DIR/munge.key (mungekey, else 1 KiB of /dev/urandom), PID file
# DIR/munged.pid, seed DIR/munged.seed, log LOG. DIR is made mode 711 (munged
# refuses 700) and owned by munge. Waits up to 10 s for a live PID.
# Exit codes: 0 running; 1 munged failed; 2 usage. Stop it by its PID file.
set -euo pipefail
[ $# = 2 ] || { echo "usage: scripts/munge-start.sh DIR LOG" >&2; exit 2; }
dir=$1 logf=$2
mkdir -p "$dir"
chown munge:munge "$dir"
chmod 711 "$dir"
mungekey --create --keyfile="$dir/munge.key" --force >/dev/null 2>&1 ||
	dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chown munge:munge "$dir/munge.key"
chmod 600 "$dir/munge.key"
touch "$logf"
chown munge:munge "$logf"
runuser -u munge -- /usr/sbin/munged --force --socket="$dir/munge.socket.2" --key-file="$dir/munge.key" \
	--pid-file="$dir/munged.pid" --log-file="$logf" --seed-file="$dir/munged.seed" || exit 1
for ((i = 0; i < 100; i++)); do
	p=$(tr -dc 0-9 <"$dir/munged.pid" 2>/dev/null || true)
	[ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = munged ] && exit 0
	sleep 0.1
done
echo "munge-start: munged wrote no live PID within 10 s (log: $logf)" >&2
exit 1
