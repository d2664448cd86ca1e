#!/usr/bin/env python3
"""Search efficiency: replays Kiln's strategies offline against recorded measurements.

Takes a catalog in which an exhaustive run evaluated every config of a job's
space (measured medians on a device of the target's kind), and replays each
strategy against it with kiln-replay (bench/search/replay.cpp): the strategy is Kiln's
own C++ code (src/search/strategy.cpp), called round after round exactly as the
scheduler calls it, and it sees only the scores of the configs it asked for.
Prints, per job and strategy, the evaluations used and the best found relative
to the exhaustive best, over many seeds.

    python3 bench/search/search_efficiency.py CATALOG [--seeds 100] [--replay build/kiln-replay]
                                       [--jobs 14,15] [--min-space 8] [--json]
                                       [--priors-from DB[,DB...]]

Strategies replayed per job:
  exhaustive       every config (the reference: 1.000 by definition)
  halving          the manifest defaults (budget = the job's max_candidates; the
                   search usually stops earlier, when the survivors' neighbours
                   are all evaluated)
  halving@N/5      halving with its budget capped at a fifth of the space
  random@E         random sampling with E = the default halving's mean
                   evaluations (rounded up): the same budget without the model
  halving+priors   with --priors-from: halving that starts from the configs that
                   were fastest on the nearest jobs of those catalogs
                   (src/search/priors.h), leave-one-out: a job of the replayed
                   job's own shape there never counts; also capped at a fifth
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def find_replay(arg: str | None) -> str:
    cands = [arg] if arg else []
    cands += [os.environ.get("KILN_REPLAY", "")]
    cands += [str(ROOT / d / "kiln-replay") for d in ("build", "build-search", "build-release")]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("kiln-replay not found: build it (cmake --build BUILD --target kiln-replay) "
             "and pass --replay BUILD/kiln-replay or set KILN_REPLAY")


def complete_jobs(catalog: str, min_space: int) -> list[dict]:
    """Jobs whose whole space an exhaustive run evaluated, with measured medians."""
    db = sqlite3.connect(f"file:{catalog}?immutable=1", uri=True)
    out = []
    for jid, op, shape, dtype, target, spec in db.execute(
            "SELECT id, op, shape, dtype, target, spec FROM jobs WHERE state = 'done' ORDER BY id"):
        ex = json.loads(spec).get("explore", {})
        n, evaluated, measured = db.execute(
            "SELECT COUNT(c.id), COUNT(e.id), COUNT(e.median_ms) FROM candidates c "
            "LEFT JOIN evaluations e ON e.candidate_id = c.id "
            "WHERE c.job_id = ? AND c.generator = 'template'", (jid,)).fetchone()
        if ex.get("strategy") != "exhaustive" or n < min_space or evaluated < n:
            continue
        if n >= ex.get("max_candidates", 64):  # truncated by the budget: not the whole space
            continue
        if measured == 0:  # estimated only: not what this benchmark is about
            continue
        out.append({"id": jid, "op": op, "shape": json.loads(shape), "dtype": dtype,
                    "target": target, "space": n})
    return out


def template_hints(catalog: str, job: int, out_dir: str) -> str | None:
    """The hints a live run's config model gets for the job (the worker's
    `space` method: launch grid, shared-memory estimate, the template's own
    hints such as conv2d's registers), computed here on the CPU and written as
    {config JSON: hint} for kiln-replay --hints. None when the worker or the
    template cannot say (the replay then reads the recorded code objects)."""
    if str(ROOT / "worker") not in sys.path:
        sys.path[:0] = [str(ROOT / "worker"), str(ROOT)]
    os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        from kiln_worker.evaluation.evaluate import space
        from kiln_worker.evaluation.templates import Library
        db = sqlite3.connect(f"file:{catalog}?immutable=1", uri=True)
        spec = json.loads(db.execute("SELECT spec FROM jobs WHERE id = ?", (job,)).fetchone()[0])
        res = space(Library(), spec)
    except Exception as exc:  # noqa: BLE001 - reported, the replay goes on without
        print(f"job {job}: no template hints ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    hints = res.get("hints")
    if not hints:
        return None
    table = {json.dumps(c, sort_keys=True, separators=(",", ":")): h for c, h in zip(res["configs"], hints)}
    # Job ids repeat across catalogs: the file name carries the catalog's too.
    tag = hashlib.sha256(os.path.abspath(catalog).encode()).hexdigest()[:12]
    path = os.path.join(out_dir, f"hints-{tag}-{job}.json")
    with open(path, "w") as f:
        json.dump(table, f)
    return path


def replay(binary: str, catalog: str, job: int, strategy: str, seeds: int, **kw) -> dict:
    cmd = [binary, "--catalog", catalog, "--job", str(job), "--strategy", strategy,
           "--seeds", str(seeds)]
    for k, v in kw.items():
        if v is not None:
            cmd += [f"--{k}", str(v)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{res.stderr}")
    return json.loads(res.stdout)


def summarise(label: str, data: dict) -> dict:
    runs = data["runs"]
    evals = [r["evaluations"] for r in runs]
    ratios = [r["ratio"] if r["ratio"] is not None else math.inf for r in runs]
    return {
        "strategy": label,
        "space": data["space"],
        "evaluations_mean": statistics.fmean(evals),
        "evaluations_min": min(evals),
        "evaluations_max": max(evals),
        "fewer": data["space"] / statistics.fmean(evals),
        "ratio_median": statistics.median(ratios),
        "ratio_mean": statistics.fmean(ratios),
        "ratio_worst": max(ratios),
        "within_3pct": sum(r <= 1.03 for r in ratios) / len(ratios),
        "seeds": len(runs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("catalog")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--replay", help="path to kiln-replay (default: build*/kiln-replay, $KILN_REPLAY)")
    ap.add_argument("--jobs", help="comma-separated job ids (default: every complete exhaustive job)")
    ap.add_argument("--min-space", type=int, default=8, help="skip jobs with fewer configs")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--priors-from", help="comma-separated catalogs: also replay halving with priors "
                    "from their measured jobs (leave-one-out)")
    ap.add_argument("--recorded-hints", action="store_true",
                    help="give the config model only the recorded code objects' grid and shared "
                         "memory, not the template's hints (as before 2026-11-30 evening)")
    a = ap.parse_args()
    if not Path(a.catalog).is_file():
        sys.exit(f"no catalog at {a.catalog}")
    binary = find_replay(a.replay)
    jobs = complete_jobs(a.catalog, a.min_space)
    if a.jobs:
        want = {int(x) for x in a.jobs.split(",")}
        jobs = [j for j in jobs if j["id"] in want]
    if not jobs:
        sys.exit("no job in the catalog has its whole space evaluated by an exhaustive run")

    results = []
    tmp = tempfile.mkdtemp(prefix="kiln-hints-")
    for job in jobs:
        n = job["space"]
        rows = []
        hints = None if a.recorded_hints else template_hints(a.catalog, job["id"], tmp)
        ex = replay(binary, a.catalog, job["id"], "exhaustive", 1)
        rows.append(summarise("exhaustive", ex))
        hv = replay(binary, a.catalog, job["id"], "halving", a.seeds, hints=hints)
        rows.append(summarise("halving", hv))
        cap = max(1, n // 5)
        hc = replay(binary, a.catalog, job["id"], "halving", a.seeds, budget=cap, hints=hints)
        rows.append(summarise(f"halving@{cap}", hc))
        e = math.ceil(rows[1]["evaluations_mean"])
        rd = replay(binary, a.catalog, job["id"], "random", a.seeds, budget=e)
        rows.append(summarise(f"random@{e}", rd))
        if a.priors_from:
            hp = replay(binary, a.catalog, job["id"], "halving", a.seeds, hints=hints,
                        **{"priors-from": a.priors_from})
            rows.append(summarise("halving+priors", hp))
            hpc = replay(binary, a.catalog, job["id"], "halving", a.seeds, budget=cap, hints=hints,
                         **{"priors-from": a.priors_from})
            rows.append(summarise(f"halving+priors@{cap}", hpc))
        results.append({"job": job, "exhaustive_best_ms": ex["exhaustive_best_ms"], "rows": rows})

    if a.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"catalog {a.catalog}; {a.seeds} seeds per randomised strategy; "
          "best = best found / exhaustive best (1.000 = found the best)")
    print()
    hdr = ("| job | space | strategy | evaluations (mean, min–max) | fewer | best: median | mean | worst "
           "| runs within 3% |")
    print(hdr)
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        j = r["job"]
        name = f"{j['op']} {'x'.join(map(str, j['shape']))} {j['dtype']} {j['target']}"
        for s in r["rows"]:
            print(f"| {name} | {s['space']} | {s['strategy']} | {s['evaluations_mean']:.1f} "
                  f"({s['evaluations_min']}–{s['evaluations_max']}) | {s['fewer']:.1f}× "
                  f"| {s['ratio_median']:.3f} | {s['ratio_mean']:.3f} | {s['ratio_worst']:.3f} "
                  f"| {s['within_3pct']:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
