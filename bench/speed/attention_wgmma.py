"""The Gluon warp-specialised attention kernel (kernels/attention_wgmma.py) on
this GPU: first checked against the fp32 reference on odd shapes, then timed
on the anchor case (causal 4x32x2048x128 bf16) beside the template's plain
Triton kernel at its best config and torch's SDPA, with the worker's harness
(L2 flush, device events, median of --runs), twice for the noise. Exits 1 when
a check fails.

    python3 bench/speed/attention_wgmma.py [--runs 50] [--json out.json]   # sm_90 GPU

With --shapes, instead: for each of a few other shapes (causal and not, S 1k to
16k, D 64 / 128), SDPA, the plain kernel's best of four configs (_plain_candidates)
and this kernel's best of two, each checked against SDPA first.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "worker")]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import yaml  # noqa: E402

from kernels import attention, attention_tiles, common  # noqa: E402
from kiln_worker.evaluation.timing import _benchmark  # noqa: E402
from kiln_worker.processes.device import install_scratch_allocator  # noqa: E402

SHAPE = [4, 32, 2048, 128]
CHECKS = [([1, 2, 128, 64], "fp16", True), ([1, 3, 1000, 128], "bf16", True), ([2, 2, 1000, 128], "bf16", False),
          ([1, 2, 77, 64], "fp16", False), ([1, 2, 77, 64], "bf16", True), ([2, 4, 512, 128], "bf16", True),
          ([1, 2, 300, 256], "bf16", True), ([1, 1, 16, 64], "fp16", True)]
TILES = [(128, 2, 0), (128, 2, 1), (128, 3, 0), (64, 2, 0), (64, 3, 0), (64, 4, 0)]  # (BLOCK_N, stages, pair)
SHAPES_WS = [attention.ws_config(128, 2), attention.ws_config(128, 2, 1), attention.ws_config(64, 3)]  # --shapes
PLAIN_BEST = {"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_H": 8, "num_warps": 4, "num_stages": 3}  # the H200's best


def _name(c):
    return f"Gluon ws, 128x{c['BLOCK_N']} / {c['num_stages']} stages" + (", pair" if c.get("pair") else "")


def _fits(config, dtype, shape, target):
    """Whether a `ws` config applies to a [B, H, S, D] shape: its shared memory
    fits, and with `pair` the query blocks pair up."""
    return (attention.shared_estimate(config, dtype, shape[3], target) <= common.shared_limit(target)
            and (not config.get("pair") or attention_tiles.ws_pairs_fit(shape[2])))


def check(shape, dtype, causal, config) -> tuple[float, bool]:
    p = {"causal": causal}
    inputs = attention.make_inputs("attention", shape, dtype, p, 0, torch.device("cuda"))
    out = attention.output_like("attention", inputs, p).fill_(float("nan"))
    attention.launch("attention", inputs, out, config, p)
    ref = attention.reference("attention", {n: t.float() for n, t in inputs.items()}, p)
    err = (out.float() - ref).abs().max().item()
    return err, bool(torch.isfinite(out).all()) and err < 3e-2


SHAPES = [([4, 32, 2048, 128], True), ([4, 32, 2048, 128], False), ([1, 32, 8192, 128], True),
          ([1, 32, 8192, 128], False), ([8, 32, 1024, 128], True), ([4, 32, 2048, 64], True),
          ([1, 16, 16384, 128], True), ([2, 32, 4096, 64], False)]


def _plain_candidates(space: list[dict]) -> list[dict]:
    """The plain kernel's two leading configs in the space (64-row tiles on
    sm_90; the `ws` tiles, which lead the sm_90 space, and the other knobs
    left out) and its first two 128-row, 8-warp, 3-stage tiles, so both tile
    heights are tried on every shape."""
    plain = [c for c in space if not any(c.get(k) for k in attention.NV_KNOBS)]
    tall = [c for c in plain if c["BLOCK_M"] == 128 and c["num_warps"] == 8 and c["num_stages"] == 3]
    return plain[:2] + [c for c in tall[:2] if c not in plain[:2]]


def shapes(args, target) -> int:
    """--shapes: the best of each kernel on other shapes (module docstring)."""
    rows = []
    for shape, causal in SHAPES:
        p = {"causal": causal}
        inputs = attention.make_inputs("attention", shape, "bf16", p, 1, torch.device("cuda"))
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        out = torch.empty_like(q)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
        B, H, S, D = shape
        flops = 4 * B * H * (S * (S + 1) // 2 if causal else S * S) * D

        def best(cands, checked=True):
            # checked: the candidate writes `out`, compared with SDPA's result first
            found = None
            for name, fn in cands:
                out.fill_(float("nan"))
                try:
                    fn()
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001  (a config that does not fit this shape)
                    print(f"  {shape} causal={causal} {name}: {type(exc).__name__}", flush=True)
                    continue
                if checked and not (out.float() - ref).abs().max().item() < 3e-2:
                    print(f"  {shape} causal={causal} {name}: WRONG", flush=True)
                    continue
                ms = min(_benchmark(fn, 25, args.runs, "gpu", target)["median_ms"] for _ in range(2))
                if found is None or ms < found[1]:
                    found = (name, ms)
            return found

        sdpa = best([("SDPA", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))], checked=False)
        plain = best([(f"{c['BLOCK_M']}x{c['BLOCK_N']}/{c['num_warps']}w/{c['num_stages']}st" +
                       "".join(f" {kk}" for kk in attention.NV_KNOBS if c.get(kk)),
                       lambda c=c: attention.launch("attention", inputs, out, c, p))
                      for c in _plain_candidates(attention.config_space("attention", shape, "bf16", p, target))])
        ws = best([(_name(c), lambda c=c: attention.launch("attention", inputs, out, c, p))
                   for c in SHAPES_WS if _fits(c, "bf16", shape, target)])
        row = {"shape": shape, "causal": causal, "flops": flops, "sdpa": sdpa, "plain": plain, "ws": ws}
        rows.append(row)
        print(row, flush=True)
    print("| shape | causal | SDPA ms | plain Triton best (config) | Gluon ws best (config) | ws / plain | ws / SDPA |")
    print("| --- | --- | ---: | --- | --- | ---: | ---: |")
    for r in rows:
        s_ms, p_ms, w_ms = (r[k][1] if r[k] else float("nan") for k in ("sdpa", "plain", "ws"))
        print(f"| {r['shape']} | {r['causal']} | {s_ms:.4f} | {p_ms:.4f} ({r['plain'][0] if r['plain'] else '-'}) | "
              f"{w_ms:.4f} ({r['ws'][0] if r['ws'] else '-'}) | {w_ms / p_ms:.3f} | {w_ms / s_ms:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--shapes", action="store_true", help="other shapes, each kernel at its best (docstring)")
    args = ap.parse_args()
    install_scratch_allocator()  # the plain kernel's `tma` knob makes device-side descriptors
    target = yaml.safe_load(open(ROOT / "configs" / "targets" / "H200.yaml"))
    if args.shapes:
        return shapes(args, target)
    results = {"checks": [], "timings": []}

    for shape, dtype, causal in CHECKS:
        for bn, stages, pair in TILES:
            c = attention.ws_config(bn, stages, pair)
            if not _fits(c, dtype, shape, target):
                continue
            err, ok = check(shape, dtype, causal, c)
            results["checks"].append({"shape": shape, "dtype": dtype, "causal": causal, "config": c,
                                      "max_err": err, "ok": ok})
            print(f"check {shape} {dtype} causal={causal} {_name(c)}: {'ok' if ok else 'FAIL'} {err:.3g}",
                  flush=True)
    bad = sum(not r["ok"] for r in results["checks"])

    p = {"causal": True}
    inputs = attention.make_inputs("attention", SHAPE, "bf16", p, 1, torch.device("cuda"))
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    out = torch.empty_like(q)
    B, H, S, D = SHAPE
    flops = 4 * B * H * S * (S + 1) / 2 * D
    fns = {"SDPA (default: cuDNN)": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           "Triton template, 64x64 / 4 warps / 3 stages":
               lambda: attention.launch("attention", inputs, out, PLAIN_BEST, p)}
    for bn, stages, pair in TILES:
        c = attention.ws_config(bn, stages, pair)
        fns[_name(c)] = lambda c=c: attention.launch("attention", inputs, out, c, p)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    for name, fn in fns.items():
        row = {"name": name}
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        if not name.startswith("SDPA"):
            row["max_err_vs_sdpa"] = (out.float() - ref).abs().max().item()
        row["ms"] = [_benchmark(fn, 25, args.runs, "gpu", target)["median_ms"] for _ in range(2)]
        results["timings"].append(row)
        print(row, flush=True)

    sdpa = min(results["timings"][0]["ms"])
    print(f"\n{bad} failed checks of {len(results['checks'])}; causal {SHAPE} bf16, {torch.cuda.get_device_name()}")
    print("| kernel | ms (2 passes) | TFLOP/s | / SDPA | max err vs SDPA |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in results["timings"]:
        m = min(r["ms"])
        print(f"| {r['name']} | {r['ms'][0]:.4f} / {r['ms'][1]:.4f} | {flops / m / 1e9:.0f} | {m / sdpa:.3f} | "
              f"{r.get('max_err_vs_sdpa', 0):.3g} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
