#!/usr/bin/env python3
"""How long N processes take to create their CUDA contexts at one instant,
forked from one that imported torch and Triton (as the fork server's workers)
or started afresh (as workers without it).

Each process waits for a common instant, then times: its CUDA context (a
tensor on the GPU), a first Triton kernel (compile and run, one shared cold
cache as in a Kiln run), and a first library kernel. Prints the median and the
largest of each over the N processes.

    python3 bench/cost/cuda_context_herd.py --n 1 6 12 24
    python3 bench/cost/cuda_context_herd.py --n 12 24 --gpus 0,1   # process i on GPU i mod 2

With --gpus, each process sees one GPU (CUDA_VISIBLE_DEVICES, set before its
CUDA starts): on a two-GPU machine, 24 processes over 2 GPUs that wait as long
as 24 on one say the driver makes contexts one at a time per node; as long as
12 on one, per GPU.

Found on the H200 node (bench/results/README.md, h200-2026-12-01-fork-server):
the context takes about 0.16 s per process that creates one at the same time
(0.4 s alone, 1.9-2.1 s for 12, 3.9-5.5 s for 24), forked or not: the driver
creates them one at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics as st
import subprocess
import sys
import tempfile
import time


def steps(start_at: float) -> dict:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def double(x, y, n, B: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.perf_counter()
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    y = torch.empty_like(x)
    double[(1,)](x, y, 1024, B=1024)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    (x.view(32, 32) @ x.view(32, 32)).sum().item()
    t3 = time.perf_counter()
    return {"context": t1 - t0, "triton_kernel": t2 - t1, "library_kernel": t3 - t2, "total": t3 - t0}


def forked(n: int, gpus: list[str]) -> list[dict]:
    import gc
    import torch  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401
    gc.freeze()
    start_at = time.time() + 1.0
    pipes = []
    for i in range(n):
        r, w = os.pipe()
        if os.fork() == 0:
            if gpus:
                os.environ["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
            os.close(r)
            os.write(w, json.dumps(steps(start_at)).encode())
            os._exit(0)
        os.close(w)
        pipes.append(r)
    out = []
    for r in pipes:
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        out.append(json.loads(data))
    for _ in range(n):
        os.wait()
    return out


def fresh(n: int, gpus: list[str]) -> list[dict]:
    start_at = time.time() + 12  # after every process's imports
    ps = [subprocess.Popen([sys.executable, __file__, "--child", str(start_at)], stdout=subprocess.PIPE,
                           env=dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]} if gpus else {})))
          for i in range(n)]
    return [json.loads(p.stdout.read()) for p in ps]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1, 6, 12, 24])
    ap.add_argument("--gpus", default="", help="comma-separated GPU ids: process i on the (i mod count)th")
    ap.add_argument("--child", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    gpus = [g for g in a.gpus.split(",") if g]
    if a.child is not None:
        print(json.dumps(steps(a.child)), flush=True)
        return 0
    print(f"GPUs: {', '.join(gpus) if gpus else 'as visible'}")
    print("| processes | started | context s (median / max) | Triton kernel s | library kernel s |")
    print("| ---: | --- | --- | --- | --- |")
    for n in a.n:
        for how, run in (("forked", forked), ("afresh", fresh)):
            # Each in its own process, with its own cold Triton cache.
            if how == "forked":
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
                    os.write(w, json.dumps(run(n, gpus)).encode())
                    os._exit(0)
                os.close(w)
                data = b""
                while chunk := os.read(r, 1 << 20):
                    data += chunk
                os.waitpid(pid, 0)
                res = json.loads(data)
            else:
                os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
                res = run(n, gpus)
            cell = {k: f"{st.median(x[k] for x in res):.2f} / {max(x[k] for x in res):.2f}" for k in res[0]}
            print(f"| {n} | {how} | {cell['context']} | {cell['triton_kernel']} | {cell['library_kernel']} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
