"""The worker's `confirm` method on the CPU (Triton interpreter), as a real subprocess."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from fake_device import FakeDeviceApi  # noqa: E402
from worker_client import TARGET_H200, Worker, worker_env  # noqa: E402

N = 512


def job(op="add", shape=(N,), dtype="fp32"):
    return {"op": op, "shape": list(shape), "dtype": dtype, "params": {}, "target": TARGET_H200,
            "constraints": [], "validation": {"seeds": 1, "atol": None, "rtol": None},
            "benchmark": {"warmup": 1, "runs": 3}}


@pytest.fixture(scope="module")
def worker():
    w = Worker(env=worker_env(kernels_dir=None))  # the real library
    yield w
    assert w.close() == 0, w.stderr[-3000:]


class _Host:
    """A device that is not a GPU: _Clock takes the fake device API as its GPU."""
    is_gpu = False


def fake_clock(cycles_per_ms=None, call_ms=2.0):
    """A confirm._Clock on a fake device API (tests/python/fake_device.py), the
    API's log and clock, and a call that advances that clock by call_ms."""
    from kiln_worker.evaluation.confirm import _Clock
    log, clock = [], [0.0]

    def launch():
        clock[0] += call_ms
        log.append("launch")
    return _Clock(_Host(), {"l2_bytes": 1 << 20}, api=FakeDeviceApi(log, clock, cycles_per_ms)), log, clock, launch


def config_of(worker):
    ans = worker.call("space", job=job())
    assert ans["ok"], ans
    return ans["result"]["configs"]


def test_confirm_times_entries_interleaved(worker):
    configs = config_of(worker)[:2]
    entries = [{"id": 11, "config": configs[0]}, {"id": 12, "config": configs[1]}, {"baseline": "eager"}]
    ans = worker.call("confirm", job=job(), entries=entries, rounds=3, reps=4)
    assert ans["ok"], ans
    r = ans["result"]
    assert r["basis"] == "cpu" and r["rounds"] == 3 and r["reps"] == 4
    assert [e.get("id", e.get("baseline")) for e in r["entries"]] == [11, 12, "eager"]
    for e in r["entries"]:
        assert len(e["samples_ms"]) == 12 and all(x > 0 for x in e["samples_ms"])
        assert min(e["samples_ms"]) <= e["median_ms"] <= max(e["samples_ms"])
    for e in r["entries"][:2]:
        assert e["check"]["passed"] is True and e["check"]["rounds"] == 3
    rounds = r["conditions"]["rounds"]
    assert len(rounds) == 3
    # the order rotates by one entry per round; input sets rotate too
    assert rounds[0]["order"] == ["candidate:11", "candidate:12", "baseline:eager"]
    assert rounds[1]["order"] == ["candidate:12", "baseline:eager", "candidate:11"]
    assert len({rc["input_seed"] for rc in rounds}) == 3
    ident = r["conditions"]["identity"]
    assert ident["torch"] and ident["triton"] and r["conditions"]["clock_drop"] is False


def test_injected_delay_is_timed(worker):
    cfg = config_of(worker)[0]
    entries = [{"id": 1, "config": cfg}, {"id": 2, "config": cfg, "inject_ms": 5.0}]
    r = worker.call("confirm", job=job(), entries=entries, rounds=2, reps=3)["result"]
    a, b = r["entries"]
    # every timed call of the slowed entry includes its 5 ms (a wall-clock spin on the CPU)
    assert min(b["samples_ms"]) >= 5.0
    assert "inject_ms" in b and "inject_ms" not in a


def test_reps_within_shares_the_budget():
    from kiln_worker.evaluation.confirm import MIN_REPS, reps_within
    # 30 s over 5 rounds x 4 entries: 1500 ms per entry and round
    assert reps_within(30.0, 5, [0.5, 10.0, 100.0, 2000.0], 20) == [20, 20, 15, MIN_REPS]
    assert reps_within(1.0, 1, [100.0], 50) == [10]   # 1000 ms / 100 ms
    assert reps_within(1.0, 1, [5000.0], 1) == [1]    # never more than asked
    assert reps_within(1.0, 3, [], 20) == []


