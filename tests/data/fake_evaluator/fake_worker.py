"""A scripted evaluator for engine tests: speaks the worker protocol (JSON
lines on stdin / stdout), claims to be an NVIDIA H200, offers `add` configs
BLOCK = 64 x 1..N with a latency that grows with BLOCK, evaluates nothing, and
appends every evaluate request's benchmark settings to $FAKE_EVALUATOR_LOG.
It answers `confirm` (the confirmation round) with scripted samples around
each finalist's latency: deterministic noise of +-1%, and the config whose
BLOCK is $FAKE_CONFIRM_FASTEST (if set) at 0.4x its latency there, so a test
sees the selection follow the confirmed medians; the eager baseline at 0.5 ms,
compile at 0.3 ms; $FAKE_CONFIRM_SCALE multiplies every candidate's samples
(a slower kernel for the nightly's test); $FAKE_CONFIRM_WRONG fails every
finalist's re-check. Confirm requests are logged to
$FAKE_EVALUATOR_LOG.confirm.

It also answers `package_info` (docs/package-format.md) with a launch derived
from the request alone -- the job's shape and dtype, the config's BLOCK and the
artifact's argument list and grid -- so `kiln package` can be tested on a real
catalog before or without the real method; each request is appended to
$FAKE_PACKAGE_INFO_LOG when set.

Misbehaving modes (the engine must trust nothing a worker says):
$FAKE_ARTIFACT_PATH names a file the worker claims as every candidate's code
object, with that file's true sha256 (a path outside the run, a symlink
out, ...); $FAKE_ARTIFACT_LIE writes a real code object into the request's
artifact_dir but claims a wrong sha256; $FAKE_MALFORMED, a comma-separated
list of modes, answers the evaluate requests of the configs BLOCK = 64 x
2, 3, ... with one malformed reply each, in that order (modes: result_string,
status_number, latency_string, ok_string, no_result, artifact_string,
traffic_string, not_object, sha_missing; and the chaos suite's, which
misbehave as a process: hang (never answers), crash (SIGSEGV), exit (exits
3 without answering), huge (a 65 MiB line, over the engine's 64 MiB bound),
garbage (a line of binary junk, then the real answer), status_unknown (a
status no evaluation can have), artifact_outside / artifact_symlink /
artifact_dotdot / artifact_kind_null (claims $FAKE_OUTSIDE_FILE, with its true sha256, by its
path, through a symlink in the artifact_dir, as artifact_dir/../..
/that file, or by its path with kind and kernel_name null)). $FAKE_EVALUATOR_DELAY_S sleeps that long before each evaluate
answer (a run long enough to be killed at random points).
$FAKE_STATUSES, a comma-separated list of statuses, answers the evaluate
requests of the configs BLOCK = 64 x 1, 2, ... with that status instead of ok
("" or "ok" leaves one ok): "crash" as the real worker reports a candidate out
of GPU memory on a shared GPU, "incorrect" as a wrong result, "compile_error"
as a compiler's refusal (kiln retry's tests: which evaluations are verdicts).

Start-up failures (the slot pool's policy, explore/slot_pool.h):
$FAKE_HELLO_FAIL=always answers every hello with an error; a number N fails
the first N hellos of all the workers sharing the counter file
$FAKE_HELLO_COUNTER (every hello counts there, under a lock); $FAKE_HELLO_FAIL_GPU
fails the hello of a worker bound (CUDA_VISIBLE_DEVICES) to that GPU.

The engine starts it as `$KILN_PYTHON -m kiln_worker`; tests point KILN_PYTHON
at fake_python.sh next to this file, which runs this script instead.
"""
import hashlib
import json
import os
import signal
import sys
import time

N_CONFIGS = int(os.environ.get("FAKE_EVALUATOR_CONFIGS", "12"))


def latency_ms(config):
    return 0.1 * config["BLOCK"] / 64  # BLOCK 64: 0.1 ms, 128: 0.2 ms, ...


