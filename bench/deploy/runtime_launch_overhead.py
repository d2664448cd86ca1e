"""Host time per launch of the same softmax kernel through Triton's own
launchers, for comparison with bench/deploy/runtime_launch_overhead.c (run by
bench/deploy/runtime_h200.sh). Batches of 200 launches, synchronised between batches;
prints one JSON line per launcher: the JIT entry point (kernel[grid](...)) and
the compiled kernel's launcher (CompiledKernel[grid](...))."""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "data" / "runtime"))
from make_package import softmax_kernel  # noqa: E402

BATCH, BATCHES = 200, 200


def measure(fn):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(BATCH):
            fn()
        per.append((time.perf_counter() - t0) / BATCH * 1e6)
        torch.cuda.synchronize()
    per.sort()
    return {"median_us": per[BATCHES // 2], "p10_us": per[BATCHES // 10], "p90_us": per[BATCHES * 9 // 10]}


def main(rows=64, cols=1000):
    x = torch.randn(rows, cols, device="cuda")
    y = torch.empty_like(x)
    grid = (rows,)
    out = {"what": "triton jit launch", "kernel": "softmax_kernel", "shape": [rows, cols]}
    out.update(measure(lambda: softmax_kernel[grid](x, y, cols, BLOCK=1024, num_warps=4)))
    print(json.dumps(out))
    try:
        ck = softmax_kernel.warmup(x, y, cols, BLOCK=1024, num_warps=4, grid=grid)
        out = {"what": "triton CompiledKernel launch", "kernel": "softmax_kernel", "shape": [rows, cols]}
        # CompiledKernel's runner takes a 3-dim grid and every argument of the
        # kernel's signature, constexprs included (as JITFunction.run passes them)
        grid3 = (rows, 1, 1)
        out.update(measure(lambda: ck[grid3](x, y, cols, 1024)))
        print(json.dumps(out))
    except Exception as exc:  # the compiled-kernel entry point changes between Triton versions
        print(json.dumps({"what": "triton CompiledKernel launch", "error": repr(exc)}))


if __name__ == "__main__":
    main()
