"""The JSON-lines protocol loop (the protocol: src/evaluate/protocol.json; its names: protocol.py)."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
from typing import Any, BinaryIO, TextIO

from .. import __version__, protocol
from ..log import log
from ..processes.device import Device
from .jsonsafe import json_safe

EXIT_DEVICE_LOST = protocol.EXIT_DEVICE_LOST


def protect_stdout() -> TextIO:
    """Keeps the real stdout for answers; everything else written to fd 1 or
    sys.stdout (stray prints, C libraries, subprocesses) goes to stderr."""
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(answer_fd, "w", encoding="utf-8", buffering=1)




class Server:
    def __init__(self, dev: Device, out: TextIO, startup: dict | None = None, warm=None):
        from ..evaluation.evaluate import Evaluation
        from ..evaluation.templates import Library
        from ..evaluation.utilisation import UtilisationSamples
        self.dev = dev
        self.out = out
        self.startup = startup if startup is not None else {}  # seconds per start-up step (main)
        self.warm = warm  # device.WarmUp, running while the first requests are served
        self.lib = Library()
        self.evaluation = Evaluation(self.lib, dev, warm)
        self._generated = None  # GeneratedEvaluator, created by the first generated request
        # the driver's utilisation samples since the last answer (utilisation.py)
        self.util = UtilisationSamples() if dev.is_gpu else None
        if self.util is not None:
            self.util.start()  # NVML found beside hello, not in the first answer
        self._request_t0 = time.perf_counter()  # when the request being served was read (serve)

    # -- answers ----------------------------------------------------------
    def send(self, obj: dict) -> None:
        try:
            line = json.dumps(obj, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            line = json.dumps({"id": obj.get("id"), "ok": False,
                               "error": f"internal error: answer not serialisable: {exc}"})
        self.out.write(line + "\n")
        self.out.flush()

    def error(self, rid: Any, message: str) -> None:
        self.send({"id": rid, "ok": False, "error": message})

    # -- loop -------------------------------------------------------------
    def serve(self, stdin: BinaryIO) -> int:
        while True:
            raw = stdin.readline()
            self._request_t0 = time.perf_counter()
            if not raw:
                return 0
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                req = json.loads(text)
            except ValueError as exc:
                self.error(None, f"malformed request (not JSON): {exc}")
                continue
            if not isinstance(req, dict):
                self.error(None, "malformed request: expected a JSON object")
                continue
            rid = req.get("id")
            if rid is not None and (not isinstance(rid, int) or isinstance(rid, bool)):
                self.error(None, "malformed request: 'id' must be an integer")
                continue
            method = req.get("method")
            handler = getattr(self, method) if method in protocol.METHODS else None
            if handler is None:
                self.error(rid, protocol.unknown_method(method))
                continue
            try:
                result = handler(req)
            except Exception as exc:
                self.error(rid, self.describe_failure(exc))
                continue
            self.send({"id": rid, "ok": True, "result": json_safe(result)})
            if self.evaluation.device_lost:
                log("the GPU context is unusable after the last crash; exiting so the engine "
                    "starts a fresh worker")
                return EXIT_DEVICE_LOST

    def describe_failure(self, exc: BaseException) -> str:
        from ..evaluation.evaluate import BadRequest
        from ..sandbox.generated import BadGeneratedRequest
        from ..sandbox.reference_module import ReferenceError_
        from ..packaging.package_info import PackageInfoError
        from ..evaluation.templates import TemplateError
        if isinstance(exc, PackageInfoError):
            return f"package_info: {exc}"
        if isinstance(exc, (BadRequest, BadGeneratedRequest)):
            return f"malformed request: {exc}"
        if isinstance(exc, ReferenceError_):
            return f"reference module: {exc}"
        if isinstance(exc, TemplateError):
            return f"template library: {exc}"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        tail = "\n".join(tb.rstrip().splitlines()[-15:])
        return f"internal error: {type(exc).__name__}: {exc}\n{tail}"

    def require_device(self) -> None:
        if self.dev.error:
            raise RuntimeError(self.dev.error)

    # -- methods ------------------------------------------------------------
    def hello(self, req: dict) -> dict:
        self.require_device()
        import torch
        import triton
        t0 = time.perf_counter()
        templates = self.lib.template_hashes()
        operators = list(self.lib.operators.keys())
        startup = {**self.startup, **(self.warm.phases if self.warm is not None and self.warm.done() else {})}
        startup["hello_s"] = time.perf_counter() - t0  # this answer's own work (the templates' digests)
        return {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "worker": __version__,
            "pid": os.getpid(),
            "device": self.dev.as_json(),
            "startup": startup,
            "kernels_dir": str(self.lib.dir),
            "templates": templates,
            "operators": operators,
            "methods": list(protocol.METHODS),
            "generated": {"statuses": list(protocol.STATUSES)},
        }

    def space(self, req: dict) -> dict:
        self.require_device()
        from ..evaluation.evaluate import space
        job = req.get("job")
        if isinstance(job, dict) and job.get("oracle"):  # a reference job a template serves
            from ..structural import oracle
            self.evaluation.release_inputs()  # it runs at full size, alone: this worker's cache first
            oracle.verify_on(self.lib, job, self.dev)
        return space(self.lib, job)

    def match(self, req: dict) -> dict:
        """Reference jobs traced and matched against the template families."""
        from ..structural import method
        return method.run(self.lib, req)

    def traffic(self, req: dict) -> dict:
        """The minimum traffic of each job in req["jobs"] and the size of its
        config space (null for one the library cannot size: a reference
        module, a bad spec); for the engine's claim order, so it never fails
        as a whole."""
        from ..evaluation.evaluate import job_fields
        jobs = req.get("jobs")
        if not isinstance(jobs, list):
            from ..evaluation.evaluate import BadRequest
            raise BadRequest("traffic: 'jobs' must be a list")
        traffic, spaces = [], []
        for job in jobs:
            try:
                op, shape, dtype, params, target = job_fields(self.lib, job)
                mod = self.lib.launch_module(op)
            except Exception:  # noqa: BLE001 - a job we cannot size gets no priority
                traffic.append(None)
                spaces.append(None)
                continue
            try:
                traffic.append(mod.traffic(op, shape, dtype, params))
            except Exception:  # noqa: BLE001
                traffic.append(None)
            try:
                spaces.append(len(list(mod.config_space(op, shape, dtype, params, target))))
            except Exception:  # noqa: BLE001
                spaces.append(None)
        return {"traffic": traffic, "space": spaces}

    def generated(self):
        if self._generated is None:
            from ..sandbox.generated import GeneratedEvaluator
            self._generated = GeneratedEvaluator(self.dev)
        return self._generated

    def wait_warm(self) -> None:
        if self.warm is not None:
            self.warm.wait()

    def evaluate(self, req: dict) -> dict:
        self.require_device()
        if req.get("source") is not None:  # generated code against a reference module
            self.wait_warm()
            result = self.generated().evaluate(req)
        else:
            result = self.evaluation.run(req.get("job"), req.get("config"), req.get("artifact_dir"))
        t0 = time.perf_counter()
        result = self.with_utilisation(result)
        timings = result.get("timings") if isinstance(result, dict) else None
        if isinstance(timings, dict):
            if self.util is not None:
                timings["util_s"] = time.perf_counter() - t0  # reading the driver's samples
            # the whole evaluation in this worker, from reading the request:
            # what its other timings leave out is the rest
            timings["worker_s"] = time.perf_counter() - self._request_t0
        return result

    def with_utilisation(self, result: dict) -> dict:
        """result, its timings given the GPU's utilisation samples since the
        last answer (timings.util_samples; none on the CPU or without NVML)."""
        if self.util is not None and isinstance(result, dict):
            samples = self.util.take()
            if samples:
                timings = result.setdefault("timings", {})
                if isinstance(timings, dict):
                    timings["util_samples"] = samples
        return result

    def package_info(self, req: dict) -> dict:
        """What `kiln package` writes for one variant (package_info.py)."""
        self.require_device()
        self.wait_warm()
        from ..packaging import package_info
        return package_info.run(self.lib, self.evaluation, self.dev, req)

    def confirm(self, req: dict) -> dict:
        """A job's finalists and baselines timed again, interleaved (confirm.py)."""
        self.require_device()
        self.wait_warm()
        from ..evaluation import confirm
        self.evaluation.release_inputs(above_bytes=confirm.KEEP_CACHED_BYTES)
        self.evaluation.yield_memory()  # another worker's memory-pressure notice
        return self.with_utilisation(confirm.run(self.lib, self.dev, req))

    def reference_info(self, req: dict) -> dict:
        self.require_device()
        self.wait_warm()
        return self.generated().reference_info(req)

    def close(self) -> None:
        if self._generated is not None:
            self._generated.close()


