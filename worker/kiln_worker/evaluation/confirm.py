"""The confirm method: a job's finalists and baselines timed again, together.

After a job's exploration the engine sends its finalists (the best and every
candidate within the confirmation margin) and its baselines (the PyTorch eager
reference, called with PyTorch's default precision flags -- TF32 convolutions
-- not the worker's reference flags; ``torch.compile(mode="max-autotune-no-cudagraphs")``
of it where the manifest asks -- without CUDA graphs: a graph replays from static input buffers,
so each call on another input set first copies its inputs in, which on an H200
read as 2.3-3.5x slower than the kernels themselves on the memory-bound anchors)
in one request. Each entry is set up once (a template config launches as
`evaluate` launches it; a baseline calls what a PyTorch user would: the template
module's `eager` hook where it has one -- attention: SDPA -- else its `reference`,
on the job's native-dtype inputs), then all of them are timed in `rounds` rounds,
in an order that rotates by one entry per round, `reps` timed calls per entry
and round -- fewer for a slow entry: each entry's timed calls of a round get
an equal share of the confirmation's budget (`budget_s`, default BUDGET_S, of
device time in all), so an entry whose call takes 2 s is timed MIN_REPS times
a round, not `reps` (its call time read once at set-up; `entries[].reps` says
how many it got);

- every call starts cold: the L2 flush and the GPU spin of ``timing._benchmark``
  (the host's launch overhead stays out), device events around the call;
- each round uses the next of a few input sets drawn for the job (rotating), so
  no entry is timed on inputs it has seen in the previous round; as many sets
  as fit this worker's share of the GPU (``memplan.share_bytes``) beside one
  output per finalist, less what the set-up and the baseline hold for a
  moment (the job's memory plan: one set's upcast copy for its reference, one
  output of the eager call; half the share for a job without a plan), at
  least one; where even one set and those outputs do not fit, the finalists
  share one output, each checked right after its own timed calls
  (``conditions``: ``input_sets``, ``shared_output``); a job whose check
  working set passes the share (``MemoryPlan.alone``) sets up alone on the
  GPU, as its checks do (``evaluate.alone_on_gpu``: the lock exclusive, the
  other workers asked to give back their cached memory);
- a candidate's output is filled with NaN before its round and checked against
  the reference after its timed calls: what was timed computed the right thing;
- the device's clocks, temperature and power are read (NVML through torch, or
  pynvml) at the start and end of each round; a round whose SM clock fell by
  more than 5% is flagged (``clock_drop``; for a power-limited job: the
  clock measured after the round more than 5% below its sustained clock,
  below);
- throttled rounds are timed again, as NVBench does (``--throttle-threshold``,
  ``--throttle-recovery-delay``): right after a round's calls the SM clock is
  measured on the device (a spin of known cycles between two events), and a
  round that ran below ``throttle_threshold`` (default THROTTLE_THRESHOLD) of
  the reference clock (NVML's maximum SM clock, else the highest measured in
  this confirmation) loses its samples, and is timed again after
  ``throttle_recovery_s`` (default THROTTLE_RECOVERY_S) of idle GPU, at most
  THROTTLE_RETRIES times; then its last samples stand, flagged
  (``throttled``). Threshold 0 turns this off; where the clock cannot be
  measured (no spin kernel) nothing is retimed;
- every job is timed as a deployment and ``do_bench`` run it: back to back,
  all of its entries alike. After the set-up the best finalist runs back to
  back for ``preheat_s`` (default PREHEAT_S) of device time, the SM clock is
  measured (the probe) and the L2 flush is timed on its own. Where the host
  keeps the device busy through a round's timed calls -- what its enqueues
  would fall behind the device in all (``sustained.host_deficit_ms``: per
  entry, its reps x how much its host enqueue, HOST_MARGIN x the measured
  one, exceeds its device time with the flush) is at most half the lead-in's
  last chunk (HOST_BUFFER_MS), still queued when the timed calls start -- no
  entry gets a spin before its calls (``sustained.spin_free`` lists them
  all): every round starts with a lead-in of its first entry that leaves the
  host that chunk ahead. Else every entry keeps its spin (the list is
  empty; the calls would otherwise time the host). One rule for the whole
  job: a spin idles the GPU, the clock comes back up in the idle time, and
  the entry timed next inherits it (on an H200 a spun 0.4 ms GEMM read 5-7%
  and attention ~3% faster than ``do_bench`` and ``kiln-rt bench``, and
  with two of three attention finalists spun the third, spin-free, read 5%
  faster than both outside harnesses -- except in the round it led);
- a job whose clock settles below STEADY_BELOW of NVML's maximum under the
  probe (``power_limited``: a large GEMM on an H200 settles near 1500 of
  1980 MHz, attention near 1830, still falling after 300 ms) is timed in
  that steady state: every round's lead-in runs at least ``preheat_s`` and
  then until it settles, all the round's timed calls are enqueued behind it
  with no wait for the device in between (one wait at the end), and the
  throttle guard judges the rounds against the sustained clock instead of the
  maximum. Any other round's lead-in is one chunk (HOST_LEAD_S). The probe
  and each settling lead-in run at least ``preheat_s`` and then until they
  settle (``settled``: the per-call time of the last 100 ms within 1% of the
  100 ms that ended 300 ms earlier), the probe at most PREHEAT_MAX_S, a
  lead-in at most as long as its probe took. Timed in 20-call bursts such a
  kernel reads up to ~10% faster than under sustained load, and how much
  depends on the power state the previous work left: the steady state is
  what a deployment gets, and it reproduces. ``conditions.sustained`` says
  what the probe found; ``preheat_s`` 0 turns the probe, the lead-ins and
  the spin-free calls off.

Every timed round holds the GPU lock exclusively (``gpulock.gpu_lock``), so no
other worker's kernels run meanwhile; set-up holds it shared, as checks do
(exclusively for a job that runs alone, above).

On the CPU (Triton interpreter) the calls are timed with ``time.perf_counter``
and the result says ``basis: "cpu"``: such numbers are for tests of the
pipeline, never mixed with device timings.

Request: ``{"job": JOB, "entries": [{"id": candidate_id, "config": CONFIG} |
{"baseline": "eager" | "compile"}], "rounds": R, "reps": N, "budget_s": S?,
"throttle_threshold": F?, "throttle_recovery_s": S?, "preheat_s": S?}``. An entry may add
``"inject_ms"`` (benchmarks of the regression test only, bench/trust/aa_nightly.py):
a GPU sleep kernel of about that length (a CPU spin on the CPU) inside each of
its timed calls: a kernel really that much slower.
"""
from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass
from typing import Any

