"""Softmax's normalisation: a division per element or one reciprocal per row.

`e / denom` in fp32 is IEEE division (div.rn.f32 on NVIDIA: a reciprocal on the
special-function unit, then Newton steps and a fix-up), one per element;
`e * (1 / denom)` divides once per row. The special-function units also serve
the exp2 of every element, so the division competes with it. This times the
one-pass softmax of kernels/softmax.py both ways at the anchor shape
([16384, 4096] bf16), interleaved, with the worker's harness (L2 flush, device
events, median of --runs), --repeat times, and checks both against torch.

    python3 bench/speed/softmax_division.py [--runs 200] [--repeat 3] [--json FILE]   # on a GPU node
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]

SHAPE = (16384, 4096)


@triton.jit
def softmax_rows(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 RECIPROCAL: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    denom = tl.sum(e, axis=1)
    if RECIPROCAL:
        out = e * (1.0 / denom)[:, None]
    else:
        out = e / denom[:, None]
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    import yaml
    from kiln_worker.evaluation.timing import _benchmark
    target = yaml.safe_load(open(ROOT / "configs" / "targets" / "H200.yaml"))
    rows, cols = SHAPE
    x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    ref = torch.softmax(x.float(), dim=-1)
    floor_ms = 2 * x.numel() * 2 / 4.25e12 * 1e3
    tiles = [(1, 2), (1, 4), (1, 8), (2, 4), (2, 8)]
    results = []
    for bm, warps in tiles:
        for rec in (0, 1):
            def run(bm=bm, warps=warps, rec=rec):
                softmax_rows[(triton.cdiv(rows, bm),)](x, out, rows, cols, BLOCK_M=bm, BLOCK_N=cols,
                                                       RECIPROCAL=rec, num_warps=warps)
            out.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item()
            results.append({"BLOCK_M": bm, "num_warps": warps, "reciprocal": rec, "max_abs_err": err,
                            "ms": [], "run": run})
    for _ in range(a.repeat):  # interleaved: both variants see the same GPU state
        for r in results:
            r["ms"].append(_benchmark(r["run"], 25, a.runs, "gpu", target)["median_ms"])
    print(f"| BLOCK_M | warps | division ms | reciprocal ms | reciprocal / division | best / floor ({floor_ms:.4f}) |")
    print("| ---: | ---: | --- | --- | ---: | ---: |")
    for i in range(0, len(results), 2):
        d, r = results[i], results[i + 1]
        md, mr = min(d["ms"]), min(r["ms"])
        print(f"| {d['BLOCK_M']} | {d['num_warps']} | {' / '.join(f'{v:.4f}' for v in d['ms'])} | "
              f"{' / '.join(f'{v:.4f}' for v in r['ms'])} | {mr / md:.3f} | {min(md, mr) / floor_ms:.3f} |")
    print("max abs err vs torch (fp32):", max(r["max_abs_err"] for r in results))
    if a.json:
        for r in results:
            r.pop("run")
        with open(a.json, "w") as f:
            json.dump({"shape": SHAPE, "floor_ms": floor_ms, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
