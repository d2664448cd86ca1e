"""The driver's utilisation samples a worker sends (evaluation/utilisation.py),
read through a stand-in for pynvml's nvmlDeviceGetSamples that keeps a real
sample buffer: the samples newer than the last seen timestamp, as the NVML
documentation describes the call."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))
from kiln_worker.evaluation.utilisation import UtilisationSamples  # noqa: E402


class NVMLError_NotFound(Exception):  # pynvml's class name for NVML_ERROR_NOT_FOUND
    pass


class FakeNvml:
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self):
        self.buffer: list[tuple[int, int]] = []  # (microseconds, percent)
        self.calls = []
        self.fail: Exception | None = None

    def add(self, t_us: int, pct: int):
        self.buffer.append((t_us, pct))

    def nvmlDeviceGetSamples(self, handle, kind, last_seen):
        self.calls.append((handle, kind, last_seen))
        if self.fail is not None:
            raise self.fail
        assert kind == self.NVML_GPU_UTILIZATION_SAMPLES
        newer = [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=p))
                 for t, p in self.buffer if t > last_seen]
        if not newer:
            raise NVMLError_NotFound("Not Found")
        return 1, newer


def test_each_take_returns_only_newer_samples_in_unix_seconds():
    nv = FakeNvml()
    now = 1_800_000_000.0
    u = UtilisationSamples(nv, "h", clock=lambda: now)
    nv.add(int((now - 1.0) * 1e6), 40)
    nv.add(int((now - 0.5) * 1e6), 90)
    first = u.take()
    assert [p for _, p in first] == [40, 90]
    assert abs(first[0][0] - (now - 1.0)) < 1e-3  # unix time kept as it is
    assert u.take() == []  # nothing newer: empty, not broken
    nv.add(int((now + 0.2) * 1e6), 10)
    again = u.take()
    assert [p for _, p in again] == [10]
    assert nv.calls[-1][2] == int((now - 0.5) * 1e6)  # asked from the newest seen


def test_a_driver_clock_that_is_not_unix_time_is_aligned_to_now():
    nv = FakeNvml()
    now = 1_800_000_000.0
    u = UtilisationSamples(nv, "h", clock=lambda: now)
    nv.add(5_000_000, 70)   # 5 s after some boot
    nv.add(5_200_000, 30)
    got = u.take()
    assert abs(got[-1][0] - now) < 1e-6 and abs(got[0][0] - (now - 0.2)) < 1e-6


def test_out_of_range_values_are_dropped_and_errors_end_the_account():
    nv = FakeNvml()
    now = 1_800_000_000.0
    u = UtilisationSamples(nv, "h", clock=lambda: now)
    nv.add(int(now * 1e6), 101)
    nv.add(int(now * 1e6) + 1, 55)
    assert [p for _, p in u.take()] == [55]
    nv.fail = RuntimeError("NVML_ERROR_NOT_SUPPORTED")
    assert u.take() == []
    nv.fail = None
    nv.add(int(now * 1e6) + 10, 60)
    assert u.take() == []  # an unsupported call is not retried on every answer


def test_without_nvml_there_is_no_account():
    class NoNvml(UtilisationSamples):
        def _device(self):
            return False
    assert NoNvml().take() == []


def test_start_finds_the_device_beside_the_requests():
    # NVML's initialisation in start()'s thread; the first take waits for it
    import threading
    import time

    now = 1_800_000_000.0
    nv = FakeNvml()
    nv.add(int(now * 1e6), 70)
    found_in = []

    class Slow(UtilisationSamples):
        def _device(self):
            if self._nv is None:
                found_in.append(threading.current_thread().name)
                time.sleep(0.2)
                self._nv, self._h = nv, "h"
            return True

    u = Slow(clock=lambda: now)
    u.start()
    u.start()  # once
    assert u.take() == [[now, 70.0]]
    assert found_in == ["kiln-nvml"]
