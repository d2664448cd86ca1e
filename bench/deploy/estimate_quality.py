#!/usr/bin/env python3
"""How well the static estimate ranks candidates, against recorded measurements.

Reads the slim H200 catalogs committed under tests/data/search/ (every job explored
with the exhaustive strategy: each config of the job was compiled, checked and
timed on the device), recomputes the estimate of every recorded candidate with
the CURRENT model (build/kiln-estimate, the C++ of src/search/estimate.cpp),
and reports per job:

  rho      Spearman rank correlation of estimate and measured median latency
  pick     measured latency of the estimate's first choice / the measured best
  top1/4/8 whether the estimate's first 1/4/8 hold a config within 3% of the best
  list     the shortlist a package would ship, by the package's own rule
           (src/package/shortlist.h, run through build/kiln-shortlist): rank 0,
           then one per tile, each value of the knobs the model does not rank
           once before any twice, 8 in all; its size, and whether it holds a
           config within 3%
  lpick    the list's fastest, measured, / the measured best (what tuning on the device would keep)
  old      the fixed rule before: every candidate within 1.5x, at most 8
  need     how far (estimate / rank 0's) the first near-best config of the first 8 lies
  rties    (with --random-ties N) the fraction of N orders, equal estimates shuffled instead of kept in
           candidate order, whose shortlist holds a config within 3%: how much of a catch the model
           ranks and how much the candidates' order decides

Jobs are split: `fit` (the anchors, the quickstart shapes and conv2d
32x64x56x56, which the model and the search priors were tuned on) and
`held-out` (the shapes listed in bench/search/holdout*_ops.yaml and the long attention
shapes), so the held-out numbers are out of sample. A job recorded in several
catalogs (repeat runs) counts once: the catalog with the most timed candidates.

  python3 bench/deploy/estimate_quality.py [--bin build/kiln-estimate] [--shortlist-bin build/kiln-shortlist]
         [--json OUT.json]
         [--recorded]   (rank by the estimate_ms recorded at run time instead)
         [--before]     (the model without its config terms, and the fixed 1.5x rule)
         [--random-ties N]  (also the shortlist over N orders with equal estimates shuffled)
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import sqlite3
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOL = 1.03
OLD_RATIO, LIST_MAX = 1.5, 8


def holdout_keys() -> set:
    keys = set()
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "search", "holdout*_ops.yaml"))):
        for o in yaml.safe_load(open(path))["operators"]:
            for shape in o["shapes"]:
                keys.add((o["op"], json.dumps(shape, separators=(",", ":")), o.get("dtype", "fp32")))
    return keys


def tune_keys() -> set:
    """(op, shape, dtype) of the kernels bench/deploy/shortlist_tune.sh tunes on the device:
    jobs/examples/anchors_h200.yaml and bench/search/holdout_ops.yaml."""
    keys = set()
    for rel in (("jobs", "examples", "anchors_h200.yaml"), ("bench", "search", "holdout_ops.yaml")):
        m = yaml.safe_load(open(os.path.join(ROOT, *rel)))
        dtype = (m.get("defaults") or {}).get("dtype", "fp32")
        for o in m["operators"]:
            for shape in o.get("shapes") or [o["input_shape"]]:
                keys.add((o["op"], json.dumps(shape, separators=(",", ":")), o.get("dtype", dtype)))
    return keys


def warp_sizes() -> dict:
    """Target name -> warp size (configs/targets): the compiled kernel's, which the slim catalogs leave out."""
    out = {}
    for path in glob.glob(os.path.join(ROOT, "configs", "targets", "*.yaml")):
        t = yaml.safe_load(open(path))
        out[t["name"]] = t.get("warp_size", 64)
    return out