from . import check, memplan, timing
from ..processes import gpulock
from ..processes.device import PYTORCH_DEFAULTS, as_pytorch_defaults
from .evaluate import BadRequest, _tensor_bytes, alone_on_gpu, job_fields

INPUT_SETS = 3            # input sets drawn per confirmation (used in rotation)
CLOCK_DROP = 0.05         # an SM clock that falls more than this share within a round
MAX_ROUNDS, MAX_REPS = 1000, 100000
SEED_BASE = 7919          # input sets' seeds: SEED_BASE + i (not the check's seeds)
# The timed calls' device time a confirmation may take in all (all entries,
# all rounds), unless the request says otherwise; an entry gets at least
# MIN_REPS calls a round however slow it is. 30 s: a 10 ms kernel keeps its
# 20 calls x 5 rounds with three finalists and a baseline (4 s), a 2 s one
# (KernelBench's Frobenius norm served by a one-program template) gets 2.
BUDGET_S, MIN_REPS = 30.0, 2
# Throttled rounds (module docstring). NVBench's defaults are 75% and 0.05 s;
# Kiln ranks configs a few percent apart, and a compute-bound kernel's time
# follows the SM clock, so a round is retimed below 90% of the reference.
THROTTLE_THRESHOLD, THROTTLE_RECOVERY_S, THROTTLE_RETRIES = 0.90, 0.05, 3
FREQ_SPIN_CYCLES = 1_000_000  # the clock measurement's spin: ~0.5 ms at 2 GHz
# Power-limited jobs (module docstring): the back-to-back run before the
# rounds and before each of their rounds lasts at least PREHEAT_S of device
# time, and then until it has settled: the per-call time of its last
# SETTLE_WINDOW_MS within SETTLE_TOL of that of the window SETTLE_LAG_WINDOWS
# windows before (a clock still falling 1% per 300 ms is not settled), or
# PREHEAT_MAX_S have passed. do_bench's default is 100 ms of calls; under a
# large GEMM an H200's SM clock is still falling at 300 ms (do_bench's 300 ms
# read 8192^3 5% slower than 0.3 s lead-ins did).
PREHEAT_S, PREHEAT_MAX_S = 0.3, 2.0
SETTLE_WINDOW_MS, SETTLE_LAG_WINDOWS, SETTLE_TOL = 100.0, 3, 0.01
SUSTAIN_CHUNK_MS = 20.0   # back-to-back calls enqueued between two reads of the device time
HOST_LEAD_S = SUSTAIN_CHUNK_MS / 1e3  # the lead-in of a round not timed in a settled state: the host a chunk ahead
# Spin-free rounds (module docstring): the host's enqueue of a timed call is
# taken as HOST_MARGIN x the one measured at set-up (the timed calls also
# record two events, and the host is shared), and the rounds' timed calls may
# fall behind the device by HOST_BUFFER_MS in all: half the lead-in's last
# chunk, which is still queued when they start.
HOST_MARGIN = 1.5
HOST_BUFFER_MS = SUSTAIN_CHUNK_MS / 2
FLUSH_SAMPLES = 5  # the L2 flush timed on its own: the median of this many
# A job whose probe settles below this share of NVML's maximum SM clock is
# timed in its steady state (module docstring). The clock of a memory-bound
# kernel on an H200 stays within 1% of the maximum; attention's settles 7-8%
# below it and reads ~3% slower there than in 20-call bursts.
STEADY_BELOW = 0.97
# The worker's cached check inputs are dropped before a confirmation when they
# hold more than this (server.confirm): the round draws its own sets.
KEEP_CACHED_BYTES = 1 << 30


def parse_entries(entries: Any) -> list[dict]:
    if not isinstance(entries, list) or not entries:
        raise BadRequest("confirm: 'entries' must be a non-empty list")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise BadRequest(f"confirm: entry {i} must be an object")
        inject = e.get("inject_ms")
        if inject is not None and (not isinstance(inject, (int, float)) or inject < 0):
            raise BadRequest(f"confirm: entry {i}: inject_ms must be a non-negative number")
        if "baseline" in e:
            if e["baseline"] not in ("eager", "compile"):
                raise BadRequest(f"confirm: entry {i}: baseline must be 'eager' or 'compile'")
            out.append({"baseline": e["baseline"], "inject_ms": inject})
        else:
            cid, config = e.get("id"), e.get("config")
            if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(config, dict):
                raise BadRequest(f"confirm: entry {i} needs an integer 'id' and a 'config' object, "
                                 "or a 'baseline'")
            out.append({"id": cid, "config": config, "inject_ms": inject})
    return out


