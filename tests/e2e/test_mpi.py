"""End-to-end tests of the MPI launcher (kiln-mpi) on this machine's CPU.

Open MPI's mpirun starts 3 ranks (oversubscribed): rank 0 coordinates and
writes the catalog, ranks 1 and 2 evaluate with real Python workers under the
Triton interpreter. Covered: a small manifest spread over both worker ranks,
a worker rank SIGKILLed mid-run (its work requeued, the batch completes, no
candidate evaluated twice), SIGTERM to mpirun mid-run (drain: exit 130, jobs
back in the queue, a second run finishes), checkpoints, the no-op evaluator,
usage errors.

The binaries are found next to KILN_BIN (default build/kiln): kiln-mpi and the
kiln-mpirun wrapper (mpirun --enable-recovery, rank 0's exit code passed on).
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import KILN, ROOT  # noqa: E402
from conftest import kiln as run_kiln  # noqa: E402

KILN_MPI = KILN.parent / "kiln-mpi"
KILN_MPIRUN = KILN.parent / "kiln-mpirun"
SMALL = ROOT / "tests" / "data" / "manifests" / "mpi_small.yaml"

# Skipped without Open MPI, unless KILN_REQUIRE_MPI is set (then it fails: CI installs it).
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None and not os.environ.get("KILN_REQUIRE_MPI"),
                                reason="Open MPI (mpirun) is not installed")


def session_base(catalog) -> str:
    """A short directory of Open MPI's session trees for the runs on one catalog."""
    import hashlib
    d = Path("/tmp") / ("kiln-ompi-" + hashlib.sha256(str(Path(catalog).resolve()).encode()).hexdigest()[:12])
    d.mkdir(exist_ok=True)
    return str(d)


def mpi_env(catalog, **extra):
    e = dict(os.environ, KILN_CATALOG=str(catalog))
    # Open MPI 4 keeps its session directories under one per-user tree in /tmp;
    # two mpiruns starting at once on one node race on it (open-mpi/ompi#8510:
    # "A call to mkdir was unable to create the desired directory"), and the
    # tests run in parallel. Each test's runs get a tree of their own, with a
    # short path (PMIx puts its rendezvous files there; a Unix socket's path
    # is limited to 107 bytes).
    e.update({
        "OMPI_MCA_orte_tmpdir_base": session_base(catalog),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
        "OMPI_MCA_btl": "self,vader",
        # Containers often forbid the cross-process memory copy (CMA) vader uses.
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    })
    e.update(extra)
    return e


def kiln(*args, catalog, check=True, timeout=300):
    return run_kiln(*args, check=check, timeout=timeout, base_env=mpi_env(catalog))


def longer_manifest(tmp, softmax_shapes="[[4, 64], [8, 64], [4, 128]]"):
    """mpi_small grown to 2 add jobs of 6 candidates and softmax jobs of 12 (48
    candidates by default), so that a signal or a kill lands mid-run even when
    evaluations are fast (~0.1 s each on an idle machine)."""
    man = tmp / "mpi_longer.yaml"
    man.write_text(SMALL.read_text().replace("max_candidates: 3", "max_candidates: 12")
                   .replace("input_shape: [256]", "shapes: [[256], [512]]")
                   .replace("input_shape: [4, 64]", f"shapes: {softmax_shapes}"))
    return man


def mpirun_cmd(np, *args):
    return [str(KILN_MPIRUN), "--oversubscribe", "-np", str(np), str(KILN_MPI), "run", *map(str, args)]


def start(cmd, env, **kw):
    """kiln-mpirun in its own session, so that kill_tree() reaches mpirun and every rank."""
    return subprocess.Popen(cmd, env=env, start_new_session=True, text=True, **kw)


