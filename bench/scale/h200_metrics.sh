#!/usr/bin/env bash
# On a GPU node: kiln run's Prometheus metrics on a real GPU run.
#   1. build kiln (scripts/gpu/build_on_device.sh; KILN_SKIP_BUILD=1 reuses build-gpu/)
#   2. kiln run --device gpu --metrics 127.0.0.1:0 --metrics-file on MANIFEST,
#      scraped every 2 s while it runs
#   3. a table: the final metrics beside the run's own --json summary (GPU busy
#      by lock-held spans and by device events, candidates, jobs), scrapes seen
#      mid-run, and `promtool check metrics` where promtool is installed
#   MANIFEST          default: jobs/quickstart.yaml
#   KILN_RUN_TIMEOUT  seconds for `kiln run` (default 300)
#   KILN_BIN          the kiln binary (default: build-gpu/kiln)
# Writes $OUT/metrics.tgz (run log, summary, every scrape, the final textfile).
set -uo pipefail
W=/tmp/kiln-metrics
rm -rf "$W"; mkdir -p "$W/scrapes"
. "$(dirname "$0")/../gpu_setup.sh" "$W/build.log"  # cd to the tree; OUT; builds; K
K=${KILN_BIN:-$K}
export KILN_CATALOG=$W/kiln.db
$K submit "${MANIFEST:-jobs/quickstart.yaml}" >/dev/null
timeout -s TERM "${KILN_RUN_TIMEOUT:-300}" $K run --device gpu --json --metrics 127.0.0.1:0 \
  --metrics-file "$W/kiln.prom" --metrics-file-interval 5 >"$W/run.json" 2>"$W/run.log" &
pid=$!
python3 - "$W" "$pid" <<'PY'
import os, re, sys, time, urllib.request
w, pid = sys.argv[1], int(sys.argv[2])
url, n = None, 0
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    if url is None:
        m = re.search(r"metrics at (http://\S+/metrics)", open(f"{w}/run.log").read())
        url = m.group(1) if m else None
    if url:
        try:
            body = urllib.request.urlopen(url, timeout=5).read().decode()
            open(f"{w}/scrapes/{n:04d}.prom", "w").write(body)
            n += 1
        except Exception:
            pass
    time.sleep(2)
PY
wait $pid; rc=$?
python3 - "$W" "$rc" <<'PY'
import json, glob, re, sys
w, rc = sys.argv[1], sys.argv[2]
def parse(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out
final = parse(open(f"{w}/kiln.prom").read())
try:
    s = json.loads(open(f"{w}/run.json").read().strip().splitlines()[-1])
except Exception:
    s = {}
scrapes = sorted(glob.glob(f"{w}/scrapes/*.prom"))
evals = lambda m: sum(v for k, v in m.items() if k.startswith("kiln_candidates_evaluated_total"))
mid = [evals(parse(open(p).read())) for p in scrapes]
def metric(prefix):
    vals = [v for k, v in final.items() if k.startswith(prefix)]
    return "-" if not vals else " ".join(f"{v:.4g}" for v in vals)
def account(a):
    vals = [v for k, v in final.items() if k.startswith("kiln_gpu_busy_ratio") and f'account="{a}"' in k]
    return "-" if not vals else " ".join(f"{v:.4g}" for v in vals)
rows = [
    ("run exit code", rc, ""),
    ("scrapes during the run", len(scrapes), f"evaluations seen: {mid[:1]} .. {mid[-1:]}"),
    ("candidates evaluated", s.get("candidates"), evals(final)),
    ("jobs done", s.get("jobs_done"), final.get('kiln_jobs_finished_total{result="done"}')),
    ("GPU busy, lock-held", s.get("gpu_busy_fraction"), account("lock_held")),
    ("GPU busy, device events", s.get("gpu_kernel_fraction"), account("device_kernel")),
    ("GPU kernel seconds", s.get("gpu_kernel_s"), metric("kiln_gpu_kernel_seconds_total")),
    ("compile seconds", "", metric("kiln_compile_seconds_total")),
]
print(f"{'':28} {'kiln run --json':>18}  metrics")
for name, a, b in rows:
    print(f"{name:28} {str(a):>18}  {b}")
PY
if command -v promtool >/dev/null; then
  promtool check metrics <"$W/kiln.prom" && echo "promtool check metrics: ok"
else
  echo "promtool not installed: not checked here (CI checks the format)"
fi
tar -C /tmp --exclude kiln-metrics/kiln.db -czf "$OUT/metrics.tgz" kiln-metrics
echo "details: $OUT/metrics.tgz"
