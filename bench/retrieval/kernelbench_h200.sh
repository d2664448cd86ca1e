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
#   RUN_TIMEOUT (seconds, default none: a TERM then stops the run cleanly)
#   WORKERS (default 4): KernelBench's inputs are GiBs each and every worker
#   caches its job's inputs and checks in float64 at full size: with the
#   default one worker per core, 12 workers ran an H200 out of memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
KB=${1:?usage: $0 /path/to/KernelBench}
OUT=${OUT:-/tmp/kb-h200}
K=${KILN:-build/kiln}
mkdir -p "$OUT"
DB="$OUT/kiln.db"
rm -f "$DB"
python3 bench/retrieval/kernelbench_dryrun.py "$KB" --kiln "$K" --out "$OUT" --manifest-out "$OUT/kb1.yaml" \
  ${EXPLORE:+--explore "$EXPLORE"} | tee "$OUT/dryrun.txt"
$K submit "$OUT/kb1.yaml" --catalog "$DB"
set +e
t0=$(date +%s)
if [[ -n ${RUN_TIMEOUT:-} ]]; then
  timeout -s TERM "$RUN_TIMEOUT" $K run --device gpu --workers "${WORKERS:-4}" --catalog "$DB" > "$OUT/run.log" 2>&1
else
  $K run --device gpu --workers "${WORKERS:-4}" --catalog "$DB" > "$OUT/run.log" 2>&1
fi
echo "kiln run exit $? in $(( $(date +%s) - t0 )) s (4: the LLM's jobs failed, as expected without one; 124/143: stopped by RUN_TIMEOUT)"
tail -1 "$OUT/run.log"
set -e
$K best --catalog "$DB" --json > "$OUT/best.json"
$K query --catalog "$DB" --csv \
  "SELECT op, state, json_extract(spec, '$.oracle.name') AS problem, message FROM jobs
   WHERE json_extract(spec, '$.oracle') IS NOT NULL ORDER BY id" > "$OUT/served_jobs.csv"
python3 - "$OUT" <<'PY'
import csv, json, math, sys
out = sys.argv[1]
jobs = list(csv.DictReader(open(f"{out}/served_jobs.csv")))
best = json.load(open(f"{out}/best.json"))
rows = best if isinstance(best, list) else best.get("jobs", best.get("rows", []))
speedups = []
for r in rows:
    sp = (((r.get("confirmed") or {}).get("baselines") or {}).get("eager") or {}).get("speedup")
    if sp:
        speedups.append(sp)
done = sum(1 for j in jobs if j["state"] == "done")
print(f"served by templates: {len(jobs)}; correct (done): {done}; failed: {len(jobs) - done}")
if speedups:
    g = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    print(f"geometric-mean speedup over eager (confirmed, {len(speedups)} jobs): {g:.3f}x")
for j in jobs:
    if j["state"] != "done":
        print(f"  {j['problem']} ({j['op']}): {j['state']}: {j['message'][:160]}")
PY
