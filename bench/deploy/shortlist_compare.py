#!/usr/bin/env python3
"""Table of bench/deploy/shortlist_tune.sh: per kernel, the estimate-only shortlist's
tuned pick (kiln-rt tune on the H200-est package) against the exhaustive
measured best (kiln-rt tune on the H200 package: its rank 0), both timed by
kiln-rt's own code on the same GPU.

    python3 bench/deploy/shortlist_compare.py DIR     # DIR as bench/deploy/shortlist_tune.sh leaves it
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^(?P<label>.*?)\s+rank (?P<rank>\d+) candidate (?P<cid>\d+): (?P<what>.*)$")


def ranks(path: Path) -> dict[str, dict[int, float | None]]:
    out: dict[str, dict[int, float | None]] = {}
    for ln in path.read_text().splitlines():
        m = LINE.match(ln)
        if m:
            what = m["what"]
            ms = float(what.split()[0]) if what.endswith(" ms") else None
            out.setdefault(m["label"].strip(), {})[int(m["rank"])] = ms
    return out


def label(k: dict) -> str:
    return f"{k['operator']} {'x'.join(str(s) for s in k['shape'])} {k['dtype']}"


def configs(pkg: Path) -> dict[str, list]:
    m = json.loads((pkg / "manifest.json").read_text())
    return {label(k): [v.get("config") for v in sorted(k["variants"], key=lambda v: v["rank"])]
            for k in m["kernels"]}


def main() -> int:
    d = Path(sys.argv[1])
    exh = {label(k): k for k in json.loads((d / "tune-exh.json").read_text())["kernels"]}
    est = {label(k): k for k in json.loads((d / "tune-est.json").read_text())["kernels"]}
    est_ranks = ranks(d / "tune-est.txt")
    est_cfg, exh_cfg = configs(d / "pkg-est"), configs(d / "pkg-exh")
    print("| kernel | shortlist | estimate's pick / best | tuned rank | tuned / best | best in shortlist | within 3% |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    within = n = 0
    ratios = []
    for lab in sorted(exh):
        if lab not in est:
            print(f"| {lab} | - | - | - | - | - | no estimate-only result |")
            continue
        best = exh[lab]["median_ms"]
        r = est_ranks.get(lab, {})
        r0 = r.get(0)
        t = est[lab]
        ratio = t["median_ms"] / best
        ratios.append(ratio)
        ok = ratio <= 1.03
        within += ok
        n += 1
        in_list = exh_cfg.get(lab, [None])[0] in est_cfg.get(lab, [])
        print(f"| {lab} | {len(est_cfg.get(lab, []))} | {f'{r0 / best:.3f}' if r0 else '-'} | {t['rank']} | "
              f"{ratio:.3f} | {'yes' if in_list else 'no'} | {'yes' if ok else 'NO'} |")
    print(f"\n{within} of {n} tuned picks within 3% of the exhaustive best "
          f"(worst {max(ratios):.3f}; times are kiln-rt medians, two processes)" if ratios else "no kernels")
    best_path = d / "best.json"
    if best_path.exists() and best_path.stat().st_size:
        rows = json.loads(best_path.read_text())
        est_rows = [b for b in rows if b.get("target") == "H200-est"]
        meas = sum(1 for b in est_rows if b.get("basis") == "measured")
        print(f"after kiln import-measurements: {meas} of {len(est_rows)} H200-est jobs have a measured best")
    return 0


if __name__ == "__main__":
    sys.exit(main())
