#!/usr/bin/env bash
# Start (or confirm) a real two-node Slurm cluster on this one machine for the tests in tests/slurm/.
#
# Two slurmd (Slurm's multiple-slurmd mode, which Debian's build has): node1 at 127.0.0.2 and
# node2 at 127.0.0.3, each with its own port, spool dir, pid and log file and two fake GPUs, in
# one partition `debug`. Each node has its own loopback address so that Ray, which a job starts
# on every node of its allocation, sees two nodes (Ray rewrites 127.0.0.1 to the machine's
# interface address, but no other loopback address). One-node jobs run on either node.
#
# Everything lives in one private dir (LOONGSAGE_SLURM_DIR, default /tmp/loongsage-slurm):
# config, state, spool, pid and log files, the munge socket and four fake GPU device files.
# Idempotent: when the cluster is already up it only prints the export line again.
# stdout carries exactly one line for callers to eval:
#     eval "$(bash .ci/slurm_up.sh)"    # -> export SLURM_CONF=<dir>/slurm.conf
# Progress and errors go to stderr. Must run as root (SlurmUser=root, munged, mknod).
set -euo pipefail

DIR="${LOONGSAGE_SLURM_DIR:-/tmp/loongsage-slurm}"
CTLD_PORT="${LOONGSAGE_SLURM_CTLD_PORT:-16817}"
SLURMD_PORT="${LOONGSAGE_SLURM_D_PORT:-16818}"  # node1's slurmd; node2's listens on the next port
# name:address. Node i (from 0) listens on SLURMD_PORT + i and has fake GPUs 2i and 2i+1.
NODES=(node1:127.0.0.2 node2:127.0.0.3)
KEY=/etc/munge/munge.key
CONF="$DIR/slurm.conf"
export SLURM_CONF="$CONF"

say() { echo "slurm_up: $*" >&2; }

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sinfo >/dev/null && command -v munged >/dev/null; then
        return
    fi
    say "installing slurm-wlm and munge"
    # stdout is reserved for the export line callers eval.
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

# The daemon NAME is running: its pid file names a live process of that name (not a reused pid).
# NAME is the pid file's stem (slurmd.node1); the process is the part before the dot.
alive() { [[ -f "$DIR/$1.pid" ]] && [[ "$(cat "/proc/$(cat "$DIR/$1.pid")/comm" 2>/dev/null)" == "${1%%.*}" ]]; }

node_names() { local node; for node in "${NODES[@]}"; do echo "${node%%:*}"; done; }

# Compact state (%t) of node $1: a node whose slurmd has not registered reads "idle*", not "idle".
node_state() { sinfo -h -N -n "$1" -o %t 2>/dev/null | head -n1; }

# Up means: munged, slurmctld and every node's slurmd alive, and every node usable (jobs may be
# running on it).
cluster_up() {
    alive munged && alive slurmctld || return 1
    local name
    for name in $(node_names); do
        alive "slurmd.$name" || return 1
        case "$(node_state "$name")" in
            idle | mix | alloc | comp) ;;
            *) return 1 ;;
        esac
    done
}

make_munge_key() {
    if [[ -f "$KEY" ]]; then return; fi
    say "creating $KEY"
    mkdir -p /etc/munge
    dd if=/dev/urandom of="$KEY" bs=1 count=1024 status=none
    # Owned by the user our munged runs as (root). The Debian package's own key belongs to
    # user munge; munged --force accepts that with a warning in munged.log.
    chown root:root "$KEY"
    chmod 0400 "$KEY"
}

# Fake GPUs, two per node: character devices with /dev/null's numbers. slurmd rejects plain
# files ("not a valid character or block device"), so where mknod is not permitted (some
# containers) fall back to links to existing harmless devices.
make_fake_gpus() {
    local i targets=(/dev/null /dev/zero /dev/full /dev/urandom)
    for i in 0 1 2 3; do
        [[ -e "$DIR/fakegpu$i" ]] && continue
        mknod "$DIR/fakegpu$i" c 1 3 2>/dev/null || {
            say "mknod not permitted; fakegpu$i links to ${targets[$i]}"
            ln -sf "${targets[$i]}" "$DIR/fakegpu$i"
        }
    done
}

