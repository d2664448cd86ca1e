"""`kiln-mpi run` under plain `mpirun` (not kiln-mpirun), with real Open MPI
ranks and the scripted evaluator (tests/data/fake_evaluator) on the worker
ranks (issue 22, item 7; docs/cluster.md, "Plain mpirun").

Without --enable-recovery, Open MPI ends the whole job when any rank dies:

- a worker rank killed: mpirun SIGTERMs the others; rank 0 drains (its jobs go
  back to the queue, nothing stays `running`) and the next run finishes the
  batch with no candidate evaluated twice;
- rank 0 killed (`kill -9`): its jobs stay `running` under its lease, which
  expires on its own within --lease seconds; a run on another node (a UTS
  namespace with another host name, where rank 0's pid cannot be checked)
  takes none of them before the lease expires and all of them after.
"""
import os
import shutil
import signal
import subprocess
import time

import pytest

from test_mpi import (KILN_MPI, ROOT, assert_each_candidate_once, binaries, db_rows, kill_tree, kiln,  # noqa: F401
                      mpi_env, rank_pid, start, summary_of, wait_for, worker_ranks)

FAKE = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"
N_JOBS = 6


def manifest(tmp):
    m = tmp / "m.yaml"
    m.write_text("targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
                 "  exploration: {strategy: exhaustive, max_candidates: 8}\noperators:\n" +
                 "".join(f"  - op: add\n    input_shape: [{4096 * (i + 1)}]\n" for i in range(N_JOBS)))
    return m


def plain_mpirun(np, *args):
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np), str(KILN_MPI), "run",
            "--device", "gpu", *map(str, args)]


def env_for(tmp, catalog, delay="0.1"):
    return mpi_env(catalog, KILN_PYTHON=str(FAKE), FAKE_EVALUATOR_LOG=str(tmp / "log.jsonl"),
                   FAKE_EVALUATOR_DELAY_S=delay)


def states(catalog):
    return dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))


def test_worker_rank_killed_under_plain_mpirun_drains_then_resumes(binaries, tmp_path):
    catalog = tmp_path / "kiln.db"
    kiln("submit", manifest(tmp_path), catalog=catalog)
    scratch = tmp_path / "scratch"
    log = open(tmp_path / "run1.log", "w")
    proc = start(plain_mpirun(3, "--scratch", scratch, "--json"), env_for(tmp_path, catalog),
                 stdout=subprocess.PIPE, stderr=log)
    try:
        wait_for(lambda: worker_ranks(catalog).get(2, 0) >= 1, 120, proc, "rank 2's first evaluation")
        os.kill(rank_pid(scratch, 2), signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
        log.close()
    err = (tmp_path / "run1.log").read_text()
    assert proc.returncode != 0, err  # plain mpirun: the job is aborted
    s = states(catalog)
    assert "running" not in s, (s, err[-3000:])  # rank 0 drained: nothing left under a lease
    assert db_rows(catalog, "SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    assert_each_candidate_once_so_far(catalog)
    r = subprocess.run(plain_mpirun(3, "--scratch", scratch, "--json"), capture_output=True, text=True,
                       timeout=300, env=env_for(tmp_path, catalog, delay="0"), start_new_session=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert states(catalog) == {"done": N_JOBS}
    assert_each_candidate_once(catalog)


def assert_each_candidate_once_so_far(catalog):
    assert db_rows(catalog, "SELECT candidate_id FROM evaluations GROUP BY 1 HAVING COUNT(*) > 1") == []


def other_node(cmd):
    """cmd as run on a node named kiln-other-node: a new UTS namespace (root)."""
    return ["unshare", "--uts", "sh", "-c", 'hostname kiln-other-node && exec "$@"', "sh", *map(str, cmd)]


def test_rank0_killed_leaves_leases_that_expire_on_their_own(binaries, tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare --uts to stand in for another node")
    lease = 10.0
    catalog = tmp_path / "kiln.db"
    kiln("submit", manifest(tmp_path), catalog=catalog)
    scratch = tmp_path / "scratch"
    # --prefetch: rank 0 claims ahead, so several jobs are under its lease when it dies.
    proc = start(plain_mpirun(3, "--scratch", scratch, "--lease", lease, "--json"), env_for(tmp_path, catalog),
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0] >= 1, 120, proc,
                 "the first evaluation")
        owner = db_rows(catalog, "SELECT DISTINCT lease_owner FROM jobs WHERE state = 'running'")
        assert len(owner) == 1, owner
        rank0 = rank_pid(scratch, 0)
        assert owner[0][0].endswith(f":{rank0}"), (owner, rank0)
        os.kill(rank0, signal.SIGKILL)
        killed_at = time.time()
        proc.wait(timeout=60)  # plain mpirun takes the worker ranks down with it
    finally:
        kill_tree(proc)
    held = db_rows(catalog, "SELECT id, lease_expires FROM jobs WHERE state = 'running'")
    assert held, states(catalog)
    # The leases are bounded: each lapses within --lease of the kill.
    assert all(exp <= killed_at + lease + 0.5 for _, exp in held), (held, killed_at)
    done_before = states(catalog).get("done", 0)
    evals_before = db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0]

    # Another node, before the leases lapse: it takes the queued jobs, none of the held ones.
    first_expiry = min(exp for _, exp in held)
    checked_before = False
    if time.time() < first_expiry - 3:
        r = subprocess.run(other_node([KILN_MPI.parent / "kiln", "run", "--device", "gpu", "--workers", "1",
                                       "--scratch", tmp_path / "s2", "--lease", lease, "--json"]),
                           capture_output=True, text=True, timeout=120,
                           env=env_for(tmp_path, catalog, delay="0"))
        assert r.returncode == 0, r.stderr[-3000:]
        if time.time() < first_expiry:
            still = db_rows(catalog, "SELECT id FROM jobs WHERE state = 'running'")
            assert sorted(i for (i,) in still) == sorted(i for i, _ in held), (still, held)
            checked_before = True
    assert checked_before, "the machine was too slow to run a second node's run before the leases lapsed"
    # After the leases lapse: another node reclaims every one of them and finishes the batch.
    time.sleep(max(0.0, max(exp for _, exp in held) - time.time() + 0.5))
    r = subprocess.run(other_node([KILN_MPI.parent / "kiln", "run", "--device", "gpu", "--workers", "1",
                                   "--scratch", tmp_path / "s3", "--json"]),
                       capture_output=True, text=True, timeout=120, env=env_for(tmp_path, catalog, delay="0"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert states(catalog) == {"done": N_JOBS}
    msgs = db_rows(catalog, "SELECT id, attempts FROM jobs WHERE id IN (%s)" % ",".join(str(i) for i, _ in held))
    assert all(a >= 2 for _, a in msgs), msgs
    assert_each_candidate_once(catalog)
    assert done_before < N_JOBS and evals_before < N_JOBS * 8
