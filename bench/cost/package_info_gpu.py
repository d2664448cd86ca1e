#!/usr/bin/env python3
"""The worker's `package_info` on a GPU: anchor-sized jobs, neighbours on.

For each case: a GPU worker (python3 -m kiln_worker, KILN_DEVICE=gpu)
evaluates one config (the first of the job's space, or the given one), then
answers package_info with neighbours and verification data. This script then
checks the answer the way a loader would, on the same GPU, without the
worker:

* every expression parsed and evaluated at the job shape; the grid equals
  the artifact's;
* inputs regenerated from the verify object (SplitMix64, verify_data.fill),
  the template kernel launched on them (mod.launch, the Triton JIT), and
  verify_data.check_verify on its output -- it must pass -- and on the
  output with one element set to NaN -- it must fail.

    python3 bench/cost/package_info_gpu.py                 # every case
    python3 bench/cost/package_info_gpu.py softmax matmul  # some
    python3 bench/cost/package_info_gpu.py --cpu-smoke     # tiny shapes, CPU interpreter (checks the script)

Prints one row per case (range found, neighbours verified / failed, the
method's time by part, the loader-side check) and writes every answer with
its notes to $OUT/package_info_gpu.json (or ./package_info_gpu.json).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

CPU_SMOKE = "--cpu-smoke" in sys.argv
if CPU_SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: mod.launch runs interpreted

import yaml  # noqa: E402

HOME = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(HOME / "worker"), str(HOME)]

TARGET = yaml.safe_load((HOME / "configs" / "targets" / "H200.yaml").read_text())
WS = {"BLOCK_M": 128, "BLOCK_N": 128, "GROUP_H": 8, "num_warps": 4, "num_stages": 2, "ws": 1, "pair": 1}
CASES = [  # (name, op, shape, dtype, params, config or None = the space's first)
    ("softmax", "softmax", [16384, 4096], "bf16", {}, None),
    ("layernorm", "layernorm", [16384, 4096], "bf16", {"eps": 1e-5}, None),
    ("rmsnorm", "rmsnorm", [16384, 4096], "bf16", {"eps": 1e-6}, None),
    ("row_sum", "row_sum", [16384, 4096], "fp32", {}, None),
    ("add", "add", [16384, 4096], "fp16", {}, None),
    ("bias_gelu", "bias_gelu", [8192, 4096], "bf16", {"approximate": "none"}, None),
    ("matmul", "matmul", [4096, 4096, 4096], "bf16", {}, None),
    ("gemm_bias_act", "gemm_bias_act", [8192, 4096, 4096], "bf16", {"activation": "gelu"}, None),
    ("conv2d", "conv2d", [32, 64, 56, 56], "fp16", {"out_channels": 64, "kernel_size": 3, "padding": 1}, None),
    ("attention", "attention", [4, 32, 2048, 128], "bf16", {"causal": True, "sm_scale": 0.0}, None),
    ("attention_ws", "attention", [4, 32, 2048, 128], "bf16", {"causal": True, "sm_scale": 0.0}, WS),
]
SMOKE = [
    ("softmax", "softmax", [6, 40], "fp32", {}, {"BLOCK_M": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 1}),
    ("matmul", "matmul", [32, 48, 64], "bf16", {},
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 2, "num_stages": 3}),
]
DEVICE = "cpu" if CPU_SMOKE else "gpu"


class Worker:
    def __init__(self):
        env = dict(os.environ)
        env.pop("TRITON_INTERPRET", None)
        env.update(PYTHONPATH=f"{HOME / 'worker'}:{HOME}", KILN_HOME=str(HOME), KILN_DEVICE=DEVICE)
        self.proc = subprocess.Popen([sys.executable, "-m", "kiln_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=HOME)
        self.n = 0

    def call(self, method, **fields):
        self.n += 1
        self.proc.stdin.write((json.dumps({"id": self.n, "method": method, **fields}) + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the worker died (rc {self.proc.wait()})")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def loader_check(op, shape, dtype, params, config, answer, artifact) -> str:
    """The answer checked as a loader would, on this process's GPU."""
    import torch

    from kiln_worker.packaging import verify_data
    from kiln_worker.packaging.shape_expr import evaluate
    from kiln_worker.evaluation.templates import Library
    grid = [evaluate(g, shape) for g in answer["grid"]]
    if grid != list(artifact["grid"]):
        return f"grid {grid} != artifact {artifact['grid']}"
    for a in answer["args"]:
        if "expr" in a["bind"]:
            evaluate(a["bind"]["expr"], shape)
    mod = Library().launch_module(op)
    v = answer["verify"]
    tensors = answer["tensors"]
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    inputs = {}
    for spec in v["inputs"]:
        t = tensors[spec["tensor"]]
        tshape = [evaluate(e, shape) for e in t["shape"]]
        vals = verify_data.fill(v["seed"], spec["tensor"], math.prod(tshape), spec["lo"], spec["hi"], t["dtype"])
        inputs[t["name"]] = torch.from_numpy(vals).reshape(tshape).to(dt[t["dtype"]]).to(
            "cpu" if CPU_SMOKE else "cuda")
    out = mod.output_like(op, inputs, params)
    out.fill_(float("nan"))
    mod.launch(op, inputs, out, config, params)
    if not CPU_SMOKE:
        torch.cuda.synchronize()
    o = v["outputs"][0]
    flat = out.double().reshape(-1).cpu().numpy()
    fails = verify_data.check_verify(v, {o["tensor"]: flat})
    if fails:
        return "FAILED: " + fails[0]
    flat[len(flat) // 2] = float("nan")
    if not verify_data.check_verify(v, {o["tensor"]: flat}):
        return "FAILED: a NaN output passed"
    return "ok"


def describe_range(r) -> str:
    if r.get("exact"):
        return "exact"
    return " x ".join(f"[{d['min']},{d['max']}]" + (f"/{d['multiple_of']}" if d["multiple_of"] > 1 else "")
                      for d in r["dims"])


def main(names) -> int:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    w = Worker()
    hello = w.call("hello")
    print(f"worker: {hello.get('result', {}).get('device')}")
    rows, details = [], []
    for name, op, shape, dtype, params, config in (SMOKE if CPU_SMOKE else CASES):
        if names and name not in names and op not in names:
            continue
        job = {"op": op, "shape": shape, "dtype": dtype, "params": params, "target": TARGET,
               "validation": {"seeds": 1}, "benchmark": {"runs": 0}}
        if config is None:
            sp = w.call("space", job=job)
            config = [c for c in sp["result"]["configs"] if not c.get("ws")][0]
        ev = w.call("evaluate", job=job, config=config, artifact_dir=None)
        if not ev.get("ok") or ev["result"]["status"] != "ok":
            rows.append((name, "evaluate failed", "", "", "", ""))
            details.append({"case": name, "evaluate": ev})
            continue
        art = ev["result"]["artifact"]
        t0 = time.perf_counter()
        pi = w.call("package_info", job=job, config=config, artifact=art, neighbours=True, verify_seed=1)
        wall = time.perf_counter() - t0
        if not pi.get("ok"):
            rows.append((name, "package_info failed: " + pi.get("error", "")[:80], "", "", "", ""))
            details.append({"case": name, "package_info": pi})
            continue
        r = pi["result"]
        notes = r["range_notes"]
        verified = len(r["range"].get("verified_shapes", [shape]))
        failed = sum(1 for n in notes if ": fail:" in n)
        tm = r["timings"]
        check = loader_check(op, shape, dtype, params, config, r, art)
        rows.append((name, describe_range(r["range"]), f"{verified}/{failed}",
                     f"{tm['launch_s']:.2f}/{tm['range_s']:.1f}/{tm['verify_s']:.1f}", f"{wall:.1f}", check))
        details.append({"case": name, "job": job, "config": config, "artifact_sha256": art["sha256"],
                        "answer": {k: v for k, v in r.items() if k != "verify"},
                        "verify_outputs": [{k: v for k, v in o.items() if k != "samples"}
                                           for o in r["verify"]["outputs"]],
                        "loader_check": check, "wall_s": wall})
    w.close()
    head = ("case", "range", "verified/failed", "launch/range/verify s", "wall s", "loader check")
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    for row in [head] + rows:
        print("  ".join(str(x).ljust(wd) for x, wd in zip(row, widths)))
    (out_dir / "package_info_gpu.json").write_text(json.dumps(details, indent=1))
    print(f"details: {out_dir / 'package_info_gpu.json'}")
    return 0 if all(r[-1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main([a for a in sys.argv[1:] if not a.startswith("--")]))
