"""The engine's benchmark cutoff (kiln run --bench-cutoff), against a scripted
evaluator (tests/data/fake_evaluator) that claims to be an H200 and logs the
benchmark settings of every evaluate request it gets: once a job has a
measured best, later candidates carry cutoff_ms = factor x that best; with
--bench-cutoff 0 none does."""
import pytest

from test_e2e import KILN, db_rows, run_fake_evaluator


def run_fake(tmp, cutoff):
    return run_fake_evaluator(tmp, "targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
                                   "  exploration: {strategy: exhaustive, max_candidates: 12}\n"
                                   "operators:\n  - op: add\n    input_shape: [4096]\n",
                              "--workers", "1", "--bench-cutoff", cutoff)


def test_later_candidates_carry_the_cutoff(tmp_path):
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")
    catalog, reqs, summary = run_fake(tmp_path, 1.5)
    assert summary["candidates"] == 12 and summary["jobs_done"] == 1, summary
    assert len(reqs) == 12
    # one worker, exhaustive in space order: BLOCK 64 (0.1 ms) first, the best throughout
    assert "cutoff_ms" not in reqs[0]["benchmark"]
    assert all(r["benchmark"]["cutoff_ms"] == pytest.approx(0.15) for r in reqs[1:]), reqs
    # the fake stops the slow ones after 20 runs; the catalog records the runs made
    runs = dict(db_rows(catalog, "SELECT json_extract(c.config, '$.BLOCK'), e.runs FROM evaluations e "
                                 "JOIN candidates c ON c.id = e.candidate_id"))
    assert runs[64] == 100 and all(runs[b] == 20 for b in runs if b > 64), runs
    best = db_rows(catalog, "SELECT e.median_ms FROM best b JOIN evaluations e ON e.candidate_id = b.candidate_id")
    assert best == [(pytest.approx(0.1),)]


def test_cutoff_zero_runs_everything(tmp_path):
    catalog, reqs, summary = run_fake(tmp_path, 0)
    assert summary["candidates"] == 12
    assert not any("cutoff_ms" in r["benchmark"] for r in reqs)
    assert {r for (r,) in db_rows(catalog, "SELECT runs FROM evaluations")} == {100}