def hello_refused():
    """Whether this hello fails under $FAKE_HELLO_FAIL / $FAKE_HELLO_FAIL_GPU.
    Every hello counts one byte in $FAKE_HELLO_COUNTER when it is set."""
    seen = 0
    if os.environ.get("FAKE_HELLO_COUNTER"):
        import fcntl
        with open(os.environ["FAKE_HELLO_COUNTER"], "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            seen = len(f.read())
            f.write("x")
    gpu = os.environ.get("FAKE_HELLO_FAIL_GPU")
    if gpu is not None and os.environ.get("CUDA_VISIBLE_DEVICES") == gpu:
        return True
    fail = os.environ.get("FAKE_HELLO_FAIL", "")
    return fail == "always" or (fail.isdigit() and seen < int(fail))


def answer(req):
    m = req.get("method")
    if m == "hello":
        if hello_refused():
            raise RuntimeError("fake evaluator: hello refused (FAKE_HELLO_FAIL)")
        device = {"kind": "cuda", "name": "NVIDIA H200"}
        for var in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):  # the binding, as the real worker says
            if os.environ.get(var) is not None:
                device[var.lower()] = os.environ[var]
        return {"python": "3", "torch": "fake", "triton": "3.6.0", "worker": "fake", "pid": os.getpid(),
                "device": device, "templates": {}, "operators": ["add"],
                "methods": ["hello", "space", "evaluate", "package_info"]}
    if m == "traffic":
        return {"traffic": [{"bytes": 1e6, "flops": 1e5} for _ in req.get("jobs", [])]}
    if m == "space":
        return {"configs": [{"BLOCK": 64 * i, "num_warps": 4, "num_stages": 1} for i in range(1, N_CONFIGS + 1)],
                "traffic": {"bytes": 1e6, "flops": 1e5}}
    if m == "evaluate":
        if os.environ.get("FAKE_EVALUATOR_DELAY_S"):
            time.sleep(float(os.environ["FAKE_EVALUATOR_DELAY_S"]))
        bench = (req.get("job") or {}).get("benchmark") or {}
        with open(os.environ["FAKE_EVALUATOR_LOG"], "a") as f:
            f.write(json.dumps({"config": req["config"], "benchmark": bench}) + "\n")
        ms = latency_ms(req["config"])
        cutoff = bench.get("cutoff_ms")
        runs = 20 if cutoff and ms > cutoff else bench.get("runs", 100)
        art = None
        if os.environ.get("FAKE_ARTIFACT_PATH"):
            path = os.environ["FAKE_ARTIFACT_PATH"]
            with open(path, "rb") as f:
                art = {"kind": "cubin", "kernel_name": "k", "path": path,
                       "sha256": hashlib.sha256(f.read()).hexdigest()}
        elif os.environ.get("FAKE_ARTIFACT_LIE"):
            path = os.path.join(req["artifact_dir"], f"k{req['config']['BLOCK']}.cubin")
            with open(path, "wb") as f:
                f.write(b"code object bytes")
            art = {"kind": "cubin", "kernel_name": "k", "path": path, "sha256": "0" * 64}
        scripted = scripted_status(req["config"])
        if scripted:
            return scripted
        return {"status": "ok", "message": "", "exec_device": "NVIDIA H200",
                "correctness": {"seeds": 1, "passed": True, "max_abs_err": 0.0, "max_rel_err": 0.0},
                "latency": {"device": "NVIDIA H200", "runs": runs, "warmup": 0, "median_ms": ms, "mean_ms": ms,
                            "p99_ms": ms, "min_ms": ms, "max_ms": ms, "stddev_ms": 0.0},
                "artifact": art, "traffic": {"bytes": 1e6, "flops": 1e5},
                "timings": {"compile_s": 0.0, "check_s": 0.0, "bench_s": 0.0}}
    if m == "package_info":
        return package_info(req)
    if m == "confirm":
        with open(os.environ["FAKE_EVALUATOR_LOG"] + ".confirm", "a") as f:
            f.write(json.dumps({"confirm": req["entries"], "rounds": req["rounds"], "reps": req["reps"]}) + "\n")
        n = req["rounds"] * req["reps"]
        fastest = os.environ.get("FAKE_CONFIRM_FASTEST")
        scale = float(os.environ.get("FAKE_CONFIRM_SCALE", "1"))
        entries = []
        for e in req["entries"]:
            if "baseline" in e:
                base = {"eager": 0.5, "compile": 0.3}[e["baseline"]]
                entries.append({"baseline": e["baseline"], "samples_ms": noisy(base, n)})
                continue
            ms = latency_ms(e["config"]) * scale
            if fastest and e["config"]["BLOCK"] == int(fastest):
                ms *= 0.4
            check = {"passed": True, "rounds": req["rounds"], "max_abs_err": 0.0}
            if os.environ.get("FAKE_CONFIRM_WRONG"):  # every finalist wrong while timed
                check = {"passed": False, "round": 0, "message": "scripted: wrong after timing"}
            entries.append({"id": e["id"], "samples_ms": noisy(ms, n), "check": check})
        rounds = [{"round": r, "start": {"sm_clock_mhz": 1980, "temperature_c": 40, "power_w": 300},
                   "end": {"sm_clock_mhz": 1980, "temperature_c": 41, "power_w": 310}, "clock_drop": False}
                  for r in range(req["rounds"])]
        return {"basis": "device", "device": "NVIDIA H200", "rounds": req["rounds"], "reps": req["reps"],
                "entries": entries,
                "conditions": {"identity": {"name": "NVIDIA H200", "uuid": "GPU-fake", "driver": "fake"},
                               "rounds": rounds, "clock_drop": False},
                "timings": {"setup_s": 0.0, "time_s": 0.0, "kernel_s": sum(sum(e["samples_ms"]) for e in entries) / 1e3}}
    raise ValueError(f"unknown method {m!r}")


