"""End-to-end tests of `kiln nightly` (regeneration, regression report, packaging).

On this CPU-only machine every best is `estimated`; the measured-vs-measured
regression is crafted with sqlite3 in a copy of the catalog and checked with the
hidden `--report-only` mode (no submit, no run: the report step alone).

KILN_BIN names the binary (default: build/kiln).
"""
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, db_rows as rows, kiln, require_kiln  # noqa: E402

MANIFEST = ROOT / "tests" / "data" / "manifests" / "slurm_small.yaml"
EXIT_REGRESSION = 4


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    require_kiln()
    tmp = tmp_path_factory.mktemp("nightly")
    cat = tmp / "nightly.db"
    scratch = tmp / "scratch"
    common = ["--device", "cpu", "--workers", "2", "--scratch", scratch]
    first = kiln("nightly", MANIFEST, "--report", tmp / "night1.md", "--package-dir", tmp / "pkg",
                 *common, catalog=cat, check=False)
    second = kiln("nightly", MANIFEST, "--report", tmp / "night2.md", "--package-dir", tmp / "pkg2",
                  *common, catalog=cat, check=False)
    return dict(tmp=tmp, cat=cat, first=first, second=second, common=common)


def report(path):
    return json.loads(Path(path).read_text())


def skip_without_package_info(rep):
    """kiln nightly packages with the run's worker; until that worker answers
    package_info the package is skipped with kiln package's error."""
    for p in rep["packages"]:
        if "no package_info method" in p.get("skipped", ""):
            pytest.skip("the worker has no package_info method yet: " + p["skipped"][:200])


def test_first_night_evaluates_and_exits_0(nightly):
    r = nightly["first"]
    assert r.returncode == 0, r.stderr
    rep = report(nightly["tmp"] / "night1.json")
    assert rep["evaluated"] > 0
    jobs = rows(nightly["cat"], "SELECT COUNT(*) FROM jobs")[0][0]
    assert rep["summary"]["jobs"] == jobs == rep["summary"]["new"] == rep["summary"]["ran_now"]
    assert rep["summary"]["regressions"] == 0
    assert all(j["status"] == "new" and j["previous"] is None for j in rep["jobs"])
    md = (nightly["tmp"] / "night1.md").read_text()
    assert "No regressions." in md and "| softmax | 8x64 | fp32 | MI300X | new |" in md
    assert rows(nightly["cat"], "SELECT DISTINCT state FROM jobs") == [("done",)]


def test_first_night_packages_the_target(nightly):
    rep = report(nightly["tmp"] / "night1.json")
    assert [p["target"] for p in rep["packages"]] == ["MI300X"]
    skip_without_package_info(rep)
    man = json.loads((nightly["tmp"] / "pkg" / "MI300X" / "manifest.json").read_text())
    assert len(man["kernels"]) == rep["summary"]["jobs"]
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=nightly["tmp"] / "pkg" / "MI300X",
                          capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr


def test_second_night_evaluates_nothing(nightly):
    r = nightly["second"]
    assert r.returncode == 0, r.stderr
    rep = report(nightly["tmp"] / "night2.json")
    assert rep["evaluated"] == 0
    assert rep["run"] is None, "nothing was runnable: no explorer run at all"
    assert rep["summary"]["unchanged"] == rep["summary"]["jobs"]
    assert rep["summary"]["ran_now"] == 0
    assert rep["packages"] == [] and not (nightly["tmp"] / "pkg2").exists()
    n_eval = rows(nightly["cat"], "SELECT COUNT(*) FROM evaluations")[0][0]
    assert n_eval == report(nightly["tmp"] / "night1.json")["evaluated"]