def main() -> int:
    out = protect_stdout()
    from ..processes.device import WarmUp, describe_steps, process_age_s, select_device
    # How long each step of the start took (seconds), answered in hello: the
    # engine logs them, and a slow start shows where it went.
    startup = {"process_s": process_age_s()}  # interpreter start and imports before main()
    forkserver = sys.modules.get("kiln_worker.processes.forkserver")
    if forkserver is not None and forkserver.child_args is not None and forkserver.preload_s is not None:
        # Forked by the fork server: its imports, done once for all workers.
        startup["preload_s"] = forkserver.preload_s
    t0 = time.perf_counter()
    dev = select_device()  # exits 3 when torch / triton / yaml are missing
    if forkserver is not None:
        forkserver.reexec_if_mismatched(out.fileno())  # Triton preloaded in the other mode
    t1 = time.perf_counter()
    startup["imports_s"] = t1 - t0
    # The GPU warm-up runs beside the first requests (hello, spaces, the first
    # compiles); the first GPU work waits for it. Its phases are reported by
    # the first evaluation (timings.warm_up), and by hello if done by then.
    warm = WarmUp(dev, log)
    server = Server(dev, out, startup, warm)
    startup["library_s"] = time.perf_counter() - t1
    log(f"ready: device {dev.name} ({dev.kind}), python {platform.python_version()}; started in "
        + describe_steps(startup)
        + (f"; {dev.error}" if dev.error else ""))
    try:
        return server.serve(sys.stdin.buffer)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    finally:
        server.close()
