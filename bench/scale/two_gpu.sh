#!/usr/bin/env bash
# On a node with two GPUs: the
# same exploration of MANIFEST on one GPU and on two, with both multi-GPU
# executors, each self-scheduled (a slot or rank takes the next candidate when
# it frees; nothing is split statically):
#   run-1  kiln run --gpus 1 --workers W
#   run-2  kiln run --gpus 2 --workers 2W      one scheduler, slots alternate GPUs
#   mpi-1  kiln-mpirun -np 2 kiln-mpi run --workers W   rank 0 + 1 worker rank
#   mpi-2  kiln-mpirun -np 3 kiln-mpi run --workers W   rank 0 + 2 worker ranks, a GPU each
# Every run starts from a fresh catalog and a cold Triton cache on node-local
# /tmp, and is timed from the command's start to its end (worker start-up
# included). The exhaustive strategy of the default manifest makes every run
# evaluate exactly the same candidates.
#   MANIFEST  default jobs/examples/cluster_h200.yaml (26 jobs)
#   W         workers per GPU (default 12; the machine has 16 cores per GPU)
#   MODES     default "run-1 run-2 mpi-1 mpi-2" (mpi-* need mpirun); also
#             run-1x2: one GPU with 2W workers -- as many processes as run-2
#             on one GPU: if its GPU time per candidate grows like run-2's, the
#             host side (CPU contention) slows the GPU work, else the GPUs do
#   RUN_TIMEOUT  seconds per run (default 300); on expiry it drains (rc 130)
#   RUN_ARGS     more options for every kiln run / kiln-mpi run (e.g. "--ready-per-slot 0")
#   CLAIM_ORDER  submit (default): the order kiln submit sets, the most compiling
#                job first (jobs.compile_est_s), then the roofline priority;
#                roofline: the compile estimates cleared after submit, so the
#                roofline priority alone decides (the order before schema 4)
#   CONTEXT_HERD 1 (default): first, where two or more GPUs are visible, time 12
#                and 24 processes creating their CUDA contexts at once over GPUs
#                0 and 1 (bench/cost/cuda_context_herd.py --gpus 0,1; about 40 s) into
#                context_herd.txt: whether the driver makes contexts one at a
#                time per node or per GPU; 0 skips it
# Prints a table and the 2-GPU / 1-GPU throughput ratios; writes under $OUT
# (default ./out): machine.txt (GPUs, topology, CPUs), results.jsonl (per run:
# wall, GPU and CPU busy, seconds per candidate per stage, SM clock and power
# per GPU, each GPU's busy time and each operator's part of it, the start:
# workers ready, the first evaluations' wait for their warm-up) and
# logs.tar.gz (each run's log, JSON, nvidia-smi dmon and <mode>.evals.csv:
# every evaluation's timings and GPU lock spans).
set -uo pipefail
. "$(dirname "$0")/../gpu_setup.sh" /tmp/two-gpu-build.log  # cd to the tree; OUT; builds; K
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
M=${MANIFEST:-jobs/examples/cluster_h200.yaml}
W=${W:-12}
MODES=${MODES:-run-1 run-2 mpi-1 mpi-2}
# Few files are kept: the machine's description, the
# results and one archive of the logs.
LOGS=/tmp/tg-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
{ nvidia-smi -L; nvidia-smi topo -m; lscpu; } > "$OUT/machine.txt" 2>&1
nvidia-smi -L
if [[ ${CONTEXT_HERD:-1} == 1 && $(nvidia-smi -L | grep -c '^GPU') -ge 2 ]]; then
  python3 bench/cost/cuda_context_herd.py --n 12 24 --gpus 0,1 > "$OUT/context_herd.txt" 2>&1
  python3 bench/cost/cuda_context_herd.py --n 12 24 --gpus 0 >> "$OUT/context_herd.txt" 2>&1
  cat "$OUT/context_herd.txt"
