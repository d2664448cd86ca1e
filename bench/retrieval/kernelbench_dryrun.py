#!/usr/bin/env python3
"""How many KernelBench level-1 problems Kiln's templates serve without an LLM.

    python3 bench/retrieval/kernelbench_dryrun.py /path/to/KernelBench [--dtype fp32] [--kiln build/kiln]
                                                   [--target H200] [--out DIR]

Writes a manifest with one reference entry per file of KernelBench/level1/
(no generator given: served by a template where one matches, else the LLM),
runs `kiln submit --dry-run --json` on it (nothing stored, no reference run at
full size) and prints the served / unserved counts, the wall time and the
matcher's peak memory, then a table of the problems by operator. Details
(the whole plan) go to $OUT/kernelbench_dryrun.json (or --out).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernelbench", help="a KernelBench checkout (holding KernelBench/level1) or the level1 dir")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--target", default="H200")
    ap.add_argument("--kiln", default=str(ROOT / "build" / "kiln"))
    ap.add_argument("--out", default=os.environ.get("OUT") or "")
    ap.add_argument("--manifest-out", default="",
                    help="also write the manifest (with --explore settings) here, to submit and run it")
    ap.add_argument("--explore", default="{strategy: halving, max_candidates: 24, timeout_s: 300}",
                    help="the defaults' exploration mapping in the written manifest")
    args = ap.parse_args()
    base = Path(args.kernelbench)
    level1 = next((p for p in (base / "KernelBench" / "level1", base / "level1", base) if p.is_dir()
                   and any(p.glob("*.py"))), None)
    if level1 is None:
        print(f"no KernelBench level1 problems under {base}", file=sys.stderr)
        return 2
    files = sorted(level1.glob("*.py"), key=lambda p: (int(p.name.split("_")[0]) if p.name.split("_")[0].isdigit()
                                                        else 10**6, p.name))
    with tempfile.TemporaryDirectory(prefix="kiln-kb-") as tmp:
        manifest = Path(tmp) / "kernelbench_level1.yaml"
        lines = ["name: kernelbench_level1", f"targets: [{args.target}]", "defaults:", f"  dtypes: [{args.dtype}]", "operators:"]
        for f in files:
            name = "kb1_" + "".join(c if c.isalnum() or c in "_-." else "_" for c in f.stem)
            lines += [f"  - reference: {json.dumps(str(f.resolve()))}", f"    name: {name}"]
        manifest.write_text("\n".join(lines) + "\n")
        if args.manifest_out:
            Path(args.manifest_out).write_text("\n".join(lines[:4] + [f"  exploration: {args.explore}"] + lines[4:]) + "\n")
        t0 = time.perf_counter()
        r = subprocess.run([args.kiln, "submit", str(manifest), "--dry-run", "--json",
                            "--catalog", str(Path(tmp) / "unused.db")], capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return r.returncode
    plan = json.loads(r.stdout)
    served = [j for j in plan["jobs"] if j["generator"] == "template"]
    by_op = collections.Counter(j["op"] for j in served)
    print(f"KernelBench level 1 ({len(files)} problems, {args.dtype}, {args.target}): "
          f"{len(served)} served by templates, {len(plan['jobs']) - len(served)} need the LLM")
    print(f"kiln submit --dry-run: {wall:.1f} s wall, matcher {plan.get('match_s', 0):.1f} s, "
          f"peak memory growth {plan.get('rss_growth_kib', 0) / 1024:.0f} MiB")
    print(f"{'operator':<16} problems")
    for op, n in by_op.most_common():
        print(f"{op:<16} {n}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "kernelbench_dryrun.json").write_text(json.dumps(plan, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