# Memory Slurm may hand out on each node: half of what is available now, in whole GB, at least
# 1 GB (the nodes share the machine, and the jobs here are small). slurmd reports total memory,
# so any value below it registers cleanly.
real_memory_mb() {
    local avail_kb
    avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    local mb=$(( avail_kb / 1024 / 2 / 1000 * 1000 ))
    (( mb < 1000 )) && mb=1000
    echo "$mb"
}

write_config() {
    local cpus mem host i node name addr
    cpus=$(nproc)
    mem=$(real_memory_mb)
    host=$(hostname -s)
    cat >"$CONF" <<CONFIG
# Written by .ci/slurm_up.sh: a two-node test cluster on one machine; every path is under $DIR.
ClusterName=loongsage-ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.socket
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$DIR/state
# %n: the node's name, so that the slurmd of the two nodes on this machine keep apart.
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default every job would claim the whole node's memory and jobs could not share it.
DefMemPerCPU=$(( mem / cpus ))
ReturnToService=2
MpiDefault=none
# No mail on this node; the default MailProg is missing and slurmctld logs an error for it.
MailProg=/bin/true
GresTypes=gpu
CONFIG
    : >"$DIR/gres.conf"
    i=0
    for node in "${NODES[@]}"; do
        name=${node%%:*}
        addr=${node#*:}
        echo "NodeName=$name NodeHostname=$host NodeAddr=$addr Port=$(( SLURMD_PORT + i )) CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN" >>"$CONF"
        echo "NodeName=$name Name=gpu File=$DIR/fakegpu[$(( 2 * i ))-$(( 2 * i + 1 ))]" >>"$DIR/gres.conf"
        i=$(( i + 1 ))
    done
    echo "PartitionName=debug Nodes=$(node_names | paste -sd,) Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
}

start_daemons() {
    # Clean the previous run's leftovers so the daemons start from a known state.
    rm -f "$DIR/munge.socket" "$DIR/munge.socket.lock"
    # munged returns once its socket is ready; slurmd retries registering until slurmctld answers.
    munged --force --socket="$DIR/munge.socket" --key-file="$KEY" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munged.seed" >&2
    # -c: cold start, forget jobs of an earlier run.
    slurmctld -f "$CONF" -c >&2
    local name
    for name in $(node_names); do
        mkdir -p "$DIR/spool/$name"
        slurmd -f "$CONF" -N "$name" >&2
    done
}

show_logs_and_fail() {
    say "ERROR: $1"
    local f
    for f in munged.log slurmctld.log $(node_names | sed 's/.*/slurmd.&.log/'); do
        echo "----- $DIR/$f (last 30 lines) -----" >&2
        tail -n 30 "$DIR/$f" >&2 2>/dev/null || echo "(missing)" >&2
    done
    exit 1
}

# Until node $1 is idle.
wait_until_idle() {
    local name=$1 timeout_s=60 waited=0 state=""
    while (( waited < timeout_s )); do
        state=$(node_state "$name")
        [[ "$state" == idle ]] && return 0
        # A daemon writes its pid file only once it has forked into the background, which on a
        # loaded machine can take seconds: only a daemon still missing after that has exited.
        if (( waited >= 15 )); then
            alive "slurmd.$name" || show_logs_and_fail "slurmd of $name exited during startup"
            alive slurmctld || show_logs_and_fail "slurmctld exited during startup"
        fi
        sleep 1
        waited=$(( waited + 1 ))
    done
    show_logs_and_fail "node '$name' not idle after ${timeout_s}s (sinfo state: '${state:-no answer}')"
}

main() {
    [[ $(id -u) -eq 0 ]] || { say "ERROR: must run as root"; exit 1; }
    install_packages
    mkdir -p "$DIR/state" "$DIR/spool"
    # munged refuses a socket dir that others can write to.
    chmod 0755 "$DIR"
    if cluster_up; then
        say "already up ($CONF)"
    else
        # Whatever is half-running belongs to an older config (the one-node cluster of earlier
        # versions of this script, say): stop it before rewriting.
        LOONGSAGE_SLURM_DIR="$DIR" bash "$(dirname "$0")/slurm_down.sh" >&2
        make_munge_key
        make_fake_gpus
        write_config
        start_daemons
        local name
        for name in $(node_names); do wait_until_idle "$name"; done
        say "up: nodes $(node_names | paste -sd' ') idle, partition debug ($CONF)"
    fi
    echo "export SLURM_CONF=$CONF"
}

main "$@"
