#!/usr/bin/env python3
"""How long evaluator workers take to start, and where the time goes.

Starts N workers at once, as `kiln run --workers N` does (python3 -m
kiln_worker, PYTHONPATH=worker:., KILN_DEVICE, one shared TRITON_CACHE_DIR,
OMP_NUM_THREADS = cores / N), sends each a hello and times it from the spawn to
the answer. Each worker reports its own steps (hello's "startup": process =
interpreter start and imports before main, imports = torch and triton, and on a
GPU context, compile = check.compare's kernel, kernels = the warm-up's tiny
kernels, library = the template library, hello = the answer's own work). Rounds:

  cold  a fresh, empty Triton cache (what bench/scale/two_gpu.sh's runs see)
  warm  the same cache again (what a second run on the node sees)

    python3 bench/cost/worker_startup.py --workers 1 12 --device gpu --json out.json

Prints one row per (round, N): the slowest worker's time to its answer and the
median of each step over the workers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOME = Path(__file__).resolve().parents[2]
STEPS = ("process_s", "imports_s", "context_s", "compile_s", "kernels_s", "library_s", "hello_s")


def start_round(n: int, device: str, cache: str) -> dict:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env.update(PYTHONPATH=f"{HOME / 'worker'}:{HOME}", KILN_HOME=str(HOME), KILN_DEVICE=device,
               PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=cache,
               OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // n)))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "kiln_worker"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=HOME)
             for _ in range(n)]
    for p in procs:
        p.stdin.write(b'{"id": 1, "method": "hello"}\n')
        p.stdin.flush()
    answers = []
    for p in procs:  # every answer is waited for; the slowest decides the round
        line = p.stdout.readline()
        answers.append((time.perf_counter() - t0, json.loads(line) if line else None))
    for p in procs:
        p.stdin.close()
        p.wait(timeout=60)
    bad = [a for _, a in answers if not a or not a.get("ok")]
    if bad:
        raise SystemExit(f"a worker did not start: {bad[0]}")
    steps = [a["result"].get("startup", {}) for _, a in answers]
    med = {k: statistics.median(s[k] for s in steps) for k in STEPS if all(s.get(k) is not None for s in steps)}
    return {"workers": n, "slowest_s": max(t for t, _ in answers),
            "fastest_s": min(t for t, _ in answers), "median_steps_s": med, "each": steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 12])
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    ap.add_argument("--json", help="write every round's numbers here")
    a = ap.parse_args()
    rows = []
    for n in a.workers:
        with tempfile.TemporaryDirectory(prefix="kiln-startup-") as cache:
            for label in ("cold", "warm"):
                r = start_round(n, a.device, cache)
                r["cache"] = label
                rows.append(r)
    cols = [k for k in STEPS if any(k in r["median_steps_s"] for r in rows)]
    print("| cache | workers | first answer s | last answer s | " + " | ".join(c[:-2] for c in cols) + " |")
    print("| --- | ---: | ---: | ---: |" + " ---: |" * len(cols))
    for r in rows:
        m = r["median_steps_s"]
        print(f"| {r['cache']} | {r['workers']} | {r['fastest_s']:.2f} | {r['slowest_s']:.2f} | "
              + " | ".join(f"{m[c]:.2f}" if c in m else "-" for c in cols) + " |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
