"""A scripted evaluator for engine tests: speaks the worker protocol (JSON
lines on stdin / stdout), claims to be an NVIDIA H200, offers `add` configs
BLOCK = 64 x 1..N with a latency that grows with BLOCK, evaluates nothing, and
appends every evaluate request's benchmark settings to $FAKE_EVALUATOR_LOG.

The engine starts it as `$KILN_PYTHON -m kiln_worker`; tests point KILN_PYTHON
at fake_python.sh next to this file, which runs this script instead.
"""
import json
import os
import sys

N_CONFIGS = int(os.environ.get("FAKE_EVALUATOR_CONFIGS", "12"))


def latency_ms(config):
    return 0.1 * config["BLOCK"] / 64  # BLOCK 64: 0.1 ms, 128: 0.2 ms, ...


def answer(req):
    m = req.get("method")
    if m == "hello":
        device = {"kind": "cuda", "name": "NVIDIA H200"}
        for var in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):  # the binding, as the real worker says
            if os.environ.get(var) is not None:
                device[var.lower()] = os.environ[var]
        return {"python": "3", "torch": "fake", "triton": "3.6.0", "worker": "fake", "pid": os.getpid(),
                "device": device, "templates": {}, "operators": ["add"],
                "methods": ["hello", "space", "evaluate"]}
    if m == "traffic":
        return {"traffic": [{"bytes": 1e6, "flops": 1e5} for _ in req.get("jobs", [])]}
    if m == "space":
        return {"configs": [{"BLOCK": 64 * i, "num_warps": 4, "num_stages": 1} for i in range(1, N_CONFIGS + 1)],
                "traffic": {"bytes": 1e6, "flops": 1e5}}
    if m == "evaluate":
        bench = (req.get("job") or {}).get("benchmark") or {}
        with open(os.environ["FAKE_EVALUATOR_LOG"], "a") as f:
            f.write(json.dumps({"config": req["config"], "benchmark": bench}) + "\n")
        ms = latency_ms(req["config"])
        cutoff = bench.get("cutoff_ms")
        runs = 20 if cutoff and ms > cutoff else bench.get("runs", 100)
        return {"status": "ok", "message": "", "exec_device": "NVIDIA H200",
                "correctness": {"seeds": 1, "passed": True, "max_abs_err": 0.0, "max_rel_err": 0.0},
                "latency": {"device": "NVIDIA H200", "runs": runs, "warmup": 0, "median_ms": ms, "mean_ms": ms,
                            "p99_ms": ms, "min_ms": ms, "max_ms": ms, "stddev_ms": 0.0},
                "artifact": None, "traffic": {"bytes": 1e6, "flops": 1e5},
                "timings": {"compile_s": 0.0, "check_s": 0.0, "bench_s": 0.0}}
    raise ValueError(f"unknown method {m!r}")


for line in sys.stdin:
    if not line.strip():
        continue
    req = json.loads(line)
    try:
        out = {"id": req.get("id"), "ok": True, "result": answer(req)}
    except Exception as exc:  # noqa: BLE001
        out = {"id": req.get("id"), "ok": False, "error": str(exc)}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
