#!/usr/bin/env bash
# Estimate-only shortlist + `kiln-rt tune` against the exhaustive measured best
# (docs/packaging.md "Estimated targets ship a shortlist"), on one NVIDIA H200.
#
# The H200 plays both parts. A copy of configs/targets/H200.yaml named
# H200-est, which no device matches, makes its jobs estimate-only, exactly as
# an AMD target is where Kiln runs on NVIDIA: candidates compiled and checked,
# ranked by the static model, nothing timed. The same manifest's H200 jobs are
# explored exhaustively and measured. Then:
#   pkg-exh = kiln package --target H200      (rank 0: the exhaustive measured best)
#   pkg-est = kiln package --target H200-est  (a shortlist of at most 8 per kernel)
#   kiln-rt tune on both, in one process each, same timing code (device events,
#   L2 flush, median of --reps): the tuned pick against the exhaustive best;
#   kiln import-measurements brings the tuned picks back as `measured`.
# Operators: the anchors (jobs/examples/anchors_h200.yaml) and the held-out
# shapes of bench/search/holdout_ops.yaml, which tuned nothing.
#   KILN_SKIP_BUILD=1 reuse build-gpu/;  REPS (default 100)
# Prints a table; writes $OUT/shortlist.tgz (logs, measurements, table).
set -uo pipefail
W=/tmp/shortlist
. "$(dirname "$0")/h200_est_home.sh"  # cd to the tree; ROOT, OUT, a clean $W; builds; K, RT; KILN_HOME
python3 - "$W/manifest.yaml" <<'PY'
import sys, yaml
a = yaml.safe_load(open("jobs/examples/anchors_h200.yaml"))
h = yaml.safe_load(open("bench/search/holdout_ops.yaml"))
m = {"name": "shortlist_h200", "targets": ["H200", "H200-est"], "defaults": a["defaults"],
     "operators": a["operators"] + h["operators"]}
yaml.safe_dump(m, open(sys.argv[1], "w"), sort_keys=False)
PY
$K submit "$W/manifest.yaml" >"$W/submit.log" 2>&1 || { cat "$W/submit.log"; exit 1; }
t0=$(date +%s)
timeout -s TERM "${KILN_RUN_TIMEOUT:-330}" $K run --device gpu >"$W/run.log" 2>&1
echo "run: rc=$? $(( $(date +%s) - t0 )) s; $(tail -1 "$W/run.log" | cut -c1-200)"
for t in H200:exh H200-est:est; do
  tgt=${t%%:*}; n=${t##*:}
  t0=$(date +%s)
  # --no-neighbours: the shortlist is tuned at the job's shape only
  timeout "${PACKAGE_TIMEOUT:-240}" $K package --target "$tgt" --device gpu --no-neighbours --out "$W/pkg-$n" \
    >"$W/package-$n.log" 2>&1
  echo "package $tgt: rc=$? $(( $(date +%s) - t0 )) s; $(tail -1 "$W/package-$n.log" | cut -c1-160)"
done
for n in exh est; do
  t0=$(date +%s)
  timeout 180 "$RT" tune "$W/pkg-$n" --reps "${REPS:-100}" --out "$W/tune-$n.json" >"$W/tune-$n.txt" 2>&1
  echo "kiln-rt tune pkg-$n: rc=$? $(( $(date +%s) - t0 )) s"
done
# The tune ran on the H200, so H200-est now has a device: say so in its target
# file (as a deployment adds its device's name), else the import refuses
# measurements from a device that serves none of the file's targets.
sed -i 's/^device_match:.*/device_match: ["H200"]/' "$W/home/configs/targets/H200-est.yaml"
$K import-measurements "$W/tune-est.json" >"$W/import.log" 2>&1
echo "import-measurements: rc=$? $(tail -1 "$W/import.log" | cut -c1-200)"
$K best --json >"$W/best.json" 2>"$W/best.err"
python3 bench/deploy/shortlist_compare.py "$W" | tee "$W/table.md"
grep -h "" "$W"/tune-*.txt >"$W/tune-all.txt" 2>/dev/null
tar czf "$OUT/shortlist.tgz" -C /tmp --exclude=shortlist/pkg-exh/objects --exclude=shortlist/pkg-est/objects \
  --exclude='shortlist/kiln.db*' --exclude=shortlist/home shortlist
# the run's catalog, for the dashboard screenshots (bench/deploy/dashboard_screenshots.py)
gzip -c "$W/kiln.db" >"$OUT/shortlist-kiln.db.gz" 2>/dev/null || true
