#!/usr/bin/env bash
# Stop the test cluster started by .ci/slurm_up.sh: cancel its jobs, then stop every slurmd
# (slurmd.<node>.pid; slurmd.pid of the one-node cluster of earlier versions), slurmctld and
# munged by the pid files in its private dir. Safe to run when nothing is running. State and
# logs stay in the dir for inspection.
set -euo pipefail

DIR="${LOONGSAGE_SLURM_DIR:-/tmp/loongsage-slurm}"
export SLURM_CONF="$DIR/slurm.conf"

say() { echo "slurm_down: $*" >&2; }

# The daemon NAME is running: its pid file names a live process of that name (not a reused pid).
# NAME is the pid file's stem (slurmd.node1); the process is the part before the dot.
alive() { [[ -f "$DIR/$1.pid" ]] && [[ "$(cat "/proc/$(cat "$DIR/$1.pid")/comm" 2>/dev/null)" == "${1%%.*}" ]]; }

# Jobs keep their processes (proctrack/linuxproc) after slurmd dies: cancel them first.
cancel_jobs() {
    alive slurmctld || return 0
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    [[ -z "$jobs" ]] && return 0
    say "cancelling jobs: $(echo $jobs)"
    scancel $jobs 2>/dev/null || true
    local i
    for i in $(seq 1 20); do
        [[ -z "$(squeue -h -t running,completing -o %i 2>/dev/null)" ]] && return 0
        sleep 0.5
    done
}

stop() {
    local name=$1 pidfile="$DIR/$1.pid" pid i
    alive "$name" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill "$pid"
    for i in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; say "stopped $name ($pid)"; return 0; }
        sleep 0.25
    done
    say "$name ($pid) ignored SIGTERM for 10s; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

cancel_jobs
for pidfile in "$DIR"/slurmd.pid "$DIR"/slurmd.*.pid; do
    if [[ -e "$pidfile" ]]; then stop "$(basename "$pidfile" .pid)"; fi
done
stop slurmctld
stop munged
