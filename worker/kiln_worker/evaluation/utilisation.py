"""The GPU's utilisation as its driver counts it: NVML's sample buffer.

The driver keeps, per GPU, a buffer of utilisation samples: each the percentage
of one short sample period (between 1/6 s and 1 s, by product) during which
one or more kernels ran on the GPU -- any kernel of any process: timed calls,
checks, references, L2 flushes, other workers'. This is "GPU busy" by the
device's own account, where the lock-held figure counts what the workers
reserved and the event-timed figure only the timed calls.

`UtilisationSamples.take()` returns the samples newer than those the previous
call returned, as ``[unix_seconds, percent]`` pairs, oldest first (at most
MAX_SAMPLES: the newest). The worker's server adds them to each answer's
timings (``util_samples``); every worker of one GPU reads the same buffer, so
the engine merges their samples by timestamp (src/explore/utilisation.h).

Threading: one instance per worker process, used from its request thread only;
start() finds NVML and the device in a thread of its own (NVML's
initialisation, otherwise paid by the worker's first answer), which take()
waits for.
Failure: none raised. Where NVML is missing, the GPU has no samples, or the
call is not supported, take() returns [] (no account rather than an error);
a call that finds no sample newer than the last is an empty take, not a
failure.
"""
from __future__ import annotations

import time
from typing import Any, Callable

MAX_SAMPLES = 4000      # per take: a bound on one answer's size
EPOCH_SLACK_S = 3600.0  # sample times further than this from now are not unix times


class UtilisationSamples:
    def __init__(self, nvml: Any = None, handle: Any = None, clock: Callable[[], float] = time.time):
        """nvml/handle: a pynvml module and a device handle (tests pass their
        own); by default pynvml and this worker's GPU (confirm._nvml_handle),
        found on the first take."""
        self._nv = nvml
        self._h = handle
        self._clock = clock
        self._last_us = 0        # the newest sample's driver timestamp seen (microseconds)
        self._off: float | None = None  # driver time -> unix time, where the driver's is not unix time
        self._broken = False
        self._finding = None     # start()'s thread, until take() has joined it

    def start(self) -> None:
        """Finds NVML and the device (_device) in a daemon thread, so that the
        first take() does not initialise NVML; take() waits for it."""
        import threading
        if self._nv is not None or self._finding is not None:
            return

        def find():
            try:
                self._device()
            except Exception:  # noqa: BLE001 - take() meets it again and stops taking
                pass
        self._finding = threading.Thread(target=find, name="kiln-nvml", daemon=True)
        self._finding.start()

    def _device(self) -> bool:
        if self._nv is not None:
            return True
        from .confirm import _nvml_handle, _pynvml  # confirm.py owns the NVML set-up
        nv = _pynvml()
        if nv is None:
            return False
        self._h = _nvml_handle(nv)
        self._nv = nv
        return True

    def take(self) -> list[list[float]]:
        if self._finding is not None:
            self._finding.join()
            self._finding = None
        if self._broken:
            return []
        try:
            if not self._device():
                self._broken = True
                return []
            nv = self._nv
            _, samples = nv.nvmlDeviceGetSamples(self._h, nv.NVML_GPU_UTILIZATION_SAMPLES, self._last_us)
        except Exception as exc:  # noqa: BLE001
            if "NotFound" in type(exc).__name__ or "Not Found" in str(exc):
                return []  # nothing newer than the last take
            self._broken = True
            return []
        pts = []
        for s in samples or []:
            ts = int(getattr(s, "timeStamp", 0) or 0)
            if ts <= self._last_us:
                continue
            val = getattr(s, "sampleValue", None)
            pct = getattr(val, "uiVal", val)
            try:
                pct = float(pct)
            except (TypeError, ValueError):
                continue
            if 0 <= pct <= 100:
                pts.append((ts, pct))
        if not pts:
            return []
        pts.sort()
        self._last_us = pts[-1][0]
        now = self._clock()
        if self._off is None:
            # The documentation says "CPU timestamp in microseconds": unix time
            # where it is within the slack of now; else a clock of the
            # driver's own, aligned once by the newest sample (which is at
            # most one sample period old).
            newest = pts[-1][0] / 1e6
            self._off = 0.0 if abs(newest - now) < EPOCH_SLACK_S else now - newest
        return [[round(ts / 1e6 + self._off, 4), pct] for ts, pct in pts[-MAX_SAMPLES:]]