def test_a_small_budget_times_each_entry_fewer_times(worker):
    cfg = config_of(worker)[0]
    entries = [{"id": 1, "config": cfg}, {"baseline": "eager"}]
    ans = worker.call("confirm", job=job(), entries=entries, rounds=3, reps=10, budget_s=1e-6)
    assert ans["ok"], ans
    r = ans["result"]
    assert r["conditions"]["budget_s"] == 1e-6
    for e in r["entries"]:
        assert e["reps"] == 2 and len(e["samples_ms"]) == 3 * 2
    full = worker.call("confirm", job=job(), entries=entries, rounds=3, reps=10)["result"]
    assert [e["reps"] for e in full["entries"]] == [10, 10]
    assert all(len(e["samples_ms"]) == 30 for e in full["entries"])


@pytest.mark.parametrize("bad", [0, -1, "10", True, 1e9])
def test_bad_budget_is_refused(worker, bad):
    cfg = config_of(worker)[0]
    ans = worker.call("confirm", job=job(), entries=[{"id": 1, "config": cfg}], rounds=1, reps=1, budget_s=bad)
    assert not ans["ok"] and "budget_s" in str(ans), ans


@pytest.mark.parametrize("op", ["add_wrong", "add_skip"])
def test_wrong_kernel_fails_its_recheck(op):
    """The fixture library's deliberately wrong adds: one writes a wrong last
    element, one never writes it (left as the NaN poison of its round)."""
    w = Worker()  # the fixture library
    try:
        cfgs = w.call("space", job=job(op=op))["result"]["configs"]
        ans = w.call("confirm", job=job(op=op), entries=[{"id": 5, "config": cfgs[0]}, {"baseline": "eager"}],
                     rounds=2, reps=2)
        assert ans["ok"], ans
        chk = ans["result"]["entries"][0]["check"]
        assert chk["passed"] is False and chk["round"] == 0 and chk["message"]
        assert len(ans["result"]["entries"][0]["samples_ms"]) == 4  # timed all the same
    finally:
        assert w.close() == 0, w.stderr[-3000:]


# What a confirmation of an fp32 add of N elements holds for a moment beside its
# sets and outputs: one set's float64 copy of x and y (16 N) for its reference,
# and the eager baseline's output (4 N).
MOMENT = 16 * N + 4 * N


@pytest.mark.parametrize("budget,sets,shared", [(None, 3, False), (3 * N * 16 + 2 * N * 4, 3, False),
                                                (3 * N * 16 + 2 * N * 4 - 1, 2, False),
                                                (N * 16 + N * 4, 1, True)])
def test_input_sets_and_outputs_fit_the_memory_bound(budget, sets, shared):
    """An input set of an fp32 add of N elements holds 16 N bytes (x, y and the
    float64 reference), an output 4 N: the round draws as many sets as fit the
    worker's share (less MOMENT) beside one output per finalist, and where one
    set and two outputs do not fit, the finalists share one output, each
    checked right after its own calls -- the wrong kernel still fails, the
    honest one passes."""
    env = worker_env()
    if budget is not None:
        env["KILN_WORKER_INPUT_BYTES"] = str(budget + MOMENT)  # the worker's share
    w = Worker(env=env)  # the fixture library: add, add_wrong
    try:
        ok = w.call("space", job=job())["result"]["configs"][0]
        bad = w.call("space", job=job(op="add_wrong"))["result"]["configs"][0]
        ans = w.call("confirm", job=job(), entries=[{"id": 1, "config": ok}, {"id": 2, "config": ok},
                                                    {"baseline": "eager"}], rounds=4, reps=2)
        assert ans["ok"], ans
        cond = ans["result"]["conditions"]
        assert (cond["input_sets"], cond["shared_output"]) == (sets, shared)
        assert len({rc["input_seed"] for rc in cond["rounds"]}) == sets
        assert all(e["check"]["passed"] and e["check"]["rounds"] == 4 for e in ans["result"]["entries"][:2])
        ans = w.call("confirm", job=job(op="add_wrong"), entries=[{"id": 1, "config": bad}, {"id": 2, "config": bad}],
                     rounds=2, reps=2)
        assert [e["check"]["passed"] for e in ans["result"]["entries"]] == [False, False]
    finally:
        assert w.close() == 0, w.stderr[-3000:]


