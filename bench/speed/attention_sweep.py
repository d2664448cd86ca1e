"""Causal attention on this GPU: Kiln's whole H200 space, a wider grid with the
sm_90 knobs, and torch's SDPA with each of its backends, in one harness.

Shape [4, 32, 2048, 128] bf16, causal (the anchor case). Configs: the
template's space plus every tile of BLOCK_M 64/128 x BLOCK_N 32/64/128 x 4/8
warps x 2/3/4 stages with the knobs off, `tma`, `q_regs`, and both, pruned
by the template's shared-memory estimate. Compiled in a process pool first
(row_sweep.compile_all), then checked against the fp32 reference and timed
with the worker's harness (L2 flush, device events, median of --runs); the
best five again for the noise. SDPA: the default dispatch and each backend
(flash, cuDNN, memory-efficient) that accepts the inputs, same harness.

    python3 bench/speed/attention_sweep.py --json out.json    # on a GPU node
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import row_sweep  # noqa: E402  (also puts the worker and the kernels on sys.path)

SHAPE = [4, 32, 2048, 128]
PARAMS = {"causal": True}


def configs() -> list[dict]:
    mod = importlib.import_module("kernels.attention")
    target = row_sweep._target()
    out = list(mod.config_space("attention", SHAPE, "bf16", PARAMS, target))
    limit = 227 * 1024
    for bm in (64, 128):
        for bn in (32, 64, 128):
            if bn > bm:
                continue
            for warps in (4, 8):
                if bm * SHAPE[3] > warps * 32 * 64:
                    continue
                for stages in (2, 3, 4):
                    for knobs in ({}, {"tma": 1}, {"q_regs": 1}, {"tma": 1, "q_regs": 1}):
                        c = {"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_H": 8, "num_warps": warps,
                             "num_stages": stages, **knobs}
                        if mod.shared_estimate(c, "bf16", SHAPE[3], target) <= limit:
                            out.append(c)
    return row_sweep.unique(out)


def sdpa_rows(runs: int) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from kiln_worker.evaluation.timing import _benchmark
    mod = importlib.import_module("kernels.attention")
    inputs = mod.make_inputs("attention", SHAPE, "bf16", PARAMS, 0, torch.device("cuda"))
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    rows = []
    backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for name, backend in backends:
        def fn():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        try:
            if backend is None:
                ms = _benchmark(fn, 25, runs, "gpu", row_sweep._target())["median_ms"]
            else:
                with sdpa_kernel([backend]):
                    fn()
                    ms = _benchmark(fn, 25, runs, "gpu", row_sweep._target())["median_ms"]
            rows.append({"sdpa": name, "ms": ms})
        except Exception as exc:
            rows.append({"sdpa": name, "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
    return rows


def main() -> int:
    args = row_sweep.parse_args(__doc__)

    cs = configs()
    errors = row_sweep.compile_all("attention", SHAPE, PARAMS, cs, args.jobs)
    rows = row_sweep.time_all("attention", SHAPE, PARAMS, cs, errors, args.runs)
    sdpa = sdpa_rows(args.runs)
    B, H, S, D = SHAPE
    flops = 4 * B * H * S * S * D / 2  # causal: half the score matrix
    ok = sorted((r for r in rows if r.get("ok")), key=lambda r: r["ms"])
    bad = [r for r in rows if not r.get("ok")]
    ref = next((r["ms"] for r in sdpa if r["sdpa"] == "default" and "ms" in r), None)
    print("| kernel | ms (2 runs) | TFLOP/s | / SDPA |")
    print("| --- | --- | ---: | ---: |")
    for r in sdpa:
        if "ms" in r:
            print(f"| SDPA {r['sdpa']} | {r['ms']:.4f} | {flops / r['ms'] / 1e9:.0f} | "
                  f"{r['ms'] / ref:.3f} |" if ref else "")
        else:
            print(f"| SDPA {r['sdpa']} | {r['error']} | | |")
    for r in ok[:8]:
        print(f"| {json.dumps(r['config'], sort_keys=True)} | {r['ms']:.4f} / {r.get('ms2', 0):.4f} | "
              f"{flops / r['ms'] / 1e9:.0f} | {r['ms'] / ref:.3f} |" if ref else "")
    for knob in ("tma", "q_regs"):
        with_k = [r for r in ok if r["config"].get(knob)]
        if with_k:
            print(f"| best with {knob}: {json.dumps(with_k[0]['config'], sort_keys=True)} | "
                  f"{with_k[0]['ms']:.4f} | | |")
    print(f"| ({len(ok)} timed, {len(bad)} failed or wrong) | | | |")
    for r in bad[:5]:
        print(f"|   {json.dumps(r['config'], sort_keys=True)}: {r.get('error', 'wrong result')} | | | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": SHAPE, "params": PARAMS, "rows": rows, "sdpa": sdpa}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
