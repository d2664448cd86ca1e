"""The sandbox child: evaluates one generated program (or describes a reference).

``python -m kiln_worker.sandbox.child run|compile`` -- started by the worker
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

from ..evaluation.outcome import traceback_tail

GEN_MODULE = "kiln_generated"
# The checked timing protocol (Harness._checked_benchmark): probe calls per
# benchmark (plus the last call), and the calls it makes on the CPU.
PROBES = 3
CPU_BENCH_RUNS = 3

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
        from . import confine
        self.sandbox = confine
        limits = dict(req.get("limits") or {})
        self.enforced = {"network": network, "files": files,
                         "rlimits": confine.apply_limits(limits, self.gpu),
                         "audit_hook": True, "process": "child of the worker, own process group"}
        cache = os.environ.get("TRITON_CACHE_DIR")
        extra = []
        spec = (req.get("reference") or {})
        if spec.get("path"):
            extra.append(os.path.dirname(os.path.abspath(spec["path"])))
        self.guard = confine.Guard(self.tmpdir, cache, lambda: self.gen_files, extra_read=extra)
        self.guard.install()
        self.stream = torch.cuda.Stream() if self.gpu else None
        from ..codeobject.launches import Capture
        self.capture = Capture({GEN_MODULE},
                               expected_stream=(lambda: self.stream.cuda_stream) if self.gpu else None)
        self.capture.install()
        self.monitor_violations: list[str] = []
        self.poison = True  # the monitor NaN-fills empty* allocations (off in unprobed timed calls)
        self.integrity = None  # integrity.Snapshot, taken before the generated module loads
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
                if harness.poison and name in EMPTY_FUNCS and isinstance(out, torch.Tensor) and out.numel():
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
                        "the generated module failed to import: " + traceback_tail(exc, 12)})
        finally:
            self.timings["import_s"] = time.perf_counter() - t0
        self.check_violations()
        self.verify_integrity("the import of the generated module")
        return mod

    def verify_integrity(self, after: str) -> None:
        """Stop (rejected, monkeypatch) when anything of the snapshot changed
        (integrity.py): called after every phase in which untrusted code ran and
        after every verdict."""
        if self.integrity is None:
            return
        t0 = time.perf_counter()
        changed = self.integrity.changes()
        self.timings["integrity_s"] = self.timings.get("integrity_s", 0.0) + time.perf_counter() - t0
        if changed:
            raise Stop({"status": "rejected", "rule": "monkeypatch",
                        "message": f"at run time, after {after}: {changed[0]}; generated code must not "
                                   "change torch, Triton, NumPy, Python or evaluator objects",
                        "violations": [{"rule": "monkeypatch", "detail": c} for c in changed]})

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
        """The exception's status and message (evaluation/outcome.py), with the
        launch that failed when one was running."""
        from ..evaluation.outcome import classify
        res: dict = {}
        if self.capture.current is not None:
            res["failed_launch"] = self.capture.current
        status, message = classify(exc, self.dev_name)
        res.update(status=status, message=message)
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
        self.verify_integrity(what)
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
                res = {"status": "crash", "message": "evaluator: " + traceback_tail(exc)}
        res.setdefault("timings", {}).update(self.timings)
        try:  # GPU lock spans (gpulock.take_spans), for the engine's GPU busy fraction
            from ..processes import gpulock
            spans = gpulock.take_spans()
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

    def _reference_model(self, ref, init, seed0, tdt):
        """The reference Model on the device in the job's dtype, and a CPU copy
        of its initial state (for ModelNew: reference_module's convention)."""
        torch = self.torch
        torch.manual_seed(int(seed0))
        ref_model = ref.Model(*copy.deepcopy(init))
        state = {k: v.detach().clone() for k, v in ref_model.state_dict().items()}
        with torch.no_grad():
            ref_model.to(self.dev)
            if tdt is not None:
                ref_model.to(tdt)
            ref_model.eval()
        return ref_model, state

    def _models(self, gen, init, seed0, tdt, ref_state):
        torch = self.torch
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
            rs, ns = ref_state, new_model.state_dict()
            if rs and list(rs.keys()) == list(ns.keys()) and all(
                    tuple(rs[k].shape) == tuple(ns[k].shape) for k in rs):
                new_model.load_state_dict({k: v.clone() for k, v in rs.items()})
                synced = True
            new_model.to(self.dev)
            if tdt is not None:
                new_model.to(tdt)
            new_model.eval()
        self.check_violations()
        self.verify_integrity("ModelNew's set-up")
        return new_model, synced

    def _cases(self, ref, ref_model, ref_up, seeds, tdt, updt, dname):
        """Per seed, computed before any generated code is loaded: the inputs
        (pristine; every call gets its own copies), the reference outputs (on
        upcast copies; in the job's dtype when the reference cannot run
        upcast), and the outputs' expected dtypes and shapes (the reference run
        in the job's dtype on the first seed's inputs)."""
        from ..evaluation import check
        from . import reference_module as rm
        torch = self.torch
        cases, ref_dtype = [], rm.dtype_name(updt)
        for seed in seeds:
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
            cases.append({"seed": seed, "inputs": [check.snapshot({"v": v})["v"] for v in inputs],
                          "refs": [r.detach() for r in ref_outs]})
        try:
            with torch.no_grad():
                native = rm.as_outputs(ref_model(*rm.clone_upcast(cases[0]["inputs"], None))) or []
        except Exception:  # noqa: BLE001 - the reference cannot run in the job's dtype:
            native = []    # the upcast references' shapes are still checked (check.compare)
        expect = [(o.dtype, tuple(o.shape)) for o in native]
        if self.gpu:
            torch.cuda.synchronize()
        return cases, expect, ref_dtype

    def evaluate(self) -> dict:
        from ..evaluation import check
        from . import reference_module as rm
        from .integrity import Snapshot
        torch = self.torch
        req = self.req
        job = req.get("job") or {}
        ref = rm.load(req["reference"], self.tmpdir)
        init = rm.init_inputs(ref)
        dname, tdt = self._dtype(job, ref)
        updt = check.upcast_dtype(dname)
        atol, rtol = check.resolve_tolerances({"validation": job.get("validation") or {},
                                               "dtype": dname})
        # every seed the candidate's own (check.seed_list)
        seeds = check.seed_list(job, check.candidate_id(source=req["source"]), per_candidate=1 << 30)
        if len(seeds) < 2:
            seeds.append(max(seeds) + 1)  # caching is caught by a second call on new inputs
        t0 = time.perf_counter()
        # the trusted phase: references and inputs before any generated code is loaded
        ref_model, ref_state = self._reference_model(ref, init, seeds[0], tdt)
        ref_up = copy.deepcopy(ref_model).to(updt)
        with self._check_lock():
            cases, expect, ref_dtype = self._cases(ref, ref_model, ref_up, seeds, tdt, updt, dname)
            self._warm_verdict_path(cases[0], expect, atol, rtol)
        self.timings["reference_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        # under the interpreter, Triton itself patches triton.language while it
        # interprets a launch (and restores it, not always to the same objects);
        # the comparison there uses no triton.language
        self.integrity = Snapshot.take(skip=() if self.gpu else ("triton.language",))
        self.timings["integrity_s"] = time.perf_counter() - t1
        gen = self.load_generated(req["source"])
        t0 = time.perf_counter()
        new_model, synced = self._models(gen, init, seeds[0], tdt, ref_state)
        acc: dict = {}
        with self._check_lock():
            traffic = self._check_seeds(new_model, cases, expect, atol, rtol, acc, t0, ref_dtype)
        self.verify_integrity("the comparisons")
        self.timings["check_s"] = time.perf_counter() - t0
        corr = {"seeds": len(seeds), "seeds_used": seeds, "max_abs_err": acc.get("max_abs_err", 0.0),
                "max_rel_err": acc.get("max_rel_err", 0.0), "passed": True,
                "atol": acc.get("atol", atol), "rtol": rtol,
                "reference_dtype": ref_dtype, "dtype": dname,
                "weights_from_reference": synced}
        res = {"status": "ok", "message": "", "rule": None, "correctness": corr,
               "launches": self.capture.last_call(), "traffic": traffic,
               "artifact": None, "artifacts": [], "latency": None}
        # the timing protocol, checked (on the CPU too, untimed: bench_check)
        bcfg = job.get("benchmark") or {}
        runs = int(bcfg.get("runs") if bcfg.get("runs") is not None else 100)
        warmup = int(bcfg.get("warmup") if bcfg.get("warmup") is not None else 25)
        if not self.gpu:
            runs, warmup = min(runs, CPU_BENCH_RUNS), min(warmup, 1)
        target = job.get("target") or None
        if self.gpu and target and req.get("compile_target", True):
            from ..codeobject.launches import compile_launches
            t1 = time.perf_counter()
            comp = compile_launches(gen, res["launches"], target, self.artifact_dir(),
                                    untrusted=self.guard.untrusted)
            self.timings["compile_s"] = time.perf_counter() - t1
            self.check_violations()
            self.verify_integrity("the compile of the generated kernels")
            res["artifacts"] = comp["artifacts"]
            res["artifact"] = comp["artifacts"][0] if comp["artifacts"] else None
            res["compiled"] = True
            if comp["status"] != "ok":
                res.update(status=comp["status"], message=comp["message"])
                return res
        if runs > 0:
            t1 = time.perf_counter()
            try:
                lat = self._checked_benchmark(new_model, cases, expect, atol, rtol, warmup, runs, target)
            except Stop as st:
                st.result.setdefault("correctness", corr)
                raise
            except BaseException as exc:
                self.check_violations()
                c = self.classify(exc)
                res.update(status=c["status"], message="during the benchmark: " + c["message"])
                lat = None
            self.timings["bench_s"] = time.perf_counter() - t1
            if lat is not None:
                res["bench_check"] = lat.pop("bench_check")
                if self.gpu:
                    res["latency"] = lat
                    if res.get("artifacts"):
                        from ..codeobject.launches import match_timed
                        mismatch = match_timed(res["artifacts"], lat, target, self.gpu_arch())
                        if mismatch:
                            res.update(status="incorrect", rule="timed_binary", message=mismatch)
        return res

    def _warm_verdict_path(self, case, expect, atol, rtol) -> None:
        """The comparison's first run, on the reference against itself, before
        the integrity snapshot: whatever its first run sets lazily (the fused
        comparison kernel's JIT cache on a GPU, torch's lazy state) is then in
        the snapshot and not taken for the program's doing."""
        from ..evaluation import check
        torch = self.torch
        for k, r in enumerate(case["refs"]):
            dt = expect[k][0] if k < len(expect) else r.dtype
            o = r.to(dt)
            try:
                _compare(check, torch, o, r, atol, rtol, case["seed"])
            except check.Incorrect:
                pass  # the job dtype's rounding alone; only the path matters here
            _overlap(o, r)
        first = case["inputs"][0] if case["inputs"] else None
        if isinstance(first, torch.Tensor):
            check.modified_inputs({"a": first}, {"a": first})
        if self.gpu:
            self.stream.synchronize()

    def gpu_arch(self) -> str | None:
        if not self.gpu:
            return None
        p = self.torch.cuda.get_device_properties(0)
        if getattr(self.torch.version, "hip", None):
            return str(getattr(p, "gcnArchName", "") or "").split(":")[0] or None
        return f"sm_{p.major}{p.minor}"

    def _check_lock(self):
        """On a GPU the correctness run holds the GPU lock shared, like the template path
        (evaluation/evaluate.py): no benchmark of another worker is timing meanwhile."""
        import contextlib
        from ..processes import gpulock
        if not self.gpu:
            return contextlib.nullcontext()
        return gpulock.gpu_lock(shared=True)

    def _call(self, new_model, inputs, what: str):
        """One call of forward (its launches captured)."""
        self.capture.begin_call()
        return self.untrusted_call(new_model, *inputs, what=what)

    def _launched(self, what: str) -> None:
        """Refuses a call that launched no Triton kernel of the generated module."""
        if not self.capture.last_call():
            raise Stop({"status": "rejected", "rule": "no_launch",
                        "message": f"{what} launched no Triton kernel of the generated module "
                                   "(a cached or precomputed result, or PyTorch doing the work)"})

    def _check_seeds(self, new_model, cases, expect, atol, rtol, acc, t0, ref_dtype):
        """Each seed once, then the last seed's inputs again, the same objects
        (a result cached per input object, or work handed elsewhere when inputs
        repeat, shows there): every call launches a kernel and is compared."""
        torch = self.torch
        earlier: list = []
        prev_ref = None
        traffic = None
        plan = [(i, False) for i in range(len(cases))] + [(len(cases) - 1, True)]
        inputs = None
        for n, (i, repeat) in enumerate(plan):
            case = cases[i]
            if not repeat:
                inputs = [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in case["inputs"]]
            what = "forward" if not repeat else "forward (the same inputs again)"
            out = self._call(new_model, inputs, what)
            failed = self._check_call(n, case["seed"], inputs, case["inputs"], out, case["refs"],
                                      None if repeat else prev_ref, earlier, atol, rtol, acc, expect)
            if failed:
                failed.setdefault("correctness", {}).update(seeds=min(n + 1, len(cases)),
                                                            failed_seed=case["seed"], passed=False,
                                                            reference_dtype=ref_dtype,
                                                            seeds_used=[c["seed"] for c in cases])
                self.timings["check_s"] = time.perf_counter() - t0
                raise Stop(failed)
            self._launched(what)
            prev_ref = case["refs"]
            if traffic is None:
                nb = sum(v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor))
                nb += sum(int(torch.Tensor.numel(o)) * int(torch.Tensor.element_size(o))
                          for o in _trusted_outputs(torch, out) or [])
                traffic = {"bytes": int(nb)}
        return traffic

    def _check_call(self, i, seed, inputs, pristine, out, ref_outs, prev_ref, earlier, atol, rtol,
                    acc, expect) -> dict | None:
        from ..evaluation import check
        torch = self.torch
        inputs = [torch.Tensor.detach(v) if type(v) is torch.Tensor else v for v in inputs]
        changed = check.modified_inputs({f"arg{j}": v for j, v in enumerate(pristine)},
                                        {f"arg{j}": v for j, v in enumerate(inputs)})
        if changed:
            return {"status": "incorrect", "rule": "modified_inputs",
                    "message": f"kernel modified its inputs ({', '.join(changed)}; seed {seed})"}
        outs = _trusted_outputs(torch, out)
        if outs is None:
            return {"status": "incorrect", "rule": "output_type",
                    "message": f"forward returned {type(out).__name__}, not a tensor or a tuple of "
                               f"plain torch.Tensor (seed {seed})"}
        if len(outs) != len(ref_outs):
            return {"status": "incorrect", "rule": "output_type",
                    "message": f"forward returned {len(outs)} tensors, the reference {len(ref_outs)}"}
        in_tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
        for k, o in enumerate(outs):
            if o.device.type != self.dev:
                return {"status": "incorrect", "rule": "output_type",
                        "message": f"output {k} is on {o.device}, not {self.dev}"}
            if k < len(expect) and (o.dtype, tuple(o.shape)) != expect[k]:
                want_dt, want_shape = expect[k]
                return {"status": "incorrect", "rule": "output_type",
                        "message": f"output {k} is {str(o.dtype).replace('torch.', '')} "
                                   f"{list(o.shape)}; the reference's is "
                                   f"{str(want_dt).replace('torch.', '')} {list(want_shape)} (seed {seed})"}
            for j, t in enumerate(in_tensors):
                if _overlap(o, t):
                    return {"status": "incorrect", "rule": "output_alias",
                            "message": f"output {k} shares memory with input {j} (seed {seed}); "
                                       "return a new tensor"}
        if self.gpu:
            self.stream.synchronize()
        stats_all = []
        for k, (o, r) in enumerate(zip(outs, ref_outs)):
            try:
                stats_all.append(_compare(check, torch, o, r, atol, rtol, seed))
            except check.Incorrect as inc:
                if prev_ref is not None and len(prev_ref) == len(outs):
                    try:
                        _compare(check, torch, o, prev_ref[k], atol, rtol, seed)
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

    def _checked_benchmark(self, new_model, cases, expect, atol, rtol, warmup, runs, target) -> dict:
        """The benchmark of forward with its checks (module docstring): fresh
        input copies per call (a random seed's, from os.urandom: not
        predictable), the compute monitor on, a launch count per call (none:
        rejected), and a few probe calls -- drawn at random among the timed
        ones -- whose allocations are NaN-poisoned and whose outputs are
        compared with their seed's reference after the timing. On the CPU the
        same protocol runs a few calls with a wall clock and no latency is
        reported (bench_check)."""
        import random
        from ..evaluation import timing
        torch = self.torch
        rng = random.Random(os.urandom(16))
        total = max(1, warmup) + max(1, runs)
        first_timed = max(1, warmup)
        nprobe = min(PROBES, max(1, runs))
        probes = set(rng.sample(range(first_timed, total), nprobe)) | {total - 1}
        state: dict = {"k": 0, "inputs": None, "case": 0, "launches": [], "kept": []}

        def before(_i=None):
            case = rng.randrange(len(cases))
            state["case"] = case
            state["inputs"] = [v.detach().clone() if isinstance(v, torch.Tensor) else v
                               for v in cases[case]["inputs"]]

        def fn():
            k = state["k"]
            state["k"] += 1
            probe = k in probes
            self.poison = probe
            self.capture.begin_call()
            try:
                with self.monitor(), self.guard.untrusted():
                    out = new_model(*state["inputs"])
            finally:
                self.poison = True
            state["launches"].append(len(self.capture.last_call()))
            if probe:
                state["kept"].append((k, state["case"], out, state["inputs"]))
            if len(self.capture.calls) > 2 * total:  # keep the capture's memory bounded
                del self.capture.calls[:-1]

        api = None if self.gpu else _WallClock()
        with torch.no_grad(), (torch.cuda.stream(self.stream) if self.gpu else _nullcontext()):
            before()
            if self.gpu:
                from ..codeobject.launches import TimedBinaries
                with TimedBinaries({GEN_MODULE}) as timed:
                    lat = timing.benchmark(fn, warmup, runs, self.dev_name, target, api=api,
                                          before=before)
                lat.update(timed.describe())
            else:
                lat = timing._benchmark(fn, warmup, runs, self.dev_name, target, api=api, before=before)
            if self.gpu:
                self.stream.synchronize()
        self.check_violations()
        self.verify_integrity("the benchmark")
        empty = [k for k, n in enumerate(state["launches"]) if n == 0]
        if empty:
            raise Stop({"status": "rejected", "rule": "no_launch",
                        "message": f"during the benchmark, call {empty[0] + 1} of "
                                   f"{len(state['launches'])} launched no Triton kernel of the generated "
                                   "module (a cached or precomputed result)"})
        verified = 0
        for k, case, out, inputs in state["kept"]:
            with self._check_lock():  # GPU work: shared, as every check
                failed = self._check_call(k, cases[case]["seed"], inputs, cases[case]["inputs"], out,
                                          cases[case]["refs"], None, [], atol, rtol, {}, expect)
            if failed:
                failed["rule"] = failed.get("rule") or "bench_output"
                failed["message"] = (f"during the benchmark, call {k + 1} (a random probe, seed "
                                     f"{cases[case]['seed']}): " + failed["message"])
                raise Stop(failed)
            verified += 1
        self.verify_integrity("the comparisons")
        lat["bench_check"] = {"calls": len(state["launches"]), "probes_verified": verified,
                              "launches_per_call_min": min(state["launches"]),
                              "fresh_inputs": True, "monitor": True}
        return lat

    def reference_info(self) -> dict:
        from ..evaluation import check
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
            from ..evaluation.timing import benchmark
            t1 = time.perf_counter()
            with torch.no_grad():
                res["latency"] = benchmark(lambda: model(*inputs), warmup, runs, self.dev_name,
                                           job.get("target"))
            self.timings["bench_s"] = time.perf_counter() - t1
        return res

    def compile_task(self) -> dict:
        from ..codeobject.launches import compile_launches
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


def _compare(check, torch, out, ref, atol, rtol, seed):
    if not ref.is_floating_point() and not ref.is_complex():
        return check.compare(out.to(torch.float64), ref.to(torch.float64), 0.0, 0.0, seed)
    return check.compare(out, ref, atol, rtol, seed)


def _trusted_outputs(torch, value) -> list | None:
    """forward's result as fresh tensor objects the program never held: each
    must be a plain torch.Tensor (a subclass could run its own code inside
    the comparison: __torch_function__) and is detached through the class
    (an attribute the program set on its own object cannot shadow a method).
    None when the result is not one tensor or a tuple/list of them."""
    items = [value] if type(value) is torch.Tensor else \
        list(value) if type(value) in (tuple, list) and value else None
    if items is None or any(type(v) is not torch.Tensor for v in items):
        return None
    return [torch.Tensor.detach(v) for v in items]


class _WallClock:
    """timing._benchmark's device API on the CPU (the interpreter): no L2 to
    flush, host clock events; what it measures is not a latency (bench_check)."""

    class _Buffer:
        def zero_(self):
            return self

    class _Event:
        def __init__(self):
            self.t = None

        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, end) -> float:
            return (end.t - self.t) * 1e3

    def buffer(self, nbytes: int):
        return self._Buffer()

    def event(self):
        return self._Event()

    def synchronize(self):
        pass

    def sleep(self, cycles: int) -> bool:
        return False


