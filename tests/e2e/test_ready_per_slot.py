"""kiln run --ready-per-slot: the option reaches the scheduler (its effect,
which jobs an idle slot takes up, is unit-tested in tests/cpp/dispatch_test.cpp
and measured on the H200 pair in docs/performance.md), and a bad value is a
usage error."""
import pytest

from test_e2e import KILN, kiln, run_fake_evaluator


@pytest.mark.parametrize("ready", ["0", "4", "2.5"])
def test_a_run_completes_with_any_threshold(tmp_path, ready):
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")
    _, reqs, summary = run_fake_evaluator(
        tmp_path, "targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
                  "  exploration: {strategy: exhaustive, max_candidates: 12}\n"
                  "operators:\n  - op: add\n    shapes: [[4096], [8192], [16384]]\n",
        "--workers", "4", "--ready-per-slot", ready)
    assert summary["jobs_done"] == 3 and summary["candidates"] == 36, summary
    assert len(reqs) == 36


def test_negative_threshold_is_a_usage_error(tmp_path):
    r = kiln("run", "--ready-per-slot", "-1", "--scratch", tmp_path / "s", catalog=tmp_path / "k.db", check=False)
    assert r.returncode == 2 and "--ready-per-slot must be 0 or more" in r.stderr, r.stderr
