"""The confirmation round end to end: finalists and baselines timed again after
the exploration, raw samples in the catalog, selection by the confirmed
medians, `kiln best` and `kiln nightly` on them.

Two paths: the real worker on the CPU (Triton interpreter) with
KILN_CONFIRM_CPU=1 (the stage's test path, basis "cpu"), and the scripted H200
evaluator (tests/data/fake_evaluator) for the measured path up to the device.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_e2e import FAKE_EVALUATOR, KILN, ROOT, db_rows, kiln  # noqa: E402

CPU_MANIFEST = """targets: [H200]
defaults:
  dtypes: [fp32]
  exploration: {max_candidates: 4}
operators:
  - op: add
    shape: [1024]
  - op: softmax
    shape: [8, 64]
"""

FAKE_MANIFEST = """targets: [H200]
defaults:
  dtypes: [fp32]
  exploration: {max_candidates: 6, baselines: [eager, compile], confirm_margin: 3.5}
operators:
  - op: add
    shape: [4096]
"""


def samples(blob):
    return np.frombuffer(blob, dtype="<f4").astype(np.float64)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("confirm_cpu")
    cat, man = tmp / "k.db", tmp / "m.yaml"
    man.write_text(CPU_MANIFEST)
    kiln("submit", man, catalog=cat)
    r = kiln("run", "--device", "cpu", "--scratch", tmp / "s", "--confirm-rounds", "3", "--confirm-reps", "4",
             "--throttle-threshold", "85", "--throttle-recovery-delay", "0.2", "--confirm-preheat", "0.7",
             "--json", catalog=cat, env={"KILN_CONFIRM_CPU": "1"})
    return {"tmp": tmp, "cat": cat, "summary": json.loads(r.stdout.splitlines()[-1]), "stderr": r.stderr}


def test_cpu_run_records_raw_samples(cpu_run):
    cat = cpu_run["cat"]
    assert cpu_run["summary"]["jobs_confirmed"] == 2 and cpu_run["summary"]["confirm_failures"] == 0
    rows = db_rows(cat, "SELECT job_id, candidate_id, baseline, run_id, basis, samples, n, median_ms, conditions "
                        "FROM confirmations ORDER BY job_id, candidate_id")
    by_job = {}
    for r in rows:
        by_job.setdefault(r[0], []).append(r)
    assert len(by_job) == 2
    for job_id, rs in by_job.items():
        cands = [r for r in rs if r[1] is not None]
        bases = [r[2] for r in rs if r[2] is not None]
        assert bases == ["eager"]
        assert len(cands) >= 3                         # at least 3 finalists when the job has them
        assert len({r[3] for r in rs}) == 1            # one round, one run id
        for r in rs:
            xs = samples(r[5])
            assert r[4] == "cpu" and r[6] == len(xs) == 3 * 4
            assert r[7] == pytest.approx(float(np.median(xs)), rel=1e-12)   # recomputable from the blob
            cond = json.loads(r[8])
            assert cond["identity"]["torch"] and len(cond["rounds"]) == 3
            # the run's throttle flags reached the worker (no clock measured on the CPU)
            t = cond["throttle"]
            assert (t["threshold"], t["recovery_s"], t["rounds_retimed"]) == (0.85, 0.2, 0)
            assert cond["sustained"] == {"preheat_s": 0.7}  # nothing probed on the CPU
        for r in cands:
            assert json.loads(r[8])["check"]["passed"] is True


@pytest.mark.parametrize("flag,value", [("--throttle-threshold", "101"), ("--throttle-threshold", "-1"),
                                        ("--throttle-recovery-delay", "61"), ("--confirm-preheat", "-1"),
                                        ("--confirm-preheat", "61")])
def test_bad_throttle_flags_are_usage_errors(tmp_path, flag, value):
    r = kiln("run", "--device", "cpu", flag, value, catalog=tmp_path / "k.db", check=False)
    assert r.returncode == 2 and flag in r.stderr, r.stderr


def test_cpu_best_is_the_lowest_confirmed_median(cpu_run):
    cat = cpu_run["cat"]
    for job_id, cand, run, cms, basis in db_rows(
            cat, "SELECT job_id, candidate_id, confirmed_run, confirmed_ms, basis FROM best"):
        rs = db_rows(cat, f"SELECT candidate_id, median_ms FROM confirmations WHERE job_id = {job_id} "
                          f"AND run_id = '{run}' AND candidate_id IS NOT NULL")
        best = min(rs, key=lambda x: x[1])
        assert cand == best[0] and cms == pytest.approx(best[1])
        assert basis == "estimated"  # a CPU time is never a measurement of the H200


def test_cpu_kiln_best_json_and_text(cpu_run):
    out = json.loads(kiln("best", "--json", catalog=cpu_run["cat"]).stdout)
    assert len(out) == 2
    for row in out:
        c = row["confirmed"]
        assert c["basis"] == "cpu" and c["n"] == 12 and c["finalists"] >= 3
        # the interval resamples the rounds the samples were taken in
        rounds = db_rows(cpu_run["cat"], f"SELECT conditions FROM confirmations WHERE run_id = '{c['run_id']}' "
                                         "AND candidate_id IS NOT NULL LIMIT 1")[0][0]
        assert c["rounds"] == len(json.loads(rounds)["rounds"]) >= 2 and c["n"] % c["rounds"] == 0
        lo, hi = c["ci95_ms"]
        assert lo <= c["median_ms"] <= hi
        ru = c["runner_up"]
        assert ru["median_ms"] >= c["median_ms"]
        assert ru["margin"] == pytest.approx(ru["median_ms"] / c["median_ms"] - 1)
        assert c["tie"] == (ru["ci95_ms"][0] <= hi and lo <= ru["ci95_ms"][1])
        e = c["baselines"]["eager"]
        assert e["speedup"] == pytest.approx(e["median_ms"] / c["median_ms"])
        assert e["speedup_ci95"][0] <= e["speedup"] <= e["speedup_ci95"][1]
    text = kiln("best", catalog=cpu_run["cat"]).stdout
    assert "confirmed median [95% CI]" in text and " cpu" in text and "eager " in text


def test_perf_table_from_the_cpu_catalog(cpu_run, tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text("# x\n\nbefore\n<!-- perf-table:begin -->\nold table\n<!-- perf-table:end -->\nafter\n")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "perf_table.py"), "--catalog", str(cpu_run["cat"]),
                        "--doc", str(doc), "--kiln", str(KILN)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = doc.read_text()
    assert "old table" not in text and text.startswith("# x\n\nbefore\n") and text.endswith("after\n")
    table = text.split("<!-- perf-table:begin -->")[1].split("<!-- perf-table:end -->")[0]
    best = json.loads(kiln("best", "--json", catalog=cpu_run["cat"]).stdout)
    for row in best:
        assert f"{row['confirmed']['median_ms']:.4f}" in table
    assert "cpu" in table  # the basis is named: these are no H200 numbers
    # No markers: a clear error, the file untouched.
    bare = tmp_path / "bare.md"
    bare.write_text("nothing\n")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "perf_table.py"), "--catalog", str(cpu_run["cat"]),
                        "--doc", str(bare), "--kiln", str(KILN)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "perf-table:begin" in r.stderr and bare.read_text() == "nothing\n"


# -- the measured path, against the scripted H200 -------------------------------------

def fake_run(tmp, manifest, env=None, catalog=None):
    cat = catalog or tmp / "k.db"
    man = tmp / "m.yaml"
    man.write_text(manifest)
    kiln("submit", man, catalog=cat)
    log = tmp / "requests.jsonl"
    e = {"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(log)}
    e.update(env or {})
    r = kiln("run", "--device", "gpu", "--scratch", tmp / "s", "--json", catalog=cat, env=e)
    confirms = [json.loads(x) for x in Path(str(log) + ".confirm").read_text().splitlines()] \
        if Path(str(log) + ".confirm").exists() else []
    return cat, json.loads(r.stdout.splitlines()[-1]), confirms


def test_measured_selection_follows_the_confirmed_medians(tmp_path):
    # The exploration's best is BLOCK 64 (0.1 ms); confirmed, BLOCK 128 runs at 0.08 ms.
    cat, summary, confirms = fake_run(tmp_path, FAKE_MANIFEST, {"FAKE_CONFIRM_FASTEST": "128"})
    assert summary["jobs_confirmed"] == 1
    (req,) = confirms
    assert [e.get("baseline") for e in req["confirm"] if "baseline" in e] == ["eager", "compile"]
    sent = [e["config"]["BLOCK"] for e in req["confirm"] if "id" in e]
    assert sent == [64, 128, 192, 256]  # every candidate within 350% of the best (0.1 ms): up to 0.45 ms
    (best,) = db_rows(cat, "SELECT c.config, b.basis, b.value_ms, b.confirmed_ms, b.device FROM best b "
                           "JOIN candidates c ON c.id = b.candidate_id")
    assert json.loads(best[0])["BLOCK"] == 128
    assert best[1] == "measured" and best[2] == pytest.approx(0.08, rel=0.02) and best[2] == best[3]
    row = json.loads(kiln("best", "--json", catalog=cat).stdout)[0]
    c = row["confirmed"]
    assert c["basis"] == "device" and c["tie"] is False and c["runner_up"]["margin"] > 0.2
    assert c["baselines"]["eager"]["speedup"] == pytest.approx(0.5 / 0.08, rel=0.02)
    assert c["baselines"]["compile"]["speedup"] == pytest.approx(0.3 / 0.08, rel=0.02)
    assert c["conditions"]["sm_clock_mhz"] == [1980, 1980]
    # The device's own account beside the lock-held one.
    assert summary["gpu_kernel_s"] > 0 and "gpu_busy_fraction" in summary


def test_finalists_wrong_while_timed_fail_the_job(tmp_path):
    cat = tmp_path / "k.db"
    man = tmp_path / "m.yaml"
    man.write_text(FAKE_MANIFEST)
    kiln("submit", man, catalog=cat)
    r = kiln("run", "--device", "gpu", "--scratch", tmp_path / "s", "--json", catalog=cat,
             env={"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp_path / "l"),
                  "FAKE_CONFIRM_WRONG": "1"})
    assert json.loads(r.stdout.splitlines()[-1])["jobs_failed"] == 1
    (state, message), = db_rows(cat, "SELECT state, message FROM jobs")
    assert state == "failed" and "re-check after timing" in message
    assert db_rows(cat, "SELECT COUNT(*) FROM best") == [(0,)]
    assert db_rows(cat, "SELECT COUNT(*) FROM confirmations") == [(6,)]  # kept: 4 finalists, 2 baselines


def test_confirm_rounds_zero_turns_it_off(tmp_path):
    cat = tmp_path / "k.db"
    man = tmp_path / "m.yaml"
    man.write_text(FAKE_MANIFEST)
    kiln("submit", man, catalog=cat)
    r = kiln("run", "--device", "gpu", "--scratch", tmp_path / "s", "--confirm-rounds", "0", "--json", catalog=cat,
             env={"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp_path / "l")})
    assert json.loads(r.stdout.splitlines()[-1])["jobs_confirmed"] == 0
    assert db_rows(cat, "SELECT COUNT(*) FROM confirmations") == [(0,)]
    row = json.loads(kiln("best", "--json", catalog=cat).stdout)[0]
    assert row["confirmed"] is None
    assert "(unconfirmed)" in kiln("best", catalog=cat).stdout


@pytest.mark.parametrize("scale,status", [("1.0", "same"), ("1.10", "regression"), ("0.9", "improved")])
def test_nightly_decides_on_raw_samples(tmp_path, scale, status):
    cat = tmp_path / "k.db"
    fake_run(tmp_path, FAKE_MANIFEST, catalog=cat)
    # The same job under a new key (another exploration seed): the nightly compares the two bests.
    changed = tmp_path / "changed.yaml"
    changed.write_text(FAKE_MANIFEST.replace("confirm_margin: 3.5}", "confirm_margin: 3.5, seed: 1}"))
    env = {"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp_path / "l2"),
           "FAKE_CONFIRM_SCALE": scale}
    r = kiln("nightly", changed, "--device", "gpu", "--scratch", tmp_path / "s2", "--report", tmp_path / "r.md",
             catalog=cat, check=False, env=env)
    rep = json.loads((tmp_path / "r.json").read_text())
    (job,) = rep["jobs"]
    assert job["status"] == status, job
    d = job["decision"]
    assert d["decided_by"] == "mann-whitney" and d["n_now"] == d["n_previous"] == 100
    rounds = job["new"]["confirmed_rounds"]
    assert rounds == job["previous"]["confirmed_rounds"] >= 2 and 100 % rounds == 0
    lo, hi = d["ratio_ci95"]
    assert lo <= d["median_ratio"] <= hi
    assert (d["p"] < 0.01) == (status != "same")
    assert r.returncode == (4 if status == "regression" else 0), r.stderr
    assert "decided by" in (tmp_path / "r.md").read_text()


def test_kiln_decide(tmp_path):
    rng = np.random.default_rng(3)
    a = (1 + rng.gamma(4, 0.004, 200)).tolist()
    b = (1.06 * (1 + rng.gamma(4, 0.004, 200))).tolist()
    r = subprocess.run([str(KILN), "decide"], input=json.dumps({"pairs": [{"previous": a, "now": b},
                                                                          {"previous": a, "now": a}]}),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["decisions"]
    assert d[0]["verdict"] == "regressed" and d[1]["verdict"] == "unchanged" and d[1]["p"] == 1.0
    r = subprocess.run([str(KILN), "decide"], input="{}", capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "pairs" in r.stderr
    # five rounds a side, each round at its own clock: the interval over the rounds is wider
    # than over the calls; the verdict and p are the calls'
    clocks = np.repeat(1 + rng.normal(0, 0.02, 10), 20)
    c, e = (clocks[:100] * (1 + rng.gamma(4, 0.004, 100))).tolist(), (clocks[100:] * (1 + rng.gamma(4, 0.004, 100))).tolist()
    pairs = [{"previous": c, "now": e}, {"previous": c, "now": e, "rounds_previous": 5, "rounds_now": 5}]
    r = subprocess.run([str(KILN), "decide"], input=json.dumps({"pairs": pairs}), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    calls, rounds = json.loads(r.stdout)["decisions"]
    assert rounds["p"] == calls["p"] and rounds["verdict"] == calls["verdict"]
    width = [d["ratio_ci95"][1] - d["ratio_ci95"][0] for d in (calls, rounds)]
    assert width[1] > 1.5 * width[0], width
    r = subprocess.run([str(KILN), "decide"], input=json.dumps({"pairs": [dict(pairs[1], rounds_now="five")]}),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "rounds_now" in r.stderr


def test_a_docs_copy_of_the_catalog_keeps_what_kiln_best_reads(cpu_run, tmp_path):
    """bench/search/slim_catalog.py --keep-best: the code objects' bytes gone,
    `kiln best --json` (what bench/perf_table.py reads) unchanged but for the
    summary decoded from those bytes."""
    copy = tmp_path / "docs.db"
    subprocess.run([sys.executable, str(ROOT / "bench" / "search" / "slim_catalog.py"), str(cpu_run["cat"]),
                    str(copy), "--keep-best"], check=True, timeout=120)
    assert db_rows(cpu_run["cat"], "SELECT COUNT(*) FROM blobs WHERE length(data) > 0")[0][0] > 0
    assert db_rows(copy, "SELECT COUNT(*) FROM blobs WHERE length(data) > 0")[0][0] == 0
    best = [json.loads(kiln("best", "--json", catalog=c).stdout) for c in (cpu_run["cat"], copy)]
    for b in best:  # the code object's summary is decoded from its bytes: gone in the copy
        for row in b:
            row.pop("code_object")
    assert best[0] and best[0] == best[1]
