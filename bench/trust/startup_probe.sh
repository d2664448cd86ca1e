#!/usr/bin/env bash
# On a GPU node: where the idle start of an exploration goes. Runs `kiln run
# --device gpu` on MANIFEST, each round with a fresh catalog, and stops it
# (SIGTERM: its jobs go back to the queue) once it has printed its "first
# results:" line (every worker's first evaluation answered, with the phases
# the workers reported; src/explore/first_results.h) or after PROBE_RUN_S.
# Prints per round the run's "workers ready" and "first results" lines and
# bench/trust/startup_report.py's table (each worker's first evaluation from
# the catalog, and when nvidia-smi first read the GPU >= 50% busy).
#   ROUNDS       "CACHE:FORK ..." (default "cold:0 warm:0 cold:1 warm:1"): CACHE cold
#                starts from an empty Triton cache, warm reuses the previous round's
#                of the same FORK; FORK is KILN_FORK_SERVER (0: each worker imports
#                torch, Triton and torch._dynamo itself -- the default for 12 workers on
#                16 cores; 1: forked from one process that imported them once)
#   MANIFEST     default jobs/examples/anchors_h200.yaml
#   WORKERS      --workers (default: kiln run's choice)
#   PROBE_RUN_S  the longest a round runs (default 60)
#   DEVICE       kiln run's --device (default gpu; cpu tries the script itself without a GPU)
#   KILN_SKIP_BUILD=1 reuse build-gpu/ (the only build: scripts/gpu/build_on_device.sh's kiln)
# Writes $OUT/startup_probe.txt (what it prints) and $OUT/startup_probe.tgz (each
# round's run log and nvidia-smi readings).
set -uo pipefail
W=/tmp/startup-probe
rm -rf "$W"; mkdir -p "$W"
. "$(dirname "$0")/../gpu_setup.sh" "$W/build.log"  # cd to the tree; OUT; builds; K
MANIFEST=${MANIFEST:-jobs/examples/anchors_h200.yaml}
RUN_S=${PROBE_RUN_S:-60}
report=$OUT/startup_probe.txt
: >"$report"
say() { echo "$@" | tee -a "$report"; }
say "startup probe: $MANIFEST, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1), $(nproc) cores"
for round in ${ROUNDS:-cold:0 warm:0 cold:1 warm:1}; do
  cache=${round%%:*} fork=${round##*:}
  d=$W/$cache-fork$fork
  scratch=$W/scratch-fork$fork  # the Triton cache is <scratch>/triton-cache
  mkdir -p "$d"
  [[ $cache == cold ]] && rm -rf "$scratch"
  KILN_CATALOG=$d/k.db $K submit "$MANIFEST" >/dev/null || exit 1
  nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 200 >"$d/smi.csv" 2>/dev/null &
  smi=$!
  t0=$(date +%s.%N)
  KILN_FORK_SERVER=$fork $K run --device "${DEVICE:-gpu}" --catalog "$d/k.db" --scratch "$scratch" ${WORKERS:+--workers $WORKERS} \
    >/dev/null 2>"$d/run.log" &
  run=$!
  end=$(( $(date +%s) + RUN_S ))
  while kill -0 "$run" 2>/dev/null && ! grep -q "first results:" "$d/run.log" && (( $(date +%s) < end )); do
    sleep 0.2
  done
  kill -TERM "$run" 2>/dev/null
  wait "$run"
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  say ""
  say "== $cache Triton cache, KILN_FORK_SERVER=$fork: stopped after $(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t0") s"
  grep -E "workers ready|first results:|warning|error" "$d/run.log" | tee -a "$report"
  python3 bench/trust/startup_report.py --catalog "$d/k.db" --t0 "$t0" --smi "$d/smi.csv" 2>&1 | tee -a "$report"
  rm -f "$d"/k.db*
done
tar czf "$OUT/startup_probe.tgz" --exclude="startup-probe/scratch-*" -C /tmp startup-probe
