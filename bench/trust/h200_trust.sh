#!/usr/bin/env bash
# On a GPU node: the numbers a deployment gets,
# end to end and checked from outside Kiln.
#   1. build kiln and kiln-rt (scripts/gpu/build_on_device.sh)
#   2. explore the manifests on the GPU; every measured job ends with its
#      confirmation round (finalists + torch eager, interleaved; raw samples)
#   3. kiln best (text and JSON), the perf table regenerated from the catalog
#   4. kiln package --target H200 --device gpu (verification data, ranges)
#   5. kiln-rt verify with no Python on the path, kiln-rt bench
#   6. bench/trust/independent_bench.py: the package's cubins loaded through the CUDA
#      driver with ctypes and timed with triton.testing.do_bench, torch eager and
#      cuBLAS in the same harness
#   MANIFESTS         default: jobs/quickstart.yaml jobs/examples/anchors_h200.yaml
#   KILN_RUN_TIMEOUT  seconds for `kiln run` (default 360)
#   KILN_SKIP_BUILD=1 reuse build-gpu/
#   TAG               name of the result folder (default trust)
# Writes $OUT/$TAG.tgz (run log, nvidia-smi utilisation every 200 ms, best, package manifest, verify, benches, slim catalog, the docs copy of the catalog).
set -uo pipefail
TAG=${TAG:-trust}
W=/tmp/$TAG
rm -rf "$W"; mkdir -p "$W"
. "$(dirname "$0")/../gpu_setup.sh" "$W/build.log"  # cd to the tree; OUT; builds; K, RT
export KILN_CATALOG=$W/kiln.db
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$W/gpu.txt"
for m in ${MANIFESTS:-jobs/quickstart.yaml jobs/examples/anchors_h200.yaml}; do $K submit "$m" >/dev/null; done
t0=$(date +%s)
# the driver's own utilisation every 200 ms beside the run (bench/trust/util_timeline.py)
nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 200 >"$W/smi.csv" 2>/dev/null &
smi=$!
timeout -s TERM "${KILN_RUN_TIMEOUT:-360}" $K run --device gpu --json >"$W/run.json" 2>"$W/run.log"
rc=$?
kill "$smi" 2>/dev/null
echo "run: rc=$rc $(( $(date +%s) - t0 )) s; $(grep -oE '"gpu_(busy|kernel|driver)_fraction":[0-9.]*' "$W/run.json" | tr '\n' ' ')"
python3 bench/trust/util_timeline.py "$W/smi.csv" | tee "$W/util.txt"
$K best >"$W/best.txt" 2>&1; $K best --json >"$W/best.json" 2>/dev/null
grep -E "H200" "$W/best.txt" | cut -c1-200
python3 bench/perf_table.py --catalog "$KILN_CATALOG" --kiln "$K" --copy-tbs 4.25 --matmul-tflops 671 \
  >"$W/perf_table.md" 2>&1 || echo "perf_table failed: $(tail -3 "$W/perf_table.md")"
t0=$(date +%s)
$K package --target H200 --device gpu --out "$W/pkg" >"$W/package.log" 2>&1
echo "package: rc=$? $(( $(date +%s) - t0 )) s; $(tail -1 "$W/package.log")"
env -i PATH=/usr/bin:/bin "$RT" verify "$W/pkg" >"$W/verify.txt" 2>&1
echo "kiln-rt verify (no Python): rc=$? $(grep -c '^PASS' "$W/verify.txt") PASS $(grep -c '^FAIL' "$W/verify.txt") FAIL"
grep -E "^FAIL" "$W/verify.txt" | head -5
"$RT" bench "$W/pkg" --out "$W/rtbench.json" >"$W/rtbench.txt" 2>&1
echo "kiln-rt bench: rc=$?"; tail -20 "$W/rtbench.txt"
python3 bench/trust/independent_bench.py "$W/pkg" --json "$W/independent.json" >"$W/independent.txt" 2>&1
echo "independent harness: rc=$?"; cat "$W/independent.txt" | tail -20
python3 bench/search/slim_catalog.py "$KILN_CATALOG" "$W/kiln-h200-slim.db" >/dev/null 2>&1
# the catalog without its code objects' bytes: perf_table.py regenerates the tables from it
python3 bench/search/slim_catalog.py "$KILN_CATALOG" "$W/kiln-h200-docs.db" --keep-best >/dev/null 2>&1 \
  && xz -f "$W/kiln-h200-docs.db"
tar czf "$OUT/$TAG.tgz" -C /tmp --exclude="$TAG/pkg/objects" --exclude="$TAG/kiln.db*" "$TAG"
