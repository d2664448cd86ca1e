"""Kiln's best kernels against torch eager on the same shapes, on this GPU.

Reads the catalog (every done job whose best was *measured* on this GPU),
times torch eager on the same operator, shape and dtype with the very harness
the Kiln worker uses (kiln_worker.evaluation.timing: L2 flush, device events, median of N
runs), and prints a Markdown table. Writes JSON with every number to --json.

    python3 bench/speed/torch_baseline.py --catalog kiln.db --json out.json

The floor column is max(bytes / copy bandwidth, flops / matmul rate) with both
ceilings measured in the same run (a device-to-device copy; a bf16 8192^3
torch matmul), as the anchor measurements of 2026-11-29 did.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import yaml  # noqa: E402

from kiln_worker.evaluation.timing import benchmark  # noqa: E402


def eager(op: str, inputs: dict, params: dict):
    """The torch eager call for an operator, on native-dtype inputs."""
    v = list(inputs.values())
    if op == "add":
        return lambda: torch.add(v[0], v[1])
    if op == "bias_gelu":
        approx = params.get("approximate", "none")
        return lambda: F.gelu(v[0] + v[1], approximate=approx)
    if op == "softmax":
        return lambda: torch.softmax(v[0], dim=-1)
    if op == "layernorm":
        x, w, b = v[0], v[1], v[2]
        return lambda: F.layer_norm(x, (x.shape[-1],), w, b, params.get("eps", 1e-5))
    if op == "matmul":
        return lambda: torch.matmul(v[0], v[1])
    if op == "conv2d":
        return lambda: F.conv2d(v[0], v[1], stride=params.get("stride", 1),
                                padding=params.get("padding", 0))
    if op == "rmsnorm":
        x, w = inputs["x"], inputs["weight"]
        return lambda: F.rms_norm(x, (x.shape[-1],), w, params.get("eps", 1e-6))
    if op == "row_sum":
        return lambda: v[0].sum(dim=-1)
    if op == "row_mean":
        return lambda: v[0].mean(dim=-1)
    if op == "row_max":
        return lambda: v[0].amax(dim=-1)
    if op == "gemm_bias_act":
        a, b, bias = inputs["a"], inputs["b"], inputs["bias"]
        act = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[params.get("activation", "gelu")]
        return lambda: act(torch.addmm(bias, a, b))
    if op == "attention":
        q, k, vv = inputs["q"], inputs["k"], inputs["v"]
        scale = params.get("sm_scale") or None
        return lambda: F.scaled_dot_product_attention(q, k, vv, is_causal=params.get("causal", True), scale=scale)
    raise KeyError(op)


# torch.compile (max-autotune) medians from the anchor measurements (one H200,
# torch 2.11, Triton 3.6.0, 2026-11-29), by (op, shape, dtype). Not re-measured
# here: max-autotune compiles for minutes per case.
COMPILE_MS = {
    ("add", (67108864,), "fp32"): 0.1894,
    ("softmax", (16384, 4096), "bf16"): 0.1322,
    ("layernorm", (16384, 4096), "bf16"): 0.0701,
    ("rmsnorm", (16384, 4096), "bf16"): 0.0682,
    ("row_sum", (16384, 4096), "fp32"): 0.0676,
    ("matmul", (4096, 4096, 4096), "bf16"): 0.1953,
    ("matmul", (8192, 8192, 8192), "bf16"): 1.6372,
    ("gemm_bias_act", (8192, 4096, 4096), "bf16"): 0.4616,
    ("conv2d", (64, 3, 224, 224), "fp16"): 0.5571,
    ("attention", (4, 32, 2048, 128), "bf16"): 0.2933,
}


def ceilings() -> tuple[float, float]:
    """(copy bytes/s counting read + write, bf16 matmul flop/s), measured here."""
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = triton.testing.do_bench(lambda: b.copy_(a), warmup=25, rep=200, return_mode="median")
    bw = 2 * n / (t * 1e-3)
    m = 8192
    x = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    t = triton.testing.do_bench(lambda: x @ y, warmup=25, rep=300, return_mode="median")
    return bw, 2 * m ** 3 / (t * 1e-3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalog", required=True)
    ap.add_argument("--json", default=None)
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()

    ops = yaml.safe_load((ROOT / "kernels" / "operators.yaml").read_text())["operators"]
    con = sqlite3.connect(f"file:{args.catalog}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT j.op, j.shape, j.dtype, j.params, j.target, b.value_ms, b.device, e.p99_ms, "
        "e.runs, c.config, e.max_rel_err FROM best b JOIN jobs j ON j.id = b.job_id "
        "JOIN candidates c ON c.id = b.candidate_id JOIN evaluations e ON e.candidate_id = c.id "
        "WHERE b.basis = 'measured' ORDER BY j.op, j.id").fetchall()
    if not rows:
        print("no measured results in the catalog", file=sys.stderr)
        return 1
    device = torch.cuda.get_device_name()
    bw, flops_rate = ceilings()
    out = []
    for op, shape, dtype, params, target, kiln_ms, kiln_dev, p99, runs, config, rel in rows:
        shape, params = json.loads(shape), json.loads(params)
        mod = importlib.import_module("kernels." + ops[op]["module"])
        inputs = mod.make_inputs(op, shape, dtype, params, 1234, "cuda")
        fn = eager(op, inputs, params)
        t = benchmark(fn, 25, args.runs, device)
        traffic = mod.traffic(op, shape, dtype, params)
        floor = max(traffic["bytes"] / bw, traffic["flops"] / flops_rate) * 1e3
        compiled = COMPILE_MS.get((op, tuple(shape), dtype))
        out.append(dict(op=op, shape=shape, dtype=dtype, target=target, kiln_ms=kiln_ms,
                        compile_ms_anchor=compiled,
                        kiln_p99_ms=p99, kiln_runs=runs, kiln_config=json.loads(config),
                        kiln_max_rel_err=rel, torch_ms=t["median_ms"], torch_p99_ms=t["p99_ms"],
                        floor_ms=floor, speedup=t["median_ms"] / kiln_ms, kiln_over_floor=kiln_ms / floor))
    meta = dict(device=device, torch=torch.__version__, triton=triton.__version__,
                copy_bandwidth_tbs=bw / 1e12, bf16_matmul_tflops=flops_rate / 1e12)
    print(f"\n{device} · torch {torch.__version__} · Triton {triton.__version__} · "
          f"copy {bw / 1e12:.2f} TB/s · bf16 matmul {flops_rate / 1e12:.0f} TFLOP/s\n")
    print("| op | shape | dtype | Kiln best ms | torch eager ms | eager / Kiln | torch.compile ms (anchors) | compile / Kiln | floor ms | Kiln / floor |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in out:
        c = r["compile_ms_anchor"]
        cs = f"{c:.4f} | {c / r['kiln_ms']:.2f}" if c else "- | -"
        print(f"| {r['op']} | {'×'.join(map(str, r['shape']))} | {r['dtype']} | {r['kiln_ms']:.4f} | "
              f"{r['torch_ms']:.4f} | {r['speedup']:.2f} | {cs} | {r['floor_ms']:.4f} | {r['kiln_over_floor']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(meta=meta, rows=out), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