fi
now() { date +%s.%N; }
for mode in $MODES; do
  d=/tmp/tg-$mode
  rm -rf "$d" && mkdir -p "$d"
  KILN_CATALOG=$d/k.db $K submit "$M" >/dev/null || exit 1
  case ${CLAIM_ORDER:-submit} in
    submit) ;;
    roofline) python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('UPDATE jobs SET compile_est_s = 0'); c.commit()" "$d/k.db" || exit 1 ;;
    *) echo "CLAIM_ORDER must be submit or roofline"; exit 2 ;;
  esac
  common=(--device gpu --catalog "$d/k.db" --scratch "$d/s" --json ${RUN_ARGS:-})
  case $mode in
    run-1) cmd=($K run "${common[@]}" --gpus 1 --workers "$W") ;;
    run-2) cmd=($K run "${common[@]}" --gpus 2 --workers $((2 * W))) ;;
    run-1x2) cmd=($K run "${common[@]}" --gpus 1 --workers $((2 * W))) ;;
    mpi-1|mpi-2)
      if [[ ! -x build-gpu/kiln-mpi ]]; then echo "$mode: no kiln-mpi (no MPI found at build)"; continue; fi
      np=$(( ${mode#mpi-} + 1 ))
      cmd=(build-gpu/kiln-mpirun -np "$np" build-gpu/kiln-mpi run "${common[@]}" --workers "$W") ;;
  esac
  # SM clock and power of every GPU once a second during the run: a GPU that
  # slows down when both work would show here.
  nvidia-smi dmon -s pc -d 1 > "$LOGS/$mode.dmon" 2>/dev/null &
  dmon=$!
  t0=$(now)
  cpu0=$(head -1 /proc/stat)
  timeout -s TERM "${RUN_TIMEOUT:-300}" "${cmd[@]}" >"$LOGS/$mode.json" 2>"$LOGS/$mode.log"
  rc=$?
  kill "$dmon" 2>/dev/null; wait "$dmon" 2>/dev/null
  t1=$(now)
  cpu1=$(head -1 /proc/stat)
  echo "$mode rc=$rc wall=$(python3 -c "print(round($t1 - $t0, 1))") s"
  python3 - "$mode" "$t0" "$t1" "$rc" "$d/k.db" "$OUT" "$cpu0" "$cpu1" "$LOGS" <<'PY'
import csv, json, os, sqlite3, sys
mode, t0, t1, rc, db, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
logs = sys.argv[9]
# nvidia-smi dmon: a '# gpu pwr gtemp mtemp mclk pclk' header, then one line per GPU per second.
gpu_clock = {}
try:
    cols = None
    for line in open(f"{logs}/{mode}.dmon"):
        f = line.split()
        if line.startswith("#"):
            if "gpu" in f:
                cols = f[1:]
            continue
        if cols and len(f) == len(cols):
            row = dict(zip(cols, f))
            g = gpu_clock.setdefault(row["gpu"], {"pclk": [], "pwr": []})
            for k in ("pclk", "pwr"):
                try:
                    g[k].append(float(row[k]))
                except (KeyError, ValueError):
                    pass
except OSError:
    pass
clocks = {g: {k: (round(sum(v) / len(v)), min(v) if v else None) for k, v in d.items() if v}
          for g, d in gpu_clock.items()}
if clocks:
    print(f"  {mode}: per GPU (mean, min) SM clock MHz and power W over the run: {clocks}")
# Whole-machine CPU use over the run (/proc/stat: user nice system idle iowait ...).
c0 = [int(x) for x in sys.argv[7].split()[1:]]
c1 = [int(x) for x in sys.argv[8].split()[1:]]
total = sum(c1) - sum(c0)
idle = (c1[3] + c1[4]) - (c0[3] + c0[4])
cpu_busy = (total - idle) / total if total else None
try:
    s = json.loads(open(f"{logs}/{mode}.json").read().strip().splitlines()[-1])
except Exception:
    s = {}
con = sqlite3.connect(db)
done = con.execute("SELECT COUNT(*) FROM jobs WHERE state = 'done'").fetchone()[0]
evals = con.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
fails = con.execute("SELECT j.op, e.status, COUNT(*), MIN(substr(e.message, 1, 300)) FROM evaluations e "
                    "JOIN candidates c ON c.id = e.candidate_id JOIN jobs j ON j.id = c.job_id "
                    "WHERE e.status != 'ok' GROUP BY j.op, e.status ORDER BY 3 DESC").fetchall()
for f in fails:
    print(f"  {mode} failures: {f[0]} {f[1]} x{f[2]}: {f[3]!r}")
stages = con.execute("SELECT COUNT(*), SUM(compile_s), SUM(check_s), SUM(bench_s) FROM evaluations").fetchone()
n = max(1, stages[0] or 0)
per = {"compile_s": (stages[1] or 0) / n, "check_s": (stages[2] or 0) / n, "bench_s": (stages[3] or 0) / n}
# Start-up and steady state: the first evaluation's record comes after the
# workers' imports, CUDA contexts and the first cold compiles; between the first
# and the last record the run is in its steady state.
first, last = con.execute("SELECT MIN(created_at), MAX(created_at) FROM evaluations").fetchone()
startup_s = (first - t0) if first else None
steady = (evals - 1) / (last - first) if first and last and last > first else None
print(f"  {mode}: first evaluation recorded {startup_s:.1f} s after the start; steady state "
      f"{steady:.2f} candidates/s; last record {t1 - last:.1f} s before the end" if steady else "")
# Every evaluation's worker timings (and its GPU lock spans), written to
# <mode>.evals.csv in the logs archive and summed here: setup_s (the worker drew the job's inputs and
# computed its reference, once per job; inside check_s), preload_s (the kernel
# loaded before the check took the lock, worker/kiln_worker/evaluation/preload.py), and
# per lock kind the time spent queueing for the GPU lock (inside check_s /
# bench_s) and holding it (checks and draws share it, so theirs overlap).
KINDS = ("setup", "check", "bench")
timing_cols = (["setup_s", "preload_s"] + [f"{k}_wait_s" for k in KINDS] + [f"{k}_held_s" for k in KINDS])
sums = dict.fromkeys(timing_cols, 0.0)
by_gpu_op = {}  # GPU -> operator -> its evaluations' lock spans
warm_waits = []  # the first evaluations' waits for their worker's GPU warm-up (timings.warm_up)
with open(f"{logs}/{mode}.evals.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["created_at", "op", "shape", "worker", "status", "compile_s", "check_s", "bench_s"]
               + timing_cols + ["median_ms", "gpu_spans"])
    for row in con.execute("SELECT e.created_at, j.op, j.shape, e.worker, e.status, e.compile_s, e.check_s, "
                           "e.bench_s, e.median_ms, e.result FROM evaluations e JOIN candidates c "
                           "ON c.id = e.candidate_id JOIN jobs j ON j.id = c.job_id ORDER BY e.created_at"):
        t = (json.loads(row[9]) if row[9] else {}).get("timings") or {}
        waits, held = t.get("lock_wait_s") or {}, {}
        if t.get("warm_up"):
            warm_waits.append(t["warm_up"].get("wait_s", 0.0))
        # the worker's GPU: evaluations.worker "pid P gpu G" where the run spans several
        gpu = row[3].split(" gpu ")[1] if " gpu " in row[3] else "0"
        op_spans = by_gpu_op.setdefault(gpu, {}).setdefault(row[1], [])
        for a, b, kind in t.get("gpu_spans") or []:
            held[kind] = held.get(kind, 0.0) + (b - a)
            op_spans.append((a, b))
        vals = {"setup_s": t.get("setup_s") or 0.0, "preload_s": t.get("preload_s") or 0.0,
                **{f"{k}_wait_s": waits.get(k, 0.0) for k in KINDS},
                **{f"{k}_held_s": held.get(k, 0.0) for k in KINDS}}
        for k, v in vals.items():
            sums[k] += v
        # the lock spans themselves ([start, end, kind], unix seconds)
        w.writerow(list(row[:8]) + [round(vals[k], 6) for k in timing_cols] + [row[8],
                   json.dumps(t.get("gpu_spans") or [])])


def union(spans):
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


# Each GPU's busy time (the union of its workers' lock spans) and each
# operator's part of it (the union of that operator's spans on the GPU; the
# parts overlap where two operators' checks ran together, so they can sum to
# more than the whole).
busy_by_op = {}
for g, ops in sorted(by_gpu_op.items()):
    whole = union([sp for spans in ops.values() for sp in spans])
    parts = {op: union(spans) for op, spans in ops.items()}
    busy_by_op[g] = {"busy_s": whole, "by_op_s": parts}
    print(f"  {mode}: GPU {g} busy {whole:.1f} s; by operator " +
          ", ".join(f"{op} {v:.1f}" for op, v in sorted(parts.items(), key=lambda kv: -kv[1])))
# Job set-ups: the (worker, job) pairs.
setups = con.execute("SELECT COUNT(DISTINCT c.job_id || '/' || e.worker) FROM evaluations e "
                     "JOIN candidates c ON c.id = e.candidate_id").fetchone()[0]
per["setup_s_total"] = sums["setup_s"]
per["setups"] = setups or 0
print(f"  {mode}: {per['setups']} job set-ups (worker, job pairs), {per['setup_s_total']:.1f} s of set-up in all")
per["preload_s"] = sums["preload_s"] / n
per["check_held_s"] = sums["check_held_s"] / n
per["bench_held_s"] = sums["bench_held_s"] / n
per["setup_held_s"] = sums["setup_held_s"] / n
print(f"  {mode}: per candidate the lock held {per['check_held_s']:.3f} s by its check, "
      f"{per['bench_held_s']:.3f} s by its benchmark, {per['setup_held_s']:.3f} s by input draws; "
      f"kernel load before the lock {per['preload_s']:.3f} s")
per["check_wait_s"] = sums["check_wait_s"] / n
per["bench_wait_s"] = sums["bench_wait_s"] / n
print(f"  {mode}: CPU busy {cpu_busy * 100:.0f}% of {os.cpu_count()} cores; per candidate compile "
      f"{per['compile_s']:.2f} s, check {per['check_s']:.2f} s (waiting for the GPU {per['check_wait_s']:.2f}), "
      f"bench {per['bench_s']:.2f} s (waiting {per['bench_wait_s']:.2f})")
# Where the start went: the workers' own steps (the run's workers_ready_s) and
# the first evaluations' wait for their GPU warm-up (warm_waits, read above).
warm_waits.sort()
start = {"workers_ready_s": s.get("workers_ready_s"),
         "warm_up_wait_median_s": warm_waits[len(warm_waits) // 2] if warm_waits else None,
         "warm_ups": len(warm_waits)}
if start["workers_ready_s"]:
    print(f"  {mode}: workers ready after {start['workers_ready_s']:.1f} s; {len(warm_waits)} first evaluations "
          f"waited a median {start['warm_up_wait_median_s'] or 0:.2f} s for their warm-up")
con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
rec = {"mode": mode, "start": start, "failures": fails, "rc": rc, "wall_s": t1 - t0, "jobs_done": done, "evaluations": evals,
       "candidates_per_s": evals / (t1 - t0), "gpu_busy_fraction": s.get("gpu_busy_fraction"),
       "gpu_busy_each_s": s.get("gpu_busy_each_s"), "cpu_busy_fraction": cpu_busy,
       "per_candidate_s": per, "startup_s": startup_s, "steady_candidates_per_s": steady,
       "gpu_clock_power": clocks, "busy_by_op": busy_by_op, "summary": s}
with open(f"{out}/results.jsonl", "a") as f:
    f.write(json.dumps(rec) + "\n")
PY
done
python3 - "$OUT" <<'PY'
import json, sys
rows = {r["mode"]: r for r in map(json.loads, open(f"{sys.argv[1]}/results.jsonl"))}
print("| run | rc | GPUs | wall s | jobs done | evaluations | candidates/s | GPU busy | CPU busy | "
      "compile s/cand | GPU-held s/cand | start-up s | steady cand/s |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for m, r in rows.items():
    busy = r["gpu_busy_fraction"]
    cpu = r.get("cpu_busy_fraction")
    gpus = 2 if m in ("run-2", "mpi-2") else 1
    # the GPU lock held (benchmarks, checks) per candidate, summed over the GPUs
    held = sum(r.get("gpu_busy_each_s") or []) / r["evaluations"] if r["evaluations"] else 0
    print(f"| {m} | {r['rc']} | {gpus} | {r['wall_s']:.1f} | {r['jobs_done']} | {r['evaluations']} | "
          f"{r['candidates_per_s']:.2f} | {'' if busy is None else f'{busy * 100:.0f}%'} | "
          f"{'' if cpu is None else f'{cpu * 100:.0f}%'} | {r.get('per_candidate_s', {}).get('compile_s', 0):.2f} | "
          f"{held:.3f} | {r.get('startup_s') or 0:.1f} | {r.get('steady_candidates_per_s') or 0:.2f} |")
for a, b in (("run-1", "run-2"), ("mpi-1", "mpi-2"), ("run-1", "mpi-2")):
    if a in rows and b in rows:
        ra, rb = rows[a], rows[b]
        steady = ""
        if ra.get("steady_candidates_per_s") and rb.get("steady_candidates_per_s"):
            steady = f" (steady state {rb['steady_candidates_per_s'] / ra['steady_candidates_per_s']:.2f}x)"
        print(f"throughput {b} / {a}: {rb['candidates_per_s'] / ra['candidates_per_s']:.2f}x{steady}")
PY
tar czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
