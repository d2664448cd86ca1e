#!/usr/bin/env python3
"""The KernelBench result from a catalog that `kernelbench_h200.sh` filled:

    python3 bench/retrieval/kernelbench_table.py --catalog kiln.db [--kiln build/kiln] [--out table.md]

Reads the catalog through `kiln query` and `kiln best --json` (nothing typed by
hand) and prints: the jobs served by templates (those with an oracle), how many
ended `done` (a correct kernel: every candidate is checked against the
template's reference, which the worker first checked against the KernelBench
module), how many candidates the checker found incorrect, the failures grouped
by cause, and the geometric-mean speedup of the confirmed best over PyTorch
eager (timed in the same interleaved confirmation round), then one row per
served problem.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import subprocess
import sys


CUDNN_OPS = ("conv2d",)  # operators whose eager call goes to cuDNN (TF32 by PyTorch's default)


def kiln(k: str, *args: str) -> str:
    return subprocess.run([k, *args], check=True, capture_output=True, text=True).stdout


def cause(message: str) -> str:
    if "out of GPU memory" in message or "out of memory" in message:
        return "out of GPU memory"
    if "compile_error" in message:
        return "compile error"
    if "incorrect" in message:
        return "incorrect"
    m = re.match(r"([^:(]{0,60})", message)
    return m.group(1).strip() if m else message[:60]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catalog", required=True)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--out")
    a = ap.parse_args()
    q = ("SELECT j.id, j.op, j.shape, j.state, json_extract(j.spec, '$.oracle.name') AS problem, "
         "j.message, (SELECT count(*) FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
         "WHERE c.job_id = j.id AND e.status = 'incorrect') AS incorrect, "
         "(SELECT count(*) FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
         "WHERE c.job_id = j.id) AS evaluated, "
         "(SELECT e.status || ': ' || substr(e.message, 1, 300) FROM candidates c JOIN evaluations e "
         "ON e.candidate_id = c.id WHERE c.job_id = j.id AND e.status != 'ok' LIMIT 1) AS first_bad "
         "FROM jobs j WHERE json_extract(j.spec, '$.oracle') IS NOT NULL ORDER BY j.id")
    jobs = list(csv.DictReader(io.StringIO(kiln(a.kiln, "query", "--catalog", a.catalog, "--csv", q))))
    best = json.loads(kiln(a.kiln, "best", "--catalog", a.catalog, "--json") or "[]")
    rows = best if isinstance(best, list) else best.get("jobs", [])
    owner = {int(r["id"]): int(r["job_id"]) for r in csv.DictReader(io.StringIO(
        kiln(a.kiln, "query", "--catalog", a.catalog, "--csv", "SELECT id, job_id FROM candidates")))}
    by_job = {owner.get(int(r["candidate_id"])): r for r in rows if r.get("candidate_id") is not None}
    # eager baselines timed before the confirmation recorded its precision flags
    # ran with TF32 convolutions off: slower than PyTorch's default for conv2d
    legacy = {int(r["job_id"]) for r in csv.DictReader(io.StringIO(kiln(
        a.kiln, "query", "--catalog", a.catalog, "--csv",
        "SELECT DISTINCT job_id FROM confirmations WHERE baseline = 'eager' "
        "AND json_extract(conditions, '$.baseline_precision') IS NULL")))}
    tf32_off = {int(j["id"]) for j in jobs if j["op"] in CUDNN_OPS and int(j["id"]) in legacy}
    lines = []
    done = [j for j in jobs if j["state"] == "done"]
    incorrect = sum(int(j["incorrect"] or 0) for j in jobs)
    evaluated = sum(int(j["evaluated"] or 0) for j in jobs)
    causes: dict[str, int] = {}
    for j in jobs:
        if j["state"] == "failed":
            c = cause((j["message"] or "") + " " + (j["first_bad"] or ""))
            causes[c] = causes.get(c, 0) + 1
    speedups, table = [], []
    for j in jobs:
        r = by_job.get(int(j["id"]))
        eager = (((r or {}).get("confirmed") or {}).get("baselines") or {}).get("eager") or {}
        sp = eager.get("speedup") if j["state"] == "done" else None
        if sp:
            speedups.append(sp)
        ms = ((r or {}).get("confirmed") or {}).get("median_ms") or (r or {}).get("ms")
        table.append(f"| {j['problem']} | {j['op']} | {j['shape']} | {j['state']} | "
                     f"{ms:.4f} |" if ms and j["state"] == "done" else
                     f"| {j['problem']} | {j['op']} | {j['shape']} | {j['state']} | - |")
        mark = " (eager with TF32 off)" if int(j["id"]) in tf32_off else ""
        table[-1] += f" {sp:.3f}{mark} |" if sp else f" {cause((j['message'] or '') + ' ' + (j['first_bad'] or '')) if j['state'] == 'failed' else '-'} |"
    lines.append(f"served by templates: {len(jobs)}; done with a correct kernel: {len(done)}; "
                 f"failed: {sum(causes.values())}; other: {len(jobs) - len(done) - sum(causes.values())}")
    lines.append(f"candidates evaluated: {evaluated}; found incorrect by the checker: {incorrect}")
    lines.append("failures by cause: " + (", ".join(f"{c} {n}" for c, n in sorted(causes.items())) or "none"))
    if speedups:
        g = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        lines.append(f"geometric-mean speedup over eager (confirmed, {len(speedups)} jobs): {g:.3f}x; "
                     f"at or above 1.0x: {sum(s >= 1.0 for s in speedups)}")
    if tf32_off & {int(j["id"]) for j in done}:
        lines.append(f"of which {len(tf32_off)} with eager timed with TF32 convolutions off (the "
                     "worker's reference flags, before the baselines ran with PyTorch's defaults): "
                     "slower than a PyTorch user's eager, their speedups overstated")
    lines += ["", "| problem | operator | shape | state | Kiln ms | speedup over eager (or cause) |",
              "|---|---|---|---|---|---|", *table]
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
