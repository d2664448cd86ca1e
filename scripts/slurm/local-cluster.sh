#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for tests and demos.
#
#   scripts/slurm/local-cluster.sh start    # munged + slurmctld + slurmd; waits until the node is idle
#   scripts/slurm/local-cluster.sh status   # daemons and `sinfo`
#   scripts/slurm/local-cluster.sh env      # prints `export SLURM_CONF=...` for the client commands
#   scripts/slurm/local-cluster.sh stop     # cancels its jobs, stops the daemons it started
#
# Needs Debian's `slurm-wlm` and `munge` packages (scripts/setup.sh installs
# them) and root (the daemons run as root; so do the jobs). Everything lives in
# one state directory, $KILN_SLURM_DIR (default: ${TMPDIR:-/tmp}/kiln-slurm):
# its own munge key and socket, slurm.conf, state, spool, logs and pid files, so
# it touches neither /etc/slurm nor a system munged. The client commands (sbatch,
# sinfo, squeue, scancel) find this cluster through SLURM_CONF=$KILN_SLURM_DIR/slurm.conf.
#
# The configuration is the one that works in containers without cgroups:
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
# SelectType=select/cons_tres (CR_CPU), NodeName=$(hostname -s) CPUs=$(nproc),
# one partition `debug`; MinJobAge=4 so that `sbatch --wait` polls every 2 s
# (it backs off, up to 32 s, only while its sleep is below MinJobAge/2) and a
# finished job's record outlives one poll: when the record is purged before
# sbatch sees the job finish, `sbatch --wait` prints "no longer found and exit
# code not found" and exits 0, whatever the job's exit code (MinJobAge=2 let
# that race happen). Ports: KILN_SLURM_PORT (slurmctld; slurmd uses the next
# one), default: a free pair found at start.
#
# Exit codes: 0 ok · 1 a daemon did not come up (the log tail is printed) ·
# 2 usage · 3 slurm-wlm or munge is not installed.
set -euo pipefail

DIR=${KILN_SLURM_DIR:-${TMPDIR:-/tmp}/kiln-slurm}
CONF=$DIR/slurm.conf
HOST=$(hostname -s)
WAIT_S=${KILN_SLURM_WAIT_S:-90}

say() { echo "[local-cluster] $*" >&2; }

need_tools() {
  local missing=()
  for t in munged slurmctld slurmd sinfo sbatch scontrol; do
    command -v "$t" >/dev/null 2>&1 || [[ -x /usr/sbin/$t ]] || missing+=("$t")
  done
  if ((${#missing[@]})); then
    say "missing: ${missing[*]}; install the Debian packages: apt-get install slurm-wlm munge (scripts/setup.sh does)"
    exit 3
  fi
}

PATH=$PATH:/usr/sbin:/sbin

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

free_port_pair() {
  python3 - <<'PY'
import socket
for _ in range(200):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p >= 65535: continue
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1)); t.close(); print(p); break
    except OSError:
        t.close()
PY
}

node_state() { SLURM_CONF=$CONF sinfo -h -n "$HOST" -o %T 2>/dev/null | head -1; }

show_logs() {
  for f in "$DIR"/log/*.log; do
    [[ -f $f ]] || continue
    echo "--- $f (last 20 lines)" >&2
    tail -n 20 "$f" >&2
  done
}

start() {
  need_tools
  if pid_alive "$DIR/slurmctld.pid" && pid_alive "$DIR/slurmd.pid" && pid_alive "$DIR/munged.pid"; then
    say "already running in $DIR (node $HOST: $(node_state))"
    echo "export SLURM_CONF=$CONF"
    return 0
  fi
  # A half-started or crashed earlier instance: stop what is left of it first.
  [[ -d $DIR ]] && stop >/dev/null 2>&1 || true
  mkdir -p "$DIR"/{munge,state,spool,log,tmp}
  chmod 700 "$DIR" "$DIR/munge"

  # munge: its own key and socket.
  if [[ ! -s $DIR/munge/munge.key ]]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 600 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed" || { say "munged did not start"; show_logs; exit 1; }

  local port=${KILN_SLURM_PORT:-$(free_port_pair)}
  cat >"$CONF" <<CONF
# Written by scripts/slurm/local-cluster.sh: a single-node cluster for tests.
ClusterName=kiln-local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
TmpFS=$DIR/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=4
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

  export SLURM_CONF=$CONF
  slurmctld -c -f "$CONF" || { say "slurmctld did not start"; show_logs; exit 1; }
  slurmd -f "$CONF" -N "$HOST" || { say "slurmd did not start"; show_logs; exit 1; }

  local t0=$SECONDS state=""
  while ((SECONDS - t0 < WAIT_S)); do
    state=$(node_state)
    case $state in
      idle*) break ;;
      down*|drain*) SLURM_CONF=$CONF scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
  done
  if [[ $state != idle* ]]; then
    say "node $HOST is not idle after ${WAIT_S}s (state: ${state:-unknown})"
    show_logs
    exit 1
  fi
  say "running in $DIR: node $HOST idle, $(nproc) CPUs, partition debug, slurmctld port $port"
  echo "export SLURM_CONF=$CONF"
}

stop_pid() {  # pidfile name
  local f=$DIR/$1.pid pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      say "$1 ($pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$f"
}

stop() {
  if [[ -f $CONF ]] && pid_alive "$DIR/slurmctld.pid"; then
    SLURM_CONF=$CONF timeout 10 scancel --quiet --full --partition=debug 2>/dev/null || true
    # Let slurmd's step daemons end their tasks before slurmd goes.
    for _ in $(seq 1 25); do
      [[ -z $(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.4
    done
  fi
  stop_pid slurmd
  stop_pid slurmctld
  stop_pid munged
  say "stopped ($DIR)"
}

status() {
  local up=0
  for d in munged slurmctld slurmd; do
    if pid_alive "$DIR/$d.pid"; then
      echo "$d: running (pid $(cat "$DIR/$d.pid"))"
    else
      echo "$d: not running"; up=1
    fi
  done
  if ((up == 0)); then
    SLURM_CONF=$CONF sinfo
    echo "export SLURM_CONF=$CONF"
  fi
  return $up
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env   (state in \$KILN_SLURM_DIR, default ${TMPDIR:-/tmp}/kiln-slurm)" >&2; exit 2 ;;
esac
