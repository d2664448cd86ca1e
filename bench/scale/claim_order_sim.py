#!/usr/bin/env python3
"""Replays a measured exploration through a model of the executor, to compare
claim orders on one GPU and on two without the GPUs.

Input: a <mode>.evals.csv that bench/scale/two_gpu.sh wrote (every evaluation's
operator, shape, compile time and GPU lock holds, in the order they were
recorded), and optionally a catalog whose jobs were submitted with another
claim order (`kiln submit` of the same manifest): its order
(ORDER BY compile_est_s DESC, priority DESC, id) is replayed beside the order
of the run.

The model: W workers per GPU take the next candidate in claim order when they
free; a candidate compiles (its measured compile_s, on its worker's core), then
checks holding its GPU's lock shared (its measured check and input-draw holds,
scaled by --check-scale), then benchmarks holding it exclusively (its measured
benchmark hold). The lock is first come first served, a waiting benchmark
blocking new checks (gpulock.gpu_lock's turnstile). Not modelled: start-up, the
per-job set-ups moving with the order, compiles slowing when more cores are
busy. --check-scale stands for the checks' overlap on the GPU; 0.5 reproduces
the measured one-GPU wall of the run the file came from within about a second
(cluster_h200_large: 118.9 s modelled, 119.2 s measured), so it is the default.

    python3 bench/scale/claim_order_sim.py run-1.evals.csv --catalog k.db
"""
from __future__ import annotations

import argparse
import csv
import heapq
import itertools
import json
import sqlite3
import sys


def load(path: str):
    """{(op, shape): [(compile_s, shared_s, exclusive_s), ...]} and the jobs
    in the order their first evaluation was recorded."""
    rows = sorted(csv.DictReader(open(path)), key=lambda r: float(r["created_at"]))
    jobs, order = {}, []
    for r in rows:
        k = (r["op"], r["shape"])
        if k not in jobs:
            jobs[k] = []
            order.append(k)
        jobs[k].append((float(r["compile_s"]), float(r["setup_held_s"]) + float(r["check_held_s"]),
                        float(r["bench_held_s"])))
    return jobs, order


def simulate(jobs, order, workers_per_gpu: int, gpus: int, check_scale: float) -> float:
    """Modelled wall seconds of the candidates of `order`'s jobs, in that order."""
    queue = [c for k in order for c in jobs[k]]
    nxt = 0
    events, seq = [], itertools.count()
    readers, writer = [0] * gpus, [False] * gpus
    waiting = [[] for _ in range(gpus)]
    current = {}
    end = 0.0

    def push(t, what, w):
        heapq.heappush(events, (t, next(seq), what, w))

    def grant(g, t):
        while waiting[g]:
            mode, w, dur = waiting[g][0]
            if writer[g] or (mode == "exclusive" and readers[g]):
                return
            waiting[g].pop(0)
            if mode == "shared":
                readers[g] += 1
            else:
                writer[g] = True
            push(t + dur, "release_" + mode, w)

    for w in range(workers_per_gpu * gpus):
        push(0.0, "next", w)
    while events:
        t, _, what, w = heapq.heappop(events)
        g = w % gpus  # slot i on GPU i mod G, as kiln run --gpus binds them
        if what == "next":
            if nxt < len(queue):
                current[w] = queue[nxt]
                nxt += 1
                push(t + current[w][0], "compiled", w)
        elif what == "compiled":
            waiting[g].append(("shared", w, current[w][1] * check_scale))
            grant(g, t)
        elif what == "release_shared":
            readers[g] -= 1
            waiting[g].append(("exclusive", w, current[w][2]))
            grant(g, t)
        else:
            writer[g] = False
            end = max(end, t)
            push(t, "next", w)
            grant(g, t)
    return end


def catalog_order(path: str, known) -> list:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = []
    for op, shape in con.execute("SELECT op, shape FROM jobs ORDER BY compile_est_s DESC, priority DESC, id"):
        k = (op, json.dumps(json.loads(shape), separators=(",", ":")))
        if k in known and k not in out:
            out.append(k)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("evals_csv")
    ap.add_argument("--catalog", help="a catalog of the same manifest, submitted with the claim order to compare")
    ap.add_argument("--workers", type=int, default=12, help="workers per GPU (default 12)")
    ap.add_argument("--check-scale", type=float, default=0.5)
    a = ap.parse_args()
    jobs, run_order = load(a.evals_csv)
    orders = {"as run": run_order}
    if a.catalog:
        order = catalog_order(a.catalog, jobs)
        missing = [k for k in run_order if k not in order]
        if missing:
            print(f"warning: {len(missing)} jobs of the run are not in the catalog; they go last", file=sys.stderr)
        orders["catalog's claim order"] = order + missing
    print("| order | 1 GPU s | 2 GPUs s | 2 / 1 |")
    print("| --- | ---: | ---: | ---: |")
    for name, order in orders.items():
        one = simulate(jobs, order, a.workers, 1, a.check_scale)
        two = simulate(jobs, order, a.workers, 2, a.check_scale)
        print(f"| {name} | {one:.1f} | {two:.1f} | {one / two:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
