"""The evaluate and space methods: compile for the target, check, benchmark."""
from __future__ import annotations

import time
import traceback
from typing import Any

from . import check
from .bench import benchmark
from .compile_child import CompileChildDied, CompileClient
from .device import Device
from .jsonsafe import json_safe
from .targetcompile import compile_stage, describe_exception, is_resource_error, trim_message
from .templates import Library, TemplateError


class BadRequest(Exception):
    """The request itself is malformed (answered ok:false)."""


def job_fields(lib: Library, job: Any) -> tuple[str, list, str, dict, dict]:
    if not isinstance(job, dict):
        raise BadRequest("'job' must be an object")
    op = job.get("op")
    if not isinstance(op, str) or not op:
        raise BadRequest("job.op must be a non-empty string")
    shape = job.get("shape")
    if not isinstance(shape, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                              for x in shape):
        raise BadRequest("job.shape must be a list of integers")
    dtype = job.get("dtype", "fp32")
    if not isinstance(dtype, str):
        raise BadRequest("job.dtype must be a string")
    params = job.get("params") or {}
    if not isinstance(params, dict):
        raise BadRequest("job.params must be an object")
    target = job.get("target") or {}
    if not isinstance(target, dict):
        raise BadRequest("job.target must be an object")
    # defaults from operators.yaml for params the job leaves out
    spec = lib.operators.get(op)
    if spec is None:
        raise TemplateError(f"unknown operator {op!r}")
    merged = {}
    for name, p in ((spec or {}).get("params") or {}).items():
        if isinstance(p, dict) and "default" in p:
            merged[name] = p["default"]
    merged.update(params)
    return op, list(shape), dtype, merged, target


def space(lib: Library, job: Any) -> dict:
    op, shape, dtype, params, target = job_fields(lib, job)
    mod = lib.launch_module(op)
    configs = mod.config_space(op, shape, dtype, params, target)
    traffic = mod.traffic(op, shape, dtype, params)
    return {"configs": json_safe(list(configs)), "traffic": json_safe(traffic)}


def _traceback_tail(exc: BaseException, lines: int = 25) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    tail = "\n".join(text.rstrip().splitlines()[-lines:])
    return trim_message(tail)