def kill_tree(proc):
    """Whatever is left of the run's session (nothing, when it ended well)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_mpi(cmd, env, timeout):
    """subprocess.run for kiln-mpirun: on a timeout the whole tree goes, not only the wrapper."""
    proc = start(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def submit_text(tmp, manifest):
    """A catalog tmp/kiln.db with `manifest` (YAML text, written to tmp/m.yaml) submitted."""
    catalog = tmp / "kiln.db"
    (tmp / "m.yaml").write_text(manifest)
    kiln("submit", tmp / "m.yaml", catalog=catalog)
    return catalog


def run_ok(np, *args, env, timeout):
    """kiln-mpirun over `np` ranks with --json and `args`, which must exit 0: its summary."""
    r = run_mpi(mpirun_cmd(np, "--json", *args), env, timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return summary_of(r.stdout)


def db_rows(catalog, sql):
    con = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def summary_of(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    assert lines, f"no JSON summary on stdout:\n{stdout}"
    return json.loads(lines[-1])


def wait_for(pred, timeout, proc=None, what=""):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}")
        try:
            if pred():
                return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def evaluations(catalog):
    try:
        return db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0]
    except sqlite3.OperationalError:
        return 0


def assert_each_candidate_once(catalog):
    n_cand = db_rows(catalog, "SELECT COUNT(*) FROM candidates")[0][0]
    n_eval = db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0]
    distinct = db_rows(catalog, "SELECT COUNT(DISTINCT candidate_id) FROM evaluations")[0][0]
    assert n_eval == distinct == n_cand > 0, (n_cand, n_eval, distinct)


def worker_ranks(catalog):
    """The ranks named in evaluations.worker ("rank R pid P"), with their counts."""
    out = {}
    for (w,) in db_rows(catalog, "SELECT worker FROM evaluations"):
        parts = w.split()
        assert parts[0] == "rank" and parts[2] == "pid", w
        out[int(parts[1])] = out.get(int(parts[1]), 0) + 1
    return out


def rank_pid(scratch, rank):
    info = scratch / f"rank-{rank}" / "rank.json"
    return json.loads(info.read_text())["pid"]


def child_pids(pid):
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


@pytest.fixture(scope="module")
def binaries():
    if shutil.which("mpirun") is None:
        pytest.fail("KILN_REQUIRE_MPI is set but mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)")
    for b in (KILN, KILN_MPI, KILN_MPIRUN):
        if not b.exists():
            pytest.fail(f"{b} is missing: build first (cmake --build build --target kiln kiln-mpi)")
    return KILN_MPI


@pytest.fixture()
def submitted(binaries, tmp_path):
    catalog = tmp_path / "local" / "kiln.db"
    catalog.parent.mkdir()
    sub = json.loads(kiln("submit", SMALL, "--json", catalog=catalog).stdout)
    assert sub["new_jobs"] == sub["jobs"] == 2
    return catalog, tmp_path


# --- a whole run over 3 ranks -------------------------------------------------------

def test_three_ranks_finish_the_batch_on_both_worker_ranks(submitted):
    catalog, tmp = submitted
    shared = tmp / "shared" / "kiln.db"
    s = run_ok(3, "--scratch", tmp / "scratch", "--checkpoint-to", shared, "--checkpoint-every", "2",
               env=mpi_env(catalog), timeout=300)
    assert s["jobs_done"] == 2 and s["jobs_failed"] == 0 and s["interrupted"] is False, s
    assert s["worker_ranks"] == 2 and s["ranks_ready"] == 2 and s["ranks_lost"] == 0, s
    assert dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state")) == {"done": 2}
    assert_each_candidate_once(catalog)
    # Self-scheduled over both worker ranks; rank 0 evaluates nothing.
    ranks = worker_ranks(catalog)
    assert set(ranks) == {1, 2}, ranks
    # Code objects came through the messages into rank 0's catalog.
    assert db_rows(catalog, "SELECT COUNT(*) FROM artifacts")[0][0] == s["candidates"] - s["candidate_failures"]
    # The checkpoint is a complete, self-contained copy that kiln reads where it lies.
    assert s["checkpoints"] >= 1 and shared.exists()
    assert not Path(str(shared) + ".tmp").exists() and not Path(str(shared) + "-wal").exists()
    assert db_rows(shared, "PRAGMA journal_mode")[0][0] == "delete"
    best = json.loads(kiln("best", "--json", catalog=shared).stdout)
    assert [b["state"] for b in best] == ["done", "done"], best
    assert all(b["code_object"]["kind"] == "hsaco" for b in best), best


# --- a worker rank killed mid-run ----------------------------------------------------

def test_killed_worker_rank_is_requeued_and_batch_completes(binaries, tmp_path):
    tmp = tmp_path
    catalog = tmp / "kiln.db"
    # 84 candidates: rank 0 records evaluations in batches, so rank 2's first one
    # may land late; with 36 the run was sometimes over by then (rank 2 done,
    # nothing lost) on a loaded machine.
    kiln("submit", longer_manifest(tmp, "[[4, 64], [8, 64], [4, 128], [8, 128], [16, 64], [4, 256]]"),
         catalog=catalog)
    scratch = tmp / "scratch"
    log = open(tmp / "run.log", "w")
    proc = start(mpirun_cmd(3, "--json", "--scratch", scratch, "--heartbeat-interval", "1",
                            "--heartbeat-timeout", "5", "--prefetch", "1"),
                 mpi_env(catalog), stdout=subprocess.PIPE, stderr=log)
    try:
        # Once rank 2 has recorded an evaluation (it holds its next items then).
        wait_for(lambda: worker_ranks(catalog).get(2, 0) >= 1, 180, proc, "rank 2's first evaluation")
        victim = rank_pid(scratch, 2)
        evaluators = child_pids(victim)
        os.kill(victim, signal.SIGKILL)
        out, _ = proc.communicate(timeout=400)
    finally:
        kill_tree(proc)
        log.close()
    stderr = (tmp / "run.log").read_text()
    assert proc.returncode == 0, out + stderr
    s = summary_of(out)
    assert s["ranks_lost"] == 1 and s["items_requeued"] >= 1, s
    assert "rank 2 lost" in stderr, stderr
    assert s["jobs_done"] == 8, s
    assert dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state")) == {"done": 8}
    assert_each_candidate_once(catalog)
    assert set(worker_ranks(catalog)) == {1, 2}
    # The killed rank's evaluators died with it (PR_SET_PDEATHSIG).
    for pid in evaluators:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]


# --- SIGTERM to mpirun mid-run, then resume --------------------------------------------

def test_sigterm_to_mpirun_drains_and_next_run_resumes(binaries, tmp_path):
    tmp = tmp_path
    catalog = tmp / "kiln.db"
    # 84 candidates; the signal goes 1 s after the first claim, while the first
    # candidates are out with the ranks. (Waiting for recorded evaluations was
    # a race: rank 0 writes them in batches, and once evaluations got faster
    # the first batch landed when the run was nearly over.)
    kiln("submit", longer_manifest(tmp, "[[4, 64], [8, 64], [4, 128], [8, 128], [16, 64], [4, 256]]"),
         catalog=catalog)
    scratch = tmp / "scratch"
    log = open(tmp / "run1.log", "w")
    proc = start(mpirun_cmd(3, "--json", "--scratch", scratch), mpi_env(catalog), stdout=subprocess.PIPE,
                 stderr=log)
    try:
        wait_for(lambda: db_rows(catalog, "SELECT COUNT(*) FROM jobs WHERE state = 'running'")[0][0] >= 1,
                 180, proc, "the first claim")
        time.sleep(1.0)
        mpirun = [p for p in child_pids(proc.pid)]
        assert mpirun, "mpirun not found under kiln-mpirun"
        for p in mpirun:
            os.kill(p, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
        log.close()
    stderr = (tmp / "run1.log").read_text()
    assert proc.returncode == 130, out + stderr
    assert "draining" in stderr, stderr
    states = dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))
    assert "running" not in states and states.get("queued", 0) >= 1, states
    assert db_rows(catalog, "SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL")[0][0] == 0
    first = evaluations(catalog)

    s = run_ok(3, "--scratch", scratch, env=mpi_env(catalog), timeout=300)
    assert dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state")) == {"done": 8}
    assert_each_candidate_once(catalog)
    assert s["candidates"] == evaluations(catalog) - first


# --- evaluator timeouts on worker ranks ------------------------------------------------

def test_evaluator_timeouts_are_recorded_and_ranks_carry_on(binaries, tmp_path):
    # 50 ms is far too short for any evaluation: each one times out, the rank
    # kills and restarts its evaluator, the candidate is recorded as a timeout.
    catalog = submit_text(tmp_path, "targets: [MI300X]\ndefaults:\n  dtypes: [fp32]\n"
                                    "  exploration: {strategy: exhaustive, max_candidates: 3, timeout_s: 0.05}\n"
                                    "operators:\n  - op: add\n    input_shape: [256]\n")
    s = run_ok(3, "--scratch", tmp_path / "scratch", env=mpi_env(catalog), timeout=300)
    assert s["ranks_lost"] == 0 and s["candidates"] == 3 and s["candidate_failures"] == 3, s
    assert db_rows(catalog, "SELECT DISTINCT status FROM evaluations") == [("timeout",)]
    assert_each_candidate_once(catalog)
    state, message = db_rows(catalog, "SELECT state, message FROM jobs")[0]
    assert state == "failed" and "3 timeout" in message, message


# --- quick ones: no Python evaluator -------------------------------------------------

def test_noop_evaluator_many_candidates_three_ranks(binaries, tmp_path):
    catalog = submit_text(tmp_path, "targets: [MI300X]\ndefaults:\n  dtypes: [fp32]\n"
                                    "  exploration: {strategy: exhaustive, max_candidates: 500}\n"
                                    "operators:\n  - op: add\n    shapes: [[1024], [2048]]\n")
    s = run_ok(3, "--noop-evaluator", "--noop-space", 300, "--workers", 2, "--scratch", tmp_path / "scratch",
               env=mpi_env(catalog), timeout=120)
    assert s["candidates"] == 600 and s["jobs_done"] == 2, s
    assert_each_candidate_once(catalog)
    assert set(worker_ranks(catalog)) == {1, 2}


def test_one_rank_with_coordinator_slots(binaries, tmp_path):
    catalog = submit_text(tmp_path, "targets: [H200]\noperators:\n  - op: softmax\n    shapes: [[4, 8]]\n"
                                    "    dtypes: [fp16]\n")
    run_ok(1, "--noop-evaluator", "--noop-space", 20, "--coordinator-slots", 2, "--scratch", tmp_path / "scratch",
           env=mpi_env(catalog), timeout=120)
    assert set(worker_ranks(catalog)) == {0}
    assert_each_candidate_once(catalog)


def test_one_rank_without_slots_is_a_usage_error(binaries, tmp_path):
    r = run_mpi(mpirun_cmd(1, "--catalog", tmp_path / "kiln.db"), mpi_env(tmp_path / "kiln.db"), 60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--coordinator-slots" in r.stderr


def test_help_and_usage_errors(binaries, tmp_path):
    for args in (["--help"], ["run", "--help"]):
        r = subprocess.run([str(KILN_MPI), *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "usage: kiln-mpi run" in r.stdout, r.stderr
    r = subprocess.run([str(KILN_MPI), "run", "--help"], capture_output=True, text=True, timeout=30)
    for opt in ["--catalog", "--batch", "--workers", "--device", "--lease", "--scratch", "--json", "--verbose",
                "--checkpoint-to", "--checkpoint-every", "--heartbeat-timeout", "--coordinator-slots"]:
        assert opt in r.stdout, opt
    assert "--noop-evaluator" not in r.stdout  # testing only
    r = subprocess.run([str(KILN_MPI), "run", "--workers", "0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--workers" in r.stderr
    # the scheduling flags and their checks are kiln run's (explore/scheduling_flags.h)
    for flag, message in [(["--ready-per-slot", "-1"], "--ready-per-slot must be 0 or more"),
                          (["--bench-cutoff", "0.5"], "--bench-cutoff must be 0 (off) or at least 1"),
                          (["--lease", "0"], "--lease must be positive")]:
        r = subprocess.run([str(KILN_MPI), "run", "--catalog", str(tmp_path / "k.db"), *flag],
                           capture_output=True, text=True, timeout=30, env=mpi_env(tmp_path / "k.db"))
        assert r.returncode == 2 and message in r.stderr, (flag, r.stderr)
    r = subprocess.run([str(KILN_MPI), "frobnicate"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2


def test_hostile_worker_replies_under_mpi(binaries, tmp_path):
    # The scripted evaluator (tests/data/fake_evaluator) on the worker ranks:
    # every candidate names a file outside the run as its code object, and two
    # answer malformed replies. The rank reads and deletes nothing outside its
    # slot directory, each candidate fails alone, the run ends normally.
    outside = tmp_path / "precious.bin"
    outside.write_bytes(b"the user's file\n")
    catalog = submit_text(tmp_path, "targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
                                    "  exploration: {strategy: exhaustive, max_candidates: 4}\n"
                                    "operators:\n  - op: add\n    input_shape: [4096]\n")
    fake = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"
    env = mpi_env(catalog, KILN_PYTHON=str(fake), FAKE_EVALUATOR_LOG=str(tmp_path / "log.jsonl"),
                  FAKE_ARTIFACT_PATH=str(outside), FAKE_MALFORMED="result_string,ok_string")
    run_ok(3, "--device", "gpu", "--scratch", tmp_path / "scratch", env=env, timeout=300)
    assert outside.read_bytes() == b"the user's file\n"
    rows = dict(db_rows(catalog, "SELECT json_extract(c.config, '$.BLOCK'), e.status || ': ' || e.message "
                                 "FROM evaluations e JOIN candidates c ON c.id = e.candidate_id"))
    assert sorted(rows) == [64, 128, 192, 256], rows
    for b in (128, 192):
        assert rows[b].startswith("crash: infrastructure fault: malformed worker reply"), rows
    for b in (64, 256):
        assert rows[b].startswith("crash: ") and "outside the evaluation's artifact directory" in rows[b], rows
    assert db_rows(catalog, "SELECT COUNT(*) FROM artifacts") == [(0,)]
    assert_each_candidate_once(catalog)
