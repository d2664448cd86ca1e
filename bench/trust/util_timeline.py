#!/usr/bin/env python3
"""Where a run's GPU idled: nvidia-smi's utilization.gpu readings over a run
(`nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits
-lms 200 > smi.csv`), in tenths of the run: each tenth's mean, and the mean
before and after the first reading at or above --busy (default 50%).

    python3 bench/trust/util_timeline.py smi.csv
"""
from __future__ import annotations

import argparse
import sys


def readings(path: str) -> list[float]:
    out = []
    for line in open(path, encoding="utf-8"):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2:
            try:
                out.append(float(parts[1]))
            except ValueError:
                pass
    return out


def summary(xs: list[float], busy: float) -> dict:
    n = len(xs)
    tenths = [sum(xs[i * n // 10:(i + 1) * n // 10]) / max(1, (i + 1) * n // 10 - i * n // 10)
              for i in range(10)]
    first = next((i for i, x in enumerate(xs) if x >= busy), n)
    after = xs[first:]
    return {"readings": n, "mean": sum(xs) / n if n else 0.0, "tenths": tenths,
            "start_share": first / n if n else 0.0,
            "start_mean": sum(xs[:first]) / first if first else 0.0,
            "after_start_mean": sum(after) / len(after) if after else 0.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--busy", type=float, default=50.0)
    a = ap.parse_args()
    s = summary(readings(a.csv), a.busy)
    print(f"{s['readings']} readings, mean {s['mean']:.1f}%")
    print("tenths of the run: " + " ".join(f"{t:.0f}" for t in s["tenths"]))
    print(f"before the first reading >= {a.busy:g}%: {100 * s['start_share']:.0f}% of the run at "
          f"{s['start_mean']:.1f}%; after it: {s['after_start_mean']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
