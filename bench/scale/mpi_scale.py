#!/usr/bin/env python3
"""Coordinator scale of kiln-mpi: rank 0's cost per candidate, 2 to 64 ranks.

Every rank but 0 runs the no-op evaluator (`kiln-mpi run --noop-evaluator`: it
answers each request at once with a synthetic ok result and a tiny code object,
no Python), so what is measured is rank 0's own work per candidate: the
scheduler, the MPI messages, the catalog rows (batched per transaction), the
estimate and the selection. Ranks are oversubscribed on this machine's cores;
idle ranks sleep (polling backs off, and --mca mpi_yield_when_idle 1).

Measured at rank 0 over its busy window (first work sent -> last result):
wall ms per candidate, candidates/s, and rank 0's CPU time (getrusage) per
candidate. Prints a table and writes $OUT/mpi_scale-<date>.json (default ./out).

  python3 bench/scale/mpi_scale.py                       # 2 4 8 16 32 64 ranks
  python3 bench/scale/mpi_scale.py --ranks 2,8 --space 1000 --jobs 2
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manifest(jobs, space):
    shapes = ", ".join(f"[{1024 * (i + 1)}]" for i in range(jobs))
    return (f"name: noop_scale\ntargets: [MI300X]\ndefaults:\n  dtypes: [fp32]\n"
            f"  exploration: {{strategy: exhaustive, max_candidates: {space}, timeout_s: 60}}\n"
            f"operators:\n  - op: add\n    shapes: [{shapes}]\n")


def run_point(args, ranks, tmp):
    cat = tmp / f"r{ranks}.db"
    man = tmp / "noop.yaml"
    man.write_text(manifest(args.jobs, args.space))
    env = dict(os.environ, KILN_CATALOG=str(cat))
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    subprocess.run([str(args.kiln), "submit", str(man)], env=env, check=True, capture_output=True)
    cmd = [args.mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
           "-np", str(ranks), str(args.kiln_mpi), "run", "--noop-evaluator", "--noop-space", str(args.space),
           "--workers", str(args.workers), "--json", "--scratch", str(tmp / f"s{ranks}"),
           "--heartbeat-timeout", "120", "--progress-interval", "60"]
    # Own session: a timeout takes mpirun and every rank down, not only mpirun.
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=args.timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(out + err)
        raise SystemExit(f"{ranks} ranks: kiln-mpi exited {proc.returncode}")
    s = json.loads(lines[-1])
    return {
        "ranks": ranks,
        "worker_ranks": s["worker_ranks"],
        "slots_per_rank": args.workers,
        "candidates": s["candidates"],
        "jobs_done": s["jobs_done"],
        "wall_s": round(s["wall_s"], 3),
        "busy_s": round(s["busy_s"], 3),
        "ms_per_candidate": round(s["ms_per_candidate"], 4),
        "candidates_per_s": round(s["candidates_per_s"], 1),
        "rank0_cpu_ms_per_candidate": round(s["cpu_ms_per_candidate"], 4),
        "rank0_cpu_s": round(s["busy_cpu_s"], 3),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4,8,16,32,64")
    ap.add_argument("--jobs", type=int, default=4, help="jobs in the synthetic manifest")
    ap.add_argument("--space", type=int, default=2500, help="candidates per job (noop config space)")
    ap.add_argument("--workers", type=int, default=2, help="slots per worker rank")
    ap.add_argument("--build", default=os.environ.get("KILN_BUILD_DIR", str(ROOT / "build")))
    ap.add_argument("--mpirun", default=os.environ.get("KILN_MPIRUN", "mpirun"))
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    build = Path(args.build)
    args.kiln, args.kiln_mpi = build / "kiln", build / "kiln-mpi"
    for b in (args.kiln, args.kiln_mpi):
        if not b.exists():
            raise SystemExit(f"{b} is missing: build first (cmake --build {build} --target kiln kiln-mpi)")
    points = []
    tmp = Path(tempfile.mkdtemp(prefix="kiln-mpi-scale-"))
    try:
        for n in [int(x) for x in args.ranks.split(",")]:
            p = run_point(args, n, tmp)
            points.append(p)
            print(f"  {n} ranks: {p['candidates']} candidates in {p['busy_s']} s", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    head = ["ranks", "worker ranks", "candidates", "busy s", "ms/candidate", "candidates/s", "rank-0 CPU ms/cand"]
    rows = [[p["ranks"], p["worker_ranks"], p["candidates"], p["busy_s"], p["ms_per_candidate"],
             p["candidates_per_s"], p["rank0_cpu_ms_per_candidate"]] for p in points]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(x).rjust(w) for x, w in zip(r, widths)) + " |")

    today = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else Path(os.environ.get("OUT", "out")) / f"mpi_scale-{today}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    mpi_version = subprocess.run([args.mpirun, "--version"], capture_output=True, text=True).stdout.splitlines()
    out.write_text(json.dumps({
        "benchmark": "mpi_scale",
        "date": today,
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "kernel": platform.release()},
        "mpi": mpi_version[0] if mpi_version else "",
        "settings": {"jobs": args.jobs, "space": args.space, "slots_per_rank": args.workers,
                     "evaluator": "noop", "oversubscribed": True, "mca": {"mpi_yield_when_idle": 1}},
        "command": " ".join(sys.argv),
        "points": points,
    }, indent=2) + "\n")
    print(f"\nwritten {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
