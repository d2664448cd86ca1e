"""End-to-end tests of the `kiln` binary on this machine's CPU (Triton interpreter).

They drive the real CLI on a real SQLite catalog with real Python workers:
the quickstart manifest with a `kill -9` of `kiln run` midway and a resumed run,
bad manifests, read-only queries, best and package.

KILN_BIN names the binary (default: build/kiln).
"""
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import KILN, ROOT, db_rows, kiln  # noqa: E402

QUICKSTART = ROOT / "jobs" / "quickstart.yaml"

AMD_MACHINE = 224


FAKE_EVALUATOR = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"
# `kiln package` with the scripted evaluator answering package_info (launches
# derived from each request): packaging a real catalog whatever the worker has.
FAKE_PACKAGE_INFO = {"KILN_PYTHON": str(FAKE_EVALUATOR)}
NO_PACKAGE_INFO = "no package_info method"  # kiln package's error while the worker lacks it


def run_fake_evaluator(tmp, manifest_text, *run_args):
    """Submits `manifest_text` to a catalog in tmp and runs `kiln run --device gpu
    RUN_ARGS` against the scripted evaluator (tests/data/fake_evaluator: claims
    to be an H200, logs each evaluate request). Returns (catalog, the logged
    requests, the run's JSON summary)."""
    catalog = tmp / "kiln.db"
    man = tmp / "m.yaml"
    man.write_text(manifest_text)
    kiln("submit", man, catalog=catalog)
    log = tmp / "requests.jsonl"
    r = kiln("run", "--device", "gpu", *run_args, "--scratch", tmp / "s", "--json", catalog=catalog,
             env={"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(log)})
    reqs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return catalog, reqs, json.loads(r.stdout.splitlines()[-1])


def worker_pids_with(marker):
    """PIDs of live processes whose environment mentions `marker` (our scratch dir)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if marker.encode() in (p / "environ").read_bytes():
                stat = (p / "stat").read_text()
                if stat.split(")")[-1].split()[0] != "Z":
                    pids.append(int(p.name))
        except OSError:
            continue
    return pids


def file_digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).exists() else None


# --- the quickstart, killed midway and resumed ------------------------------------

@pytest.fixture(scope="module")
def quickstart(binary, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quickstart")
    catalog = tmp / "kiln.db"
    scratch = tmp / "scratch"
    out = kiln("submit", QUICKSTART, "--json", catalog=catalog)
    sub = json.loads(out.stdout)
    assert sub["new_jobs"] == sub["jobs"] > 0

    # First run: kill -9 once some candidates are recorded but before the end.
    log = open(tmp / "run1.log", "w")
    proc = subprocess.Popen([str(KILN), "run", "--workers", "2", "--scratch", str(scratch)],
                            stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, KILN_CATALOG=str(catalog)))
    deadline = time.time() + 600
    evaluated = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:
            evaluated = db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0]
        except sqlite3.OperationalError:
            continue
        if evaluated >= 3:
            break
    assert proc.poll() is None, "kiln run finished before it could be killed: make the quickstart larger"
    workers_before = worker_pids_with(str(scratch))
    assert workers_before, "no worker processes found while kiln run was running"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    log.close()
    killed_at = evaluated
    # PR_SET_PDEATHSIG: the workers die with their engine.
    for _ in range(50):
        left = worker_pids_with(str(scratch))
        if not left:
            break
        time.sleep(0.1)
    orphans = worker_pids_with(str(scratch))

    states = dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))
    evaluated_after_kill = db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0]

    # Second run: picks the dead run's jobs up at once (its lease owner's pid is gone).
    r2 = kiln("run", "--workers", "2", "--json", "--scratch", scratch, catalog=catalog)
    summary = json.loads(r2.stdout)
    return dict(catalog=catalog, tmp=tmp, jobs=sub["jobs"], killed_at=killed_at,
                orphans=orphans, states_after_kill=states,
                evaluated_after_kill=evaluated_after_kill, summary=summary, run2=r2,
                batch=sub["batch"])


def test_kill9_leaves_no_worker(quickstart):
    assert quickstart["orphans"] == []


def test_kill9_left_unfinished_jobs(quickstart):
    s = quickstart["states_after_kill"]
    assert s.get("done", 0) < quickstart["jobs"], s


def test_resumed_run_finishes_every_job(quickstart):
    rows = db_rows(quickstart["catalog"], "SELECT state, COUNT(*) FROM jobs GROUP BY state")
    assert dict(rows) == {"done": quickstart["jobs"]}, rows
    assert quickstart["summary"]["interrupted"] is False


def test_run_reports_the_workers_start_up(quickstart):
    # the slowest worker's start to its hello, and the steps it reported
    s = quickstart["summary"]
    assert 0 < s["workers_ready_s"] < s["wall_s"], s
    line = [ln for ln in quickstart["run2"].stderr.splitlines() if "workers ready: the last after" in ln]
    assert len(line) == 1 and "imports" in line[0], quickstart["run2"].stderr[-2000:]


def test_run_reports_its_first_results(quickstart):
    # once both workers have answered their first evaluation: when, and where
    # their time went, before the run's last line
    err = quickstart["run2"].stderr.splitlines()
    first = [i for i, ln in enumerate(err) if "first results: the first after" in ln]
    assert len(first) == 1, quickstart["run2"].stderr[-3000:]
    line = err[first[0]]
    assert re.search(r"\([12] of 2 workers\)", line) and "in the worker" in line and "compile" in line, line
    assert "plan" in line, line  # a fresh worker plans the job it is given first
    assert first[0] < max(i for i, ln in enumerate(err) if "finished:" in ln)


def test_no_candidate_evaluated_twice(quickstart):
    cat = quickstart["catalog"]
    n_cand = db_rows(cat, "SELECT COUNT(*) FROM candidates")[0][0]
    n_eval = db_rows(cat, "SELECT COUNT(*) FROM evaluations")[0][0]
    distinct = db_rows(cat, "SELECT COUNT(DISTINCT candidate_id) FROM evaluations")[0][0]
    assert n_eval == distinct == n_cand
    # The resumed run evaluated exactly the candidates the first run had not recorded.
    assert quickstart["summary"]["candidates"] == n_eval - quickstart["evaluated_after_kill"]


def test_best_has_correct_kernel_and_real_code_objects(quickstart):
    rows = json.loads(kiln("best", "--json", catalog=quickstart["catalog"]).stdout)
    assert len(rows) == quickstart["jobs"]
    for r in rows:
        assert r["state"] == "done", r
        assert r["basis"] in ("measured", "estimated"), r
        assert r["max_rel_err"] is not None
        co = r["code_object"]
        if r["arch"].startswith("gfx"):
            assert co["kind"] == "hsaco"
            assert co["elf_machine"] == "AMDGPU", co
            assert co["gfx"] == r["arch"], co
            assert co["note_target"] == "amdgcn-amd-amdhsa--" + r["arch"], co
            assert r["basis"] == "estimated"  # no AMD GPU here
        else:
            assert co["kind"] == "cubin" and co["elf_machine"] == "CUDA", co


def test_submit_estimates_each_jobs_compile_time_for_the_claim_order(quickstart):
    # A fresh catalog has no compile history: each job's estimate is its
    # candidates (max_candidates 4 here, every space is larger) times its
    # operator's compile_s in kernels/operators.yaml.
    ops = yaml.safe_load((ROOT / "kernels" / "operators.yaml").read_text())["operators"]
    rows = db_rows(quickstart["catalog"], "SELECT op, compile_est_s FROM jobs")
    assert len(rows) == quickstart["jobs"]
    for op, est in rows:
        assert est == pytest.approx(4 * ops[op]["compile_s"]), (op, est)
    assert max(rows, key=lambda r: r[1])[0] == "conv2d"


def test_best_text_labels_estimates(quickstart):
    out = kiln("best", catalog=quickstart["catalog"]).stdout
    assert "estimated" in out


def test_resubmit_adds_nothing_and_rerun_evaluates_nothing(quickstart):
    cat = quickstart["catalog"]
    again = json.loads(kiln("submit", QUICKSTART, "--json", catalog=cat).stdout)
    assert again["new_jobs"] == 0 and again["batch"] == quickstart["batch"]
    r = json.loads(kiln("run", "--json", catalog=cat).stdout)
    assert r["candidates"] == 0


def test_query_is_read_only(quickstart):
    cat = quickstart["catalog"]
    before = file_digest(cat)
    for sql in ["DELETE FROM jobs", "UPDATE jobs SET state='queued'", "DROP TABLE jobs",
                "SELECT 1; DELETE FROM jobs", "PRAGMA user_version = 0"]:
        r = kiln("query", sql, catalog=cat, check=False)
        assert r.returncode != 0, sql
    n = json.loads(kiln("query", "SELECT COUNT(*) AS n FROM jobs", "--json", catalog=cat).stdout)
    assert n == [{"n": quickstart["jobs"]}]
    csv = kiln("query", "SELECT op, state FROM jobs ORDER BY id", "--csv", catalog=cat).stdout
    assert csv.splitlines()[0] == "op,state"
    assert file_digest(cat) == before


def test_package_writes_checked_bundle(quickstart, tmp_path):
    out = tmp_path / "mi300x"
    kiln("package", "--target", "MI300X", "--out", out, catalog=quickstart["catalog"], env=FAKE_PACKAGE_INFO)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "kiln-package/2"
    assert [(t["name"], t["arch"], t["target_id"]) for t in manifest["targets"]] == \
        [("MI300X", "gfx942", "amdgcn-amd-amdhsa--gfx942")]
    assert manifest["kernels"]
    for k in manifest["kernels"]:
        assert k["tensors"]
        for v in k["variants"]:
            data = (out / v["file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == v["sha256"]
            assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == AMD_MACHINE
            assert v["kernel_name"] and v["args"] and v["grid"] and v["num_warps"]
            assert (out / v["verify"]).is_file()
            # the hidden scratch arguments' sizes travel with the kernel (none of ours needs any)
            assert v["profile_scratch_size"] == 0 and v["global_scratch_size"] == 0
        assert [v["rank"] for v in k["variants"]][0] == 0
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    # A second package into the same place needs --force.
    r = kiln("package", "--target", "MI300X", "--out", out, catalog=quickstart["catalog"], check=False,
             env=FAKE_PACKAGE_INFO)
    assert r.returncode != 0 and "--force" in r.stderr


# --- bad manifests -------------------------------------------------------------------

BAD = {
    "syntax": ("targets: [MI300X]\noperators:\n  - op: softmax\n    shapes: [[4, 8]]\n    dtypes: [fp32]]\n", ":5:19:"),
    "unknown_op": ("targets: [MI300X]\noperators:\n  - op: sofmax\n    shapes: [[4, 8]]\n    dtypes: [fp32]\n", ":3:"),
    "unknown_target": ("targets: [MI999]\noperators:\n  - op: softmax\n    shapes: [[4, 8]]\n    dtypes: [fp32]\n", ":1:"),
    "wrong_rank": ("targets: [MI300X]\noperators:\n  - op: softmax\n    shapes: [[4, 8, 2]]\n    dtypes: [fp32]\n", ":4:"),
    "negative": ("targets: [MI300X]\noperators:\n  - op: softmax\n    shapes: [[4, -8]]\n    dtypes: [fp32]\n", ":4:"),
    "zero": ("targets: [MI300X]\noperators:\n  - op: softmax\n    input_shape: [0, 8]\n    dtypes: [fp32]\n", ":4:"),
    "unknown_key": ("targets: [MI300X]\noperators:\n  - op: softmax\n    shapes: [[4, 8]]\n    dtypes: [fp32]\n    blocksize: 4\n", ":6:"),
    "wrong_type": ("targets: [MI300X]\noperators:\n  - op: softmax\n    shapes: [[4, 8]]\n    dtypes: [fp32]\n    benchmark: {runs: many}\n", ":6:"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_manifest_exit_2_catalog_untouched(binary, tmp_path, name):
    text, where = BAD[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    catalog = tmp_path / "kiln.db"
    r = kiln("submit", path, catalog=catalog, check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith(f"{path}{where}"), first
    assert not catalog.exists(), "a rejected manifest must not create or touch the catalog"


def test_bad_manifest_leaves_existing_catalog_unchanged(binary, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("targets: [MI300X]\noperators:\n  - op: softmax\n    shapes: [[4, 8]]\n    dtypes: [fp32]\n")
    catalog = tmp_path / "kiln.db"
    kiln("submit", good, catalog=catalog)
    before = db_rows(catalog, "SELECT COUNT(*) FROM jobs")[0][0], file_digest(catalog)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD["unknown_op"][0])
    assert kiln("submit", bad, catalog=catalog, check=False).returncode == 2
    assert (db_rows(catalog, "SELECT COUNT(*) FROM jobs")[0][0], file_digest(catalog)) == before


def test_every_command_has_help(binary, tmp_path):
    for cmd in ["submit", "run", "status", "best", "query", "package", "lineage", "merge", "nightly",
                "import-measurements", "retry"]:
        r = kiln(cmd, "--help", catalog=tmp_path / "none.db")
        assert "usage: kiln " + cmd in r.stdout
    assert not (tmp_path / "none.db").exists()


def test_missing_python_dependency_says_how_to_install(binary, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("targets: [MI300X]\noperators:\n  - op: softmax\n    shapes: [[4, 8]]\n    dtypes: [fp32]\n")
    # A Python whose path hides torch: the worker must name the fix.
    fake = tmp_path / "site"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('No module named torch (simulated)')\n")
    r = kiln("submit", good, catalog=tmp_path / "kiln.db", check=False,
             env={"PYTHONPATH": str(fake)})
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "pip install" in r.stderr
    assert not (tmp_path / "kiln.db").exists()


# --- claim order and GPU spreading ---------------------------------------------

def test_jobs_are_claimed_most_expensive_first(binary, tmp_path):
    """submit sizes every job (roofline ms on its target); run claims the
    biggest first, so a batch does not end with a big job running alone."""
    m = tmp_path / "order.yaml"
    m.write_text("name: order\ntargets: [H200]\n"
                 "defaults:\n  exploration: {strategy: exhaustive, max_candidates: 1}\n"
                 "operators:\n"
                 "  - {op: add, input_shape: [64], dtype: fp32}\n"
                 "  - {op: matmul, input_shape: [64, 64, 64], dtype: fp16}\n"
                 "  - {op: softmax, input_shape: [16, 64], dtype: fp32}\n")
    catalog = tmp_path / "kiln.db"
    kiln("submit", m, catalog=catalog)
    rows = db_rows(catalog, "SELECT op, priority FROM jobs ORDER BY id")
    prio = dict(rows)
    assert all(p > 0 for p in prio.values()), rows
    # bytes / bandwidth vs flops / peak on an H200: the matmul is the biggest
    assert prio["matmul"] > prio["softmax"] > prio["add"], rows
    kiln("run", "--workers", "1", "--device", "cpu", catalog=catalog, timeout=600)
    started = [op for op, in db_rows(catalog, "SELECT op FROM jobs ORDER BY started_at")]
    assert started == ["matmul", "softmax", "add"]


def test_gpus_spread_workers_and_reach_them(binary, tmp_path):
    """--gpus 2 on a node that says it has two GPUs: worker i is bound to GPU
    i mod 2 (the workers report what they were given; a mismatch stops the
    run), and the summary names both GPUs. On this CPU machine the workers
    still run the interpreter."""
    m = tmp_path / "two.yaml"
    m.write_text("name: two\ntargets: [MI300X]\n"
                 "defaults:\n  exploration: {strategy: exhaustive, max_candidates: 2}\n"
                 "operators:\n  - {op: add, shapes: [[64], [96]], dtype: fp32}\n")
    catalog = tmp_path / "kiln.db"
    kiln("submit", m, catalog=catalog)
    env = {"KILN_GPUS_PER_NODE": "2", "KILN_GPU_VENDOR": "nvidia", "CUDA_VISIBLE_DEVICES": "4,7"}
    r = kiln("run", "--gpus", "2", "--workers", "2", "--json", catalog=catalog, env=env, timeout=600)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["jobs_done"] == 2 and summary["gpus"] == ["4", "7"], summary
    assert "2 workers over 2 GPUs" in r.stderr
    # each evaluation names its evaluator's GPU
    con = sqlite3.connect(catalog)
    workers = [w for (w,) in con.execute("SELECT worker FROM evaluations")]
    con.close()
    assert workers and all(re.fullmatch(r"pid \d+ gpu [47]", w) for w in workers), workers
    # a count above the node's GPUs, or an id it does not have: usage errors
    for bad, why in (("3", "has 2 GPU"), ("4,5", "no GPU 5")):
        r = kiln("run", "--gpus", bad, catalog=catalog, env=env, check=False)
        assert r.returncode == 2 and why in r.stderr, (bad, r.stderr)