def _count(req: dict, key: str, default: int, limit: int) -> int:
    v = req.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= limit:
        raise BadRequest(f"confirm: '{key}' must be an integer in [1, {limit}]")
    return v


# -- conditions -----------------------------------------------------------------

def device_identity(dev) -> dict:
    import torch
    import triton
    ident: dict[str, Any] = {"name": dev.name, "kind": dev.kind, "torch": torch.__version__,
                             "triton": triton.__version__, "python": platform.python_version()}
    if not dev.is_gpu:
        ident["host"] = platform.node()
        ident["cpu"] = platform.processor() or platform.machine()
        return ident
    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        ident["uuid"] = str(uuid)
    for attr in ("pci_bus_id", "pci_device_id", "pci_domain_id"):
        if hasattr(props, attr):
            ident[attr] = getattr(props, attr)
    ident["cuda"] = getattr(torch.version, "cuda", None)
    ident["hip"] = getattr(torch.version, "hip", None)
    nv = _pynvml()
    if nv is not None:
        try:
            ident["driver"] = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            pass
        try:
            h = _nvml_handle(nv)
            ident["nvml_uuid"] = _text(nv.nvmlDeviceGetUUID(h))
            ident["nvml_pci_bus_id"] = _text(nv.nvmlDeviceGetPciInfo(h).busId)
        except Exception:  # noqa: BLE001
            pass
    if "driver" not in ident:
        try:  # the CUDA driver API's version (e.g. 13000), without NVML
            ident["driver"] = f"cuda driver api {torch._C._cuda_getDriverVersion()}"
        except Exception:  # noqa: BLE001
            ident["driver"] = None
    return ident


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_NVML: list = []


def _pynvml():
    """pynvml, initialised, or None (not installed, no driver)."""
    if _NVML:
        return _NVML[0]
    mod = None
    try:
        import pynvml  # type: ignore
        pynvml.nvmlInit()
        mod = pynvml
    except Exception:  # noqa: BLE001
        mod = None
    _NVML.append(mod)
    return mod


def _nvml_handle(nv):
    """The NVML handle of torch's device 0, by its UUID or PCI bus id (NVML
    numbers all GPUs, CUDA_VISIBLE_DEVICES renumbers them); never by index,
    which could name another GPU."""
    import torch
    props = torch.cuda.get_device_properties(0)
    uuid = str(getattr(props, "uuid", "") or "")
    for u in ([uuid, "GPU-" + uuid] if uuid else []):
        try:
            return nv.nvmlDeviceGetHandleByUUID(u.encode())
        except Exception:  # noqa: BLE001
            pass
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return nv.nvmlDeviceGetHandleByPciBusId(bus.encode())