def test_bad_requests_are_refused(worker):
    ans = worker.call("confirm", job=job(), entries=[{"config": {}}], rounds=1, reps=1)
    assert ans["ok"] is False and "integer 'id'" in ans["error"]
    ans = worker.call("confirm", job=job(), entries=[{"baseline": "cudnn"}])
    assert ans["ok"] is False and "baseline" in ans["error"]
    ans = worker.call("confirm", job=job(), entries=[{"baseline": "eager"}], rounds=0)
    assert ans["ok"] is False and "rounds" in ans["error"]


def test_clock_drop_rule():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))
    from kiln_worker.evaluation.confirm import clock_dropped
    assert clock_dropped({"sm_clock_mhz": 1980}, {"sm_clock_mhz": 1800}) is True
    assert clock_dropped({"sm_clock_mhz": 1980}, {"sm_clock_mhz": 1900}) is False
    assert clock_dropped({}, {"sm_clock_mhz": 1}) is False


def test_a_power_limited_round_drops_against_its_sustained_clock():
    """Its lead-in makes start-to-end NVML readings fall every round; the
    clock measured after the round against the probe's sustained clock says
    whether the round itself ran low."""
    from kiln_worker.evaluation.confirm import round_clock_dropped
    start, end = {"sm_clock_mhz": 1950}, {"sm_clock_mhz": 1500}
    hot = {"power_limited": True, "mhz": 1500.0}
    assert round_clock_dropped(start, end, 1480.0, hot) is False   # the steady state
    assert round_clock_dropped(start, end, 1400.0, hot) is True    # below 0.95 x 1500
    assert round_clock_dropped(start, end, None, hot) is False     # nothing measured
    assert round_clock_dropped(start, end, 1480.0, {"power_limited": False, "mhz": 1900.0}) is True
    assert round_clock_dropped(start, {"sm_clock_mhz": 1900}, None, {}) is False


def test_gpu_timing_loop_with_a_fake_device():
    """The device path of the timed calls, with a fake device API: cold cache,
    spin, start event, the injected sleep, the call, end event; the spin stays
    outside the timed region, the injected delay inside it."""
    c, log, clock, launch = fake_clock(cycles_per_ms=1e6)
    xs = c.start_calls(launch, 3, 5000, 0.5)()
    assert xs == pytest.approx([2.5, 2.5, 2.5])  # the 5000-cycle spin (0.005 ms) is not in them
    assert c.cycles_per_ms == pytest.approx(1e6)
    timed = log[log.index("sync", log.index("sync") + 1) + 1:]  # after the sleep calibration
    assert timed[:6] == ["flush", ("sleep", 5000), "event", ("sleep", 500000), "launch", "event"]
    assert timed[-1] == "sync" and timed.count("launch") == 3
    assert c.start_calls(launch, 2, 5000, None)() == pytest.approx([2.0, 2.0])


