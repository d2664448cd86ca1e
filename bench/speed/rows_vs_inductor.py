"""Kiln's row kernels against torch.compile's, timed by the same harness.

The anchor measurements of 2026-11-29 (one H200) time torch.compile with triton.testing.do_bench; Kiln's
catalog holds the worker's harness (kiln_worker.evaluation.timing: L2 flush, a GPU spin
before each run, device events, median of N). This script times both kinds of
kernel with both harnesses on this GPU, so a gap between Kiln and Inductor is
not a harness difference, and writes Inductor's generated Triton source next to
the numbers (--out) to read what its kernels do.

    python3 bench/speed/rows_vs_inductor.py --out DIR [--configs FILE.json]

--configs: {"op": [config, ...]} Kiln configs to time (default: the anchor
runs' best configs).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

DEFAULT_CONFIGS = {
    "softmax": [{"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 2, "num_stages": 1}],
    "layernorm": [{"BLOCK_M": 2, "BLOCK_N": 4096, "num_warps": 8, "num_stages": 1}],
    "rmsnorm": [{"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 8, "num_stages": 1}],
}
SHAPE = [16384, 4096]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs")
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    inductor_dir = tempfile.mkdtemp(prefix="kiln-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_dir

    import torch
    import torch.nn.functional as F
    import triton
    from kiln_worker.evaluation.timing import _benchmark
    from kiln_worker.evaluation.evaluate import job_fields
    from kiln_worker.evaluation.templates import Library

    lib = Library()
    configs = json.load(open(args.configs)) if args.configs else DEFAULT_CONFIGS
    target = {"l2_bytes": 50 * 2 ** 20}

    def harness(fn):
        return _benchmark(fn, 25, args.runs, "gpu", target)["median_ms"]

    def do_bench(fn):
        return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")

    def torch_fn(op, inputs):
        if op == "softmax":
            x = inputs["x"] if "x" in inputs else list(inputs.values())[0]
            return lambda x=x: torch.softmax(x, dim=-1)
        if op == "layernorm":
            x, w, b = list(inputs.values())[:3]
            return lambda: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
        if op == "rmsnorm":
            x, w = inputs["x"], inputs["weight"]
            def rms():
                xf = x.float()
                return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
            return rms
        raise ValueError(op)

    rows = []
    for op in ("softmax", "layernorm", "rmsnorm"):
        mod = lib.launch_module(op)
        params = job_fields(lib, {"op": op, "shape": SHAPE, "dtype": "bf16"})[3]  # the registry's defaults
        inputs = mod.make_inputs(op, SHAPE, "bf16", params, 0, torch.device("cuda"))
        out = mod.output_like(op, inputs, params)
        for cfg in configs.get(op, []):
            fn = lambda cfg=cfg: mod.launch(op, inputs, out, cfg, params)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            rows.append({"op": op, "kernel": "kiln " + json.dumps(cfg, sort_keys=True),
                         "harness_ms": harness(fn), "harness2_ms": harness(fn), "do_bench_ms": do_bench(fn)})
        for mode in ("default", "max-autotune-no-cudagraphs"):
            torch._dynamo.reset()
            cfn = torch.compile(torch_fn(op, inputs), mode=mode)
            for _ in range(3):
                cfn()
            torch.cuda.synchronize()
            rows.append({"op": op, "kernel": f"torch.compile {mode}",
                         "harness_ms": harness(cfn), "harness2_ms": harness(cfn), "do_bench_ms": do_bench(cfn)})
        eager = torch_fn(op, inputs)
        rows.append({"op": op, "kernel": "torch eager", "harness_ms": harness(eager),
                     "harness2_ms": harness(eager), "do_bench_ms": do_bench(eager)})
        for r in rows[-4:]:
            print(json.dumps(r), flush=True)

    kdir = os.path.join(args.out, "inductor_kernels")
    os.makedirs(kdir, exist_ok=True)
    n = 0
    for p in glob.glob(os.path.join(inductor_dir, "**", "*.py"), recursive=True):
        text = open(p, errors="replace").read()
        if "@triton.jit" in text and ("reduction" in text or "persistent" in text) and n < 40:
            shutil.copy(p, os.path.join(kdir, f"{n:02d}-{os.path.basename(p)}"))
            n += 1
    with open(os.path.join(args.out, "rows_vs_inductor.json"), "w") as f:
        json.dump({"rows": rows, "torch": torch.__version__, "triton": triton.__version__}, f, indent=1)
    print("| op | kernel | harness ms (2 runs) | do_bench ms |")
    print("| --- | --- | --- | ---: |")
    for r in rows:
        print(f"| {r['op']} | {r['kernel']} | {r['harness_ms']:.4f} / {r['harness2_ms']:.4f} | {r['do_bench_ms']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
