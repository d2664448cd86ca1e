"""End-to-end tests of scripts/slurm/ on a real single-node Slurm cluster.

The module starts its own cluster with scripts/slurm/local-cluster.sh (munged,
slurmctld and slurmd from Debian's slurm-wlm and munge packages, state in a temp
dir) and stops it at the end. It submits with `sbatch --wait`, which returns the
job's exit code, and checks the catalogs the jobs publish on "shared storage"
(a directory of this machine standing in for it).

Skipped only when slurm-wlm is not installed AND KILN_REQUIRE_SLURM is unset;
scripts/test.sh sets KILN_REQUIRE_SLURM=1, so CI cannot skip it silently.

KILN_BIN names the kiln binary (default: build/kiln); kiln-mpi is looked for
beside it.
"""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import db_rows as rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", ROOT / "build" / "kiln")).resolve()
KILN_MPI = KILN.parent / "kiln-mpi"
CLUSTER = ROOT / "scripts" / "slurm" / "local-cluster.sh"
SBATCH = ROOT / "scripts" / "slurm" / "kiln.sbatch"
ARRAY = ROOT / "scripts" / "slurm" / "array.sbatch"
NIGHTLY = ROOT / "scripts" / "slurm" / "nightly.sbatch"
MANIFEST = ROOT / "tests" / "data" / "manifests" / "slurm_small.yaml"
JOB_TIMEOUT = 600