def test_baselines_run_with_pytorchs_default_precision_flags():
    """A GPU worker turns TF32 off for its references; a baseline puts
    PyTorch's defaults back for its call (TF32 convolutions, as a user's
    eager call has them) and the worker's flags after it, also when it raises."""
    import torch
    from kiln_worker.processes.device import as_pytorch_defaults
    mm, cd = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (mm.allow_tf32, cd.allow_tf32, torch.get_float32_matmul_precision())
    try:
        mm.allow_tf32, cd.allow_tf32 = True, False  # not PyTorch's defaults
        torch.set_float32_matmul_precision("medium")
        seen = []
        f = as_pytorch_defaults(lambda x: seen.append(
            (mm.allow_tf32, cd.allow_tf32, torch.get_float32_matmul_precision())) or x + 1)
        assert f(1) == 2
        assert seen == [(False, True, "highest")]
        assert (mm.allow_tf32, cd.allow_tf32, torch.get_float32_matmul_precision()) == (True, False, "medium")

        def boom():
            raise ValueError("x")
        with pytest.raises(ValueError):
            as_pytorch_defaults(boom)()
        assert (mm.allow_tf32, cd.allow_tf32, torch.get_float32_matmul_precision()) == (True, False, "medium")
    finally:
        mm.allow_tf32, cd.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def test_throttle_guard_judges_against_nvml_max_else_the_highest_measured():
    from kiln_worker.evaluation.confirm import _ThrottleGuard
    g = _ThrottleGuard(0.9, 1980.0, 1970.0)
    assert g.throttled(1700.0) and not g.throttled(1790.0)  # 0.9 x 1980 = 1782
    assert not g.throttled(None)
    g = _ThrottleGuard(0.9, None, 1900.0)  # no NVML: the highest measured (1900 -> 1710)
    assert g.throttled(1700.0) and not g.throttled(1720.0)
    assert not g.throttled(2000.0)          # a faster round raises the reference ...
    assert g.throttled(1720.0)              # ... to 2000 (-> 1800)
    assert g.describe(0.05, [{"retimed": 2}, {}, {"throttled": True}]) == {
        "threshold": 0.9, "recovery_s": 0.05, "reference_mhz": 2000.0, "reference": "highest measured",
        "rounds_retimed": 1, "rounds_throttled": 1}
    off = _ThrottleGuard(0.0, 1980.0, None)
    assert not off.throttled(100.0)


def test_a_throttled_round_is_timed_again_after_a_pause():
    """The retry loop with a fake device: the spin that measures the clock
    reads 1500, then 1600, then 1950 MHz (the device recovering); the first
    two attempts' samples are thrown away, each followed by the pause."""
    from kiln_worker.evaluation.confirm import THROTTLE_RETRIES, _Clock, _ThrottleGuard, retime_throttled
    log, clock = [], [0.0]

    class Dev:
        is_gpu = False

    api = FakeDeviceApi(log, clock, cycles_per_ms=1.5e6)
    c = _Clock(Dev(), {"l2_bytes": 1 << 20}, api=api)
    rates = iter([1.6e6, 1.95e6])
    attempts, pauses = [], []

    def launch():
        clock[0] += 1.0 * 1.95e6 / api.cycles_per_ms  # a compute-bound call: slower at a lower clock

    def attempt():
        xs = c.start_calls(launch, 2, 1000, None)()
        mhz = c.sm_mhz()
        attempts.append((xs, mhz))
        api.cycles_per_ms = next(rates, api.cycles_per_ms)
        return xs, mhz

    xs, mhz, thrown = retime_throttled(attempt, _ThrottleGuard(0.9, 1980.0, None), 0.05, sleep=pauses.append)
    assert [round(m) for _, m in attempts] == [1500, 1600, 1950]
    assert thrown == pytest.approx([1500.0, 1600.0]) and pauses == [0.05, 0.05]
    assert mhz == pytest.approx(1950.0) and xs == pytest.approx([1.0, 1.0])

    # a device that never recovers: THROTTLE_RETRIES retimes, then the last samples stand
    api.cycles_per_ms = 1.0e6
    pauses.clear()
    xs, mhz, thrown = retime_throttled(lambda: (c.start_calls(launch, 1, 1000, None)(), c.sm_mhz()),
                                       _ThrottleGuard(0.9, 1980.0, None), 0.05, sleep=pauses.append)
    assert len(thrown) == THROTTLE_RETRIES == len(pauses) and mhz == pytest.approx(1000.0)


