#!/usr/bin/env python3
"""The start of one `kiln run`, from its catalog and nvidia-smi's readings:
when the GPU first got busy, and each worker's first evaluation with the
phases its worker reported (timings: module_s, plan_s and plan_import, the
GPU warm-up, setup_wait_s, inputs_s, reference_s, check_s, bench_s, the GPU
lock waits, worker_s; docs/architecture.md, "The run's first results").

    python3 bench/trust/startup_report.py --catalog k.db --t0 UNIX_SECONDS [--smi smi.csv]

--t0 is when `kiln run` was started; smi.csv is `nvidia-smi
--query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 200`.
Reads only; bench/trust/startup_probe.sh runs it.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import time
from datetime import datetime

PHASES = ("worker_s", "module_s", "compile_s", "check_s", "setup_wait_s", "plan_s", "inputs_s", "reference_s",
          "setup_warm_wait_s", "bench_s")


def smi_readings(path: str) -> list[tuple[float, float]]:
    """(unix seconds, percent) per reading; the timestamps are local time."""
    out = []
    for line in open(path, encoding="utf-8"):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2:
            continue
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            out.append((time.mktime(t.timetuple()) + t.microsecond / 1e6, float(parts[1])))
        except ValueError:
            pass
    return out


def first_evaluations(catalog: str) -> list[dict]:
    """Each worker's first evaluation (by the catalog's `worker`), in order."""
    con = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    seen, out = set(), []
    for created, worker, status, op, shape, result in con.execute(
            "SELECT e.created_at, e.worker, e.status, j.op, j.shape, e.result FROM evaluations e "
            "JOIN candidates c ON c.id = e.candidate_id JOIN jobs j ON j.id = c.job_id ORDER BY e.created_at"):
        if worker in seen:
            continue
        seen.add(worker)
        t = (json.loads(result) if result else {}).get("timings") or {}
        out.append({"created": created, "worker": worker, "status": status, "job": f"{op} {shape}", "timings": t})
    return out


def flat(t: dict) -> dict:
    """The numbers of one evaluation's timings, nested ones as warm_up.context_s etc."""
    out = {k: v for k, v in t.items() if isinstance(v, (int, float))}
    for group in ("warm_up", "plan_import", "lock_wait_s"):
        for k, v in (t.get(group) or {}).items():
            if isinstance(v, (int, float)):
                out[f"{group}.{k}"] = v
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catalog", required=True)
    ap.add_argument("--t0", type=float, required=True, help="unix seconds when kiln run started")
    ap.add_argument("--smi", help="nvidia-smi readings beside the run")
    ap.add_argument("--busy", type=float, default=50.0)
    a = ap.parse_args()
    if a.smi:
        xs = [(t, u) for t, u in smi_readings(a.smi) if t >= a.t0]
        busy = next((t for t, u in xs if u >= a.busy), None)
        before = [u for t, u in xs if busy is None or t < busy]
        print(f"GPU utilisation: the first reading >= {a.busy:g}% at "
              + (f"{busy - a.t0:.1f} s" if busy is not None else "none")
              + (f" (mean {statistics.mean(before):.1f}% before it)" if before else ""))
    firsts = first_evaluations(a.catalog)
    if not firsts:
        print("no evaluation recorded")
        return 1
    print(f"first evaluations of {len(firsts)} workers: the first recorded at {firsts[0]['created'] - a.t0:.1f} s, "
          f"the last at {firsts[-1]['created'] - a.t0:.1f} s after the start")
    rows = [flat(f["timings"]) for f in firsts]
    keys = [k for k in PHASES if any(k in r for r in rows)]
    keys += sorted({k for r in rows for k in r if "." in k})
    print("phase (seconds)              median   largest  (absent: 0)")
    for k in keys:
        xs = [r.get(k, 0.0) for r in rows]
        print(f"  {k:<26} {statistics.median(xs):8.3f} {max(xs):8.3f}")
    print("each (recorded at s: job, status, worker_s / module / plan / compile / check / bench):")
    for f, r in zip(firsts, rows):
        print(f"  {f['created'] - a.t0:6.2f} {f['job']:<40} {f['status']:<8} "
              + " / ".join(f"{r.get(k, 0.0):.2f}" for k in ("worker_s", "module_s", "plan_s", "compile_s",
                                                             "check_s", "bench_s")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
