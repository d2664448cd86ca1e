#!/usr/bin/env python3
"""How often the nightly's ratio interval covers 1.0 on A/A pairs (the same
kernel confirmed on two nights, so the true ratio is 1): the interval over the
calls alone against the one over each night's rounds and their calls.

Reads the `aa.json` (or `aa.json.xz`) files bench/trust/aa_nightly.py wrote,
sends every A/A pair to `kiln decide` twice (without and with
`rounds_previous` / `rounds_now`), and prints per file and in all the pairs
whose 95% interval covers 1.0 and the median interval width. The verdicts
(the test on the calls) must not differ between the two; the script says so
and exits 1 if they do.

    python3 bench/trust/aa_intervals.py bench/results/*/aa.json.xz [--kiln build/kiln]
"""
from __future__ import annotations

import argparse
import json
import lzma
import statistics
import subprocess
import sys
from pathlib import Path


def load(path: Path) -> dict:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def covers(d: dict) -> bool:
    lo, hi = d["ratio_ci95"]
    return lo <= 1.0 <= hi


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--kiln", default=str(Path(__file__).resolve().parents[2] / "build" / "kiln"))
    args = ap.parse_args()
    print("| aa.json | pairs | rounds | covers 1.0: calls | covers 1.0: rounds | median width: calls | rounds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    total = {"n": 0, "calls": 0, "rounds": 0}
    same_verdicts = True
    for path in args.files:
        d = load(path)
        rounds = d["rounds"]
        pairs = []
        for r in d["rows"]:
            a, b = r["a"]["entries"][0]["samples_ms"], r["b"]["entries"][0]["samples_ms"]
            pairs += [{"previous": a, "now": b}, {"previous": a, "now": b, "rounds_previous": rounds, "rounds_now": rounds}]
        out = subprocess.run([args.kiln, "decide"], input=json.dumps({"pairs": pairs}), capture_output=True,
                             text=True, check=True).stdout
        decisions = json.loads(out)["decisions"]
        calls, by_rounds = decisions[0::2], decisions[1::2]
        same_verdicts &= all(x["verdict"] == y["verdict"] for x, y in zip(calls, by_rounds))
        c, r = sum(map(covers, calls)), sum(map(covers, by_rounds))
        width = [statistics.median(x["ratio_ci95"][1] - x["ratio_ci95"][0] for x in ds) for ds in (calls, by_rounds)]
        print(f"| {path} | {len(calls)} | {rounds} | {c} | {r} | {width[0]:.4f} | {width[1]:.4f} |")
        total["n"] += len(calls)
        total["calls"] += c
        total["rounds"] += r
    n = total["n"]
    print(f"\nIn all: the calls' interval covers 1.0 in {total['calls']} of {n} A/A pairs, "
          f"the rounds' in {total['rounds']} of {n} (nominal 95%).")
    print("Verdicts: the same with and without rounds." if same_verdicts else "Verdicts DIFFER with rounds.")
    return 0 if same_verdicts else 1


if __name__ == "__main__":
    sys.exit(main())