def test_confirm_reports_its_throttle_settings(worker):
    cfg = config_of(worker)[0]
    r = worker.call("confirm", job=job(), entries=[{"id": 1, "config": cfg}], rounds=2, reps=2,
                    throttle_threshold=0.8, throttle_recovery_s=0.1)["result"]
    # the baselines' precision flags are recorded: PyTorch's defaults
    assert r["conditions"]["baseline_precision"] == {"matmul_tf32": False, "cudnn_tf32": True,
                                                     "matmul_precision": "highest"}
    t = r["conditions"]["throttle"]
    # on the CPU no clock is measured: nothing is judged throttled or retimed
    assert (t["threshold"], t["recovery_s"], t["rounds_retimed"], t["reference_mhz"]) == (0.8, 0.1, 0, None)
    assert all("retimed" not in rc and "sm_mhz_after" not in rc for rc in r["conditions"]["rounds"])
    for bad in ({"throttle_threshold": 1.5}, {"throttle_threshold": -0.1}, {"throttle_recovery_s": "1"}):
        ans = worker.call("confirm", job=job(), entries=[{"id": 1, "config": cfg}], rounds=1, reps=1, **bad)
        assert not ans["ok"] and next(iter(bad)) in str(ans), ans


def test_sustain_runs_back_to_back_until_the_device_time_has_passed():
    """The preheat: flush + call, back to back, in chunks of ~SUSTAIN_CHUNK_MS,
    until `seconds` of device time (the fake clock) have passed; nothing on
    the CPU or for 0 s."""
    from kiln_worker.evaluation.confirm import SUSTAIN_CHUNK_MS, _Clock
    c, log, clock, launch = fake_clock()
    li = c.sustain(launch, 0.1, call_ms=2.0)  # 100 ms of 2 ms calls: 5 chunks of 10
    assert int(SUSTAIN_CHUNK_MS / 2.0) == 10 and li.calls == 50 and li.ms == pytest.approx(100.0)
    assert li.in_flight == 10 and li.settled is None  # a fixed time: no settling asked for
    # double-buffered: each chunk's end is waited for with the next chunk
    # already queued (never the whole device), and one chunk is left running
    waits = [i for i, x in enumerate(log) if x == "event-sync"]
    assert [log[:i].count("launch") for i in waits] == [20, 30, 40, 50, 60]
    assert log.count("launch") == 60 and log.count("flush") == 60 and "sync" not in log
    assert log[1:3] == ["flush", "launch"]  # each call after the L2 flush, as the timed calls run
    assert c.sustain(launch, 0.0, call_ms=2.0).calls == 0
    assert _Clock(_Host(), None).sustain(launch, 1.0, call_ms=2.0).calls == 0  # the CPU: no preheat


def test_settled_compares_the_last_window_with_the_one_three_windows_before():
    from kiln_worker.evaluation.confirm import SETTLE_LAG_WINDOWS, SETTLE_TOL, settled
    assert SETTLE_LAG_WINDOWS == 3 and SETTLE_TOL == 0.01
    flat = [20.0] * 8
    assert settled(flat, 2) and not settled(flat[:7], 2)  # needs (3 + 1) windows of 2 chunks
    # 20 -> 20.3 over the lag: 1.5% apart, not settled; 0.8% apart, settled
    assert not settled([20.0, 20.0] + [20.1] * 4 + [20.3, 20.3], 2)
    assert settled([20.0, 20.0] + [20.1] * 4 + [20.16, 20.16], 2)
    # only the two windows count, not what lies between them
    assert settled([20.0, 20.0, 30.0, 5.0, 50.0, 1.0, 20.1, 20.1], 2)
    assert not settled([], 1) and not settled([20.0] * 8, 0)


