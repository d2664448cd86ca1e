"""kiln run --ready-per-slot: the option reaches the scheduler (its effect,
which jobs an idle slot takes up, is unit-tested in tests/cpp/dispatch_test.cpp
and measured on the H200 pair in docs/performance.md), and a bad value is a
usage error."""
import json

import pytest

from test_e2e import KILN, ROOT, kiln

FAKE = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"


@pytest.mark.parametrize("ready", ["0", "4", "2.5"])
def test_a_run_completes_with_any_threshold(tmp_path, ready):
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")
    catalog = tmp_path / "kiln.db"
    man = tmp_path / "m.yaml"
    man.write_text("targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
                   "  exploration: {strategy: exhaustive, max_candidates: 12}\n"
                   "operators:\n  - op: add\n    shapes: [[4096], [8192], [16384]]\n")
    kiln("submit", man, catalog=catalog)
    r = kiln("run", "--workers", "4", "--device", "gpu", "--ready-per-slot", ready,
             "--scratch", tmp_path / "s", "--json", catalog=catalog,
             env={"KILN_PYTHON": str(FAKE), "FAKE_EVALUATOR_LOG": str(tmp_path / "log.jsonl")})
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["jobs_done"] == 3 and summary["candidates"] == 36, summary


def test_negative_threshold_is_a_usage_error(tmp_path):
    r = kiln("run", "--ready-per-slot", "-1", "--scratch", tmp_path / "s", catalog=tmp_path / "k.db", check=False)
    assert r.returncode == 2 and "--ready-per-slot must be 0 or more" in r.stderr, r.stderr
