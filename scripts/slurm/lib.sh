# Shared by kiln.sbatch, array.sbatch and nightly.sbatch (sourced, not run).
#
# The rule these scripts follow (docs/catalog.md): SQLite must not live on a
# network filesystem. The catalog a job writes is on node-local disk
# ($SLURM_TMPDIR, else $TMPDIR, else /tmp); a consistent snapshot of it (SQLite's
# backup API, from a separate reader, which WAL allows while the run writes) is
# copied to shared storage at checkpoints and at the end, by copy-then-rename so
# a reader never sees half a file. A job that starts while its shared copy exists
# resumes from it: done jobs are skipped, every evaluated candidate is kept.

kiln_log() { echo "[kiln $(date +%H:%M:%S)] $*"; }
kiln_die() { kiln_log "ERROR: $1"; exit "${2:-1}"; }

# KILN_HOME, KILN_BIN, KILN_MPI_BIN, KILN_JOB_TAG, KILN_LOCAL_BASE; exports KILN_HOME.
kiln_setup() {
  if [[ -z ${KILN_HOME:-} ]]; then
    if [[ -d ${SLURM_SUBMIT_DIR:-$PWD}/worker/kiln_worker ]]; then KILN_HOME=${SLURM_SUBMIT_DIR:-$PWD}
    else kiln_die "set KILN_HOME to the Kiln tree (worker/, kernels/, configs/, db/)" 2; fi
  fi
  [[ -d $KILN_HOME/worker && -d $KILN_HOME/db/migrations ]] ||
    kiln_die "KILN_HOME=$KILN_HOME is not a Kiln tree (no worker/ or db/migrations/)" 2
  export KILN_HOME
  if [[ -z ${KILN_BIN:-} ]]; then
    if [[ -x $KILN_HOME/build/kiln ]]; then KILN_BIN=$KILN_HOME/build/kiln
    else KILN_BIN=$(command -v kiln || true); fi
  fi
  [[ -n $KILN_BIN && -x $KILN_BIN ]] || kiln_die "no kiln binary (set KILN_BIN; build with scripts/setup.sh)" 2
  KILN_MPI_BIN=${KILN_MPI_BIN:-$(dirname "$KILN_BIN")/kiln-mpi}
  KILN_JOB_TAG=${SLURM_JOB_ID:-local-$$}
  KILN_LOCAL_BASE=${SLURM_TMPDIR:-${TMPDIR:-/tmp}}
  kiln_log "Kiln $("$KILN_BIN" --version 2>/dev/null | awk '{print $2}') from $KILN_BIN, home $KILN_HOME," \
    "job ${SLURM_JOB_ID:-none} on $(hostname -s) (${SLURM_JOB_NUM_NODES:-1} node(s))"
}

# kiln_snapshot CATALOG SHARED REASON: copies a consistent snapshot of the local
# catalog to SHARED (a rollback-journal file, readable without -wal/-shm).
kiln_snapshot() {
  local cat=$1 shared=$2 reason=$3 snap
  [[ -f $cat ]] || { kiln_log "no catalog at $cat yet; nothing to copy ($reason)"; return 0; }
  snap=$(dirname "$cat")/snapshot.db
  rm -f "$snap"
  if ! python3 - "$cat" "$snap" <<'PY'
import sqlite3, sys
src = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=30)
dst = sqlite3.connect(sys.argv[2])
src.backup(dst)              # one step: a consistent read transaction
dst.execute("PRAGMA journal_mode = DELETE")
dst.close(); src.close()
PY
  then
    kiln_log "WARNING: could not snapshot $cat ($reason)"
    return 1
  fi
  mkdir -p "$(dirname "$shared")"
  local tmp=$shared.tmp-$KILN_JOB_TAG
  if cp "$snap" "$tmp" && mv -f "$tmp" "$shared"; then
    kiln_log "catalog copied to $shared ($reason)"
  else
    rm -f "$tmp"
    kiln_log "WARNING: could not copy the catalog to $shared ($reason)"
    return 1
  fi
}

# kiln_restore SHARED CATALOG: starts CATALOG from SHARED when it exists (resume),
# handing back jobs that the previous holder left running.
kiln_restore() {
  local shared=$1 cat=$2
  [[ -f $shared && ${KILN_RESUME:-1} == 1 ]] || return 0
  cp "$shared" "$cat" || kiln_die "cannot copy $shared to $cat"
  local n
  n=$(python3 - "$cat" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
n = con.execute("UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires = NULL "
                "WHERE state = 'running'").rowcount
con.commit(); con.close(); print(n)
PY
) || kiln_die "$shared is not a readable catalog"
  kiln_log "resuming from $shared ($n job(s) left running by an earlier run requeued)"
}

# kiln_start_checkpoints CATALOG SHARED EVERY_S / kiln_stop_checkpoints
kiln_start_checkpoints() {
  local cat=$1 shared=$2 every=$3
  ((every > 0)) || return 0
  ( trap - USR1 TERM; while sleep "$every"; do kiln_snapshot "$cat" "$shared" "checkpoint"; done ) &
  KILN_CKPT_PID=$!
}
kiln_stop_checkpoints() {
  if [[ -n ${KILN_CKPT_PID:-} ]]; then
    kill "$KILN_CKPT_PID" 2>/dev/null
    wait "$KILN_CKPT_PID" 2>/dev/null
    KILN_CKPT_PID=
  fi
}

# kiln_run_child CMD...: runs CMD in the background and waits for it. SIGUSR1
# (#SBATCH --signal=B:USR1@300: the wall time is near) and SIGTERM are passed on
# to it: kiln run and kiln-mpi run drain (stop claiming, release unfinished jobs,
# exit 130). Sets KILN_RC and KILN_DRAINED=1 when a signal came.
kiln_run_child() {
  KILN_DRAINED=0
  KILN_CHILD=
  trap 'KILN_DRAINED=1; kiln_log "SIGUSR1: the wall time is near; draining"; [[ -n $KILN_CHILD ]] && kill -USR1 "$KILN_CHILD" 2>/dev/null' USR1
  trap 'KILN_DRAINED=1; kiln_log "SIGTERM: stopping"; [[ -n $KILN_CHILD ]] && kill -TERM "$KILN_CHILD" 2>/dev/null' TERM
  "$@" &
  KILN_CHILD=$!
  while :; do
    wait "$KILN_CHILD"
    KILN_RC=$?
    # wait returns early (> 128) when a trapped signal arrives; the child goes on.
    if ((KILN_RC > 128)) && kill -0 "$KILN_CHILD" 2>/dev/null; then continue; fi
    break
  done
  KILN_CHILD=
  trap - USR1 TERM
}

# kiln_submit CATALOG MANIFEST: prints the batch id.
kiln_submit() {
  local out
  out=$("$KILN_BIN" submit "$2" --catalog "$1" --json) || kiln_die "kiln submit $2 failed" $?
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["batch"])' "$out"
  kiln_log "submitted $2: $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["jobs"], "jobs,", d["new_jobs"], "new, batch", d["batch"])' "$out")" >&2
}

# kiln_requeue_if_asked: after a drain, KILN_REQUEUE=1 puts this job back in the
# queue (#SBATCH --requeue); the next start resumes from the shared catalog.
kiln_requeue_if_asked() {
  if [[ ${KILN_REQUEUE:-0} == 1 && -n ${SLURM_JOB_ID:-} ]]; then
    kiln_log "requeueing job $SLURM_JOB_ID (KILN_REQUEUE=1)"
    scontrol requeue "$SLURM_JOB_ID" && return 0
    kiln_log "WARNING: scontrol requeue failed"
  fi
  return 1
}