def load_jobs(paths: list[str]) -> list[dict]:
    held = holdout_keys()
    tuned = tune_keys()
    ws = warp_sizes()
    best: dict = {}
    for path in paths:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        rows = db.execute(
            "SELECT j.id, j.op, j.shape, j.dtype, j.params, j.target, json_extract(j.spec, '$.explore.strategy'),"
            " c.config, e.median_ms, e.estimate_ms, e.registers, e.spills, e.shared_bytes, e.occupancy, e.result"
            " FROM jobs j JOIN candidates c ON c.job_id = j.id JOIN evaluations e ON e.candidate_id = c.id"
            " WHERE e.status = 'ok' AND e.median_ms > 0 ORDER BY j.id, c.id").fetchall()
        jobs: dict = {}
        for (jid, op, shape, dtype, params, target, strategy, config, med, est, regs, spills, shared, occ,
             result) in rows:
            if strategy != "exhaustive":
                continue
            j = jobs.setdefault(jid, {"op": op, "shape": json.loads(shape), "dtype": dtype,
                                      "params": json.loads(params), "target": target,
                                      "catalog": os.path.relpath(path, ROOT), "cands": []})
            r = json.loads(result)
            cfg = json.loads(config)
            art = dict(r.get("artifact") or {})
            art.setdefault("num_warps", cfg.get("num_warps", 4))
            art.setdefault("warp_size", ws.get(target, 64))
            for k, v in (("registers", regs), ("spills", spills), ("shared_bytes", shared), ("occupancy", occ)):
                if v is not None:
                    art.setdefault(k, v)
            j["cands"].append({"config": cfg, "measured": med, "recorded": est,
                               "traffic": r.get("traffic") or {}, "artifact": art})
        for j in jobs.values():
            if len(j["cands"]) < 2:
                continue
            key = (j["op"], json.dumps(j["shape"], separators=(",", ":")), j["dtype"], json.dumps(j["params"]),
                   j["target"])
            j["split"] = "held-out" if key[:3] in held or (j["op"] == "attention" and j["shape"][2] > 2048) \
                else "fit"
            j["tuned"] = key[:3] in tuned
            if key not in best or len(j["cands"]) > len(best[key]["cands"]):
                best[key] = j
    return sorted(best.values(), key=lambda j: (j["split"] != "fit", j["op"], j["shape"]))