def scripted_status(config):
    """The evaluate answer $FAKE_STATUSES scripts for this config, else None."""
    statuses = os.environ.get("FAKE_STATUSES", "").split(",")
    i = config["BLOCK"] // 64 - 1
    status = statuses[i].strip() if 0 <= i < len(statuses) else ""
    if status in ("", "ok"):
        return None
    messages = {
        "crash": "out of GPU memory twice, the second time holding the GPU alone (other workers' cached memory "
                 "still counts; use fewer --workers per GPU): CUDA out of memory. Tried to allocate 2.00 GiB",
        "incorrect": "max abs error 0.5 > atol 1e-05 at seed 0",
        "compile_error": "on NVIDIA H200: CompilationError: scripted",
    }
    res = {"status": status, "message": messages.get(status, "scripted " + status), "exec_device": "NVIDIA H200",
           "correctness": None, "latency": None, "artifact": None,
           "timings": {"compile_s": 0.0, "check_s": 0.0, "bench_s": 0.0}}
    if status == "incorrect":
        res["correctness"] = {"seeds": 1, "passed": False, "max_abs_err": 0.5, "max_rel_err": 1.0}
    return res


def package_info(req):
    job, config, art = req["job"], req.get("config") or {}, req["artifact"]
    if os.environ.get("FAKE_PACKAGE_INFO_LOG"):
        with open(os.environ["FAKE_PACKAGE_INFO_LOG"], "a") as f:
            f.write(json.dumps({k: req.get(k) for k in ("job", "config", "neighbours", "verify_seed")}) + "\n")
    shape, dtype = list(job["shape"]), job["dtype"]
    dims = [f"s{i}" for i in range(len(shape))]
    args = [a for a in art.get("args") or [] if isinstance(a, dict)]
    pointers = [a for a in args if str(a.get("type", "")).startswith("*") and not a.get("hidden")]
    if not pointers:
        raise ValueError("artifact has no pointer arguments")
    tensors = [{"name": a["name"].removesuffix("_ptr"), "role": "output" if i == len(pointers) - 1 else "input",
                "dtype": dtype, "shape": dims} for i, a in enumerate(pointers)]
    numel = 1
    for d in shape:
        numel *= d
    grid = [str(g) for g in art.get("grid") or [1, 1, 1]]
    block = config.get("BLOCK") or config.get("BLOCK_SIZE")
    if block and (numel + block - 1) // block == int(grid[0]):
        grid[0] = f"cdiv({'*'.join(dims)}, {block})"
    bound, n_int = [], 0
    for a in args:
        ty = str(a.get("type", ""))
        if a.get("hidden"):
            bind = {"scratch": "global" if "global" in a["name"] else "profile"}
        elif ty.startswith("*"):
            bind = {"tensor": pointers.index(a)}
        elif ty.startswith("i") or ty.startswith("u"):
            bind = {"expr": dims[n_int % len(dims)]}
            n_int += 1
        else:
            bind = {"value": 1e-5}
        bound.append({**a, "bind": bind})
    assume = [{"expr": dims[-1], "multiple_of": 16}] if shape[-1] % 16 == 0 else []
    if req.get("neighbours"):
        rng = {"dims": [{"min": 1, "max": 2 * d, "multiple_of": 1} for d in shape],
               "verified_shapes": [shape, [*shape[:-1], shape[-1] + 1]]}
    else:
        rng = {"exact": True}
    tol = 1e-5 if dtype == "fp32" else 1e-2
    count = numel
    verify = {"format": "kiln-verify/1", "seed": req["verify_seed"], "shape": shape,
              "inputs": [{"tensor": i, "lo": -1.0, "hi": 1.0} for i in range(len(tensors) - 1)],
              "outputs": [{"tensor": len(tensors) - 1, "atol": tol, "rtol": tol, "samples": [[0, 0.0]],
                           "sum": 0.0, "abs_sum": float(count) / 2, "count": count}]}
    return {"tensors": tensors, "grid": grid, "args": bound, "assume": assume, "range": rng, "verify": verify}



