"""kiln run with its evaluator workers forked by the fork server
(worker/kiln_worker/processes/forkserver.py): the batch completes with correct results,
the workers report the server's preload, KILN_FORK_SERVER turns it on and off
(unset: on when the workers outnumber the cores), and kill -9 of the engine
leaves neither the server nor a worker behind."""
import json
import os
import signal
import subprocess
import time

import pytest

from test_e2e import KILN, ROOT, db_rows, kiln, worker_pids_with

MANIFEST = ROOT / "tests" / "data" / "manifests" / "mpi_small.yaml"  # 2 jobs, 6 candidates, CPU
# the tests of how workers start: one job, one candidate
ONE = ROOT / "tests" / "data" / "manifests" / "one_candidate.yaml"


def run(tmp_path, workers, fork_server, manifest=MANIFEST):
    catalog = tmp_path / "k.db"
    kiln("submit", manifest, catalog=catalog)
    env = {} if fork_server is None else {"KILN_FORK_SERVER": fork_server}  # None: unset (auto)
    r = kiln("run", "--device", "cpu", "--workers", str(workers), "--scratch", tmp_path / "s", "--json",
             catalog=catalog, env=env)
    ready = [ln for ln in r.stderr.splitlines() if "workers ready: the last after" in ln]
    assert len(ready) == 1, r.stderr[-3000:]
    return catalog, json.loads(r.stdout), ready[0]


@pytest.fixture(autouse=True)
def built():
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")


def test_forked_workers_complete_the_batch(tmp_path):
    catalog, summary, ready = run(tmp_path, 2, "1")
    assert "preload" in ready, ready  # hello's startup.preload_s: forked by the server
    assert summary["jobs_done"] == 2 and summary["candidates"] == 6, summary
    rows = db_rows(catalog, "SELECT status, COUNT(*) FROM evaluations GROUP BY status")
    assert dict(rows) == {"ok": 6}, rows
    # the memory plans ran on meta tensors: no worker imported fake tensors (torch._dynamo)
    timings = [json.loads(r)["timings"] for (r,) in db_rows(catalog, "SELECT result FROM evaluations")]
    assert any("plan_s" in t for t in timings) and not any("plan_import" in t for t in timings), timings


def test_without_the_server_workers_import_for_themselves(tmp_path):
    _, summary, ready = run(tmp_path, 2, "0", ONE)
    assert "preload" not in ready and "imports" in ready, ready
    assert summary["jobs_done"] == 1, summary


@pytest.mark.skipif("KILN_FORK_SERVER" in os.environ, reason="the automatic choice needs KILN_FORK_SERVER unset")
def test_unset_it_forks_only_when_the_workers_outnumber_the_cores(tmp_path):
    cores = os.cpu_count() or 1
    _, _, ready = run(tmp_path / "few", cores, None, ONE)
    assert "preload" not in ready, ready
    _, summary, ready = run(tmp_path / "many", cores + 1, None, ONE)
    assert "preload" in ready, ready
    assert summary["jobs_done"] == 1, summary


def test_kill9_of_the_engine_leaves_no_server_and_no_worker(tmp_path):
    catalog = tmp_path / "k.db"
    scratch = tmp_path / "s"
    kiln("submit", ROOT / "jobs" / "quickstart.yaml", catalog=catalog)
    proc = subprocess.Popen([str(KILN), "run", "--device", "cpu", "--workers", "2", "--scratch", str(scratch)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, KILN_CATALOG=str(catalog), KILN_FORK_SERVER="1"))
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.3)
        if db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0] >= 1:
            break
    assert proc.poll() is None, "kiln run ended before it could be killed"
    alive = worker_pids_with(str(scratch))
    assert len(alive) >= 3, alive  # the server and its two workers
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(50):
        if not worker_pids_with(str(scratch)):
            break
        time.sleep(0.1)
    assert worker_pids_with(str(scratch)) == []
