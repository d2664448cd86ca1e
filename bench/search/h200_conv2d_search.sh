#!/usr/bin/env bash
# On a GPU node: the seed conv2d case
# (64x3x224x224 fp16 -> 64, 3x3, pad 1) explored live twice on the GPU, every
# config (exhaustive) and with the halving strategy (the config model with the
# template's hints), each on a fresh catalog with a cold Triton cache, and
# prints evaluations, failures, best and GPU busy of both. KILN_WORKERS
# (default 15) workers per run. Writes the logs under $OUT (default ./out),
# and a slim copy of each catalog (bench/search/slim_catalog.py) for offline replays.
#   CONV_SHAPE   default [64, 3, 224, 224] (the seed case)
#   CONV_PARAMS  default {out_channels: 64, kernel_size: 3, padding: 1}
#   STRATEGIES   default "exhaustive halving"
set -uo pipefail
. "$(dirname "$0")/../gpu_setup.sh" /tmp/conv-search-build.log  # cd to the tree; OUT; builds; K
. bench/search/search_manifest.sh
for s in ${STRATEGIES:-exhaustive halving}; do
  d=/tmp/conv-$s
  rm -rf "$d" && mkdir -p "$d"
  search_manifest "conv2d_$s" "$s" "  - {op: conv2d, input_shape: ${CONV_SHAPE:-[64, 3, 224, 224]}, dtype: fp16, params: ${CONV_PARAMS:-{out_channels: 64, kernel_size: 3, padding: 1\}}}" >"$d/m.yaml"
  KILN_CATALOG=$d/k.db $K submit "$d/m.yaml" >/dev/null || exit 1
  KILN_CATALOG=$d/k.db $K run --device gpu --workers "${KILN_WORKERS:-15}" --scratch "$d/s" --json \
    >"$OUT/$s.json" 2>"$OUT/$s.log"
  grep -E "finished" "$OUT/$s.log" | cut -c1-200
  KILN_CATALOG=$d/k.db $K query "SELECT e.status, COUNT(*), MIN(e.median_ms), MIN(substr(e.message, 1, 120)) FROM evaluations e GROUP BY e.status" | tee "$OUT/$s.statuses.txt"
  KILN_CATALOG=$d/k.db $K best | cut -c1-200 | tee "$OUT/$s.best.txt"
  python3 bench/search/slim_catalog.py "$d/k.db" "$OUT/$s-slim.db"
done
