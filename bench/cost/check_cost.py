#!/usr/bin/env python3
"""What a candidate's correctness check costs on the GPU, alone on the device.

For each case of bench/cost/compile_cost.py (an anchor's best config), runs the
worker's own evaluation (compile, check on 3 seeds, no benchmark) REPEAT times
in each of three modes, in alternation, after one untimed evaluation that sets
the job up (inputs, reference, kernel load): `fused`, check.compare as it is
(on a GPU one kernel reads the output and the reference once,
compare_kernel); `torch`, compare's torch pass (chunks of torch operations,
read back in one transfer: the compare before 2026-12-01); `detailed`, the
pass that reads every statistic back separately (the compare before
2026-11-30 late). Prints, per case, the medians of the time the check held the
GPU lock and of check_s; --json writes every sample.

    python3 bench/cost/check_cost.py [--repeat 7] [--json out.json]   # on a GPU node
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT), str(ROOT / "bench" / "cost")]


from compile_cost import CASES  # noqa: E402
from gpu_evaluation import h200_evaluation  # noqa: E402


def held(timings: dict, kind: str) -> float:
    return sum(b - a for a, b, k in timings.get("gpu_spans") or [] if k == kind)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", help="write every sample here")
    args = ap.parse_args()
    started = h200_evaluation("check_cost")
    if started is None:
        return 2
    ev, dev, target = started
    from kiln_worker.evaluation import check
    fast, detailed, fused_applies = check.compare, check._compare_detailed, check.fused_applies
    modes = ("fused", "torch", "detailed")
    rows, samples = [], []
    for op, shape, dtype, params, config in CASES:
        job = {"op": op, "shape": shape, "dtype": dtype, "params": params, "target": target,
               "validation": {"seeds": 3}, "benchmark": {"runs": 0}}
        first = ev.run(job, config, None)
        if first["status"] != "ok":
            rows.append({"op": op, "status": first["status"], "message": first["message"][:200]})
            continue
        per = {m: [] for m in modes}
        for i in range(len(modes) * args.repeat):
            mode = modes[i % len(modes)]
            if mode == "detailed":
                check.compare = (lambda out, ref, atol, rtol, seed, memo=None:
                                 detailed(out, ref, atol, rtol, seed))
            if mode == "torch":
                check.fused_applies = lambda *a: False
            try:
                res = ev.run(job, config, None)
            finally:
                check.compare, check.fused_applies = fast, fused_applies
            t = res["timings"]
            s = {"op": op, "mode": mode, "status": res["status"], "check_s": t["check_s"],
                 "check_held_s": held(t, "check"), "preload_s": t.get("preload_s")}
            per[mode].append(s)
            samples.append(s)
        row = {"op": op, "status": "ok"}
        for mode, ss in per.items():
            row[f"{mode}_held_ms"] = 1e3 * statistics.median(x["check_held_s"] for x in ss)
            row[f"{mode}_check_ms"] = 1e3 * statistics.median(x["check_s"] for x in ss)
        rows.append(row)
    print("| op | check holds the lock, ms (fused / torch / detailed) | check_s ms (fused / torch / detailed) |")
    print("| --- | ---: | ---: |")
    for r in rows:
        if r["status"] != "ok":
            print(f"| {r['op']} | {r['status']}: {r['message']} | |")
            continue
        held_ms = " / ".join(f"{r[m + '_held_ms']:.1f}" for m in modes)
        check_ms = " / ".join(f"{r[m + '_check_ms']:.1f}" for m in modes)
        print(f"| {r['op']} | {held_ms} | {check_ms} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "samples": samples, "device": dev.name}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
