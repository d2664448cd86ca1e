"""The executor's one failure policy (docs/architecture.md, "One executor, one
failure policy"), in both modes: `kiln run` on this machine and `kiln-mpi
run` over 3 Open MPI ranks (rank 0 coordinates, ranks 1 and 2 evaluate), with
the scripted evaluator (tests/data/fake_evaluator) as real worker processes:

- every hello fails: each slot is started 3 times, then dropped; with no slot
  left the run fails, naming why, and no job stays `running`;
- the first hellos fail: the slots are started again and the run finishes;
- one slot never starts (its GPU's hello fails): it is dropped and the run
  finishes on the others (under MPI: that rank leaves, its work goes on rank 1);
- a worker crashes mid-candidate: that candidate is recorded as `crash` (an
  infrastructure fault), the slot gets a fresh worker, the run finishes.
"""
import os
import shutil

import pytest

from conftest import KILN, ROOT
from conftest import kiln as run_kiln
from test_mpi import KILN_MPI, KILN_MPIRUN, db_rows, mpi_env, mpirun_cmd, run_mpi

FAKE = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"
N_JOBS, N_CONFIGS = 2, 4
MODES = ["run", "mpi"]


def manifest(tmp):
    m = tmp / "m.yaml"
    m.write_text("targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
                 f"  exploration: {{strategy: exhaustive, max_candidates: {N_CONFIGS}}}\noperators:\n" +
                 "".join(f"  - op: add\n    input_shape: [{1024 * (i + 1)}]\n" for i in range(N_JOBS)))
    return m


@pytest.fixture(params=MODES)
def mode(request):
    if request.param == "mpi":
        if shutil.which("mpirun") is None:
            if os.environ.get("KILN_REQUIRE_MPI"):
                pytest.fail("KILN_REQUIRE_MPI is set but mpirun is not installed")
            pytest.skip("Open MPI (mpirun) is not installed")
        for b in (KILN_MPI, KILN_MPIRUN):
            if not b.exists():
                pytest.fail(f"{b} is missing: build first (cmake --build build --target kiln kiln-mpi)")
    elif not KILN.exists():
        pytest.fail(f"{KILN} is missing: build it first")
    return request.param


def execute(mode, tmp, **fake_env):
    """Submits the manifest and runs it in `mode` with two evaluator slots in
    all (kiln run --workers 2; kiln-mpi: two worker ranks of one slot each).
    Returns (catalog, exit code, stderr)."""
    catalog = tmp / "kiln.db"
    env = {"KILN_PYTHON": str(FAKE), "FAKE_EVALUATOR_LOG": str(tmp / "log.jsonl"),
           "FAKE_EVALUATOR_CONFIGS": str(N_CONFIGS), "FAKE_HELLO_COUNTER": str(tmp / "hellos"), **fake_env}
    run_kiln("submit", manifest(tmp), catalog=catalog)
    if mode == "run":
        r = run_kiln("run", "--device", "gpu", "--workers", "2", "--scratch", tmp / "s", "--json",
                     catalog=catalog, env=env, check=False, timeout=300)
    else:
        r = run_mpi(mpirun_cmd(3, "--device", "gpu", "--workers", "1", "--scratch", tmp / "s", "--json"),
                    mpi_env(catalog, **env), 300)
    return catalog, r.returncode, r.stderr


def hellos(tmp):
    p = tmp / "hellos"
    return len(p.read_text()) if p.exists() else 0


def states(catalog):
    return dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))


def test_no_slot_starts_fails_the_run_after_three_starts_each(mode, tmp_path):
    catalog, code, err = execute(mode, tmp_path, FAKE_HELLO_FAIL="always")
    assert code == (1 if mode == "run" else 4), err
    assert "no evaluator worker is left" in err and "hello refused" in err, err
    assert "starting it again" in err and "dropped" in err, err
    assert hellos(tmp_path) == 2 * 3  # two slots, three starts each, no more
    assert states(catalog) == {"queued": N_JOBS}, err  # nothing left under a lease
    assert db_rows(catalog, "SELECT COUNT(*) FROM evaluations") == [(0,)]


