#!/bin/bash
# KernelBench level 1 on an H200, served by templates alone (no LLM configured):
#
#   bench/retrieval/kernelbench_h200.sh /path/to/KernelBench [--jobs-only]
#
# Plans the 100 problems (kernelbench_dryrun.py), submits them, runs them on the
# GPU (the unserved ones fail at once for want of an LLM: `kiln run` exits 4),
# and prints the served count, the jobs done with a correct kernel (each checked
# against its template's reference, which the worker first checked against the
# KernelBench module: the oracle) and the geometric-mean speedup of the
# confirmed best over PyTorch eager. Details in $OUT (default /tmp/kb-h200).
#   KILN (default build/kiln)   EXPLORE (the manifest's exploration mapping)
#   RUN_TIMEOUT (seconds, default none): `kiln run --time-limit`, which claims
#   the cheapest jobs first and at the limit puts the unfinished ones back
#   WORKERS (default 2): KernelBench's inputs are GiBs each (up to 16 GiB),
#   every worker caches its job's seeds and checks in float64 at full size:
#   12 workers, then 4, then 2 ran an H200 out of memory on some jobs; with
#   the worker's cache and confirmation round bounded to its share of the GPU,
#   2 workers had 1 memory failure in 50 jobs (2026-12-02). Each worker's share
#   is the GPU over WORKERS; a job whose float64 check needs more than that
#   (pool2d over 16 GiB: 76 GiB) checks alone, the other workers giving back
#   their cached memory first (docs/architecture.md, evaluate: Memory).
#   RESUME=1: keep $OUT/kiln.db and run its queued jobs again (after a
#   RUN_TIMEOUT stop, or on a new node with the catalog copied there)
#   INDEPENDENT=1: then package the done jobs for H200 (`kiln package
#   --no-neighbours`) and time every packaged kernel and torch eager with
#   bench/trust/independent_bench.py (CUDA driver + do_bench, nothing of
#   Kiln's timing): $OUT/independent.txt / .json; INDEPENDENT_ROUNDS (default 3)
#   VERBOSE=1: `kiln run --verbose` (the workers' own log lines in run.log)
set -euo pipefail
cd "$(dirname "$0")/../.."
KB=${1:?usage: $0 /path/to/KernelBench}
OUT=${OUT:-/tmp/kb-h200}
K=${KILN:-build/kiln}
mkdir -p "$OUT"
DB="$OUT/kiln.db"
if [[ ${RESUME:-0} == 1 && -f $DB ]]; then
  echo "resuming $DB: $($K status --catalog "$DB" | head -1)"
else
  rm -f "$DB" "$OUT/run.log"
  python3 bench/retrieval/kernelbench_dryrun.py "$KB" --kiln "$K" --out "$OUT" --manifest-out "$OUT/kb1.yaml" \
    ${EXPLORE:+--explore "$EXPLORE"} | tee "$OUT/dryrun.txt"
  $K submit "$OUT/kb1.yaml" --catalog "$DB"
fi
set +e
t0=$(date +%s)
$K run --device gpu --workers "${WORKERS:-2}" --catalog "$DB" ${RUN_TIMEOUT:+--time-limit "$RUN_TIMEOUT"} \
  ${VERBOSE:+--verbose} >> "$OUT/run.log" 2>&1
echo "kiln run exit $? in $(( $(date +%s) - t0 )) s (4: the LLM's jobs failed, as expected without one; 5: RUN_TIMEOUT reached)"
tail -1 "$OUT/run.log"
set -e
# the result, from the catalog (kernelbench_table.py: served, correct, incorrect
# candidates, failures by cause, geometric-mean speedup over eager, one row per problem)
python3 bench/retrieval/kernelbench_table.py --catalog "$DB" --kiln "$K" --out "$OUT/table.md" | head -4
if [[ ${INDEPENDENT:-0} == 1 ]]; then
  rm -rf "$OUT/pkg"
  $K package --catalog "$DB" --target H200 --out "$OUT/pkg" --device gpu --no-neighbours > "$OUT/package.log" 2>&1 \
    || { echo "kiln package failed:"; tail -20 "$OUT/package.log"; exit 1; }
  set +e  # exit 1 when a kernel is not correct: its row says which
  python3 bench/trust/independent_bench.py "$OUT/pkg" --json "$OUT/independent.json" --rounds "${INDEPENDENT_ROUNDS:-3}" \
    > "$OUT/independent.txt" 2>&1
  echo "independent harness exit $?"; tail -1 "$OUT/independent.txt"
fi
