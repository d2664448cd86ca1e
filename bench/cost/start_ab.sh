#!/usr/bin/env bash
# On a GPU node: the same small batch under two
# values of one start-up setting, alternating, for each worker count; each run
# with a fresh catalog and a cold Triton cache. The setting is an environment
# variable of kiln run and its workers (AB) and its two values (VALUES), e.g.
#   AB=KILN_FORK_SERVER VALUES="1 0"   workers forked by the fork server, or started afresh
# Prints one row per run: wall time, when the workers were ready (with the fork
# server, counted from the first fork: the server's imports come before it and
# show as "preload"), the first and last evaluation's record after the start,
# and the medians of the first evaluations' GPU warm-up phases (timings.warm_up:
# CUDA context, comparison-kernel compile, the wait for the warm-up).
#   AB        default KILN_FORK_SERVER     VALUES  default "1 0" ('""' for the empty value)
#   MANIFEST  default bench/cost/small_batch.yaml
#   WORKERS   default "12 24"     REPS  default 2
# Writes $OUT/start_ab.jsonl (one object per run) and the run logs in
# $OUT/start_ab-logs.tar.gz.
set -uo pipefail
. "$(dirname "$0")/../gpu_setup.sh" /tmp/fs-build.log  # cd to the tree; OUT; builds; K
M=${MANIFEST:-bench/cost/small_batch.yaml}
AB=${AB:-KILN_FORK_SERVER}
R=$OUT/start_ab.jsonl; : > "$R"
LOGS=/tmp/fs-logs; rm -rf $LOGS; mkdir -p $LOGS
for rep in $(seq 1 "${REPS:-2}"); do for w in ${WORKERS:-12 24}; do for fs in ${VALUES:-1 0}; do
  [ "$fs" = '""' ] && fs=""
  d=/tmp/fs-$rep-$w-${fs:-unset}; rm -rf "$d"; mkdir -p "$d"
  KILN_CATALOG=$d/k.db $K submit "$M" > /dev/null || exit 1
  t0=$(date +%s.%N)
  env "$AB=$fs" $K run --device gpu --gpus 1 --catalog "$d/k.db" --scratch "$d/s" --workers "$w" \
    --json > "$d/run.json" 2> "$d/run.log"
  rc=$?
  t1=$(date +%s.%N)
  cp "$d/run.log" "$LOGS/run-$rep-$w-${fs:-unset}.log"
  python3 - "$d" "$rep" "$w" "$fs" "$rc" "$t0" "$t1" "$AB" >> "$R" <<'PY'
import json, re, sqlite3, statistics as st, sys
d, rep, w, fs, rc, t0, t1 = sys.argv[1:8]
t0, t1 = float(t0), float(t1)
log = open(f"{d}/run.log").read()
m = re.search(r"workers ready: the last after ([\d.]+) s \(median steps: ([^)]*)\)", log)
c = sqlite3.connect(f"{d}/k.db")
rows = c.execute("SELECT created_at, result FROM evaluations ORDER BY created_at").fetchall()
warm = [json.loads(r[1]).get("timings", {}).get("warm_up") for r in rows]
warm = [x for x in warm if x]
print(json.dumps({
    "rep": int(rep), "workers": int(w), "setting": sys.argv[8], "value": fs, "rc": int(rc), "wall_s": round(t1 - t0, 2),
    "workers_ready_s": float(m.group(1)) if m else None, "steps": m.group(2) if m else None,
    "evaluations": len(rows),
    "first_eval_s": round(rows[0][0] - t0, 2) if rows else None,
    "last_eval_s": round(rows[-1][0] - t0, 2) if rows else None,
    "warm_up_median_s": {k: round(st.median(x.get(k, 0) for x in warm), 2)
                         for k in ("context_s", "compile_s", "kernels_s", "wait_s")} if warm else None}))
PY
done; done; done
tar czf "$OUT/start_ab-logs.tar.gz" -C /tmp fs-logs
python3 - "$R" <<'PY'
import json, sys
print("| rep | workers | setting | rc | wall s | ready s | first eval s | last eval s | warm-up context / compile / wait s |")
print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
for l in open(sys.argv[1]):
    r = json.loads(l)
    wu = r["warm_up_median_s"] or {}
    print(f"| {r['rep']} | {r['workers']} | {r['setting']}={r['value']!r} | {r['rc']} | {r['wall_s']:.2f} | "
          f"{r['workers_ready_s'] or 0:.2f} | {r['first_eval_s']} | {r['last_eval_s']} | "
          f"{wu.get('context_s')} / {wu.get('compile_s')} / {wu.get('wait_s')} |")
PY
