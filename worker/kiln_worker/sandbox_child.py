"""The sandbox child: evaluates one generated program (or describes a reference).

``python -m kiln_worker.sandbox_child run|compile`` -- started by the worker
(``generated.py``), possibly ahead of time (pre-warmed: torch and Triton are
imported, the GPU context and Triton's driver are up, the network namespace is
already empty). It reads **one** JSON request line on stdin, answers one JSON
line on its private answer descriptor (fd 1 and ``sys.stdout`` point at stderr,
so the program's prints cannot forge an answer; the answer echoes the request's
``nonce``), and exits.

Tasks: ``evaluate`` (mode run), ``reference_info`` (mode run), ``compile``
(mode compile: the interpreter off, for cross-compiling the launches captured by
an interpreted run on the CPU).

Dynamic checks of ``evaluate`` (each call of ``forward``, seeds >= 2):

* **run-time compute monitor** -- a ``TorchFunctionMode`` (``torch.overrides``)
  active while ``forward`` runs (not during Triton launches) sees every torch
  function, tensor method, operator and property; only allocation, views and shape
  queries pass (``ALLOWED_FUNCS``, ``ALLOWED_PROPS``; ``fill_``/``zero_`` of a whole
  buffer; basic indexing); anything else (``x + y``, ``x.sum()``, ``F.linear`` from
  an ``nn.Linear``, ``x.float()``, ``x[mask]``, ``x.item()`` ...) is ``rejected`` /
  ``torch_compute``. It also poisons every ``empty*`` allocation with NaN
  (integers: their max), so an element the kernels never write fails the
  comparison -- the generated path's version of "outputs filled with NaN". (A
  ``TorchDispatchMode`` would see aten ops instead, but its first use imports
  torch._dynamo, ~3.5 s per child on torch 2.13.)
* ``modified_inputs`` -- inputs compared bitwise to a copy taken before the call.
* ``output_alias`` -- an output sharing storage with an input, or with an output
  returned by an earlier call (all earlier outputs are kept alive, so the
  allocator cannot legitimately reuse their memory).
* ``stale_output`` -- fresh random inputs per seed; an output that fails its own
  reference but matches the previous call's reference is a cached result.
* ``side_stream`` -- on a GPU, ``forward`` runs with a fresh stream made current;
  a Triton launch on any other stream is rejected, and only that stream is
  synchronised before the outputs are compared.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import time
import traceback

GEN_MODULE = "kiln_generated"

# torch functions / tensor methods (by __name__) allowed in wrapper code at run time
ALLOWED_FUNCS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
    "new_full", "view", "view_as", "reshape", "reshape_as", "contiguous", "t", "transpose",
    "permute", "expand", "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "narrow",
    "select", "split", "chunk", "unbind", "movedim", "swapaxes", "swapdims", "diagonal",
    "as_strided", "detach", "stride", "size", "numel", "nelement", "dim", "ndimension",
    "element_size", "data_ptr", "is_contiguous", "is_floating_point", "is_complex",
    "storage_offset", "get_device", "zero_", "fill_", "__getitem__", "__len__", "__repr__",
    "__str__", "__format__", "__hash__", "__get__", "is_tensor",
}
# tensor properties (through __get__)
ALLOWED_PROPS = {"shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "T", "mT", "layout",
                 "data", "requires_grad", "itemsize", "nbytes", "is_leaf", "names", "grad",
                 "is_sparse", "is_quantized", "is_meta", "is_nested"}
EMPTY_FUNCS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}
FILL_FUNCS = {"zero_", "fill_"}


class Stop(Exception):
    """Ends an evaluation with a result."""

    def __init__(self, result: dict):
        super().__init__(result.get("message", ""))
        self.result = result


def _tail(exc: BaseException, lines: int = 25) -> str:
    from .targetcompile import trim_message
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return trim_message("\n".join(text.rstrip().splitlines()[-lines:]))


def restricted_builtins() -> dict:
    """The generated module's builtins: without open/eval/exec/compile and the reflection
    functions (defence in depth behind the screen). ``__import__`` stays the real one:
    C code called from the module (torch's lazy imports) imports through the calling
    frame's builtins, and the module's own import statements are screened already."""
    import builtins
    b = dict(vars(builtins))
    for n in ("open", "eval", "exec", "compile", "globals", "locals", "vars", "breakpoint",
              "input", "help", "exit", "quit", "getattr", "setattr", "delattr", "memoryview"):
        b.pop(n, None)
    return b


class Harness:
    def __init__(self, req: dict, mode: str, network: str, files: str = "not restricted"):
        import torch
        self.req = req
        self.mode = mode
        self.torch = torch
        self.gpu = mode == "run" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") \
            and torch.cuda.is_available()
        self.dev = "cuda" if self.gpu else "cpu"
        self.dev_name = torch.cuda.get_device_name(0) if self.gpu else "cpu (Triton interpreter)"
        self.tmpdir = os.environ.get("KILN_SANDBOX_TMP") or os.getcwd()
        self.gen_files: set[str] = set()
        self.timings: dict = {}
        from . import sandbox
        self.sandbox = sandbox
        limits = dict(req.get("limits") or {})
        self.enforced = {"network": network, "files": files,
                         "rlimits": sandbox.apply_limits(limits, self.gpu),
                         "audit_hook": True, "process": "child of the worker, own process group"}
        cache = os.environ.get("TRITON_CACHE_DIR")
        extra = []
        spec = (req.get("reference") or {})
        if spec.get("path"):
            extra.append(os.path.dirname(os.path.abspath(spec["path"])))
        self.guard = sandbox.Guard(self.tmpdir, cache, lambda: self.gen_files, extra_read=extra)
        self.guard.install()
        self.stream = torch.cuda.Stream() if self.gpu else None
        from .launches import Capture
        self.capture = Capture({GEN_MODULE},
                               expected_stream=(lambda: self.stream.cuda_stream) if self.gpu else None)
        self.capture.install()
        self.monitor_violations: list[str] = []
        self.monitor = self._make_monitor()
        self._warm_monitor()
        if not self.gpu:
            _autotune_without_gpu()

    # -- run-time compute monitor ------------------------------------------------
    def _make_monitor(self):
        torch = self.torch
        from torch.overrides import TorchFunctionMode
        harness = self

        def whole(t) -> bool:
            try:
                st = t.untyped_storage()
                return t.storage_offset() == 0 and t.numel() * t.element_size() == st.nbytes() \
                    and t.is_contiguous()
            except Exception:
                return False

        def basic_index(idx) -> bool:
            items = idx if isinstance(idx, tuple) else (idx,)
            return all(i is None or i is Ellipsis or isinstance(i, (int, slice)) and
                       not isinstance(i, bool) for i in items)

        class Monitor(TorchFunctionMode):
            """Sees every torch function and tensor method called while forward runs
            (torch.overrides); the Triton launches themselves pass through."""

            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if harness.capture.in_launch:
                    return func(*args, **kwargs)
                name = getattr(func, "__name__", None) or str(func)
                bad = None
                if name == "__get__":
                    prop = getattr(getattr(func, "__self__", None), "__name__", "?")
                    if prop not in ALLOWED_PROPS:
                        bad = f"Tensor.{prop}"
                elif name == "__getitem__":
                    if not basic_index(args[1] if len(args) > 1 else None):
                        bad = "advanced indexing (Tensor.__getitem__ with tensors/lists)"
                elif name in FILL_FUNCS:
                    if not (args and isinstance(args[0], torch.Tensor) and whole(args[0])):
                        bad = f"Tensor.{name} on part of a tensor"
                elif name not in ALLOWED_FUNCS:
                    bad = name
                if bad:
                    harness.monitor_violations.append(bad)
                    raise RuntimeError(f"kiln: torch compute op {bad} in wrapper code; the Triton "
                                       "kernels must compute the result")
                out = func(*args, **kwargs)
                if name in EMPTY_FUNCS and isinstance(out, torch.Tensor) and out.numel():
                    if out.is_floating_point() or out.is_complex():
                        out.fill_(float("nan"))
                    elif out.dtype == torch.bool:
                        out.fill_(True)
                    else:
                        out.fill_(torch.iinfo(out.dtype).max)
                return out

        return Monitor

    def _warm_monitor(self) -> None:
        """Enters the monitor once in the trusted phase (any lazy import happens here)."""
        torch = self.torch
        self.capture.in_launch += 1
        try:
            with torch.no_grad(), self.monitor():
                a = torch.randn(4, device=self.dev)
                b = torch.empty_like(a).view(2, 2).t().contiguous()
                (a + b.reshape(4)).sum()
        finally:
            self.capture.in_launch -= 1

    def artifact_dir(self) -> str | None:
        """Code objects go to the child's temp dir (the only place it may write); the
        worker moves them into the request's artifact_dir."""
        if not self.req.get("artifact_dir"):
            return None
        return os.path.join(self.tmpdir, "artifacts")

    # -- generated module -----------------------------------------------------------
    def load_generated(self, source: str):
        import importlib.util
        path = os.path.join(self.tmpdir, f"{GEN_MODULE}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        self.gen_files = {path, os.path.realpath(path)}
        spec = importlib.util.spec_from_file_location(GEN_MODULE, path)
        mod = importlib.util.module_from_spec(spec)
        mod.__builtins__ = restricted_builtins()
        sys.modules[GEN_MODULE] = mod
        t0 = time.perf_counter()
        try:
            with self.guard.untrusted():
                spec.loader.exec_module(mod)
        except BaseException as exc:
            self.check_violations()
            raise Stop({"status": "compile_error", "message":
                        "the generated module failed to import: " + _tail(exc, 12)})
        finally:
            self.timings["import_s"] = time.perf_counter() - t0
        self.check_violations()
        return mod

    def check_violations(self) -> None:
        if self.guard.violations:
            rule, detail = self.guard.violations[0]
            raise Stop({"status": "rejected", "rule": rule,
                        "message": f"sandbox: {detail} blocked at run time ({rule})",
                        "violations": [{"rule": r, "detail": d} for r, d in self.guard.violations[:20]]})
        if self.monitor_violations:
            raise Stop({"status": "rejected", "rule": "torch_compute",
                        "message": f"at run time: torch op {self.monitor_violations[0]!r} was called outside a "
                                   "Triton kernel; the wrapper may only allocate (torch.empty/"
                                   "zeros/ones/full) and make views"})
        if self.capture.stream_violations:
            raise Stop({"status": "rejected", "rule": "side_stream",
                        "message": f"at run time: {self.capture.stream_violations[0]}"})

    def classify(self, exc: BaseException) -> dict:
        from .targetcompile import describe_exception, is_resource_error
        try:
            from triton.compiler.errors import CompilationError
        except Exception:  # pragma: no cover
            CompilationError = ()  # type: ignore
        try:
            from triton.runtime.errors import PTXASError
        except Exception:  # pragma: no cover
            PTXASError = ()  # type: ignore
        res: dict = {}
        if self.capture.current is not None:
            res["failed_launch"] = self.capture.current
        if is_resource_error(exc):
            res.update(status="resource_error", message=f"on {self.dev_name}: {describe_exception(exc)}")
        elif isinstance(exc, (CompilationError, PTXASError)):
            res.update(status="compile_error", message=f"on {self.dev_name}: {describe_exception(exc)}")
        else:
            res.update(status="crash", message=_tail(exc))
        return res

    def untrusted_call(self, fn, *args, what: str = "forward", monitor: bool = True):
        torch = self.torch
        err = None
        out = None
        import contextlib
        stream_ctx = torch.cuda.stream(self.stream) if self.gpu else contextlib.nullcontext()
        with torch.no_grad(), stream_ctx:
            with (self.monitor() if monitor else contextlib.nullcontext()):
                try:
                    with self.guard.untrusted():
                        out = fn(*args)
                except BaseException as exc:  # the program's own exceptions, SystemExit too
                    err = exc
            if self.gpu:
                try:
                    self.stream.synchronize()  # only the current stream
                except BaseException as exc:
                    err = err or exc
        self.check_violations()
        if err is not None:
            res = self.classify(err)
            res["message"] = f"in {what}: " + res["message"]
            raise Stop(res)
        return out

    # -- tasks ------------------------------------------------------------------------------
    def run(self) -> dict:
        task = self.req.get("task")
        try:
            if task == "evaluate":
                res = self.evaluate()
            elif task == "reference_info":
                res = self.reference_info()
            elif task == "compile":
                res = self.compile_task()
            else:
                res = {"status": "crash", "message": f"unknown sandbox task {task!r}"}
        except Stop as s:
            res = s.result
        except Exception as exc:
            from .reference_module import ReferenceError_
            if isinstance(exc, ReferenceError_):
                res = {"status": "reference_error", "message": str(exc)}
            else:
                res = {"status": "crash", "message": "evaluator: " + _tail(exc)}
        res.setdefault("timings", {}).update(self.timings)
        try:  # GPU lock spans (bench.take_spans), for the engine's GPU busy fraction
            from . import bench
            spans = bench.take_spans() if hasattr(bench, "take_spans") else []
        except Exception:
            spans = []
        if spans:
            res["timings"]["gpu_s"] = sum(b - a for a, b, _ in spans)
            res["timings"]["gpu_spans"] = [[a, b, kind] for a, b, kind in spans]
        res["sandbox"] = self.enforced
        res["exec_device"] = self.dev_name
        return res

    def _dtype(self, job: dict, ref):
        from . import reference_module as rm
        name = job.get("dtype")
        if name:
            return name, rm.torch_dtype(name)
        probe = rm.make_inputs(ref, 0, "cpu", None)
        return rm.infer_dtype(probe), None

    def _models(self, ref, gen, init, seed0, tdt):
        torch = self.torch
        torch.manual_seed(int(seed0))
        ref_model = ref.Model(*copy.deepcopy(init))
        ModelNew = getattr(gen, "ModelNew", None)
        if ModelNew is None:
            raise Stop({"status": "rejected", "rule": "structure",
                        "message": "the generated module defines no ModelNew"})

        def build():
            torch.manual_seed(int(seed0))
            return ModelNew(*copy.deepcopy(init))

        new_model = self.untrusted_call(build, what="ModelNew.__init__", monitor=False)
        if not isinstance(new_model, torch.nn.Module):
            raise Stop({"status": "rejected", "rule": "structure",
                        "message": "ModelNew must be a torch.nn.Module subclass"})
        synced = False
        with torch.no_grad(), self.guard.untrusted():
            rs, ns = ref_model.state_dict(), new_model.state_dict()
            if rs and list(rs.keys()) == list(ns.keys()) and all(
                    tuple(rs[k].shape) == tuple(ns[k].shape) for k in rs):
                new_model.load_state_dict(rs)
                synced = True
            ref_model.to(self.dev)
            new_model.to(self.dev)
            if tdt is not None:
                ref_model.to(tdt)
                new_model.to(tdt)
            ref_model.eval()
            new_model.eval()
        self.check_violations()
        return ref_model, new_model, synced

    def evaluate(self) -> dict:
        from . import check
        from . import reference_module as rm
        torch = self.torch
        req = self.req
        job = req.get("job") or {}
        ref = rm.load(req["reference"], self.tmpdir)
        init = rm.init_inputs(ref)
        dname, tdt = self._dtype(job, ref)
        updt = check.upcast_dtype(dname)
        atol, rtol, scaled = check.resolve_tolerances({"validation": job.get("validation") or {},
                                                       "dtype": dname})
        seeds = check.seed_list(job)
        if len(seeds) < 2:
            seeds.append(max(seeds) + 1)  # caching is caught by a second call on new inputs
        gen = self.load_generated(req["source"])
        t0 = time.perf_counter()
        ref_model, new_model, synced = self._models(ref, gen, init, seeds[0], tdt)
        ref_up = copy.deepcopy(ref_model).to(updt)
        ref_dtype = rm.dtype_name(updt)
        acc: dict = {}
        with self._check_lock():
            inputs, traffic = self._check_seeds(ref, new_model, ref_model, ref_up, ref_dtype, dname,
                                                tdt, updt, seeds, atol, rtol, scaled, acc, t0)
        ref_dtype = self._ref_dtype
        self.timings["check_s"] = time.perf_counter() - t0
        res = {"status": "ok", "message": "", "rule": None,
               "correctness": {"seeds": len(seeds), "max_abs_err": acc.get("max_abs_err", 0.0),
                               "max_rel_err": acc.get("max_rel_err", 0.0), "passed": True,
                               "atol": acc.get("atol", atol), "rtol": rtol,
                               "reference_dtype": ref_dtype, "dtype": dname,
                               "weights_from_reference": synced},
               "launches": self.capture.last_call(), "traffic": traffic,
               "artifact": None, "artifacts": [], "latency": None}
        if not res["launches"]:
            raise Stop({"status": "rejected", "rule": "torch_compute", "correctness": res["correctness"],
                        "message": "forward launched no Triton kernel of the generated module"})
        target = job.get("target") or None
        if self.gpu and target and req.get("compile_target", True):
            from .launches import compile_launches
            t1 = time.perf_counter()
            comp = compile_launches(gen, res["launches"], target, self.artifact_dir(),
                                    untrusted=self.guard.untrusted)
            self.timings["compile_s"] = time.perf_counter() - t1
            self.check_violations()
            res["artifacts"] = comp["artifacts"]
            res["artifact"] = comp["artifacts"][0] if comp["artifacts"] else None
            res["compiled"] = True
            if comp["status"] != "ok":
                res.update(status=comp["status"], message=comp["message"])
                return res
        bcfg = job.get("benchmark") or {}
        runs = int(bcfg.get("runs") if bcfg.get("runs") is not None else 100)
        warmup = int(bcfg.get("warmup") if bcfg.get("warmup") is not None else 25)
        if self.gpu and runs > 0:
            from .bench import benchmark
            t1 = time.perf_counter()
            try:
                with torch.no_grad(), torch.cuda.stream(self.stream):
                    def fn():
                        with self.guard.untrusted():
                            new_model(*inputs)
                    res["latency"] = benchmark(fn, warmup, runs, self.dev_name, target)
            except BaseException as exc:
                self.check_violations()
                c = self.classify(exc)
                res.update(status=c["status"], message="during the benchmark: " + c["message"])
            self.timings["bench_s"] = time.perf_counter() - t1
        return res

    def _check_lock(self):
        """On a GPU the correctness run holds the GPU lock shared, like the template path
        (evaluate.py): no benchmark of another worker is timing meanwhile."""
        import contextlib
        import inspect
        from . import bench
        if not self.gpu:
            return contextlib.nullcontext()
        try:
            if "shared" in inspect.signature(bench.gpu_lock).parameters:
                return bench.gpu_lock(shared=True)
        except (TypeError, ValueError):
            pass
        return contextlib.nullcontext()

    def _check_seeds(self, ref, new_model, ref_model, ref_up, ref_dtype, dname, tdt, updt, seeds,
                     atol, rtol, scaled, acc, t0):
        from . import reference_module as rm
        torch = self.torch
        earlier: list = []
        prev_ref = None
        inputs = None
        traffic = None
        for i, seed in enumerate(seeds):
            inputs = rm.make_inputs(ref, seed, self.dev, tdt)
            with torch.no_grad():
                try:
                    ref_out = ref_up(*rm.clone_upcast(inputs, updt))
                except Exception:
                    if ref_dtype != dname:
                        ref_up, ref_dtype = ref_model, dname
                        ref_out = ref_model(*rm.clone_upcast(inputs, None))
                    else:
                        raise
            ref_outs = rm.as_outputs(ref_out)
            if ref_outs is None:
                raise rm.ReferenceError_(f"the reference's forward returned {type(ref_out).__name__}, "
                                         "not a tensor or a tuple of tensors")
            if self.gpu:
                torch.cuda.synchronize()
            pristine = {f"arg{j}": (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                        for j, v in enumerate(inputs)}
            self.capture.begin_call()
            out = self.untrusted_call(new_model, *inputs)
            failed = self._check_call(i, seed, inputs, pristine, out, ref_outs, prev_ref, earlier,
                                      atol, rtol, scaled, acc)
            if failed:
                failed.setdefault("correctness", {}).update(seeds=i + 1, failed_seed=seed, passed=False,
                                                            reference_dtype=ref_dtype)
                self.timings["check_s"] = time.perf_counter() - t0
                raise Stop(failed)
            prev_ref = ref_outs
            if traffic is None:
                nb = sum(v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor))
                nb += sum(o.numel() * o.element_size() for o in rm.as_outputs(out))
                traffic = {"bytes": int(nb)}
        self._ref_dtype = ref_dtype
        return inputs, traffic

    def _check_call(self, i, seed, inputs, pristine, out, ref_outs, prev_ref, earlier, atol, rtol,
                    scaled, acc) -> dict | None:
        from . import check
        from . import reference_module as rm
        torch = self.torch
        changed = check.modified_inputs(pristine, {f"arg{j}": v for j, v in enumerate(inputs)})
        if changed:
            return {"status": "incorrect", "rule": "modified_inputs",
                    "message": f"kernel modified its inputs ({', '.join(changed)}; seed {seed})"}
        outs = rm.as_outputs(out)
        if outs is None:
            return {"status": "incorrect", "rule": "output_type",
                    "message": f"forward returned {type(out).__name__}, not a tensor or a tuple of "
                               f"tensors (seed {seed})"}
        if len(outs) != len(ref_outs):
            return {"status": "incorrect", "rule": "output_type",
                    "message": f"forward returned {len(outs)} tensors, the reference {len(ref_outs)}"}
        in_tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
        for k, o in enumerate(outs):
            if o.device.type != self.dev:
                return {"status": "incorrect", "rule": "output_type",
                        "message": f"output {k} is on {o.device}, not {self.dev}"}
            for j, t in enumerate(in_tensors):
                if _overlap(o, t):
                    return {"status": "incorrect", "rule": "output_alias",
                            "message": f"output {k} shares memory with input {j} (seed {seed}); "
                                       "return a new tensor"}
        stats_all = []
        for k, (o, r) in enumerate(zip(outs, ref_outs)):
            try:
                stats_all.append(_compare(check, torch, o, r, atol, rtol, scaled, seed))
            except check.Incorrect as inc:
                if prev_ref is not None and len(prev_ref) == len(outs):
                    try:
                        _compare(check, torch, o, prev_ref[k], atol, rtol, scaled, seed)
                        return {"status": "incorrect", "rule": "stale_output",
                                "message": f"call {i + 1} (seed {seed}) returned the previous call's "
                                           "result: outputs must be computed from the current inputs, "
                                           "not cached",
                                "correctness": _stats(inc.stats)}
                    except check.Incorrect:
                        pass
                msg = inc.message if len(outs) == 1 else f"output {k}: {inc.message}"
                return {"status": "incorrect", "rule": None, "message": msg,
                        "correctness": _stats(inc.stats)}
        for k, o in enumerate(outs):
            for e in earlier:
                if _overlap(o, e):
                    return {"status": "incorrect", "rule": "output_alias",
                            "message": f"output {k} of call {i + 1} (seed {seed}) shares memory with "
                                       "an output returned by an earlier call (cached or reused "
                                       "buffer); return a new tensor"}
        earlier.extend(outs)
        for s in stats_all:
            check.merge_stats(acc, s)
        return None

    def reference_info(self) -> dict:
        from . import check
        from . import reference_module as rm
        torch = self.torch
        job = self.req.get("job") or {}
        spec = self.req["reference"]
        ref = rm.load(spec, self.tmpdir)
        init = rm.init_inputs(ref)
        dname, tdt = self._dtype(job, ref)
        seed0 = check.seed_list(job)[0]
        inputs = rm.make_inputs(ref, seed0, self.dev, tdt)
        torch.manual_seed(int(seed0))
        model = ref.Model(*copy.deepcopy(init)).to(self.dev)
        if tdt is not None:
            model = model.to(tdt)
        model.eval()
        with torch.no_grad():
            out = model(*inputs)
        outs = rm.as_outputs(out)
        nb = sum(v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor))
        nb += sum(o.numel() * o.element_size() for o in outs or [])
        res = {"status": "ok", "message": "", "dtype": dname,
               "inputs": [rm.describe(v) for v in inputs],
               "init_inputs": [rm.describe(v) for v in init],
               "outputs": [rm.describe(o) for o in outs] if outs is not None else rm.describe(out),
               "parameters": [{"name": k, "shape": list(v.shape), "dtype": rm.dtype_name(v.dtype)}
                              for k, v in model.state_dict().items()],
               "source": rm.forward_source(ref), "traffic": {"bytes": int(nb)}, "latency": None}
        bcfg = job.get("benchmark") or {}
        runs = int(bcfg.get("runs") if bcfg.get("runs") is not None else 100)
        warmup = int(bcfg.get("warmup") if bcfg.get("warmup") is not None else 25)
        if self.gpu and runs > 0:
            from .bench import benchmark
            t1 = time.perf_counter()
            with torch.no_grad():
                res["latency"] = benchmark(lambda: model(*inputs), warmup, runs, self.dev_name,
                                           job.get("target"))
            self.timings["bench_s"] = time.perf_counter() - t1
        return res

    def compile_task(self) -> dict:
        from .launches import compile_launches
        gen = self.load_generated(self.req["source"])
        t0 = time.perf_counter()
        res = compile_launches(gen, self.req.get("launches") or [], self.req["target"],
                               self.artifact_dir(), untrusted=self.guard.untrusted)
        self.timings["compile_s"] = time.perf_counter() - t0
        self.check_violations()
        return res


def _autotune_without_gpu() -> None:
    """Triton's autotuner times configs with the GPU driver's benchmarker, which does
    not exist under the interpreter ("0 active drivers"). There every config "takes" the
    same time, so an autotuned kernel runs with its first (pruned) config; the launch
    capture records that config and the cross-compile uses it."""
    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:  # pragma: no cover
        return

    def do_bench(fn, quantiles=None, **kwargs):
        return [0.0] * len(quantiles) if quantiles else 0.0

    Autotuner.do_bench = property(lambda self: do_bench)


def _stats(s: dict) -> dict:
    return {k: v for k, v in (s or {}).items() if k in ("max_abs_err", "max_rel_err", "atol", "rtol")}


def _compare(check, torch, out, ref, atol, rtol, scaled, seed):
    if not ref.is_floating_point() and not ref.is_complex():
        return check.compare(out.to(torch.float64), ref.to(torch.float64), 0.0, 0.0, False, seed)
    return check.compare(out, ref, atol, rtol, scaled, seed)


def _span(t):
    st = t.untyped_storage()
    p = st.data_ptr()
    return p, p + st.nbytes()


def _overlap(a, b) -> bool:
    a0, a1 = _span(a)
    b0, b1 = _span(b)
    if a0 == 0 or b0 == 0:
        return False
    if a1 == a0 or b1 == b0:
        return a0 == b0
    return a0 < b1 and b0 < a1


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else "run"
    from . import sandbox
    sandbox.die_with_parent(int(os.environ["KILN_SANDBOX_PARENT"])
                            if os.environ.get("KILN_SANDBOX_PARENT", "").isdigit() else None)
    sandbox.no_new_privs()
    network = sandbox.isolate_network() if os.environ.get("KILN_SANDBOX_NETNS", "1") != "0" \
        else "audit-only: disabled by KILN_SANDBOX_NETNS=0"
    roots = [p for p in (os.environ.get("KILN_SANDBOX_TMP"), os.environ.get("TRITON_CACHE_DIR")) if p]
    roots += [p for p in os.environ.get("KILN_SANDBOX_WRITE_FILES", "").split(os.pathsep)
              if p and os.path.isfile(p)]  # the GPU lock files (they must exist already)
    files = sandbox.restrict_writes(roots) if os.environ.get("KILN_SANDBOX_LANDLOCK", "1") != "0" \
        else "audit-only: disabled by KILN_SANDBOX_LANDLOCK=0"
    from .server import protect_stdout
    out = protect_stdout()
    if mode == "compile":
        os.environ["TRITON_INTERPRET"] = "0"
    try:
        import torch
        import triton  # noqa: F401
        import triton.language  # noqa: F401
        if mode == "run" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") \
                and torch.cuda.is_available():
            torch.cuda.init()
            torch.empty(1, device="cuda")
            from triton.runtime import driver
            driver.active.get_current_device()
            driver.active.get_current_stream(0)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            from .device import install_scratch_allocator
            install_scratch_allocator("cuda")
        torch.set_float32_matmul_precision("highest")

    except Exception as exc:
        sys.stderr.write(f"kiln sandbox child: start-up failed: {exc}\n")
        return 3
    out.write(json.dumps({"ready": True, "pid": os.getpid(), "network": network, "files": files})
              + "\n")
    out.flush()
    line = sys.stdin.buffer.readline()
    if not line:
        return 0
    try:
        req = json.loads(line)
    except ValueError:
        return 2
    t0 = time.perf_counter()
    try:
        res = Harness(req, mode, network, files).run()
    except BaseException as exc:
        res = {"status": "crash", "message": "evaluator: " + _tail(exc)}
    res.setdefault("timings", {})["child_s"] = time.perf_counter() - t0
    res["nonce"] = req.get("nonce")
    from .jsonsafe import json_safe
    try:
        text = json.dumps(json_safe(res), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        text = json.dumps({"status": "crash", "nonce": req.get("nonce"),
                           "message": f"evaluator: answer not serialisable: {exc}"})
    out.write(text + "\n")
    out.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