def _nullcontext():
    import contextlib
    return contextlib.nullcontext()


def _span(t):
    import torch
    st = torch.Tensor.untyped_storage(t)
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
    from . import confine
    from ..processes.lifetime import die_with_parent
    die_with_parent(int(os.environ["KILN_SANDBOX_PARENT"])
                            if os.environ.get("KILN_SANDBOX_PARENT", "").isdigit() else None)
    confine.no_new_privs()
    network = confine.isolate_network() if os.environ.get("KILN_SANDBOX_NETNS", "1") != "0" \
        else "audit-only: disabled by KILN_SANDBOX_NETNS=0"
    roots = [p for p in (os.environ.get("KILN_SANDBOX_TMP"), os.environ.get("TRITON_CACHE_DIR")) if p]
    roots += [p for p in os.environ.get("KILN_SANDBOX_WRITE_FILES", "").split(os.pathsep)
              if p and os.path.isfile(p)]  # the GPU lock files (they must exist already)
    files = confine.restrict_writes(roots) if os.environ.get("KILN_SANDBOX_LANDLOCK", "1") != "0" \
        else "audit-only: disabled by KILN_SANDBOX_LANDLOCK=0"
    from ..service.server import protect_stdout
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
            from ..processes.device import install_scratch_allocator
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
        res = {"status": "crash", "message": "evaluator: " + traceback_tail(exc)}
    res.setdefault("timings", {})["child_s"] = time.perf_counter() - t0
    res["nonce"] = req.get("nonce")
    from ..service.jsonsafe import json_safe
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
