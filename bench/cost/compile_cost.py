"""Where a candidate's CPU time goes on a GPU machine: compile, spill report, JIT.

For each case (an anchor's best config) in a fresh Triton cache: the worker's
compile stage for the job's target (Triton front end + ptxas), the extra
`ptxas -v` run that reports spills, and the first launch through the template's
own launch() -- which must find the kernel the compile stage just built (no
second compile: the cubin count in the cache stays the same). Prints a table;
--json writes the numbers.

    python3 bench/cost/compile_cost.py --json out.json          # on a GPU node
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

import yaml  # noqa: E402

CASES = [
    ("softmax", [16384, 4096], "bf16", {}, {"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 2, "num_stages": 1}),
    ("rmsnorm", [16384, 4096], "bf16", {}, {"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 8, "num_stages": 1}),
    ("matmul", [4096, 4096, 4096], "bf16", {},
     {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
      "persistent": 1}),
    ("conv2d", [64, 3, 224, 224], "fp16", {"out_channels": 64, "kernel_size": 3, "padding": 1},
     {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "BLOCK_P": 512, "num_warps": 4, "num_stages": 2,
      "spec": 1, "transpose": 1, "prefetch": 1}),
    ("attention", [4, 32, 2048, 128], "bf16", {"causal": True},
     {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_H": 8, "num_warps": 4, "num_stages": 3}),
]


def cubins(cache: str) -> int:
    return len(glob.glob(os.path.join(cache, "**", "*.cubin"), recursive=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()

    os.environ.setdefault("KILN_PTXAS_SPILLS", "1")
    from kiln_worker.codeobject import resources
    from kiln_worker.processes.device import select_device
    from kiln_worker.evaluation.evaluate import job_fields
    from kiln_worker.codeobject.targetcompile import compile_stage
    from kiln_worker.evaluation.templates import Library
    import torch
    import triton

    dev = select_device()
    lib = Library()
    target = yaml.safe_load(open(ROOT / "configs" / "targets" / "H200.yaml"))
    rows = []
    for op, shape, dtype, params, config in CASES:
        cache = tempfile.mkdtemp(prefix=f"kiln-cc-{op}-")
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            triton.knobs.cache.dir = cache
        except Exception:
            pass
        mod = lib.launch_module(op)
        merged = job_fields(lib, {"op": op, "shape": shape, "dtype": dtype, "params": params})[3]
        os.environ["KILN_PTXAS_SPILLS"] = "0"
        t0 = time.perf_counter()
        stage = compile_stage(lib, op, shape, dtype, merged, config, target, None)
        t_compile = time.perf_counter() - t0
        os.environ["KILN_PTXAS_SPILLS"] = "1"
        n_after_compile = cubins(cache)
        art = stage.get("artifact") or {}
        ptx = None
        for p in glob.glob(os.path.join(cache, "**", "*.ptx"), recursive=True):
            ptx = open(p).read()
        t0 = time.perf_counter()
        px = resources.ptxas_verbose(ptx, "sm_90") if ptx else None
        t_verbose = time.perf_counter() - t0
        inputs = mod.make_inputs(op, shape, dtype, merged, 0, dev.torch_device)
        out = mod.output_like(op, inputs, merged)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        mod.launch(op, inputs, out, config, merged)
        torch.cuda.synchronize()
        t_launch = time.perf_counter() - t0
        n_after_launch = cubins(cache)
        t0 = time.perf_counter()
        mod.launch(op, inputs, out, config, merged)
        torch.cuda.synchronize()
        t_second = time.perf_counter() - t0
        rows.append({"op": op, "status": stage["status"], "message": stage["message"][:300],
                     "compile_s": t_compile, "ptxas_verbose_s": t_verbose,
                     "first_launch_s": t_launch, "second_launch_s": t_second,
                     "cubins_after_compile": n_after_compile, "cubins_after_launch": n_after_launch,
                     "frame_size": (art.get("resources") or {}).get("stack_frame_bytes"),
                     "spill_store_bytes": (px or {}).get("spill_store_bytes"),
                     "registers": art.get("registers")})
        del inputs, out
        torch.cuda.empty_cache()

    print("| op | compile s | ptxas -v s | 1st launch s | cubins compile → launch | frame B | spill B | regs |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['op']} | {r['compile_s']:.2f} | {r['ptxas_verbose_s']:.2f} | {r['first_launch_s']:.2f} | "
              f"{r['cubins_after_compile']} → {r['cubins_after_launch']} | {r['frame_size']} | "
              f"{r['spill_store_bytes']} | {r['registers']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "cpus": os.cpu_count(), "triton": triton.__version__,
                       "torch": torch.__version__}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
