"""bench/trust/util_timeline.py on a synthetic nvidia-smi reading list."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "trust"))
from util_timeline import readings, summary  # noqa: E402


def test_start_and_steady_state(tmp_path):
    # 4 idle readings (0, 10, 0, 10), then 16 at 90 and 4 at 40: 24 in all
    xs = [0, 10, 0, 10] + [90] * 16 + [40] * 4
    f = tmp_path / "smi.csv"
    f.write_text("".join(f"2026/12/03 00:00:{i:02d}.000, {x}\n" for i, x in enumerate(xs)) + "bad line\n")
    assert readings(str(f)) == [float(x) for x in xs]
    s = summary(readings(str(f)), 50.0)
    assert s["readings"] == 24 and s["mean"] == pytest.approx((20 + 16 * 90 + 160) / 24)
    assert s["start_share"] == pytest.approx(4 / 24) and s["start_mean"] == pytest.approx(5.0)
    assert s["after_start_mean"] == pytest.approx((16 * 90 + 160) / 20)
    assert len(s["tenths"]) == 10 and s["tenths"][0] == pytest.approx(5.0)  # readings 0-1: 0, 10
