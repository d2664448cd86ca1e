#!/usr/bin/env bash
# On a GPU node: builds kiln
# and kiln-replay there (no tests), then explores six anchor cases (add,
# softmax, layernorm, matmul 4096^3 and 8192^3, conv2d) twice on the GPU,
# exhaustively and with the halving strategy, each as its own `kiln run` (which
# reports its GPU busy fraction), and replays the strategies against the
# exhaustive run (bench/search/search_efficiency.py).
#   KILN_WORKERS   workers per run (default: kiln's, cores - 1, at most 12 per GPU)
#   RUN_TIMEOUT    seconds per `kiln run` (default 240); on expiry it drains
#   SEARCH_OPS     a file with the manifest's `operators:` list to explore
#                  instead of the six anchor cases, e.g. bench/search/holdout_ops.yaml
#                  (shapes the config model and the strategy were never tuned on)
#   PRIORS_FROM    catalogs (space-separated) of earlier runs on this GPU: the
#                  halving run starts from a merge of them (`kiln merge`), so it
#                  takes its priors there (src/search/priors.h), and runs in a
#                  catalog of its own (the exhaustive run's results must not be
#                  its priors); the replays add halving with priors from them,
#                  leave-one-out (search_efficiency.py --priors-from)
# Writes under $OUT (or ./out): exhaustive.{log,json}, halving.{log,json},
# search.md, live.md (with PRIORS_FROM: the live halving run against the
# exhaustive best), kiln-h200-search-slim.db (bench/search/slim_catalog.py)
set -uo pipefail
. "$(dirname "$0")/../gpu_setup.sh" /tmp/search-build.log kiln-replay  # cd to the tree; OUT; builds; K
. bench/search/search_manifest.sh
export KILN_CATALOG=/tmp/kiln-h200-search.db
rm -f "$KILN_CATALOG"*
W=${KILN_WORKERS:+--workers $KILN_WORKERS}
if [ -n "${SEARCH_OPS:-}" ]; then
  OPS=$(sed -n '/^ *-/,$p' "$SEARCH_OPS")  # the list, without comments above it
else  # the six anchor cases the first H200 catalog recorded (docs/performance-journal.md)
  OPS=$(cat <<'YAML'
  - {op: add, input_shape: [67108864], dtype: fp32}
  - {op: softmax, input_shape: [16384, 4096], dtype: bf16, knowledge_constraints: [avoid_global_memory]}
  - {op: layernorm, input_shape: [16384, 4096], dtype: bf16}
  - op: matmul
    shapes: [[4096, 4096, 4096], [8192, 8192, 8192]]
    dtype: bf16
    knowledge_constraints: [use_matrix_cores, maximize_register_reuse]
  - op: conv2d
    input_shape: [64, 3, 224, 224]
    dtype: fp16
    params: {out_channels: 64, kernel_size: 3, padding: 1}
    knowledge_constraints: [avoid_global_memory, maximize_register_reuse]
YAML
)
fi
for s in exhaustive halving; do search_manifest "search_$s" "$s" "$OPS" >/tmp/search_$s.yaml; done
HALVING_CATALOG=$KILN_CATALOG
if [ -n "${PRIORS_FROM:-}" ]; then
  HALVING_CATALOG=/tmp/kiln-h200-search-halving.db
  rm -f "$HALVING_CATALOG"*
  # shellcheck disable=SC2086  # a list of paths
  $K merge "$HALVING_CATALOG" $PRIORS_FROM | tail -1
fi
for s in exhaustive halving; do
  cat=$KILN_CATALOG
  [ $s = halving ] && cat=$HALVING_CATALOG
  b=$(KILN_CATALOG=$cat $K submit /tmp/search_$s.yaml --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["batch"])')
  KILN_CATALOG=$cat timeout -s TERM "${RUN_TIMEOUT:-240}" $K run --device gpu $W --batch "$b" --json \
    >"$OUT/$s.json" 2>"$OUT/$s.log"
  grep -E "finished|done |FAILED|similar jobs" "$OUT/$s.log" | cut -c1-160
  cat "$OUT/$s.json"
done
$K best | cut -c1-160
if [ -n "${PRIORS_FROM:-}" ]; then
  # The live halving run (priors from the merged catalogs) against the exhaustive best.
  python3 - "$HALVING_CATALOG" "$KILN_CATALOG" "$b" <<'PY' | tee "$OUT/live.md"
import sqlite3, sys
halving, exhaustive, batch = sys.argv[1:]
h = sqlite3.connect(halving)
e = sqlite3.connect(exhaustive)
print("| job | space | live halving evaluations | fewer | live best / exhaustive best |")
print("| --- | ---: | ---: | ---: | ---: |")
for jid, op, shape, dtype in h.execute(
        "SELECT j.id, j.op, j.shape, j.dtype FROM jobs j JOIN batch_jobs b ON b.job_id = j.id "
        "WHERE b.batch_id = ? ORDER BY j.id", (batch,)):
    n, best = h.execute("SELECT COUNT(*), MIN(e.median_ms) FROM candidates c JOIN evaluations e "
                        "ON e.candidate_id = c.id WHERE c.job_id = ?", (jid,)).fetchone()
    space, ex = e.execute("SELECT COUNT(*), MIN(e.median_ms) FROM jobs j JOIN candidates c ON c.job_id = j.id "
                          "JOIN evaluations e ON e.candidate_id = c.id WHERE j.op = ? AND j.shape = ? "
                          "AND j.dtype = ?", (op, shape, dtype)).fetchone()
    if best and ex:
        print(f"| {op} {shape} {dtype} | {space} | {n} | {space / n:.1f}x | {best / ex:.3f} |")
PY
fi
python3 - <<PY
import sqlite3; c = sqlite3.connect("$KILN_CATALOG"); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
PY
# a GPU run's catalog is mostly code objects: the slim copy comes back, and replays
python3 bench/search/slim_catalog.py "$KILN_CATALOG" "$OUT/kiln-h200-search-slim.db"
# shellcheck disable=SC2086
python3 bench/search/search_efficiency.py "$KILN_CATALOG" --replay build-gpu/kiln-replay --seeds 50 \
  ${PRIORS_FROM:+--priors-from "$(echo $PRIORS_FROM | tr ' ' ,)"} | tee "$OUT/search.md"