def test_an_adaptive_lead_in_runs_until_the_per_call_time_stops_changing():
    """A kernel that slows down as the clock falls (1.0 -> 1.1 ms a call over
    the first 600 ms, then steady): the lead-in runs past its minimum until
    the last 100 ms match the 100 ms that ended 300 ms before; one that is
    still slowing at PREHEAT_MAX_S stops there, not settled."""
    from kiln_worker.evaluation.confirm import _Clock

    def run(ramp_ms, max_s):
        log, clock = [], [0.0]
        c = _Clock(_Host(), {"l2_bytes": 1 << 20}, api=FakeDeviceApi(log, clock))

        def launch():
            clock[0] += 1.0 + 0.1 * min(clock[0], ramp_ms) / ramp_ms
        return c.sustain(launch, 0.1, call_ms=1.0, max_s=max_s)

    li = run(600.0, 2.0)
    assert li.settled is True and 700.0 < li.ms < 1100.0
    assert li.window_ms == sorted(li.window_ms) and li.window_ms[0] < 1.02 and li.window_ms[-1] > 1.09
    slow = run(2000.0, 0.5)  # 1.5% slower every 300 ms
    assert slow.settled is False and 500.0 <= slow.ms < 530.0
    flat = run(1e-9, 2.0)  # 1.1 ms from the start: settled as soon as there are 4 windows of 5 chunks
    assert flat.settled is True and flat.calls == 400 and flat.ms == pytest.approx(440.0, abs=0.2)  # (the first call starts at 1.0)


def test_timed_calls_started_back_to_back_are_read_after_one_wait():
    """A round's lead-in and its entries' timed calls are enqueued with no
    wait for the device between them (an idle GPU lets the clock back up);
    the one wait comes when the times are read."""
    from kiln_worker.evaluation.confirm import _Clock
    log, clock = [], [0.0]

    class Dev:
        is_gpu = False

    def launch(ms):
        def f():
            clock[0] += ms
            log.append(("launch", ms))
        return f

    c = _Clock(Dev(), {"l2_bytes": 1 << 20}, api=FakeDeviceApi(log, clock))
    c.enqueue_calls(launch(3.0), 4)
    first = c.start_calls(launch(1.0), 2, 100, None)
    second = c.start_calls(launch(2.0), 3, 100, None)
    assert "sync" not in log                        # nothing waited for yet
    assert log[:2] == ["flush", ("launch", 3.0)] and log.count(("launch", 3.0)) == 4
    assert first() == pytest.approx([1.0, 1.0]) and second() == pytest.approx([2.0, 2.0, 2.0])
    assert log.index("sync") > max(i for i, x in enumerate(log) if x == ("launch", 2.0))


def test_a_job_is_power_limited_when_its_sustained_clock_falls_below_the_threshold(monkeypatch):
    """The probe: the best finalist back to back, then the SM clock measured
    by the spin; below STEADY_BELOW of NVML's maximum the job is
    power-limited. A fake device whose clock reads 1500, 1900 or 1950 MHz."""
    import contextlib
    from kiln_worker.evaluation import confirm
    monkeypatch.setattr(confirm, "_lock", lambda dev, shared, kind: contextlib.nullcontext())

    class Gpu:
        is_gpu = True

    def probe(cycles_per_ms, preheat_s=0.05, nvml_max=1980.0, dev=Gpu()):
        log, clock = [], [0.0]
        api = FakeDeviceApi(log, clock, cycles_per_ms=cycles_per_ms)
        c = confirm._Clock(dev, {"l2_bytes": 1 << 20}, api=api)

        def launch():
            clock[0] += 1.0
        lead = {"fns": [launch], "call_ms": 1.0}
        return confirm._probe_sustained(dev, c, lead, preheat_s, nvml_max)

    assert confirm.STEADY_BELOW == 0.97
    hot = probe(1.5e6)
    assert hot["power_limited"] is True and hot["mhz"] == pytest.approx(1500.0)
    # at least 50 ms, then until settled: a constant 1 ms call settles once
    # there are 4 windows of 100 ms (5 chunks of 20 calls each) to compare
    assert hot["probe_calls"] == 400 and hot["preheat_s"] == 0.05 and hot["settled"] is True
    assert hot["probe_ms"] == pytest.approx(400.0) and hot["flush_ms"] == pytest.approx(0.0)  # the fake flush is free
    assert hot["window_ms"] == pytest.approx([1.0] * 4)
    cool = probe(1.95e6)
    assert cool["power_limited"] is False and cool["mhz"] == pytest.approx(1950.0)
    # attention on an H200 settles near 1830 of 1980 MHz: under 0.97 x the maximum
    assert probe(1.9e6)["power_limited"] is True
    # nothing probed: preheat off, no NVML maximum, the CPU
    assert probe(1.5e6, preheat_s=0) == {"preheat_s": 0}
    assert probe(1.5e6, nvml_max=None) == {"preheat_s": 0.05}

    class Cpu:
        is_gpu = False
    assert probe(1.5e6, dev=Cpu()) == {"preheat_s": 0.05}
    # the guard of a power-limited job judges against its sustained clock
    g = confirm._ThrottleGuard(0.9, hot["mhz"], None, label="sustained clock of this job")
    assert not g.throttled(1400.0) and g.throttled(1300.0)  # 0.9 x 1500 = 1350
    assert g.describe(0.05, [])["reference"] == "sustained clock of this job"


