"""Layernorm's one-pass kernel with and without the `sums` knob (sum and sum
of squares in one reduction instead of the mean, then the variance about it),
on the anchor [16384, 4096] bf16, beside rmsnorm's best (the same traffic but
the bias, one reduction).

Each config is compiled first (row_sweep.compile_all), then timed with the
worker's harness (L2 flush, device events, median of --runs) in --rounds
rounds, every config once per round in turn; the table gives each config's
median over the rounds, its spread, and its ratio to the copy floor (one read
and one write of the tensor at 4.25 TB/s).

    python3 bench/speed/layernorm_sums.py --json out.json        # on a GPU node
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import row_sweep  # noqa: E402

TILES = [(2, 4096, 8), (1, 4096, 4), (1, 4096, 8), (4, 4096, 16), (2, 4096, 16)]
RMSNORM_BEST = {"BLOCK_M": 1, "BLOCK_N": 2048, "num_warps": 8, "num_stages": 1, "l2hint": 1}


def configs() -> list[tuple[str, dict]]:
    out = []
    for bm, bn, w in TILES:
        for sums in (0, 1):
            c = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": 1}
            out.append(("layernorm", dict(c, sums=1) if sums else c))
    out.append(("rmsnorm", RMSNORM_BEST))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    cases = configs()
    errors = {}
    for op in ("layernorm", "rmsnorm"):
        cs = [c for o, c in cases if o == op]
        errors[op] = dict(zip(map(json.dumps, cs), row_sweep.compile_all(op, row_sweep.SHAPE, {}, cs, 4)))
    samples = {json.dumps([o, c]): [] for o, c in cases}
    ok = {}
    for _ in range(args.rounds):
        for op, c in cases:
            rows = row_sweep.time_all(op, row_sweep.SHAPE, {}, [c], [errors[op][json.dumps(c)]], args.runs,
                                      again=0)
            r = rows[0]
            ok[json.dumps([op, c])] = r.get("ok", False)
            if "ms" in r:
                samples[json.dumps([op, c])].append(r["ms"])
    floor = 2 * row_sweep.SHAPE[0] * row_sweep.SHAPE[1] * 2 / 4.25e12 * 1e3
    print(f"| op | config | correct | median ms over {args.rounds} rounds | spread | / floor {floor:.4f} |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    out = []
    for op, c in cases:
        k = json.dumps([op, c])
        s = samples[k]
        if not s:
            print(f"| {op} | {json.dumps(c, sort_keys=True)} | {errors[op][json.dumps(c)]} | | | |")
            continue
        m = statistics.median(s)
        print(f"| {op} | {json.dumps(c, sort_keys=True)} | {'yes' if ok[k] else 'NO'} | {m:.4f} | "
              f"{min(s):.4f}-{max(s):.4f} | {m / floor:.3f} |")
        out.append({"op": op, "config": c, "ok": ok[k], "ms": s})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": out, "floor_ms": floor}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