def slurm_installed():
    return all(shutil.which(t) or Path("/usr/sbin", t).exists() for t in ("slurmctld", "slurmd", "munged", "sbatch"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    required = os.environ.get("KILN_REQUIRE_SLURM", "") not in ("", "0")
    if not slurm_installed():
        if required:
            pytest.fail("KILN_REQUIRE_SLURM is set but slurm-wlm/munge are not installed "
                        "(apt-get install slurm-wlm munge; scripts/setup.sh does)")
        pytest.skip("slurm-wlm and munge are not installed (apt-get install slurm-wlm munge); "
                    "set KILN_REQUIRE_SLURM=1 to make this a failure")
    if os.geteuid() != 0:
        msg = "the local Slurm cluster runs its daemons as root; run the tests as root"
        if required:
            pytest.fail(msg)
        pytest.skip(msg)
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first (scripts/setup.sh)")
    state = tmp_path_factory.mktemp("slurm-state")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["KILN_SLURM_DIR"] = str(state)
    r = subprocess.run([str(CLUSTER), "start"], env=env, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        subprocess.run([str(CLUSTER), "stop"], env=env, capture_output=True, timeout=120)
        pytest.fail(f"local-cluster.sh start exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    env["SLURM_CONF"] = str(state / "slurm.conf")
    yield dict(env=env, state=state)
    subprocess.run([str(CLUSTER), "stop"], env=env, capture_output=True, text=True, timeout=120)


def job_env(cluster, **params):
    env = dict(cluster["env"])
    env.update({"KILN_HOME": str(ROOT), "KILN_BIN": str(KILN), "KILN_DEVICE": "cpu",
                "KILN_GPUS_PER_NODE": "1", "KILN_CHECKPOINT_EVERY": "3"})
    env.update({k: str(v) for k, v in params.items()})
    return env


class Sbatch:
    """`sbatch --wait` in the background: the job id from its first line."""

    def __init__(self, env, script, log, *opts):
        self.env = env
        # --time: a hung job ends by itself (after the test's own timeout).
        self.proc = subprocess.Popen(["sbatch", "--wait", "--time=20", "-o", str(log), *opts, str(script)],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"Submitted batch job (\d+)", line)
        if not m:
            self.proc.wait(timeout=60)
            raise AssertionError(f"sbatch failed: {line}{self.proc.stderr.read()}")
        self.job_id = m[1]

    def wait(self, timeout=JOB_TIMEOUT):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            subprocess.run(["scancel", self.job_id], env=self.env, timeout=30)
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"job {self.job_id} did not finish within {timeout} s (cancelled)")
        self.stderr = self.proc.stderr.read()
        # the job record was purged before sbatch saw the job end: sbatch exits 0
        # whatever the job's exit code (scripts/slurm/local-cluster.sh, MinJobAge)
        assert "no longer found and exit code not found" not in self.stderr, \
            f"sbatch --wait lost job {self.job_id}'s exit code: {self.stderr}"
        return rc


def sbatch_wait(env, script, log, *opts, timeout=JOB_TIMEOUT):
    """sbatch --wait: returns (exit code, log text, the Sbatch)."""
    job = Sbatch(env, script, log, *opts)
    rc = job.wait(timeout)
    text = Path(log).read_text() if Path(log).exists() else ""
    return rc, text, job


def all_done(catalog):
    return dict(rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))


def assert_complete(catalog, jobs):
    assert all_done(catalog) == {"done": jobs}
    n_cand = rows(catalog, "SELECT COUNT(*) FROM candidates")[0][0]
    n_eval = rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0]
    assert n_eval == n_cand > 0
    assert rows(catalog, "SELECT COUNT(*) FROM best")[0][0] == jobs
    assert rows(catalog, "SELECT COUNT(*) FROM artifacts WHERE kind = 'hsaco'")[0][0] == n_eval


# --- kiln.sbatch ---------------------------------------------------------------------------

def test_kiln_sbatch_explores_the_manifest(cluster, tmp_path):
    shared = tmp_path / "shared" / "kiln.db"
    env = job_env(cluster, MANIFEST=MANIFEST, KILN_SHARED_CATALOG=shared)
    rc, log, r = sbatch_wait(env, SBATCH, tmp_path / "job.out")
    assert rc == 0, log + r.stderr
    assert_complete(shared, 4)
    if KILN_MPI.exists():
        assert "launching kiln-mpi with mpirun: 2 ranks (1 coordinator + 1 node(s) x 1 GPU rank(s))" in log, log
    else:
        assert "kiln-mpi not found" in log and "falling back to a plain `kiln run`" in log, log
    assert "catalog copied to " + str(shared) + " (final)" in log
    # The published copy is self-contained (no -wal beside it) and the node-local dir is gone.
    assert not Path(str(shared) + "-wal").exists()
    assert not re.search(r"local catalog (\S+)", log) or not Path(re.search(r"local catalog (\S+)", log)[1]).exists()


def test_kiln_sbatch_falls_back_to_kiln_run_and_says_so(cluster, tmp_path):
    if not KILN_MPI.exists():
        pytest.skip(f"{KILN_MPI} not built: test_kiln_sbatch_explores_the_manifest covered the fallback")
    shared = tmp_path / "shared.db"
    env = job_env(cluster, MANIFEST=MANIFEST, KILN_SHARED_CATALOG=shared, KILN_MPI_BIN=tmp_path / "no-kiln-mpi")
    rc, log, r = sbatch_wait(env, SBATCH, tmp_path / "job.out")
    assert rc == 0, log + r.stderr
    assert "falling back to a plain `kiln run`" in log
    assert_complete(shared, 4)


DRAIN_MANIFEST = """\
name: drain
targets: [MI300X]
defaults:
  dtypes: [fp32]
  exploration: {strategy: exhaustive, max_candidates: 4, timeout_s: 120}
  validation: {seeds: 2}
operators:
  - op: add
    shapes: [[512], [1024], [1536], [2048], [2560], [3072], [3584], [4096]]
  - op: softmax
    shapes: [[4, 64], [8, 64], [16, 64]]
"""


def test_usr1_drains_publishes_and_the_next_job_resumes(cluster, tmp_path):
    """What #SBATCH --signal=B:USR1@300 does before the wall time, sent by hand:
    the run drains, the catalog is published with no job left running, exit 130;
    the job submitted again resumes from the shared copy and finishes, with no
    candidate evaluated twice."""
    manifest = tmp_path / "drain.yaml"
    manifest.write_text(DRAIN_MANIFEST)
    shared = tmp_path / "shared" / "kiln.db"
    local = tmp_path / "local"
    env = job_env(cluster, MANIFEST=manifest, KILN_SHARED_CATALOG=shared, KILN_LOCAL_DIR=local,
                  KILN_CHECKPOINT_EVERY=0, KILN_MPI_BIN=tmp_path / "no-kiln-mpi")
    log1 = tmp_path / "job1.out"
    job = Sbatch(env, SBATCH, log1)
    deadline = time.time() + 300
    while time.time() < deadline and job.proc.poll() is None:
        time.sleep(0.3)
        try:
            if rows(local / "kiln.db", "SELECT COUNT(*) FROM evaluations")[0][0] >= 2:
                break
        except sqlite3.Error:
            continue
    assert job.proc.poll() is None, "the job finished before it could be signalled"
    subprocess.run(["scancel", "--batch", "--signal=USR1", job.job_id], env=env, check=True, timeout=30)
    rc = job.wait()
    log = log1.read_text()
    assert rc == 130, log
    assert "SIGUSR1: the wall time is near; draining" in log
    assert "catalog copied to " + str(shared) + " (drained)" in log
    states = all_done(shared)
    assert "running" not in states, states          # released, not left leased
    assert states.get("queued", 0) > 0, states       # it really stopped early
    evaluated_before = rows(shared, "SELECT COUNT(*) FROM evaluations")[0][0]
    assert evaluated_before >= 2

    rc, log, r = sbatch_wait(env, SBATCH, tmp_path / "job2.out")
    assert rc == 0, log + r.stderr
    assert "resuming from " + str(shared) in log
    assert_complete(shared, 11)
    assert rows(shared, "SELECT COUNT(*) FROM evaluations")[0][0] > evaluated_before


# --- array.sbatch ------------------------------------------------------------------------

def test_array_shards_then_merge(cluster, tmp_path):
    shared_dir = tmp_path / "shared"
    env = job_env(cluster, MANIFEST=MANIFEST, KILN_SHARED_DIR=shared_dir)
    rc, _, r = sbatch_wait(env, ARRAY, tmp_path / "array-%a.out", "--array=0-1")
    logs = "".join(p.read_text() for p in sorted(tmp_path.glob("array-*.out")))
    assert rc == 0, logs + r.stderr
    shards = [shared_dir / "shard-0-of-2.db", shared_dir / "shard-1-of-2.db"]
    done = []
    for i, s in enumerate(shards):
        assert s.exists(), logs
        for job_id, state in rows(s, "SELECT id, state FROM jobs"):
            assert state == ("done" if job_id % 2 == i else "queued")
        done += [k for (k,) in rows(s, "SELECT key FROM jobs WHERE state = 'done'")]
    assert len(done) == len(set(done)) == 4

    rc, log, r = sbatch_wait(env, ARRAY, tmp_path / "merge.out")
    assert rc == 0, log + r.stderr
    assert "merging 2 shard catalog(s)" in log and "every job of the manifest is done" in log
    assert_complete(shared_dir / "kiln.db", 4)


# --- nightly.sbatch ----------------------------------------------------------------------

def test_nightly_sbatch_twice(cluster, tmp_path):
    shared = tmp_path / "shared" / "nightly.db"
    env = job_env(cluster, MANIFEST=MANIFEST, KILN_SHARED_CATALOG=shared,
                  KILN_PACKAGE_DIR=tmp_path / "packages", KILN_REPORT_DIR=tmp_path / "reports")
    rc, log, r = sbatch_wait(env, NIGHTLY, tmp_path / "n1.out")
    assert rc == 0, log + r.stderr
    assert "nightly: no regression" in log
    assert_complete(shared, 4)
    reports = sorted((tmp_path / "reports").glob("nightly-*.json"))
    assert len(reports) == 1
    first = json.loads(reports[0].read_text())
    assert first["evaluated"] > 0
    skipped = " ".join(p.get("skipped", "") for p in first.get("packages", []))
    if "no package_info method" not in skipped:  # packaged once the worker answers package_info
        assert (tmp_path / "packages" / "MI300X" / "manifest.json").exists()

    rc, log, r = sbatch_wait(env, NIGHTLY, tmp_path / "n2.out")
    assert rc == 0, log + r.stderr
    assert "resuming from" in log
    second = json.loads(reports[0].read_text())   # same day: the same report file, rewritten
    assert second["evaluated"] == 0 and second["summary"]["unchanged"] == 4