def read_sensors(dev) -> dict:
    """SM and memory clocks (MHz), temperature (C), power (W) now; what cannot be
    read is left out, with `source` naming what answered (or why nothing did)."""
    if not dev.is_gpu:
        return {"source": "none (CPU)"}
    out: dict[str, Any] = {}
    nv = _pynvml()
    if nv is not None:
        try:
            h = _nvml_handle(nv)
            out["sm_clock_mhz"] = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
            out["mem_clock_mhz"] = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
            out["temperature_c"] = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
            out["power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
            out["source"] = "pynvml"
            return out
        except Exception as exc:  # noqa: BLE001
            out["nvml_error"] = str(exc)[:200]
    import torch
    for key, fn, scale in (("sm_clock_mhz", "clock_rate", 1), ("temperature_c", "temperature", 1),
                           ("power_w", "power_draw", 1e-3)):
        f = getattr(torch.cuda, fn, None)
        if f is None:
            continue
        try:
            out[key] = f() * scale
            out["source"] = "torch.cuda"
        except Exception as exc:  # noqa: BLE001
            out.setdefault("errors", {})[key] = str(exc)[:120]
    out.setdefault("source", "none (no NVML / amdsmi)")
    return out


def clock_dropped(start: dict, end: dict) -> bool:
    a, b = start.get("sm_clock_mhz"), end.get("sm_clock_mhz")
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b < a * (1 - CLOCK_DROP)


def round_clock_dropped(start: dict, end: dict, mhz_after: float | None, sustained: dict) -> bool:
    """A round's clock_drop. For a power-limited job (its rounds start with a
    lead-in) the NVML reading at the start is taken while the lead-in is still
    queued, so start-to-end always shows the fall into the steady state; its
    round dropped when the clock measured after it fell more than CLOCK_DROP
    below the sustained clock of the probe instead (never when not measured)."""
    if sustained.get("power_limited"):
        ref = sustained.get("mhz")
        return mhz_after is not None and bool(ref) and mhz_after < ref * (1 - CLOCK_DROP)
    return clock_dropped(start, end)


# -- timing ---------------------------------------------------------------------

@dataclass(frozen=True)
class LeadIn:
    """What _Clock.sustain ran: `calls` finished in `ms` of device time, one
    more chunk of `in_flight` calls still running; `settled` None where it
    ran a fixed time, else whether it settled before its maximum;
    `window_ms` the per-call time (flush included) of each whole
    SETTLE_WINDOW_MS of it, in order."""
    calls: int
    in_flight: int
    ms: float
    settled: bool | None
    window_ms: list[float]


def host_deficit_ms(calls: list[dict], flush_ms: float) -> float:
    """How far a round's timed calls, enqueued back to back, would fall
    behind the device in all (ms): per entry, its reps x how much its host
    enqueue (HOST_MARGIN x `host_s`) exceeds its device time with the L2
    flush (`call_ms` + flush_ms); 0 where the host is faster throughout."""
    return sum(c["reps"] * max(0.0, c["host_s"] * 1e3 * HOST_MARGIN - (c["call_ms"] + flush_ms))
               for c in calls)


def drop_spins(calls: list[dict], sustained: dict, shared_output: bool = False) -> bool:
    """One rule for all of a job's entries: where the host keeps the device
    busy through a round's timed calls (host_deficit_ms at most
    HOST_BUFFER_MS; with a shared output, where the rounds wait for each
    entry's calls before the next's, none may fall behind at all) every
    entry's `cycles` becomes 0 (no spin before its timed calls), and
    sustained["spin_free"] lists them all; else none (an empty list), and
    sustained["host_deficit_ms"] says why. Nothing where the probe did not
    run (no "flush_ms": the CPU, preheat_s 0, no clock measurement): every
    call keeps its spin. Returns whether the rounds start with a lead-in
    (round_lead_in): a power-limited job's always, any other's where the
    spins went."""
    if "flush_ms" not in sustained:
        return False
    flush_ms = sustained["flush_ms"]
    deficit = host_deficit_ms(calls, flush_ms)
    if shared_output:
        ok = all(host_deficit_ms([c], flush_ms) == 0 for c in calls)
    else:
        ok = deficit <= HOST_BUFFER_MS
    if ok:
        for c in calls:
            c["cycles"] = 0
    sustained["host_deficit_ms"] = round(deficit, 4)
    sustained["spin_free"] = [_label(c["entry"]) for c in calls] if ok else []
    return bool(sustained.get("power_limited")) or ok


def round_lead_in(clock: "_Clock", lead: dict, s_idx: int, preheat_s: float, sustained: dict) -> "LeadIn":
    """A round's lead-in, the round's first entry (`lead`, on input set
    s_idx) back to back, its last chunk left running: for a power-limited
    job into the steady state (at least preheat_s, then until settled, at
    most as long as the probe took from a cooler start), else HOST_LEAD_S,
    which puts the host a chunk ahead of the device."""
    if sustained.get("power_limited"):
        return clock.sustain(lead["fns"][s_idx], preheat_s, lead["call_ms"],
                             max_s=max(preheat_s, sustained["probe_ms"] / 1e3))
    return clock.sustain(lead["fns"][s_idx], HOST_LEAD_S, lead["call_ms"])


def settled(chunk_ms: list[float], window: int) -> bool:
    """Whether a back-to-back run of equal chunks (their device times in
    order) has settled: its last `window` chunks took within SETTLE_TOL of
    what the `window` chunks SETTLE_LAG_WINDOWS windows before took."""
    need = (SETTLE_LAG_WINDOWS + 1) * window
    if window < 1 or len(chunk_ms) < need:
        return False
    last, before = sum(chunk_ms[-window:]), sum(chunk_ms[-need:len(chunk_ms) - need + window])
    return before > 0 and abs(last / before - 1) <= SETTLE_TOL


class _Clock:
    """Per call: cold cache, spin, then the call between two marks. On a GPU
    device events (read once per round), on the CPU perf_counter."""

    def __init__(self, dev, target: dict | None, api=None):
        self.gpu = dev.is_gpu or api is not None
        if self.gpu:
            self.api = api or timing._Cuda()  # a fake one in the tests
            self.cache = self.api.buffer(timing.flush_bytes(target))
            self.cycles_per_ms = None

    def calibrate_sleep(self) -> float:
        """GPU sleep cycles per millisecond on this device (for inject_ms)."""
        if self.cycles_per_ms is None:
            a, b = self.api.event(), self.api.event()
            n = 2_000_000
            self.api.sleep(n)  # first call loads the kernel
            self.api.synchronize()
            a.record()
            self.api.sleep(n)
            b.record()
            self.api.synchronize()
            self.cycles_per_ms = n / max(1e-6, a.elapsed_time(b))
        return self.cycles_per_ms

    def host_cycles(self, fn) -> tuple[int, float]:
        """The spin that covers the host's enqueue of one call (timing._benchmark's
        rule), and that enqueue's time in seconds (the median of 5)."""
        host = []
        for _ in range(5):
            self.cache.zero_()
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
        self.api.synchronize()
        host_s = sorted(host)[2]
        return int(min(5e7, max(2e4, 2.0 * host_s * 2.5e9))), host_s

    def sm_mhz(self) -> float | None:
        """The SM clock now (MHz), measured on the device: a spin of known
        cycles between two events; None on the CPU or without a spin kernel."""
        if not self.gpu:
            return None
        a, b = self.api.event(), self.api.event()
        a.record()
        if not self.api.sleep(FREQ_SPIN_CYCLES):
            return None
        b.record()
        self.api.synchronize()
        ms = a.elapsed_time(b)
        return FREQ_SPIN_CYCLES / ms / 1e3 if ms > 0 else None

    def flush_ms(self) -> float:
        """The L2 flush's own device time (ms): the median of FLUSH_SAMPLES,
        each between two events (0 on the CPU)."""
        if not self.gpu:
            return 0.0
        marks = [(self.api.event(), self.api.event()) for _ in range(FLUSH_SAMPLES)]
        for a, b in marks:
            a.record()
            self.cache.zero_()
            b.record()
        self.api.synchronize()
        return sorted(a.elapsed_time(b) for a, b in marks)[FLUSH_SAMPLES // 2]

    def call_ms(self, fn) -> float:
        """One cold call's time in ms (device events; on the CPU perf_counter):
        what the budget's share per entry is divided by."""
        if not self.gpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        a, b = self.api.event(), self.api.event()
        self.cache.zero_()
        a.record()
        fn()
        b.record()
        self.api.synchronize()
        return a.elapsed_time(b)

    def sustain(self, fn, seconds: float, call_ms: float, max_s: float | None = None) -> "LeadIn":
        """fn back to back, each call after the L2 flush as the timed calls
        run, for at least `seconds` of device time; with `max_s` above it,
        then until settled() says the per-call time has stopped changing or
        max_s have passed. Double-buffered: the device time is read at the
        end of each chunk of ~SUSTAIN_CHUNK_MS while the next chunk is already
        queued, so the device never idles between chunks; that last chunk is
        left running on return (what the caller enqueues next -- the clock
        measurement, a round's timed calls -- runs right behind it, with no
        idle gap that would let the clock recover). Nothing on the CPU or for
        seconds <= 0."""
        if not self.gpu or seconds <= 0:
            return LeadIn(0, 0, 0.0, None, [])
        chunk = max(1, min(10_000, math.ceil(SUSTAIN_CHUNK_MS / max(call_ms, 1e-3))))
        window = max(1, round(SETTLE_WINDOW_MS / (chunk * max(call_ms, 1e-3))))
        adaptive = max_s is not None and max_s > seconds
        start = self.api.event()
        start.record()
        self.enqueue_calls(fn, chunk)
        end = self.api.event()
        end.record()
        calls, done_ms, chunk_ms = chunk, 0.0, []
        while True:
            self.enqueue_calls(fn, chunk)  # queued before waiting on the previous one
            nxt = self.api.event()
            nxt.record()
            end.synchronize()
            ms = start.elapsed_time(end)
            chunk_ms.append(ms - done_ms)
            done_ms = ms
            is_settled = adaptive and settled(chunk_ms, window)
            if calls >= 1_000_000 or (ms >= seconds * 1e3 and
                                      (not adaptive or is_settled or ms >= max_s * 1e3)):
                windows = [sum(chunk_ms[i:i + window]) / (window * chunk)
                           for i in range(0, len(chunk_ms) - window + 1, window)]
                return LeadIn(calls, chunk, ms, is_settled if adaptive else None, windows)
            end = nxt
            calls += chunk

    def enqueue_calls(self, fn, n: int) -> None:
        """n calls of fn, each after the L2 flush, enqueued without waiting
        for the device (a round's lead-in: no idle gap before its timed calls)."""
        for _ in range(n):
            self.cache.zero_()
            fn()

    def start_calls(self, fn, reps: int, cycles: int, inject_ms: float | None):
        """The timed calls enqueued; returns what reads their times (ms): on
        a GPU it waits for the device, so calls started one after another
        run back to back and are read after one wait. On the CPU the calls
        run (and are timed) here."""
        if not self.gpu:
            out = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                if inject_ms:
                    until = time.perf_counter() + inject_ms / 1e3
                    while time.perf_counter() < until:
                        pass
                out.append((time.perf_counter() - t0) * 1e3)
            return lambda: out
        inject = int(inject_ms * self.calibrate_sleep()) if inject_ms else 0
        starts = [self.api.event() for _ in range(reps)]
        ends = [self.api.event() for _ in range(reps)]
        for i in range(reps):
            self.cache.zero_()
            if cycles:
                self.api.sleep(cycles)
            starts[i].record()
            if inject:
                self.api.sleep(inject)
            fn()
            ends[i].record()

        def read() -> list[float]:
            self.api.synchronize()
            return [s.elapsed_time(e) for s, e in zip(starts, ends)]
        return read


def _lock(dev, shared: bool, kind: str):
    import contextlib
    return gpulock.gpu_lock(shared=shared, kind=kind) if dev.is_gpu else contextlib.nullcontext()


def run(lib, dev, req: dict) -> dict:
    """The `confirm` method (module docstring)."""
    import torch
    op, shape, dtype, params, target = job_fields(lib, req.get("job"))
    entries = parse_entries(req.get("entries"))
    rounds = _count(req, "rounds", 5, MAX_ROUNDS)
    reps = _count(req, "reps", 20, MAX_REPS)
    budget_s = _budget(req)
    threshold, recovery_s = _throttle(req)
    preheat_s = _preheat(req)
    mod = lib.launch_module(op)
    job = req["job"]
    atol, rtol = check.resolve_tolerances(job, mod, op, shape, params)
    updt = check.upcast_dtype(dtype)
    tdev = dev.torch_device
    gpulock.take_spans()
    t_setup = time.perf_counter()

    # Input sets, each with its reference (upcast, as the check computes it):
    # as many as fit the worker's bound beside the finalists' outputs.
    share = memplan.share_bytes(dev)
    plan = memplan.job_plan(mod, op, shape, dtype, params, share)
    budget = _sets_budget(share, plan)
    finalists = sum(1 for e in entries if "baseline" not in e)
    sets = []
    shared_output = False
    alone = plan is not None and plan.alone

    def setup_lock():
        return alone_on_gpu(dev, plan, "confirm", kind="setup") if alone else _lock(dev, True, "setup")

    with setup_lock():
        for i in range(min(INPUT_SETS, rounds)):
            seed = SEED_BASE + i
            torch.manual_seed(seed)
            inputs = mod.make_inputs(op, shape, dtype, params, seed, tdev)
            ref = mod.reference(op, check.upcast(inputs, updt), params)
            sets.append({"seed": seed, "inputs": inputs, "ref": ref, "memo": {}})
            if budget is None:
                continue
            if i == 0:  # every set is the size of the first: how many fit
                set_bytes = max(1, _tensor_bytes(inputs) + _tensor_bytes(ref))
                out_bytes = _numel(ref) * _native_element_bytes(inputs)
                shared_output = set_bytes + finalists * out_bytes > budget
                outputs = out_bytes if shared_output else finalists * out_bytes
                fit = max(1, (budget - outputs) // set_bytes)
            if len(sets) >= fit:
                break
        if dev.is_gpu:
            torch.cuda.synchronize()

    # Each entry's call on input set s.
    # The baselines call what a PyTorch user would: the template's `eager` hook
    # where it has one (attention: SDPA), else its reference.
    # With PyTorch's default precision flags, not the worker's reference flags.
    eager = as_pytorch_defaults(getattr(mod, "eager", None) or mod.reference)
    calls = []
    shared_out = None
    for e in entries:
        if "baseline" in e:
            if e["baseline"] == "eager":
                fns = [(lambda s=s: eager(op, s["inputs"], params)) for s in sets]
            else:
                compiled = as_pytorch_defaults(torch.compile(lambda inputs: eager(op, inputs, params),
                                                             mode="max-autotune-no-cudagraphs"))
                fns = [(lambda s=s: compiled(s["inputs"])) for s in sets]
            calls.append({"entry": e, "fns": fns, "out": None})
        else:
            # One output per finalist (or one for all, shared_output): poisoned
            # before each round (before each finalist's calls), checked after it.
            if shared_output:
                if shared_out is None:
                    shared_out = mod.output_like(op, sets[0]["inputs"], params)
                out = shared_out
            else:
                out = mod.output_like(op, sets[0]["inputs"], params)
            fns = [(lambda s=s, cfg=e["config"], out=out: mod.launch(op, s["inputs"], out, cfg, params))
                   for s in sets]
            calls.append({"entry": e, "fns": fns, "out": out, "check": None})

    clock = _Clock(dev, target)
    if dev.is_gpu:
        # The finalists' kernels found in the JIT cache and loaded before the
        # lock, as the check does (preload.py): host work, no GPU work.
        from .preload import preload
        for c in calls:
            if c["out"] is not None:
                preload(mod, op, sets[0]["inputs"], c["out"], c["entry"]["config"], params)
    # Warm-up (JIT loads, torch.compile's autotuning) and the spin per entry.
    with setup_lock():
        for c in calls:
            for fn in c["fns"]:
                fn()
            if dev.is_gpu:
                torch.cuda.synchronize()
                c["cycles"], c["host_s"] = clock.host_cycles(c["fns"][0])
            else:
                c["cycles"], c["host_s"] = 0, 0.0
            c["call_ms"] = clock.call_ms(c["fns"][0])
    for c, n_reps in zip(calls, reps_within(budget_s, rounds, [c["call_ms"] for c in calls], reps)):
        c["reps"] = n_reps
    setup_s = time.perf_counter() - t_setup

    t_time = time.perf_counter()
    samples: list[list[float]] = [[] for _ in calls]
    round_conditions = []
    n = len(calls)
    nvml_max = max_sm_clock_mhz(dev)
    sustained = _probe_sustained(dev, clock, calls[0] if calls else None, preheat_s, nvml_max)
    preheat = sustained.get("power_limited", False)
    lead_in = drop_spins(calls, sustained, shared_output)
    if preheat:
        guard = _ThrottleGuard(threshold, sustained["mhz"], None, label="sustained clock of this job")
    else:
        guard = _ThrottleGuard(threshold, nvml_max if threshold > 0 else None,
                               clock.sm_mhz() if threshold > 0 else None)
    for r in range(rounds):
        s_idx = r % len(sets)
        order = [(r + k) % n for k in range(n)]
        s = sets[s_idx]

        def attempt(s=s, s_idx=s_idx, order=order, r=r):
            got: list[list[float]] = [[] for _ in calls]
            if dev.is_gpu:
                torch.cuda.synchronize()
            pre = None
            if lead_in:
                # The round's first entry back to back (round_lead_in), then
                # every entry's timed calls enqueued behind its last chunk
                # with no wait between them: the GPU never idles (an idle
                # moment lets the clock back up).
                pre = round_lead_in(clock, calls[order[0]], s_idx, preheat_s, sustained)
            if not shared_output:  # poison the candidates' outputs before the round (after the lead-in)
                for c in calls:
                    if c["out"] is not None:
                        _poison(c["out"])
            start = read_sensors(dev)
            t0 = time.time()
            pending = []
            for k in order:
                c = calls[k]
                if shared_output and c["out"] is not None:
                    _poison(c["out"])
                pending.append((k, clock.start_calls(c["fns"][s_idx], c["reps"], c["cycles"],
                                                     c["entry"].get("inject_ms"))))
                if shared_output and c["out"] is not None:
                    got[k] = pending.pop()[1]()
                    _check_entry(c, s, r, atol, rtol)  # before the next finalist overwrites it
            for k, read in pending:
                got[k] = read()
            mhz = clock.sm_mhz() if threshold > 0 else None
            return (got, start, read_sensors(dev), t0, time.time(), pre), mhz

        # the lock held through the retimed attempts and their recovery pauses
        with _lock(dev, False, "bench"):
            (got, start, end, t0, t1, pre), mhz, throttled_mhz = retime_throttled(attempt, guard, recovery_s)
        retries = len(throttled_mhz)
        for k in range(n):
            samples[k].extend(got[k])
        cond = {"round": r, "input_seed": sets[s_idx]["seed"],
                "order": [_label(calls[k]["entry"]) for k in order],
                "start": start, "end": end, "wall_s": t1 - t0,
                "clock_drop": round_clock_dropped(start, end, mhz, sustained)}
        if mhz is not None:
            cond["sm_mhz_after"] = round(mhz, 1)
        if pre is not None:
            cond["preheat_calls"] = pre.calls + pre.in_flight
            cond["preheat_ms"] = round(pre.ms, 3)
            cond["preheat_settled"] = pre.settled
        if retries:
            cond["retimed"] = retries
            cond["throttled_mhz"] = [round(x, 1) for x in throttled_mhz]
        if guard.throttled(mhz):
            cond["throttled"] = True
        round_conditions.append(cond)
        # The outputs of what was timed, checked against the reference.
        if not shared_output:
            for c in calls:
                if c["out"] is not None:
                    _check_entry(c, s, r, atol, rtol)
    time_s = time.perf_counter() - t_time

    spans = gpulock.take_spans()
    gpulock.take_lock_waits()
    conditions = {"identity": device_identity(dev), "rounds": round_conditions,
                  "clock_drop": any(rc["clock_drop"] for rc in round_conditions),
                  "throttle": guard.describe(recovery_s, round_conditions),
                  "sustained": sustained,
                  "baseline_precision": dict(PYTORCH_DEFAULTS),
                  "input_sets": len(sets), "shared_output": shared_output,
                  "order": "rotating", "reps": reps, "budget_s": budget_s,
                  "timer": "device events" if dev.is_gpu else "time.perf_counter",
                  "l2_flush_bytes": timing.flush_bytes(target) if dev.is_gpu else 0}
    out_entries = []
    for c, xs in zip(calls, samples):
        e = c["entry"]
        item: dict[str, Any] = {"samples_ms": xs, "median_ms": timing.stats_ms(xs)["median_ms"],
                                "reps": c["reps"]}
        if "baseline" in e:
            item["baseline"] = e["baseline"]
        else:
            item["id"] = e["id"]
            item["check"] = c["check"]
        if e.get("inject_ms"):
            item["inject_ms"] = e["inject_ms"]
        out_entries.append(item)
    timings = {"setup_s": setup_s, "time_s": time_s,
               "kernel_s": sum(sum(xs) for xs in samples) / 1e3 if dev.is_gpu else 0.0}
    if dev.is_gpu:
        timings["gpu_spans"] = [[a, b, kind] for a, b, kind in spans]
        timings["gpu_s"] = sum(b - a for a, b, _ in spans)
    del calls, sets
    if dev.is_gpu:
        # the round's inputs and outputs back to the driver: other workers share the GPU
        torch.cuda.empty_cache()
    return {"basis": "device" if dev.is_gpu else "cpu", "device": dev.name, "rounds": rounds,
            "reps": reps, "entries": out_entries, "conditions": conditions, "timings": timings}


def _budget(req: dict) -> float:
    v = req.get("budget_s", BUDGET_S)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 86400:
        raise BadRequest(f"budget_s must be a number of seconds in (0, 86400], got {v!r}")
    return float(v)


def _preheat(req: dict) -> float:
    v = req.get("preheat_s", PREHEAT_S)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 60:
        raise BadRequest(f"preheat_s must be a number of seconds in [0, 60], got {v!r}")
    return float(v)


def _probe_sustained(dev, clock: "_Clock", lead: dict | None, preheat_s: float,
                     nvml_max: float | None) -> dict:
    """Whether the job is power-limited: its lead entry (the best finalist)
    back to back with the GPU to itself, at least preheat_s and then until it
    settles (at most PREHEAT_MAX_S), then the SM clock measured right behind
    it and the L2 flush timed on its own (`flush_ms`). Only {"preheat_s"} where nothing was probed (CPU, preheat_s 0,
    no entries, no NVML maximum or no clock measurement)."""
    out: dict[str, Any] = {"preheat_s": preheat_s}
    if not dev.is_gpu or preheat_s <= 0 or lead is None or not nvml_max:
        return out
    with _lock(dev, False, "bench"):
        li = clock.sustain(lead["fns"][0], preheat_s, lead["call_ms"], max_s=max(preheat_s, PREHEAT_MAX_S))
        mhz = clock.sm_mhz()  # queued behind the probe's last chunk
        flush_ms = clock.flush_ms()  # what one timed call's L2 flush adds to it
    if mhz is None:
        return out
    out.update({"probe_calls": li.calls, "probe_ms": round(li.ms, 3), "flush_ms": round(flush_ms, 5),
                "settled": li.settled, "window_ms": [round(x, 5) for x in li.window_ms],
                "mhz": round(mhz, 1), "max_mhz": nvml_max, "power_limited": mhz < STEADY_BELOW * nvml_max})
    return out


def retime_throttled(attempt, guard: "_ThrottleGuard", recovery_s: float, sleep=time.sleep):
    """attempt() -> (result, measured MHz), again after `recovery_s` while the
    guard says it ran throttled, at most THROTTLE_RETRIES times. Returns the
    last attempt's (result, MHz) and the MHz of the attempts thrown away."""
    thrown: list[float] = []
    while True:
        result, mhz = attempt()
        if not guard.throttled(mhz) or len(thrown) >= THROTTLE_RETRIES:
            return result, mhz, thrown
        thrown.append(mhz)
        sleep(recovery_s)


def _throttle(req: dict) -> tuple[float, float]:
    t = req.get("throttle_threshold", THROTTLE_THRESHOLD)
    d = req.get("throttle_recovery_s", THROTTLE_RECOVERY_S)
    for name, v, hi in (("throttle_threshold", t, 1.0), ("throttle_recovery_s", d, 60.0)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:
            raise BadRequest(f"{name} must be a number in [0, {hi:g}], got {v!r}")
    return float(t), float(d)


def max_sm_clock_mhz(dev) -> float | None:
    """NVML's maximum SM clock of the device (MHz), or None."""
    if not dev.is_gpu:
        return None
    nv = _pynvml()
    if nv is None:
        return None
    try:
        v = nv.nvmlDeviceGetMaxClockInfo(_nvml_handle(nv), nv.NVML_CLOCK_SM)
        return float(v) if v else None
    except Exception:  # noqa: BLE001
        return None


class _ThrottleGuard:
    """Whether a round ran throttled: its measured SM clock below `threshold`
    of the reference -- NVML's maximum SM clock where known (for a
    power-limited job the sustained clock its probe measured, `label` saying
    which), else the highest clock measured in this confirmation (a round's
    own measurement raises it before it is judged)."""

    def __init__(self, threshold: float, max_mhz: float | None, first_mhz: float | None,
                 label: str = "nvml max sm clock"):
        self.threshold = threshold
        self.nvml_max = max_mhz
        self.seen = first_mhz or 0.0
        self.label = label

    def reference(self) -> float | None:
        return self.nvml_max or (self.seen or None)

    def throttled(self, mhz: float | None) -> bool:
        if self.threshold <= 0 or mhz is None:
            return False
        self.seen = max(self.seen, mhz)
        ref = self.reference()
        return ref is not None and mhz < self.threshold * ref

    def describe(self, recovery_s: float, rounds: list[dict]) -> dict:
        return {"threshold": self.threshold, "recovery_s": recovery_s,
                "reference_mhz": self.reference(),
                "reference": self.label if self.nvml_max else "highest measured",
                "rounds_retimed": sum(1 for rc in rounds if rc.get("retimed")),
                "rounds_throttled": sum(1 for rc in rounds if rc.get("throttled"))}


def reps_within(budget_s: float, rounds: int, call_ms: list[float], reps: int) -> list[int]:
    """Timed calls per round for each entry: the budget shared equally by the
    entries' rounds, divided by the entry's call time, between MIN_REPS and
    reps (reps itself when it is below MIN_REPS)."""
    if not call_ms:
        return []
    share_ms = budget_s * 1e3 / (max(1, rounds) * len(call_ms))
    floor = min(MIN_REPS, reps)
    return [max(floor, min(reps, int(share_ms // max(ms, 1e-6)))) for ms in call_ms]


def _sets_budget(share: int | None, plan) -> int | None:
    """The bytes the input sets and the finalists' outputs may hold: the share
    less one set's upcast copy (its reference's input, for a moment) and one
    native output (the eager baseline's result of each call); half the share
    without a plan; None: no bound."""
    if share is None:
        return None
    if plan is None:
        return share // 2
    return max(0, share - plan.upcast_bytes - plan.output_bytes)


def _check_entry(c: dict, s: dict, r: int, atol: float, rtol: float) -> None:
    """A finalist's output of round r checked against input set s's reference;
    its first failure stays its verdict."""
    if c["check"] is not None and not c["check"]["passed"]:
        return
    try:
        st = check.compare(c["out"], s["ref"], atol, rtol, s["seed"], memo=s["memo"])
        prev = c["check"] or {"passed": True, "max_abs_err": 0.0, "max_rel_err": 0.0, "rounds": 0}
        prev["rounds"] += 1
        for k in ("max_abs_err", "max_rel_err"):
            prev[k] = max(prev[k], float(st.get(k, 0.0) or 0.0))
        c["check"] = prev
    except check.Incorrect as inc:
        c["check"] = {"passed": False, "round": r, "message": inc.message}


def _numel(value) -> int:
    """Elements of the tensors in value (a tensor, or a tuple / list of them)."""
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    n = getattr(value, "numel", None)
    return int(n()) if callable(n) else 0


def _native_element_bytes(inputs: dict) -> int:
    """Bytes per element of the job's dtype: its floating inputs' (4 if none)."""
    return next((t.element_size() for t in inputs.values()
                 if hasattr(t, "is_floating_point") and t.is_floating_point()), 4)


def _label(e: dict) -> str:
    return f"baseline:{e['baseline']}" if "baseline" in e else f"candidate:{e['id']}"


def _poison(out) -> None:
    import torch
    if out.is_floating_point():
        out.fill_(float("nan"))
    else:
        out.fill_(torch.iinfo(out.dtype).max if out.dtype != torch.bool else True)
