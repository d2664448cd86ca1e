#!/usr/bin/env python3
"""The nightly's regression decision measured: A/A false alarms and a 5% slowdown's detection.

For each of >= 20 jobs (the catalog's measured bests with --catalog, else a
built-in list of memory-bound and GEMM cases, each with its template's first
config), on this GPU, with the worker's own `confirm` method (L2 flush, device
events, interleaved rounds; worker/kiln_worker/evaluation/confirm.py):

  pass 1 (night A):  the kernel confirmed alone                    -> samples A
  pass 2 (night B):  the same kernel, and beside it, interleaved, the same
                     kernel with a GPU sleep kernel of --slowdown x median(A)
                     inside each timed call (really that much slower on the
                     device, not a rescaled number)                  -> B, B'

The two passes are separate requests minutes apart, as two nights are. Then
`kiln decide` (the very decision `kiln nightly` makes: Mann-Whitney U p < 0.01
and the medians more than --min-effect apart) judges (A, B) -- a regression
there is a false alarm -- and (A, B') -- a regression there is a detection.
Prints a table and the counts (the goal: <= 1 false alarm in 20, >= 19 of 20
detected) and writes every sample to $OUT/aa.json.

    OUT=dir python3 bench/trust/aa_nightly.py [--catalog kiln.db] [--jobs 24]
        [--rounds 5 --reps 20] [--slowdown 0.05] [--min-effect 0.03] [--kiln build/kiln]
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

BUILTIN = [  # (op, shape, dtype): memory-bound rows and elementwise, and GEMMs
    ("add", [1 << 24], "fp32"), ("add", [1 << 26], "fp32"), ("add", [1 << 22], "fp16"),
    ("softmax", [16384, 4096], "bf16"), ("softmax", [8192, 1024], "fp16"), ("softmax", [4096, 8192], "fp32"),
    ("layernorm", [16384, 4096], "bf16"), ("layernorm", [8192, 2048], "fp16"),
    ("rmsnorm", [16384, 4096], "bf16"), ("rmsnorm", [4096, 8192], "fp16"),
    ("row_sum", [16384, 4096], "fp32"), ("row_sum", [8192, 8192], "fp32"),
    ("row_mean", [16384, 4096], "fp32"), ("row_max", [16384, 4096], "fp32"),
    ("bias_gelu", [8192, 4096], "bf16"), ("bias_gelu", [4096, 4096], "fp16"),
    ("matmul", [4096, 4096, 4096], "bf16"), ("matmul", [2048, 2048, 2048], "fp16"),
    ("matmul", [8192, 8192, 8192], "bf16"), ("matmul", [1024, 4096, 4096], "bf16"),
    ("gemm_bias_act", [8192, 4096, 4096], "bf16"), ("gemm_bias_act", [4096, 4096, 4096], "fp16"),
    ("softmax", [2048, 2048], "fp32"), ("layernorm", [4096, 4096], "fp32"),
]


def target_doc(name: str) -> dict:
    import yaml
    t = yaml.safe_load((ROOT / "configs" / "targets" / f"{name}.yaml").read_text())
    t["name"] = name
    return t


def cases_from_catalog(path: str, limit: int) -> list[dict]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT j.op, j.shape, j.dtype, j.params, j.target, c.config FROM best b "
            "JOIN jobs j ON j.id = b.job_id JOIN candidates c ON c.id = b.candidate_id "
            "WHERE b.basis = 'measured' AND c.source IS NULL ORDER BY j.id LIMIT ?", (limit,)).fetchall()
    finally:
        con.close()
    return [{"op": op, "shape": json.loads(s), "dtype": dt, "params": json.loads(p), "target": t,
             "config": json.loads(c)} for op, s, dt, p, t, c in rows]


def decide(kiln: str, pairs: list[dict], min_effect: float) -> list[dict]:
    r = subprocess.run([kiln, "decide", "--min-effect", str(min_effect)], input=json.dumps({"pairs": pairs}),
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["decisions"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalog", default=None, help="take the jobs and their best configs from this catalog")
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--target", default="H200")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--slowdown", type=float, default=0.05)
    ap.add_argument("--min-effect", type=float, default=0.03)
    ap.add_argument("--kiln", default=str(ROOT / "build" / "kiln"))
    ap.add_argument("--smoke", action="store_true",
                    help="the script's plumbing on the CPU (interpreter, tiny shapes); its numbers mean nothing")
    args = ap.parse_args()
    os.environ.setdefault("KILN_DEVICE", "cpu" if args.smoke else "gpu")

    from kiln_worker.evaluation import confirm
    from kiln_worker.processes.device import select_device
    from kiln_worker.evaluation.templates import Library
    dev = select_device()
    if not dev.is_gpu and not args.smoke:
        print(f"aa_nightly: no GPU here ({dev.error or dev.name}); this measures the device", file=sys.stderr)
        return 1
    lib = Library()

    if args.smoke:
        cases = [{"op": "add", "shape": [256 * (i + 1)], "dtype": "fp32", "params": {}, "target": args.target,
                  "config": None} for i in range(args.jobs)]
    elif args.catalog:
        cases = cases_from_catalog(args.catalog, args.jobs)
    else:
        cases = [{"op": op, "shape": shape, "dtype": dt, "params": {}, "target": args.target, "config": None}
                 for op, shape, dt in BUILTIN[: args.jobs]]
    targets: dict[str, dict] = {}
    jobs = []
    for c in cases:
        t = targets.setdefault(c["target"], target_doc(c["target"]))
        job = {"op": c["op"], "shape": c["shape"], "dtype": c["dtype"], "params": c["params"], "target": t,
               "validation": {"seeds": 1, "atol": None, "rtol": None}, "benchmark": {"warmup": 5, "runs": 20}}
        cfg = c["config"]
        if cfg is None:
            from kiln_worker.evaluation.evaluate import space
            cfg = space(lib, job)["configs"][0]
        jobs.append((c, job, cfg))

    def one(job, entries):
        return confirm.run(lib, dev, {"job": job, "entries": entries, "rounds": args.rounds, "reps": args.reps})

    t0 = time.time()
    night_a = []
    for c, job, cfg in jobs:
        night_a.append(one(job, [{"id": 1, "config": cfg}]))
        print(f"A  {c['op']} {c['shape']} {c['dtype']}: {night_a[-1]['entries'][0]['median_ms']:.4f} ms",
              file=sys.stderr)
    night_b = []
    for (c, job, cfg), a in zip(jobs, night_a):
        inject = args.slowdown * a["entries"][0]["median_ms"]
        night_b.append(one(job, [{"id": 1, "config": cfg}, {"id": 2, "config": cfg, "inject_ms": inject}]))
    pairs = []
    for a, b in zip(night_a, night_b):
        sa = a["entries"][0]["samples_ms"]
        rounds = {"rounds_previous": args.rounds, "rounds_now": args.rounds}  # each night's confirmation rounds
        pairs.append({"previous": sa, "now": b["entries"][0]["samples_ms"], **rounds})
        pairs.append({"previous": sa, "now": b["entries"][1]["samples_ms"], **rounds})
    decisions = decide(args.kiln, pairs, args.min_effect)

    print(f"\n{dev.name} · {len(jobs)} jobs · {args.rounds} rounds x {args.reps} calls · "
          f"injected slowdown {args.slowdown:.0%} · min effect {args.min_effect:.0%} · {time.time() - t0:.0f} s\n")
    print("| job | A ms | B ms | A/A ratio | A/A p | A/A verdict | slowed ms | ratio | p | verdict | clock drop |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | --- |")
    false_alarms = detected = covered = 0
    rows = []
    for i, ((c, job, cfg), a, b) in enumerate(zip(jobs, night_a, night_b)):
        aa, inj = decisions[2 * i], decisions[2 * i + 1]
        false_alarms += aa["verdict"] == "regressed"
        detected += inj["verdict"] == "regressed"
        covered += aa["ratio_ci95"][0] <= 1.0 <= aa["ratio_ci95"][1]
        drop = a["conditions"]["clock_drop"] or b["conditions"]["clock_drop"]
        name = f"{c['op']} {'x'.join(map(str, c['shape']))} {c['dtype']}"
        print(f"| {name} | {a['entries'][0]['median_ms']:.4f} | {b['entries'][0]['median_ms']:.4f} | "
              f"{aa['median_ratio']:.4f} | {aa['p']:.3g} | {aa['verdict']} | {b['entries'][1]['median_ms']:.4f} | "
              f"{inj['median_ratio']:.4f} | {inj['p']:.3g} | {inj['verdict']} | {'yes' if drop else 'no'} |")
        rows.append({"job": {k: c[k] for k in ("op", "shape", "dtype", "params", "target")}, "config": cfg,
                     "a": a, "b": b, "aa": aa, "injected": inj})
    n = len(jobs)
    print(f"\nA/A false regressions: {false_alarms} of {n} (goal: at most 1 in 20)")
    print(f"{args.slowdown:.0%} slowdown detected: {detected} of {n} (goal: at least 19 of 20)")
    print(f"A/A ratio's 95% interval (over each night's rounds) covers 1.0: {covered} of {n}")
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "aa.json").write_text(json.dumps({
        "device": dev.name, "rounds": args.rounds, "reps": args.reps, "slowdown": args.slowdown,
        "min_effect": args.min_effect, "false_regressions": false_alarms, "detected": detected, "jobs": n,
        "aa_interval_covers_1": covered,
        "median_wall_s": statistics.median(r["a"]["timings"]["time_s"] for r in rows) if rows else None,
        "rows": rows}, indent=1))
    print(f"details: {out / 'aa.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
