#!/usr/bin/env python3
"""Why an independent harness reads GEMMs slower than Kiln's confirmation round:
the same kernels timed three ways in one process, with the GPU's SM clock and
power sampled throughout (NVML, every few milliseconds).

    python3 bench/trust/gemm_clocks.py CATALOG [--json OUT.json] [--rounds 3]

For every matmul / gemm_bias_act job in CATALOG (`kiln best --json`: the best
config), the template's kernel (kernels/<family>.py `launch`, JIT) and cuBLAS
(`torch.matmul` on the same inputs) are timed by:

- ``sustained``: ``triton.testing.do_bench(fn, warmup=50, rep=300)``, what
  bench/trust/independent_bench.py runs: about 300 ms of back-to-back calls,
  each after an L2 flush;
- ``bursts``: the same do_bench with ``rep=20`` (about as many calls as one
  entry gets in one confirmation round), ROUNDS bursts 0.5 s apart, median of
  the bursts' medians;
- ``kiln``: the worker's own benchmark (``kiln_worker.evaluation.timing``:
  flush, GPU spin, events), the count bounded by its time budget.

Each row gives the median, the mean and minimum SM clock and the mean power
while that harness ran. If the gap is the harness's duty cycle (a GEMM drawing
the H200 to its power limit lowers the clock), `sustained` reads slower with a
lower clock for both Triton and cuBLAS, and `bursts` agrees with `kiln`.
Nothing here changes the GPU's settings.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "worker")]

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from independent_bench import template_module  # noqa: E402  (kernels/<family>.py of an operator)


class Sampler:
    """NVML SM clock (MHz) and power (W) every `period` s in a thread, kept with
    their times; `window(t0, t1)` summarises the samples between two times."""

    def __init__(self, period: float = 0.005):
        # the worker's own NVML set-up: this process's GPU by UUID / PCI bus id
        from kiln_worker.evaluation.confirm import _nvml_handle, _pynvml
        nv = _pynvml()
        if nv is None:
            raise SystemExit("gemm_clocks.py needs NVML (pip install nvidia-ml-py) and an NVIDIA driver")
        self.nv = nv
        self.h = _nvml_handle(nv)
        self.period = period
        self.samples: list[tuple[float, int, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        nv, h = self.nv, self.h
        while not self.stop.is_set():
            try:
                self.samples.append((time.perf_counter(), nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                     nv.nvmlDeviceGetPowerUsage(h) / 1000.0))
            except Exception:  # noqa: BLE001 - a missed sample
                pass
            time.sleep(self.period)

    def window(self, t0: float, t1: float) -> dict:
        xs = [s for s in self.samples if t0 <= s[0] <= t1]
        if not xs:
            return {"samples": 0}
        return {"samples": len(xs), "sm_mhz_mean": statistics.fmean(x[1] for x in xs),
                "sm_mhz_min": min(x[1] for x in xs), "power_w_mean": statistics.fmean(x[2] for x in xs)}


def harnesses(fn, rounds: int):
    from kiln_worker.evaluation import timing

    def sustained():
        return statistics.median(triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
                                 for _ in range(rounds))

    def bursts():
        ms = []
        for _ in range(rounds):
            time.sleep(0.5)
            ms.append(triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median"))
        return statistics.median(ms)

    def kiln():
        return timing._benchmark(fn, warmup=10, runs=100, device_name="gpu")["median_ms"]

    return {"sustained": sustained, "bursts": bursts, "kiln": kiln}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("catalog")
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sql = ("SELECT j.op, j.shape, j.dtype, j.params, c.config, b.confirmed_ms FROM best b "
           "JOIN jobs j ON j.id = b.job_id JOIN candidates c ON c.id = b.candidate_id "
           "WHERE b.basis = 'measured' AND j.op IN ('matmul', 'gemm_bias_act') ORDER BY j.id")
    jobs = json.loads(subprocess.run([args.kiln, "query", sql, "--catalog", args.catalog, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    sampler = Sampler()
    rows = []
    for b in jobs:
        op, dtype = b["op"], b["dtype"]
        shape, params, config = (json.loads(b[k]) if isinstance(b[k], str) else b[k] for k in ("shape", "params", "config"))
        mod = template_module({"operator": op})
        ins = mod.make_inputs(op, shape, dtype, params, 7, torch.device("cuda"))
        out = mod.output_like(op, ins, params)
        a, bb = ins["a"], ins["b"]
        fns = {"kiln kernel": lambda: mod.launch(op, ins, out, config, params),
               "cuBLAS matmul": lambda: torch.matmul(a, bb if a.shape[-1] == bb.shape[0] else bb.t())}
        for who, fn in fns.items():
            fn()
            torch.cuda.synchronize()
            for name, h in harnesses(fn, args.rounds).items():
                time.sleep(1.0)  # the GPU cools between harnesses alike
                t0 = time.perf_counter()
                ms = h()
                t1 = time.perf_counter()
                row = {"op": op, "shape": shape, "dtype": dtype, "fn": who, "harness": name, "median_ms": ms,
                       "catalog_ms": b.get("confirmed_ms") if who == "kiln kernel" else None,
                       **sampler.window(t0, t1)}
                rows.append(row)
                print(f"{op} {'x'.join(map(str, shape))} {who:14} {name:9} {ms:8.4f} ms  "
                      f"SM {row.get('sm_mhz_mean', 0):6.0f} MHz (min {row.get('sm_mhz_min', 0):4.0f})  "
                      f"{row.get('power_w_mean', 0):5.0f} W", flush=True)
    sampler.stop.set()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "torch": torch.__version__, "triton": triton.__version__,
                       "device": torch.cuda.get_device_name()}, f, indent=1)
    print("\n| job | fn | harness | median ms | vs kiln | SM MHz mean (min) | W |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        k = next(x for x in rows if x["op"] == r["op"] and x["shape"] == r["shape"] and x["fn"] == r["fn"]
                 and x["harness"] == "kiln")
        print(f"| {r['op']} {'x'.join(map(str, r['shape']))} | {r['fn']} | {r['harness']} | {r['median_ms']:.4f} | "
              f"{r['median_ms'] / k['median_ms']:.3f} | {r.get('sm_mhz_mean', 0):.0f} ({r.get('sm_mhz_min', 0):.0f}) | "
              f"{r.get('power_w_mean', 0):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
