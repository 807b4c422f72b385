#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests of the cluster profile.
#
#   tools/slurm-local.sh up      install (Debian packages), configure and start munge + slurmctld + slurmd
#   tools/slurm-local.sh down    stop them by their PID files and remove the config `up` wrote
#   tools/slurm-local.sh status  show whether the daemons run and what sinfo says
#
# Needs root and apt (Debian/Ubuntu). Idempotent: `up` on a running cluster only checks it,
# `down` on a stopped one does nothing. The config template is tools/slurm/slurm.conf.in;
# state, logs and PID files go under /var/lib/inferlab-slurm, /var/log/inferlab-slurm and
# /run/inferlab-slurm. It overwrites /etc/slurm/slurm.conf: do not run it on a machine that
# is already part of a real cluster. `down` removes that file again: with a config that names a
# stopped controller, every `scontrol` waits ~9 s for it, and the SLURM executor plugin runs
# `scontrol show config` whenever Snakemake starts, whatever the executor (measured: a dry run
# took 11.4 s instead of 2.4 s, and the test suite paid it on every Snakemake call).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TEMPLATE="$HERE/slurm/slurm.conf.in"
CONF=/etc/slurm/slurm.conf
STATE_DIR=/var/lib/inferlab-slurm
LOG_DIR=/var/log/inferlab-slurm
RUN_DIR=/run/inferlab-slurm
MUNGE_PID=/run/munge/munged.pid
PARTITION=${INFERLAB_SLURM_PARTITION:-debug}
PACKAGES=(slurmctld slurmd slurm-client munge)
WRITTEN_MARK="# written by inferlab tools/slurm-local.sh up"

die() { echo "slurm-local: $*" >&2; exit 1; }
say() { echo "slurm-local: $*"; }

require_root_and_apt() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages and starts daemons); try: sudo $0 $*"
    command -v apt-get >/dev/null || die "apt-get not found: this script needs a Debian/Ubuntu machine; install SLURM ${PACKAGES[*]} yourself"
}

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    say "installing ${missing[*]}"
    # apt-get update only when the package lists do not know the packages yet
    apt-cache show "${missing[0]}" >/dev/null 2>&1 || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
    alive "$MUNGE_PID" && return
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    [[ -s /etc/munge/munge.key ]] || { say "creating a munge key"; mungekey --create --force; }
    chown munge:munge /etc/munge/munge.key && chmod 600 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged --pid-file "$MUNGE_PID" || die "munged did not start (see /var/log/munge/munged.log)"
}

write_config() {
    local cpus memory_mb node
    cpus=$(nproc --all)
    # leave a tenth of the memory (at least 512 MB) to the system and the daemons
    memory_mb=$(awk '/^MemTotal/ {m=int($2/1024); r=int(m/10); if (r<512) r=512; print m-r}' /proc/meminfo)
    node=$(hostname -s)
    mkdir -p "$(dirname "$CONF")" "$STATE_DIR/ctld" "$STATE_DIR/d" "$LOG_DIR" "$RUN_DIR"
    sed -e "s|@STATE_DIR@|$STATE_DIR|g" -e "s|@LOG_DIR@|$LOG_DIR|g" -e "s|@RUN_DIR@|$RUN_DIR|g" \
        -e "s|@NODE_NAME@|$node|g" -e "s|@CPUS@|$cpus|g" -e "s|@MEMORY_MB@|$memory_mb|g" \
        -e "s|@PARTITION@|$PARTITION|g" "$TEMPLATE" > "$CONF.new"
    echo "$WRITTEN_MARK" >> "$CONF.new"
    mv "$CONF.new" "$CONF"
    say "node $node: $cpus CPUs, $memory_mb MB; partition $PARTITION ($CONF)"
}

wait_for_node() {
    local i
    for i in $(seq 1 30); do
        if [[ $(sinfo -h -N -o '%T' 2>/dev/null) =~ (^|$'\n')(idle|mixed|allocated) ]]; then
            return
        fi
        sleep 1
    done
    sinfo -N 2>&1 || true
    die "the node did not become idle within 30 s (logs: $LOG_DIR)"
}

up() {
    require_root_and_apt "$@"
    install_packages
    if alive "$RUN_DIR/slurmctld.pid" && alive "$RUN_DIR/slurmd.pid"; then
        say "already running"
        wait_for_node
        sinfo
        return
    fi
    start_munge
    write_config
    alive "$RUN_DIR/slurmctld.pid" || /usr/sbin/slurmctld -i || die "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
    alive "$RUN_DIR/slurmd.pid" || /usr/sbin/slurmd || die "slurmd did not start (see $LOG_DIR/slurmd.log)"
    wait_for_node
    # a node left DOWN/DRAIN by an earlier unclean stop comes back here
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sinfo
}

stop_by_pidfile() {
    local name=$1 pidfile=$2 pid i
    alive "$pidfile" || { rm -f "$pidfile"; return 0; }
    pid=$(cat "$pidfile")
    kill "$pid"
    for i in $(seq 1 20); do
        kill -0 "$pid" 2>/dev/null || { say "stopped $name ($pid)"; rm -f "$pidfile"; return 0; }
        sleep 0.5
    done
    say "$name ($pid) did not stop on TERM; sending KILL"
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

down() {
    [[ $(id -u) -eq 0 ]] || die "must run as root"
    # cancel what is still queued so slurmd has nothing left to run
    command -v scancel >/dev/null && alive "$RUN_DIR/slurmctld.pid" && scancel --user=root 2>/dev/null || true
    stop_by_pidfile slurmd "$RUN_DIR/slurmd.pid"
    stop_by_pidfile slurmctld "$RUN_DIR/slurmctld.pid"
    stop_by_pidfile munged "$MUNGE_PID"
    if [[ -f $CONF ]] && grep -qxF "$WRITTEN_MARK" "$CONF"; then
        rm -f "$CONF"
        say "removed $CONF"
    fi
}

status() {
    local d
    for d in "munged:$MUNGE_PID" "slurmctld:$RUN_DIR/slurmctld.pid" "slurmd:$RUN_DIR/slurmd.pid"; do
        if alive "${d#*:}"; then echo "${d%%:*}: running ($(cat "${d#*:}"))"; else echo "${d%%:*}: stopped"; fi
    done
    alive "$RUN_DIR/slurmctld.pid" && sinfo
    return 0
}

case "${1:-}" in
    up) up "$@" ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
