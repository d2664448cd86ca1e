#!/usr/bin/env python3
"""The checker's GPU paths on one GPU (issue 17, items 5-8): prints a short table.

1. Templates (bench/cost/compile_cost.py's anchor cases, plus fp32 matmul 4096^3 for
   the sqrt(K) tolerance): each evaluated twice by the worker's own Evaluation
   with a benchmark of --runs runs, on the H200 target (the executing device):
   status, whether the binary timed is the code object shipped
   (latency.binary_sha256 == artifact.sha256, artifact.timed_match), the
   candidate's seeds, check_s and setup_s of a first and a repeated candidate
   (the repeated one reuses the candidate seed's reference: the cost of a seed
   per candidate is the difference), and the device identity in the latency
   block.
2. Generated code through a GPU worker (tests/python/test_worker_generated.py's
   GPU tests: the checked benchmark, the hostile corpus on the GPU, the timed
   binary), and tests/python/test_compare_kernel.py (the fused kernel on strided
   views) -- their pytest summaries.
3. The GPU lock file: one per physical GPU (gpulock.lock_path under three
   spellings of CUDA_VISIBLE_DEVICES).

    python3 bench/cost/checker_h200.py [--runs 20] [--skip-pytest]   # details to $OUT/checker_h200.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT), str(ROOT / "bench" / "cost")]


from compile_cost import CASES  # noqa: E402
from gpu_evaluation import h200_evaluation  # noqa: E402

EXTRA: list = []  # the matmul templates take fp16 / bf16 only (no fp32 case for the sqrt(K) tolerance)


def pytest_summary(args: list[str]) -> str:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=540)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    tail = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))] + lines[-1:]
    # the whole report beside the summary: a failure's reason is in it
    log = Path(os.environ.get("OUT") or tempfile.gettempdir()) / f"pytest-{Path(args[0]).stem}.log"
    log.write_text(p.stdout + p.stderr)
    return f"{' | '.join(tail)} ({time.time() - t0:.0f} s; {log})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--skip-pytest", action="store_true")
    args = ap.parse_args()
    out_dir = os.environ.get("OUT") or tempfile.mkdtemp()
    started = h200_evaluation("checker_h200")
    if started is None:
        return 2
    ev, _, target = started
    from kiln_worker.evaluation import timing
    from kiln_worker.processes import gpulock
    details: dict = {"templates": [], "pytest": {}, "lock": {}}
    print("| op | dtype | status | timed == shipped | check_s first / again (ms) | setup_s first / again (ms) | seeds |")
    print("| --- | --- | --- | --- | ---: | ---: | --- |")
    for op, shape, dtype, params, config in CASES + EXTRA:
        job = {"op": op, "shape": shape, "dtype": dtype, "params": params, "target": target,
               "validation": {"seeds": 3}, "benchmark": {"runs": args.runs, "warmup": 5}}
        first = ev.run(job, config, None)
        again = ev.run(job, config, None)
        details["templates"].append({"op": op, "dtype": dtype, "first": first, "again": again})
        art, lat = first.get("artifact") or {}, first.get("latency") or {}
        same = (lat.get("binary_sha256") == art.get("sha256"), art.get("timed_match"))
        t1, t2 = first["timings"], again["timings"]
        print(f"| {op} {shape} | {dtype} | {first['status']} {first['message'][:60]} | "
              f"{same[0]} ({same[1]}) | {1e3 * t1['check_s']:.0f} / {1e3 * t2['check_s']:.0f} | "
              f"{1e3 * t1.get('setup_s', 0):.0f} / {1e3 * t2.get('setup_s', 0):.0f} | "
              f"{(first.get('correctness') or {}).get('seeds_used')} |")
    ident = gpulock.device_identity()
    print(f"\ndevice identity: {ident}")
    paths = {}
    uuid = str(ident.get("uuid") or "")
    for vis in (None, "0", (uuid if uuid.startswith("GPU-") else "GPU-" + uuid) if uuid else "0"):
        env = {k: v for k, v in os.environ.items() if k not in ("KILN_GPU_LOCK", "CUDA_VISIBLE_DEVICES")}
        if vis is not None:
            env["CUDA_VISIBLE_DEVICES"] = vis
        env["PYTHONPATH"] = str(ROOT / "worker")
        p = subprocess.run([sys.executable, "-c", "from kiln_worker.processes import gpulock; print(gpulock.lock_path())"],
                           env=env, capture_output=True, text=True, timeout=120)
        paths[str(vis)] = p.stdout.strip() or p.stderr.strip()[-200:]
    details["lock"] = {"identity": ident, "paths": paths}
    print(f"lock paths by CUDA_VISIBLE_DEVICES: {paths} -> {'one lock' if len(set(paths.values())) == 1 else 'SEVERAL'}")
    if not args.skip_pytest:
        for name, a in (("generated (GPU tests)", ["tests/python/test_worker_generated.py", "-k", "gpu"]),
                        ("compare_kernel", ["tests/python/test_compare_kernel.py"]),
                        ("gpu lock", ["tests/python/test_gpu_lock.py"])):
            s = pytest_summary(a)
            details["pytest"][name] = s
            print(f"pytest {name}: {s}")
    with open(os.path.join(out_dir, "checker_h200.json"), "w") as f:
        json.dump(details, f, indent=1, default=str)
    print(f"details: {os.path.join(out_dir, 'checker_h200.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
