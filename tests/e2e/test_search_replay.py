"""Search quality on recorded H200 measurements, as a regression test.

tests/data/search/h200-2026-11-30-evening/anchors-slim.db holds an exhaustive run of
the anchor cases on an H200 (every config measured). Replaying Kiln's own
strategy code over it (kiln-replay, driven by bench/search/search_efficiency.py with
the worker's space hints, as in a live run) is deterministic for a seed, so the
goal of issue 3 -- halving within 3% of the exhaustive best with at least 5x
fewer evaluations on the matmul and conv2d spaces -- can be checked on every
change to the config model or the strategy. (It says nothing about a new GPU
run; bench/search/h200_conv2d_search.sh and bench/speed/h200_run.sh do.)

tests/data/search/h200-2026-11-30-night/conv2d-32x64x56x56-exhaustive-slim.db is a
second conv2d shape (64 input channels: K in several steps), measured live
after the config model had been tuned on the seed shape. Halving missed it by
1.90x until round 0 gave half its picks to tile shapes no other pick had
(strategy.h `tiles`); that change was made with this catalog in view, so the
test guards it rather than proving it on unseen data.

tests/data/search/h200-2026-12-01/holdout2/kiln-h200-search-slim.db holds eight
shapes recorded after halving's priors (src/search/priors.h) were fixed; the
priors come from the catalogs recorded before it (leave-one-out: a job of the
replayed shape never counts). The model alone misses most of its conv2d jobs;
with priors, every seed of seven of the eight jobs lands within 3% at a budget
of a fifth of the space (docs/performance-journal.md, "Halving with priors").
tests/data/search/h200-2026-12-01/holdout3/ holds eight more, chosen after the
priors took the places of model picks in round 0: there every job meets the goal.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Slim catalogs of exhaustive H200 runs (bench/search/slim_catalog.py): the replays' fixtures.
SEARCH_DATA = ROOT / "tests" / "data" / "search"
CATALOG = SEARCH_DATA / "h200-2026-11-30-evening" / "anchors-slim.db"
CONV_64_CHANNELS = SEARCH_DATA / "h200-2026-11-30-night" / "conv2d-32x64x56x56-exhaustive-slim.db"
HOLDOUT2 = SEARCH_DATA / "h200-2026-12-01" / "holdout2" / "kiln-h200-search-slim.db"
HOLDOUT3 = SEARCH_DATA / "h200-2026-12-01" / "holdout3" / "kiln-h200-search-slim.db"
EARLIER = sorted(str(p) for p in SEARCH_DATA.glob("h200-2026-11-30*/**/*slim.db"))
REPLAY = Path(os.environ.get("KILN_REPLAY", ROOT / "build" / "kiln-replay"))


@pytest.fixture(scope="module")
def replayed():
    if not REPLAY.exists():
        pytest.fail(f"{REPLAY} is missing: build it (cmake --build build --target kiln-replay)")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "search" / "search_efficiency.py"), str(CATALOG),
                        "--replay", str(REPLAY), "--seeds", "30", "--jobs", "6,7,9,10", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = {}
    for job in json.loads(r.stdout):
        rows = {row["strategy"]: row for row in job["rows"]}
        out.setdefault(job["job"]["op"], []).append(rows)
    return out


def test_matmul_and_conv2d_meet_the_search_goal(replayed):
    for op in ("matmul", "conv2d"):
        for rows in replayed[op]:
            h = rows["halving"]
            assert h["fewer"] >= 5.0, (op, h)
            assert h["within_3pct"] == 1.0, (op, h)


def test_halving_beats_random_at_the_same_budget(replayed):
    # random sampling with halving's mean number of evaluations, same seeds
    for op in ("matmul", "conv2d", "attention"):
        for rows in replayed[op]:
            rand = next(v for k, v in rows.items() if k.startswith("random@"))
            assert rows["halving"]["within_3pct"] > rand["within_3pct"], (op, rows)
            assert rows["halving"]["ratio_mean"] < rand["ratio_mean"], (op, rows)


def test_conv2d_search_holds_with_64_input_channels():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "search" / "search_efficiency.py"), str(CONV_64_CHANNELS),
                        "--replay", str(REPLAY), "--seeds", "30", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    jobs = json.loads(r.stdout)
    assert [j["job"]["op"] for j in jobs] == ["conv2d"]
    h = next(row for row in jobs[0]["rows"] if row["strategy"] == "halving")
    assert h["fewer"] >= 5.0, h
    assert h["within_3pct"] == 1.0, h


def replay_with_priors(catalog, priors_from):
    """{(op, shape): {strategy: row}} of search_efficiency.py with --priors-from;
    the capped rows' budget suffix becomes "@" ("halving+priors@")."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "search" / "search_efficiency.py"), str(catalog),
                        "--replay", str(REPLAY), "--seeds", "20", "--json", "--priors-from", ",".join(priors_from)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return {(j["job"]["op"], tuple(j["job"]["shape"])):
            {row["strategy"].split("@")[0] + ("@" if "@" in row["strategy"] else ""): row for row in j["rows"]}
            for j in json.loads(r.stdout)}


def test_priors_from_earlier_catalogs_find_what_the_model_misses():
    assert len(EARLIER) >= 5, EARLIER
    jobs = replay_with_priors(HOLDOUT2, EARLIER)
    assert len(jobs) == 8
    # Where the model alone never gets within 3%, the priors get there in every seed.
    for shape in ((4, 64, 64, 64), (8, 96, 48, 48)):
        rows = jobs[("conv2d", shape)]
        assert rows["halving"]["within_3pct"] == 0.0, rows["halving"]
        assert rows["halving+priors"]["within_3pct"] == 1.0, rows["halving+priors"]
    # The goal at a budget of a fifth of the space: >= 5x fewer evaluations, and
    # within 3% in (nearly) every seed on seven of the eight jobs.
    capped = [rows["halving+priors@"] for rows in jobs.values()]
    assert all(c["fewer"] >= 5.0 for c in capped), capped
    assert sum(c["within_3pct"] >= 0.95 for c in capped) >= 7, capped


def test_priors_meet_the_search_goal_on_the_third_held_out_set():
    earlier = EARLIER + [str(p) for p in sorted(HOLDOUT2.parent.parent.glob("holdout*/*slim.db"))
                         if not p.parent.name.startswith("holdout3")]
    jobs = replay_with_priors(HOLDOUT3, earlier)
    assert len(jobs) == 8
    for key, rows in jobs.items():
        assert rows["halving+priors"]["within_3pct"] == 1.0, (key, rows["halving+priors"])
        assert rows["halving+priors@"]["within_3pct"] == 1.0, (key, rows["halving+priors@"])
        assert rows["halving+priors@"]["fewer"] >= 5.0, (key, rows["halving+priors@"])
    # The model alone misses two of its conv2d jobs in every seed.
    assert sum(rows["halving"]["within_3pct"] == 0.0 for rows in jobs.values()) >= 2
