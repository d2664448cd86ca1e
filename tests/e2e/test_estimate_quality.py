"""The static estimate against recorded H200 measurements, as a regression test.

bench/deploy/estimate_quality.py recomputes the estimate of every candidate of the
exhaustive H200 runs under bench/results/ with the current model (kiln-estimate,
the C++ of src/search/estimate.cpp) and asks whether the shortlist an
estimated target's package would ship (the package's own rule, through
kiln-shortlist) holds a config within 3% of the measured best
(docs/packaging.md). These tests check that the harness reads the
catalogs as the engine did (the model without its config terms reproduces the
estimate_ms recorded at run time) and that the current model and shortlist
rule catch at least as many jobs as the fixed 1.5x rule on the model before,
on the fit split and on the held-out shapes.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# built beside kiln (bench/CMakeLists.txt)
EST = Path(os.environ.get("KILN_ESTIMATE",
                          Path(os.environ.get("KILN_BIN", ROOT / "build" / "kiln")).parent / "kiln-estimate"))
# the package's shortlist rule (src/package/shortlist.h), built beside kiln-estimate
SHORTLIST = Path(os.environ.get("KILN_SHORTLIST", EST.parent / "kiln-shortlist"))
SCRIPT = ROOT / "bench" / "deploy" / "estimate_quality.py"


def quality(tmp_path, *flags):
    if not EST.is_file():
        pytest.fail(f"{EST} is missing: build it (cmake --build build --target kiln-estimate)")
    if not SHORTLIST.is_file():
        pytest.fail(f"{SHORTLIST} is missing: build it (cmake --build build --target kiln-shortlist)")
    out = tmp_path / ("q" + "".join(f.strip("-") for f in flags) + ".json")
    subprocess.run([sys.executable, str(SCRIPT), "--bin", str(EST), "--shortlist-bin", str(SHORTLIST), "--json", str(out), *flags], check=True,
                   capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.read_text())


def test_the_harness_reproduces_the_recorded_estimates(tmp_path):
    before, recorded = quality(tmp_path, "--before"), quality(tmp_path, "--recorded")
    key = lambda r: (r["op"], json.dumps(r["shape"]), r["dtype"], json.dumps(r["params"], sort_keys=True),
                     r["catalog"])
    rec = {key(r): r for r in recorded["rows"]}
    # tests/data/search: 33 distinct recorded jobs (the bulk of bench/results left the tree)
    assert len(before["rows"]) >= 30 and {key(r) for r in before["rows"]} == set(rec)
    for r in before["rows"]:
        # same order by estimate: same pick, same correlation
        assert r["pick"] == pytest.approx(rec[key(r)]["pick"]), key(r)
        assert r["rho"] == pytest.approx(rec[key(r)]["rho"], abs=1e-9), key(r)


def test_the_shortlist_catches_at_least_what_the_fixed_rule_did(tmp_path):
    before, now = quality(tmp_path, "--before"), quality(tmp_path)
    for split in ("fit", "held-out"):
        b, n = before["summary"][split], now["summary"][split]
        assert n["jobs"] == b["jobs"] > 0
        assert n["list_ok"] >= b["old_list_ok"], split
        assert n["list_mean_n"] <= 8
        # a shipped list never lies further from the best than the fixed rule's did
        assert n["worst_list_pick"] <= b["worst_old_list_pick"], split
    for r in now["rows"]:
        assert 1 <= r["list_n"] <= min(8, r["n"])


def test_random_ties_move_only_jobs_with_equal_estimates(tmp_path):
    q = quality(tmp_path, "--random-ties", "10")
    assert q["random_ties"] == 10
    rows = q["rows"]
    for r in rows:
        frac = r["list_ok_random_ties"]
        assert 0 <= frac <= 1, r["op"]
        if r["tied"] == 0:
            # every estimate differs: shuffling changes no order, so no answer
            assert frac == float(r["list_ok"]), (r["op"], r["shape"])
    # the row kernels' configs tie (the model cannot tell them apart): there the order decides
    assert any(r["tied"] > 0 and 0 < r["list_ok_random_ties"] < 1 for r in rows)
    for split in ("fit", "held-out"):
        s = q["summary"][split]
        assert s["list_ok_random_ties"] == pytest.approx(
            sum(r["list_ok_random_ties"] for r in rows if r["split"] == split))