def noisy(ms, n):
    """n samples of ms with deterministic +-1% noise (a fixed sequence)."""
    return [ms * (1 + 0.01 * (((i * 7919) % 201) - 100) / 100) for i in range(n)]


def malformed(req, out):
    """The malformed reply for this request under $FAKE_MALFORMED, else `out`."""
    modes = [m for m in os.environ.get("FAKE_MALFORMED", "").split(",") if m]
    if req.get("method") != "evaluate" or not out.get("ok"):
        return out
    i = req["config"]["BLOCK"] // 64 - 2  # BLOCK 128 takes the first mode
    if not 0 <= i < len(modes):
        return out
    mode, res = modes[i], out["result"]
    if mode == "result_string":
        out["result"] = "not an object"
    elif mode == "status_number":
        res["status"] = 7
    elif mode == "latency_string":
        res["latency"] = "fast"
    elif mode == "ok_string":
        out["ok"] = "yes"
    elif mode == "no_result":
        del out["result"]
    elif mode == "artifact_string":
        res["artifact"] = "/etc/passwd"
    elif mode == "traffic_string":
        res["traffic"] = {"bytes": "many"}
    elif mode == "not_object":
        return ["a", "list"]
    elif mode == "sha_missing":
        res["artifact"] = {"kind": "cubin", "path": os.path.join(req["artifact_dir"], "x.cubin")}
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)
    elif mode == "exit":
        sys.stderr.write("fake evaluator: exiting without an answer\n")
        sys.stderr.flush()
        os._exit(3)
    elif mode == "huge":
        res["message"] = "x" * (65 << 20)
    elif mode == "garbage":
        sys.stdout.buffer.write(b"\xff\xfe\x00garbage\x80{\"id\": \n")
        sys.stdout.flush()
    elif mode == "status_unknown":
        res["status"] = "triumph"
    elif mode.startswith("artifact_"):
        outside = os.environ["FAKE_OUTSIDE_FILE"]
        with open(outside, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        path = outside
        if mode == "artifact_symlink":
            path = os.path.join(req["artifact_dir"], "k.cubin")
            os.symlink(outside, path)
        elif mode == "artifact_dotdot":
            path = os.path.join(req["artifact_dir"], *[".."] * 16) + os.path.abspath(outside)
        res["artifact"] = {"kind": "cubin", "kernel_name": "k", "path": path, "sha256": sha}
        if mode == "artifact_kind_null":  # optional strings as null: absent, not a type error
            res["artifact"].update(kind=None, kernel_name=None)
    return out


for line in sys.stdin:
    if not line.strip():
        continue
    req = json.loads(line)
    try:
        out = {"id": req.get("id"), "ok": True, "result": answer(req)}
    except Exception as exc:  # noqa: BLE001
        out = {"id": req.get("id"), "ok": False, "error": str(exc)}
    out = malformed(req, out)
    if not isinstance(out, dict):  # a reply that is no object: the engine cannot match its id
        sys.stdout.write(json.dumps({"id": req.get("id"), "ok": True, "result": out}) + "\n")
        sys.stdout.flush()
        continue
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