@pytest.mark.parametrize("bad", [-0.1, 61, "1", True])
def test_bad_preheat_is_refused(worker, bad):
    cfg = config_of(worker)[0]
    ans = worker.call("confirm", job=job(), entries=[{"id": 1, "config": cfg}], rounds=1, reps=1, preheat_s=bad)
    assert not ans["ok"] and "preheat_s" in str(ans), ans


def test_a_call_with_no_spin_enqueues_none():
    """start_calls with 0 cycles enqueues no spin at all (a spin idles the
    GPU between the calls); with cycles, one before each timed call."""
    c, log, clock, launch = fake_clock(call_ms=0.5)
    c.start_calls(launch, 3, 0, None)()
    assert log.count("launch") == 3 and not [x for x in log if isinstance(x, tuple) and x[0] == "sleep"]
    log.clear()
    c.start_calls(launch, 3, 1000, None)()
    assert log.count(("sleep", 1000)) == 3


def _entry_call(label: int, host_s: float, call_ms: float, cycles: int = 1000, reps: int = 20) -> dict:
    return {"entry": {"id": label}, "host_s": host_s, "call_ms": call_ms, "cycles": cycles, "reps": reps}


def test_host_deficit_counts_what_the_enqueues_fall_behind_in_a_round():
    """host_deficit_ms: per entry, reps x (HOST_MARGIN x host enqueue - device
    time with the flush), never below 0; summed over the round's entries."""
    from kiln_worker.evaluation.confirm import HOST_MARGIN, host_deficit_ms
    assert HOST_MARGIN == 1.5
    # a 0.4 ms GEMM enqueued in 40 us: 60 us < 0.45 ms, nothing behind
    assert host_deficit_ms([_entry_call(1, 40e-6, 0.4)], 0.05) == 0.0
    # an eager chain enqueued in 250 us on a 5 us kernel + 50 us flush:
    # 20 x (375 - 55) us = 6.4 ms behind
    assert host_deficit_ms([_entry_call(1, 250e-6, 0.005)], 0.05) == pytest.approx(6.4)
    # the round's entries add up; the fast one takes nothing back
    both = [_entry_call(1, 250e-6, 0.005), _entry_call(2, 40e-6, 0.4, reps=100)]
    assert host_deficit_ms(both, 0.05) == pytest.approx(6.4)