def test_failed_hellos_are_retried_and_the_run_finishes(mode, tmp_path):
    catalog, code, err = execute(mode, tmp_path, FAKE_HELLO_FAIL="2")
    assert code == 0, err
    assert "starting it again" in err, err
    assert "dropped" not in err, err
    assert states(catalog) == {"done": N_JOBS}
    assert db_rows(catalog, "SELECT COUNT(*), COUNT(DISTINCT candidate_id) FROM evaluations") == \
        [(N_JOBS * N_CONFIGS, N_JOBS * N_CONFIGS)]


def test_a_slot_that_never_starts_is_dropped_and_the_others_finish(mode, tmp_path):
    # Two GPUs, 4 and 7; every hello of a worker bound to GPU 7 fails. Each
    # evaluation takes 0.6 s: the run outlasts the dropped slot's 3 starts.
    gpus = {"KILN_GPUS_PER_NODE": "2", "KILN_GPU_VENDOR": "nvidia", "CUDA_VISIBLE_DEVICES": "4,7",
            "FAKE_HELLO_FAIL_GPU": "7", "FAKE_EVALUATOR_DELAY_S": "0.6"}
    if mode == "run":
        catalog = tmp_path / "kiln.db"
        run_kiln("submit", manifest(tmp_path), catalog=catalog)
        r = run_kiln("run", "--device", "gpu", "--gpus", "2", "--workers", "2", "--scratch", tmp_path / "s",
                     catalog=catalog, check=False, timeout=300,
                     env={"KILN_PYTHON": str(FAKE), "FAKE_EVALUATOR_LOG": str(tmp_path / "log.jsonl"),
                          "FAKE_EVALUATOR_CONFIGS": str(N_CONFIGS), **gpus})
        code, err = r.returncode, r.stderr
        workers = {w for (w,) in db_rows(catalog, "SELECT worker FROM evaluations")}
        assert workers and all(w.endswith(" gpu 4") for w in workers), workers
    else:
        catalog, code, err = execute(mode, tmp_path, **gpus)
        ranks = {w.split()[1] for (w,) in db_rows(catalog, "SELECT worker FROM evaluations")}
        assert ranks == {"1"}, ranks
        assert "rank 2 left (no evaluator worker is left" in err, err
    assert code == 0, err
    assert "evaluator slot" in err and "dropped" in err, err
    assert states(catalog) == {"done": N_JOBS}
    assert db_rows(catalog, "SELECT COUNT(*), COUNT(DISTINCT candidate_id) FROM evaluations") == \
        [(N_JOBS * N_CONFIGS, N_JOBS * N_CONFIGS)]


def test_a_crash_mid_candidate_is_an_infrastructure_fault_and_the_slot_restarts(mode, tmp_path):
    # BLOCK 128 (one candidate per job) kills its worker with SIGSEGV.
    catalog, code, err = execute(mode, tmp_path, FAKE_MALFORMED="crash")
    assert code == 0, err
    assert states(catalog) == {"done": N_JOBS}, err
    rows = db_rows(catalog, "SELECT c.config, e.status, e.message, e.worker FROM evaluations e "
                            "JOIN candidates c ON c.id = e.candidate_id")
    assert len(rows) == N_JOBS * N_CONFIGS
    crashed = [r for r in rows if r[1] == "crash"]
    assert len(crashed) == N_JOBS and all('"BLOCK":128' in c.replace(" ", "") for c, *_ in crashed), rows
    assert all("SIGSEGV" in m for _, _, m, _ in crashed), crashed
    # every other candidate was evaluated, by the crashed slots' fresh workers too
    assert {s for _, s, _, _ in rows} == {"ok", "crash"}
    pids = {w.split("pid ")[1].split()[0] for *_, w in rows}
    assert len(pids) > 2, rows  # two slots, and a fresh worker after each crash