def estimate_all(jobs: list[dict], binary: str, with_config: bool = True) -> None:
    lines = []
    for j in jobs:
        for c in j["cands"]:
            lines.append(json.dumps({"target": j["target"], "dtype": j["dtype"], "traffic": c["traffic"],
                                     "artifact": c["artifact"], "config": c["config"] if with_config else {}}))
    out = subprocess.run([binary, "--targets", os.path.join(ROOT, "configs", "targets")],
                         input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    results = [json.loads(x) for x in out.splitlines()]
    it = iter(results)
    for j in jobs:
        for c in j["cands"]:
            r = next(it)
            if "error" in r:
                raise SystemExit(f"kiln-estimate: {r['error']}")
            c["estimate"] = r["ms"]
            c["terms"] = r


def ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        k = i
        while k + 1 < len(order) and xs[order[k + 1]] == xs[order[i]]:
            k += 1
        for m in range(i, k + 1):
            r[order[m]] = (i + k) / 2.0
        i = k + 1
    return r


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va > 0 and vb > 0 else 0.0


def ratio_list(order: list[dict], key: str) -> list[dict]:
    """The fixed rule before the shortlist (until 2026-12-02): every candidate within 1.5x of rank 0's
    estimate, at most 8. Kept for comparison; no package applies it."""
    r0, out = order[0][key], []
    for c in order:
        if c[key] > r0 * OLD_RATIO or len(out) == LIST_MAX:
            break
        out.append(c)
    return out


def shortlists(orders: list[list[dict]], key: str, binary: str) -> list[list[dict]]:
    """The shortlist kiln package ships for each job (src/package/shortlist.h pick_shortlist), computed by
    that C++ rule through kiln-shortlist: rank 0, then one per tile, each value of the knobs the model does
    not rank once before any twice, 8 in all."""
    lines = [json.dumps({"max": LIST_MAX, "candidates": [{"estimate_ms": c[key], "config": c["config"]}
                                                          for c in order]}) for order in orders]
    out = subprocess.run([binary], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout
    picked = []
    for order, line in zip(orders, out.splitlines()):
        r = json.loads(line)
        if "error" in r:
            raise SystemExit(f"kiln-shortlist: {r['error']}")
        picked.append([order[i] for i in r["picked"]])
    if len(picked) != len(orders):
        raise SystemExit(f"kiln-shortlist answered {len(picked)} lines for {len(orders)} jobs")
    return picked


def needed_factor(order: list[dict], key: str, best: float) -> float:
    """The smallest factor whose shortlist (<= 8) holds a config within 3% of the best; inf if none."""
    r0 = order[0][key]
    for c in order[:LIST_MAX]:
        if c["measured"] <= best * TOL:
            return c[key] / r0 if r0 > 0 else math.inf
    return math.inf


def random_ties(jobs: list[dict], key: str, shortlist_bin: str, n: int, seed: int = 1) -> list[float]:
    """Per job, the fraction of n orders whose shortlist holds a config within 3% of the measured best, where
    equal estimates are shuffled (seeded) instead of kept in candidate order. Jobs whose estimates all differ
    get their candidate-order answer (0 or 1) every time."""
    rng = random.Random(seed)
    hits = [0] * len(jobs)
    for _ in range(n):
        orders = []
        for j in jobs:
            cs = list(j["cands"])
            rng.shuffle(cs)
            orders.append(sorted(cs, key=lambda c: c[key]))  # stable: ties stay shuffled
        for i, (j, sl) in enumerate(zip(jobs, shortlists(orders, key, shortlist_bin))):
            best = min(c["measured"] for c in j["cands"])
            hits[i] += any(c["measured"] <= best * TOL for c in sl)
    return [h / n for h in hits]


def evaluate(jobs: list[dict], key: str, shortlist_bin: str, ties_n: int = 0) -> list[dict]:
    rows = []
    # ties in candidate order, as the package's query (ORDER BY estimate_ms, c.id)
    orders = [sorted(j["cands"], key=lambda c: c[key]) for j in jobs]
    rties = random_ties(jobs, key, shortlist_bin, ties_n) if ties_n > 0 else [None] * len(jobs)
    for j, order, sl, rt in zip(jobs, orders, shortlists(orders, key, shortlist_bin), rties):
        cs = j["cands"]
        estimates = [c[key] for c in cs]
        best = min(c["measured"] for c in cs)
        good = lambda sub: any(c["measured"] <= best * TOL for c in sub)
        old = ratio_list(order, key)
        rows.append({
            "split": j["split"], "tuned": j["tuned"], "op": j["op"], "shape": j["shape"], "dtype": j["dtype"], "params": j["params"],
            "catalog": j["catalog"], "n": len(cs),
            "rho": spearman([c[key] for c in cs], [c["measured"] for c in cs]),
            "pick": order[0]["measured"] / best,
            "top1": good(order[:1]), "top4": good(order[:4]), "top8": good(order[:8]),
            "list_n": len(sl), "list_ok": good(sl), "list_pick": min(c["measured"] for c in sl) / best,
            "old_list_n": len(old), "old_list_ok": good(old), "old_list_pick": min(c["measured"] for c in old) / best,
            "needed_factor": needed_factor(order, key, best),
            # candidates whose estimate another candidate shares (their order is the candidates')
            "tied": sum(estimates.count(e) > 1 for e in estimates),
            "list_ok_random_ties": rt,
        })
    return rows


def summary(rows: list[dict]) -> dict:
    n = len(rows)
    if not n:
        return {}
    return {"jobs": n,
            "top1": sum(r["top1"] for r in rows), "top4": sum(r["top4"] for r in rows),
            "top8": sum(r["top8"] for r in rows),
            "list_ok": sum(r["list_ok"] for r in rows), "list_mean_n": sum(r["list_n"] for r in rows) / n,
            "old_list_ok": sum(r["old_list_ok"] for r in rows),
            "old_list_mean_n": sum(r["old_list_n"] for r in rows) / n,
            "median_rho": sorted(r["rho"] for r in rows)[n // 2],
            "worst_pick": max(r["pick"] for r in rows),
            "worst_list_pick": max(r["list_pick"] for r in rows),
            "worst_old_list_pick": max(r["old_list_pick"] for r in rows),
            "list_ok_random_ties": (sum(r["list_ok_random_ties"] for r in rows)
                                    if all(r["list_ok_random_ties"] is not None for r in rows) else None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "kiln-estimate"))
    ap.add_argument("--shortlist-bin", default=os.path.join(ROOT, "build", "kiln-shortlist"))
    ap.add_argument("--json", help="write per-job rows and summaries here")
    ap.add_argument("--recorded", action="store_true", help="rank by the estimate_ms recorded at run time")
    ap.add_argument("--before", action="store_true",
                    help="the model before the config terms (no config passed)")
    ap.add_argument("--random-ties", type=int, default=0, metavar="N",
                    help="also the shortlist over N orders with equal estimates shuffled (seeded), per job the "
                         "fraction that holds a config within 3%%")
    ap.add_argument("catalogs", nargs="*",
                    default=sorted(glob.glob(os.path.join(ROOT, "tests", "data", "search", "**", "*.db"), recursive=True)))
    a = ap.parse_args()
    jobs = load_jobs(a.catalogs)
    key = "recorded" if a.recorded else "estimate"
    if a.recorded:
        jobs = [j for j in jobs if all(c["recorded"] is not None for c in j["cands"])]
    else:
        estimate_all(jobs, a.bin, with_config=not a.before)
    if a.random_ties < 0:
        ap.error("--random-ties must be >= 0")
    rows = evaluate(jobs, key, a.shortlist_bin, a.random_ties)

    ties = a.random_ties > 0
    print(f"{'split':8} {'op':13} {'shape':22} {'n':>3} {'rho':>6} {'pick':>6} top1 top4 top8 "
          f"{'list':>4} ok lpick {'old':>4} ok  need" + (" rties" if ties else ""))
    yn = lambda b: " y  " if b else " -  "
    for r in rows:
        print(f"{r['split']:8} {r['op']:13} {json.dumps(r['shape'], separators=(',', ':')):22} {r['n']:3d} "
              f"{r['rho']:6.2f} {r['pick']:6.2f} {yn(r['top1'])} {yn(r['top4'])} {yn(r['top8'])} "
              f"{r['list_n']:4d} {'y' if r['list_ok'] else '-':2} {r['list_pick']:5.3f} {r['old_list_n']:4d} "
              f"{'y' if r['old_list_ok'] else '-':2} {r['needed_factor']:5.2f}"
              + (f" {r['list_ok_random_ties']:5.2f}" if ties else ""))
    sums = {}
    for split in ("fit", "held-out"):
        s = summary([r for r in rows if r["split"] == split])
        sums[split] = s
        if s:
            print(f"{split}: {s['jobs']} jobs; a config within 3% of the measured best in the estimate's "
                  f"top 1: {s['top1']}, top 4: {s['top4']}, top 8: {s['top8']}; median rho {s['median_rho']:.2f}; "
                  f"worst pick {s['worst_pick']:.2f}x; shortlist holds one: {s['list_ok']} "
                  f"(mean size {s['list_mean_n']:.1f}, worst {s['worst_list_pick']:.3f}x), "
                  f"1.5x rule: {s['old_list_ok']} (mean size {s['old_list_mean_n']:.1f}, "
                  f"worst {s['worst_old_list_pick']:.3f}x)"
                  + (f"; with equal estimates in random order the shortlist holds one in "
                     f"{s['list_ok_random_ties']:.2f} on average" if ties else ""))
    tuned = [r for r in rows if r["tuned"]]
    sums["tuned"] = summary(tuned)
    if tuned:
        missed = ", ".join(f"{r['op']} {'x'.join(map(str, r['shape']))}" for r in tuned if not r["list_ok"])
        print(f"shortlist_tune.sh kernels recorded here: {len(tuned)}; the shortlist holds a config within 3%: "
              f"{sum(r['list_ok'] for r in tuned)}" + (f" (missed: {missed})" if missed else "")
              + (f"; with equal estimates in random order: {sum(r['list_ok_random_ties'] for r in tuned):.2f} "
                 f"on average" if ties else ""))
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:  # JSON has no infinity: "no factor catches it" is null
                r["needed_factor"] = None if math.isinf(r["needed_factor"]) else r["needed_factor"]
            json.dump({"basis": key, "model": "before" if a.before else ("recorded" if a.recorded else "current"),
                       "tolerance": TOL, "random_ties": a.random_ties, "rows": rows, "summary": sums,
                       "catalogs": [os.path.relpath(p, ROOT) for p in a.catalogs]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
