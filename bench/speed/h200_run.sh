#!/usr/bin/env bash
# On a GPU node: builds Kiln there, runs the
# quickstart and the anchor manifest on the GPU with measured latencies, then
# times torch eager on the same shapes with the same harness.
#   KILN_RUN_TIMEOUT  seconds for `kiln run` (default 420); on expiry it drains
#   MANIFESTS         manifests to run (default: quickstart + anchors_h200)
#   KILN_WORKERS      workers (default: kiln's, cores - 1)
#   KILN_CPUS         taskset CPU list for the run and the baselines (e.g. 0-15:
#                     one GPU's share of a two-GPU machine); CUDA_VISIBLE_DEVICES
#                     picks the GPU
#   KILN_SKIP_BUILD=1 use the build-gpu/kiln already there
#   KILN_CATALOG      default /tmp/kiln-h200.db
# Writes under $OUT (or ./out): run.log, best.txt, table.md, perf.json, kiln-h200-slim.db
set -uo pipefail
. "$(dirname "$0")/../gpu_setup.sh" /tmp/h200-run-build.log  # cd to the tree; OUT; builds; K
export KILN_CATALOG=${KILN_CATALOG:-/tmp/kiln-h200.db}
PIN=(${KILN_CPUS:+taskset -c $KILN_CPUS})
rm -f "$KILN_CATALOG"*
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
for m in ${MANIFESTS:-jobs/quickstart.yaml jobs/examples/anchors_h200.yaml}; do $K submit "$m"; done
timeout -s TERM "${KILN_RUN_TIMEOUT:-420}" "${PIN[@]}" $K run --device gpu ${KILN_WORKERS:+--workers $KILN_WORKERS} \
  --scratch "$KILN_CATALOG.scratch" 2>&1 | tee "$OUT/run.log" | grep -v "^\[.*\]   " | tail -40
$K status | tee "$OUT/status.txt"
$K best > "$OUT/best.txt"; cat "$OUT/best.txt" | cut -c1-200
"${PIN[@]}" python3 bench/speed/torch_baseline.py --catalog "$KILN_CATALOG" --json "$OUT/perf.json" | tee "$OUT/table.md"
python3 - <<PY
import sqlite3; c = sqlite3.connect("$KILN_CATALOG"); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
PY
# the catalog without its code objects (small enough to come back; replayable)
python3 bench/search/slim_catalog.py "$KILN_CATALOG" "$OUT/kiln-h200-slim.db"