def test_spins_go_for_every_entry_of_a_job_or_for_none():
    """drop_spins: one rule for a job's entries. Where the round's enqueues
    fall behind the device by at most HOST_BUFFER_MS in all, no entry has a
    spin (a spun neighbour would hand its cooler clock to the next entry),
    even one whose own enqueue is slower than its call; past the buffer
    every entry keeps its spin. With a shared output (a wait after each
    entry) none may fall behind at all. The rounds start with a lead-in
    where the spins went, or the job is power-limited. Nothing probed:
    spins stay and no lead-in."""
    from kiln_worker.evaluation.confirm import HOST_BUFFER_MS, SUSTAIN_CHUNK_MS, drop_spins
    assert HOST_BUFFER_MS == SUSTAIN_CHUNK_MS / 2

    def calls(slow_host_s=250e-6):
        return [_entry_call(1, 40e-6, 0.3), _entry_call(2, 40e-6, 0.005), _entry_call(3, slow_host_s, 0.005)]

    cool = {"power_limited": False, "flush_ms": 0.05, "probe_ms": 500.0}
    cs = calls()  # 20 x 5 us + 6.4 ms = 6.5 ms behind in all: within the 10 ms buffer
    assert drop_spins(cs, cool) is True
    assert [c["cycles"] for c in cs] == [0, 0, 0]
    assert cool["spin_free"] == ["candidate:1", "candidate:2", "candidate:3"]
    assert cool["host_deficit_ms"] == pytest.approx(6.5)
    behind = {"power_limited": False, "flush_ms": 0.05}
    cs = calls(slow_host_s=500e-6)  # 0.1 + 20 x (750 - 55) us = 14 ms: past the buffer
    assert drop_spins(cs, behind) is False and behind["spin_free"] == []
    assert [c["cycles"] for c in cs] == [1000] * 3 and behind["host_deficit_ms"] == pytest.approx(14.0)
    shared = {"power_limited": False, "flush_ms": 0.05}
    cs = calls()  # with a wait after each entry, entry 3 would time the host
    assert drop_spins(cs, shared, shared_output=True) is False and [c["cycles"] for c in cs] == [1000] * 3
    shared_ok = {"power_limited": False, "flush_ms": 0.05}
    cs = [_entry_call(1, 40e-6, 0.3), _entry_call(2, 20e-6, 0.005)]  # 30 us < 55 us
    assert drop_spins(cs, shared_ok, shared_output=True) is True and [c["cycles"] for c in cs] == [0, 0]
    hot = {"power_limited": True, "flush_ms": 0.0, "probe_ms": 500.0}
    assert drop_spins(calls(slow_host_s=500e-6), hot) is True  # a power-limited job: always a lead-in
    unprobed = {"preheat_s": 0.3}
    cs = calls()
    assert drop_spins(cs, unprobed) is False and [c["cycles"] for c in cs] == [1000] * 3
    assert "spin_free" not in unprobed


def test_the_flush_is_timed_on_its_own():
    """_Clock.flush_ms: the median of FLUSH_SAMPLES flushes, each between two
    events, on a fake device whose flush takes 0.05 ms (one takes 3 ms)."""
    from kiln_worker.evaluation.confirm import FLUSH_SAMPLES
    c, log, clock, launch = fake_clock()
    times = iter([0.05, 3.0, 0.05, 0.05, 0.06] * 2)

    class Flush:
        def zero_(self):
            clock[0] += next(times)
            log.append("flush")
    c.cache = Flush()
    assert FLUSH_SAMPLES == 5
    assert c.flush_ms() == pytest.approx(0.05)
    assert log.count("flush") == 5 and log.count("sync") == 1


def test_a_rounds_lead_in_settles_only_for_a_power_limited_job():
    """round_lead_in: a power-limited job's runs at least preheat_s and until
    it settles (at most its probe's time); any other's is one chunk of
    HOST_LEAD_S with the next chunk left running, which puts the host ahead."""
    from kiln_worker.evaluation.confirm import HOST_LEAD_S, SUSTAIN_CHUNK_MS, round_lead_in
    c, log, clock, launch = fake_clock(call_ms=0.5)
    lead = {"fns": [None, launch], "call_ms": 0.5}
    short = round_lead_in(c, lead, 1, 0.3, {"power_limited": False, "probe_ms": 600.0})
    assert HOST_LEAD_S == SUSTAIN_CHUNK_MS / 1e3 and short.settled is None
    assert short.ms == pytest.approx(20.0) and short.calls == 40 and short.in_flight == 40
    assert log.count("launch") == 80 and "sync" not in log
    log.clear()
    hot = round_lead_in(c, lead, 1, 0.3, {"power_limited": True, "probe_ms": 600.0})
    assert hot.settled is True and 300.0 <= hot.ms <= 600.0
