"""kiln run --ready-per-slot: the option reaches the scheduler (its effect,
which jobs an idle slot takes up, is unit-tested in tests/cpp/dispatch_test.cpp
and measured on the H200 pair in docs/performance-journal.md), and a bad value is a
usage error."""
import pytest

from test_e2e import KILN, ROOT, kiln, run_fake_evaluator


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


BAD_FLAGS = [(["--ready-per-slot", "-1"], "--ready-per-slot must be 0 or more"),
             (["--bench-cutoff", "0.5"], "--bench-cutoff must be 0 (off) or at least 1"),
             (["--lease", "0"], "--lease must be positive")]


@pytest.mark.parametrize("flag,message", BAD_FLAGS)
@pytest.mark.parametrize("command", ["run", "nightly"])
def test_a_bad_scheduling_flag_is_a_usage_error(tmp_path, command, flag, message):
    # kiln run and kiln nightly share the flags and their checks
    # (explore/scheduling_flags.h); kiln-mpi run: tests/e2e/test_mpi.py
    args = [command] + ([str(ROOT / "jobs" / "examples" / "anchors_h200.yaml")] if command == "nightly" else [])
    r = kiln(*args, *flag, "--scratch", tmp_path / "s", catalog=tmp_path / "k.db", check=False)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "k.db").exists()  # checked before the catalog is opened