class Evaluation:
    def __init__(self, lib: Library, dev: Device):
        self.lib = lib
        self.dev = dev
        self.device_lost = False  # set when the GPU context is unusable after a crash
        # under the interpreter the cross-compile runs in a child process (compile_child.py)
        self.interpreting = not dev.is_gpu
        self.compiler = CompileClient() if self.interpreting and not dev.error else None
        if self.compiler is not None:
            self.compiler.start()  # imports torch/triton while the worker waits for requests

    def run(self, job: Any, config: Any, artifact_dir: Any) -> dict:
        op, shape, dtype, params, target = job_fields(self.lib, job)
        if not isinstance(config, dict):
            raise BadRequest("'config' must be an object")
        if artifact_dir is not None and not isinstance(artifact_dir, str):
            raise BadRequest("'artifact_dir' must be a string path")
        mod = self.lib.launch_module(op)
        res: dict[str, Any] = {
            "status": "ok", "message": "", "exec_device": self.dev.name,
            "correctness": None, "latency": None, "artifact": None,
            "traffic": json_safe(mod.traffic(op, shape, dtype, params)),
            "timings": {"compile_s": 0.0, "check_s": 0.0, "bench_s": 0.0},
        }

        # (1) compile for the job's target -----------------------------------
        t0 = time.perf_counter()
        if self.interpreting:
            req = {"op": op, "shape": shape, "dtype": dtype, "params": params, "config": config,
                   "target": target, "artifact_dir": artifact_dir}
            try:
                stage = self.compiler.compile(req)
            except CompileChildDied as exc:
                stage = {"status": "crash", "message": str(exc), "artifact": None}
        else:
            stage = compile_stage(self.lib, op, shape, dtype, params, config, target, artifact_dir)
        res["timings"]["compile_s"] = time.perf_counter() - t0
        res["artifact"] = stage.get("artifact")
        if stage["status"] != "ok":
            res["status"], res["message"] = stage["status"], stage["message"]
            return json_safe(res)

        # (2) correctness on the executing device -----------------------------
        t0 = time.perf_counter()
        try:
            corr, inputs, out = self._check(mod, op, shape, dtype, params, config, job)
            res["correctness"] = corr
        except check.Incorrect as inc:
            res["status"], res["message"] = "incorrect", inc.message
            res["correctness"] = {"seeds": inc.stats.get("seeds", 1), "passed": False,
                                  "failed_seed": inc.stats.get("seed"),
                                  **{k: v for k, v in inc.stats.items()
                                     if k in ("max_abs_err", "max_rel_err", "atol", "rtol")}}
            res["timings"]["check_s"] = time.perf_counter() - t0
            return json_safe(res)
        except _LaunchError as le:
            res["status"], res["message"] = le.status, le.message
            res["timings"]["check_s"] = time.perf_counter() - t0
            return json_safe(res)
        res["timings"]["check_s"] = time.perf_counter() - t0

        # (3) benchmark on a GPU -----------------------------------------------
        bcfg = job.get("benchmark") or {}
        runs = int(bcfg.get("runs", 100) if bcfg.get("runs") is not None else 100)
        warmup = int(bcfg.get("warmup", 25) if bcfg.get("warmup") is not None else 25)
        if self.dev.is_gpu and runs > 0:
            t0 = time.perf_counter()
            try:
                res["latency"] = benchmark(lambda: mod.launch(op, inputs, out, config, params),
                                           warmup, runs, self.dev.name, target)
            except Exception as exc:
                status, message = self._classify(exc)
                res["status"], res["message"] = status, "during the benchmark: " + message
            res["timings"]["bench_s"] = time.perf_counter() - t0
        return json_safe(res)

    # -------------------------------------------------------------------------
    def _sync(self):
        if self.dev.is_gpu:
            import torch
            torch.cuda.synchronize()

    def _classify(self, exc: BaseException) -> tuple[str, str]:
        try:
            from triton.compiler.errors import CompilationError
        except Exception:  # pragma: no cover
            CompilationError = ()  # type: ignore
        try:
            from triton.runtime.errors import PTXASError
        except Exception:  # pragma: no cover
            PTXASError = ()  # type: ignore
        if is_resource_error(exc):
            return "resource_error", f"on {self.dev.name}: {describe_exception(exc)}"
        if isinstance(exc, (CompilationError, PTXASError)):
            return "compile_error", f"on {self.dev.name}: {describe_exception(exc)}"
        self._probe_device()
        return "crash", _traceback_tail(exc)

    def _probe_device(self):
        if not self.dev.is_gpu:
            return
        try:
            import torch
            torch.cuda.synchronize()
            torch.ones(1, device="cuda").add_(1).item()
        except Exception:
            self.device_lost = True

    def _check(self, mod, op, shape, dtype, params, config, job):
        atol, rtol, scaled = check.resolve_tolerances(job, mod, op, shape, params)
        seeds = check.seed_list(job)
        updt = check.upcast_dtype(dtype)
        dev = self.dev.torch_device
        acc: dict[str, Any] = {}
        inputs = out = None
        for i, seed in enumerate(seeds):
            try:
                inputs, out = self._one_seed(mod, op, shape, dtype, params, config, seed, updt,
                                             dev, atol, rtol, scaled, acc)
            except check.Incorrect as inc:
                inc.stats.update(seeds=i + 1, seed=seed)
                raise
        corr = {"seeds": len(seeds), "max_abs_err": acc.get("max_abs_err", 0.0),
                "max_rel_err": acc.get("max_rel_err", 0.0), "passed": True,
                "atol": acc.get("atol", atol), "rtol": rtol}
        return corr, inputs, out

    def _one_seed(self, mod, op, shape, dtype, params, config, seed, updt, dev, atol, rtol,
                  scaled, acc):
        import torch
        torch.manual_seed(seed)
        inputs = mod.make_inputs(op, shape, dtype, params, seed, dev)
        pristine = check.snapshot(inputs)
        out = mod.output_like(op, inputs, params)
        if out.is_floating_point():
            out.fill_(float("nan"))
        else:
            out.fill_(torch.iinfo(out.dtype).max if out.dtype != torch.bool else True)
        try:
            mod.launch(op, inputs, out, config, params)
            self._sync()
        except Exception as exc:
            status, message = self._classify(exc)
            raise _LaunchError(status, message) from exc
        changed = check.modified_inputs(pristine, inputs)
        if changed:
            raise check.Incorrect(f"kernel modified its inputs ({', '.join(changed)}; seed {seed})",
                                  {})
        ref = mod.reference(op, check.upcast(pristine, updt), params)
        self._sync()
        stats = check.compare(out, ref, atol, rtol, scaled, seed)
        check.merge_stats(acc, stats)
        return inputs, out


class _LaunchError(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message