def test_changed_keys_rerun_and_compare_with_the_previous_jobs(nightly, tmp_path):
    """A changed manifest entry (more benchmark runs) is a new key for every job:
    they run again and are compared with the older jobs of the same
    (op, shape, dtype, params, target); same configs, same estimates: 'same'."""
    cat = tmp_path / "cat.db"
    shutil.copy(nightly["cat"], cat)
    changed = tmp_path / "changed.yaml"
    changed.write_text(MANIFEST.read_text().replace("runs: 20", "runs: 30"))
    r = kiln("nightly", changed, "--report", tmp_path / "r.md", "--package-dir", tmp_path / "pkg",
             *nightly["common"], catalog=cat, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = report(tmp_path / "r.json")
    assert rep["evaluated"] > 0
    n = rep["summary"]["jobs"]
    assert rep["summary"]["ran_now"] == n
    old_keys = {k for (k,) in rows(nightly["cat"], "SELECT key FROM jobs")}
    for j in rep["jobs"]:
        assert j["key"] not in old_keys
        assert j["previous"] is not None and j["previous"]["key"] in old_keys, j
        assert j["status"] == "same" and abs(j["ratio"] - 1) < 1e-9, j
    # The package holds this manifest's kernels only, not the superseded keys' too.
    skip_without_package_info(rep)
    man = json.loads((tmp_path / "pkg" / "MI300X" / "manifest.json").read_text())
    assert sorted(k["job_key"] for k in man["kernels"]) == sorted(j["key"] for j in rep["jobs"])


def craft_previous(cat, job_key, basis, value_ms, device, now_ms, now_basis, now_device):
    """Inserts an older done job with the same identity as `job_key` (another key),
    with a best of `value_ms`, and sets the current job's best to `now_ms`."""
    con = sqlite3.connect(cat)
    con.execute("PRAGMA foreign_keys = ON")
    cols = [r[1] for r in con.execute("PRAGMA table_info(jobs)")]
    job = dict(zip(cols, con.execute("SELECT * FROM jobs WHERE key = ?", (job_key,)).fetchone()))
    old = dict(job, id=None, key="old-" + job_key[:20], created_at=job["created_at"] - 86400,
               started_at=job["created_at"] - 86400, finished_at=job["created_at"] - 86000)
    names = [c for c in cols if c != "id"]
    cur = con.execute(f"INSERT INTO jobs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                      [old[c] for c in names])
    old_id = cur.lastrowid
    best_cand = con.execute("SELECT candidate_id FROM best WHERE job_id = ?", (job["id"],)).fetchone()[0]
    ccols = [r[1] for r in con.execute("PRAGMA table_info(candidates)") if r[1] not in ("id", "parent_id")]
    c = dict(zip(ccols, con.execute(f"SELECT {', '.join(ccols)} FROM candidates WHERE id = ?",
                                    (best_cand,)).fetchone()))
    c["job_id"] = old_id
    cur = con.execute(f"INSERT INTO candidates ({', '.join(ccols)}) VALUES ({', '.join('?' * len(ccols))})",
                      [c[k] for k in ccols])
    con.execute("INSERT INTO best (job_id, candidate_id, basis, value_ms, device, selected_at) "
                "VALUES (?, ?, ?, ?, ?, ?)", (old_id, cur.lastrowid, basis, value_ms, device, old["finished_at"]))
    con.execute("UPDATE best SET basis = ?, value_ms = ?, device = ? WHERE job_id = ?",
                (now_basis, now_ms, now_device, job["id"]))
    con.commit()
    con.close()


def test_report_only_finds_a_measured_regression(nightly, tmp_path):
    cat = tmp_path / "regressed.db"
    shutil.copy(nightly["cat"], cat)
    keys = dict(rows(cat, "SELECT op || ' ' || shape, key FROM jobs"))
    mi300x = "AMD Instinct MI300X"
    # softmax: 1.0 ms measured before, 2.0 ms measured now: a regression.
    craft_previous(cat, keys["softmax [8,64]"], "measured", 1.0, mi300x, 2.0, "measured", mi300x)
    # layernorm: measured before, estimated now: not comparable, never a regression.
    craft_previous(cat, keys["layernorm [8,64]"], "measured", 0.001, mi300x, 5.0, "estimated", None)
    # add 1024: 1.0 -> 0.5 measured: improved. add 2048: 1.0 -> 1.02: same (within 5%).
    craft_previous(cat, keys["add [1024]"], "measured", 1.0, mi300x, 0.5, "measured", mi300x)
    craft_previous(cat, keys["add [2048]"], "measured", 1.0, mi300x, 1.02, "measured", mi300x)
    before = rows(cat, "SELECT COUNT(*) FROM evaluations")[0][0]

    r = kiln("nightly", MANIFEST, "--report-only", "--report", tmp_path / "rep.md", catalog=cat, check=False)
    assert r.returncode == EXIT_REGRESSION, r.stdout + r.stderr
    rep = report(tmp_path / "rep.json")
    by_op = {(j["op"], tuple(j["shape"])): j for j in rep["jobs"]}
    soft = by_op[("softmax", (8, 64))]
    assert soft["status"] == "regression" and soft["regression"] is True
    assert soft["ratio"] == pytest.approx(2.0)
    assert soft["previous"]["ms"] == 1.0 and soft["new"]["ms"] == 2.0
    ln = by_op[("layernorm", (8, 64))]
    assert ln["status"] == "not comparable" and ln["ratio"] is None and ln["regression"] is False
    assert "not comparable" in ln["note"]
    assert by_op[("add", (1024,))]["status"] == "improved"
    assert by_op[("add", (2048,))]["status"] == "same"
    assert rep["regressions"] == ["softmax 8x64 fp32 MI300X"]
    md = (tmp_path / "rep.md").read_text()
    assert "1 regression(s)" in md and "softmax 8x64 fp32 MI300X" in md
    assert "not comparable" in md
    assert "softmax 8x64 fp32 MI300X" in r.stdout  # the Markdown goes to stdout too
    # The report step reads only.
    assert rows(cat, "SELECT COUNT(*) FROM evaluations")[0][0] == before

    # A looser threshold: 2x slower is within 150%: exit 0.
    r = kiln("nightly", MANIFEST, "--report-only", "--threshold", "1.5", "--json", catalog=cat, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["summary"]["regressions"] == 0


def test_nightly_help_and_usage_errors(tmp_path):
    r = kiln("nightly", "--help", catalog=tmp_path / "none.db")
    assert "usage: kiln nightly" in r.stdout and "Exit codes" in r.stdout
    assert "--report-only" not in r.stdout  # hidden
    r = kiln("nightly", MANIFEST, "--threshold", "-1", catalog=tmp_path / "none.db", check=False)
    assert r.returncode == 2
    r = kiln("nightly", MANIFEST, "--report-only", catalog=tmp_path / "none.db", check=False)
    assert r.returncode == 1 and "no catalog" in r.stderr
    assert not (tmp_path / "none.db").exists()


def test_metrics_file_marks_the_regressed_kernel(nightly, tmp_path):
    """--metrics-file: kiln_nightly_kernel_regressed is 1 for the regressed kernel
    alone (what configs/prometheus/alerts.yml alerts on), and the file passes
    `promtool check metrics`."""
    cat = tmp_path / "regressed.db"
    shutil.copy(nightly["cat"], cat)
    keys = dict(rows(cat, "SELECT op || ' ' || shape, key FROM jobs"))
    mi300x = "AMD Instinct MI300X"
    craft_previous(cat, keys["softmax [8,64]"], "measured", 1.0, mi300x, 2.0, "measured", mi300x)
    prom = tmp_path / "nightly.prom"
    r = kiln("nightly", MANIFEST, "--report-only", "--metrics-file", prom, "--report", tmp_path / "rep.md",
             catalog=cat, check=False)
    assert r.returncode == EXIT_REGRESSION, r.stdout + r.stderr
    text = prom.read_text()
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's `prometheus` package (scripts/setup.sh)"
    chk = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert chk.returncode == 0 and not chk.stdout.strip(), chk.stdout + chk.stderr
    flags = {}
    for line in text.splitlines():
        if line.startswith("kiln_nightly_kernel_regressed{"):
            labels, value = line[len("kiln_nightly_kernel_regressed{"):].rsplit("} ", 1)
            l = dict(kv.split("=", 1) for kv in labels.split('",'))
            flags[(l["op"].strip('"'), l["shape"].strip('"'))] = (l["status"].strip('"'), float(value))
    assert len(flags) == len(report(tmp_path / "rep.json")["jobs"]) == 4, flags  # one per kernel of the manifest
    assert flags[("softmax", "8x64")] == ("regression", 1.0)
    assert all(v == 0.0 for k, (_, v) in flags.items() if k != ("softmax", "8x64")), flags
    assert "\nkiln_nightly_regressions 1\n" in text
    assert 'kiln_nightly_kernel_latency_seconds{op="softmax",shape="8x64",dtype="fp32",target="MI300X",basis="measured"} 0.002\n' in text
