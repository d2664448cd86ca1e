"""The evaluate and space methods: compile for the target, check, benchmark."""
from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from . import check, memplan
from .timing import benchmark
from ..log import log
from ..processes import gpulock, pressure
from ..processes.gpulock import gpu_lock
from ..processes.compile_child import CompileChildDied, CompileClient
from ..processes.device import Device, install_scratch_allocator
from ..service.jsonsafe import json_safe
from ..codeobject.launches import TimedBinaries, match_timed, untimed
from .preload import preload
from ..codeobject.targetcompile import compile_stage, describe_exception
from .outcome import classify
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
    if lib.operators.get(op) is None:
        raise TemplateError(f"unknown operator {op!r}")
    return op, list(shape), dtype, lib.complete_params(op, params), target


def space(lib: Library, job: Any) -> dict:
    op, shape, dtype, params, target = job_fields(lib, job)
    mod = lib.launch_module(op)
    configs = list(mod.config_space(op, shape, dtype, params, target))
    traffic = mod.traffic(op, shape, dtype, params)
    out = {"configs": json_safe(configs), "traffic": json_safe(traffic)}
    hints = space_hints(mod, op, shape, dtype, params, configs, target)
    if hints is not None:
        out["hints"] = hints
    return out


def space_hints(mod, op, shape, dtype, params, configs, target) -> list | None:
    """Per config, what the engine's config model needs before any compile: the
    launch grid (from the template's compile_spec) and, where the template has
    them, its shared-memory estimate and its own `hints(...)` (e.g. conv2d's
    registers and instructions per output). Optional: any failure leaves the
    space answer without hints (the model then assumes full waves)."""
    try:
        shared = getattr(mod, "shared_bytes", None)
        extra = getattr(mod, "hints", None)
        hints = []
        for c in configs:
            grid = [int(x) for x in mod.compile_spec(op, shape, dtype, params, c, target)["grid"]]
            hint = {"grid": (grid + [1, 1, 1])[:3]}
            if shared is not None:
                try:
                    hint["shared_bytes"] = int(shared(c, dtype, target))
                except Exception:
                    pass
            if extra is not None:
                try:
                    hint.update(json_safe(extra(op, shape, dtype, params, c, target)))
                except Exception:
                    pass
            hints.append(hint)
        return hints
    except Exception:
        return None


class Evaluation:
    def __init__(self, lib: Library, dev: Device, warm=None):
        self.lib = lib
        self.dev = dev
        self.warm = warm  # the worker's warm-up (device.WarmUp), waited for before the first GPU work
        self.device_lost = False  # set when the GPU context is unusable after a crash
        # under the interpreter the cross-compile runs in a child process (compile_child.py)
        self.interpreting = not dev.is_gpu
        self.compiler = CompileClient() if self.interpreting and not dev.error else None
        if self.compiler is not None:
            self.compiler.start()  # imports torch/triton while the worker waits for requests
        # this worker's share of the GPU's memory (memplan.share_bytes; None:
        # no bound). A job without a plan caches at most half of it.
        self.share = memplan.share_bytes(dev)
        self.inputs = _InputCache(None if self.share is None else self.share // 2)
        self.plans: dict[tuple, memplan.MemoryPlan | None] = {}  # per job (_plan)
        self._plan_now: memplan.MemoryPlan | None = None  # the evaluation's job's (_run)
        self._memory_wait_s: float | None = None  # this evaluation's (_alone)
        # package_info's verification data by (kernel instance, seed, tensors): the
        # shortlist's variants of one kernel share one (package_info.verify_for)
        self.verify_cache: dict = {}
        self._job = None  # the job of the check in progress (_check)
        self._setup_s = 0.0  # this evaluation's job set-up time (_check)
        # this evaluation's phases before its check, seconds (plan_s, inputs_s,
        # reference_s, setup_warm_wait_s): written by run()'s thread or by its
        # set-up thread (_start_setup) before run() joins it; in its timings
        self._phases: dict[str, float] = {}
        self._preload_s = None  # its kernel load before the GPU lock (_check, GPU only)
        if dev.is_gpu:
            install_scratch_allocator(dev.torch_device)

    def run(self, job: Any, config: Any, artifact_dir: Any) -> dict:
        gpulock.take_spans()
        self._memory_wait_s = None
        self._plan_now = None
        self._phases = {}
        try:
            res = self._attempt(job, config, artifact_dir)
        except _OutOfMemory:
            # Several workers share the GPU, each holding its job's inputs and
            # its allocator's cached blocks: a check or benchmark can run out
            # of memory through no fault of the kernel. Free everything this
            # worker holds and run the candidate again alone on the GPU (the
            # lock held exclusively, the other workers asked to give back
            # their cached memory: _alone).
            self._free_gpu_memory()
            try:
                with self._alone(self._plan_now, "retry", kind="bench"):
                    res = self._attempt(job, config, artifact_dir)
            except _OutOfMemory as oom:
                self._free_gpu_memory()
                res = {"status": "crash", "exec_device": self.dev.name,
                       "message": f"out of GPU memory twice, the second time holding the GPU alone "
                                  f"(other workers' cached memory still counts; use fewer "
                                  f"--workers per GPU): {oom}",
                       "correctness": None, "latency": None, "artifact": None,
                       "timings": {"compile_s": 0.0, "check_s": 0.0, "bench_s": 0.0}}
        if self.dev.is_gpu:
            _trim_cached_gpu_memory()
        self.yield_memory()  # another worker's notice: give back what this one caches
        # On a GPU: time this evaluation held the GPU (benchmark exclusively,
        # checks shared), and the spans, for the engine's GPU busy fraction.
        spans = gpulock.take_spans()
        waits = gpulock.take_lock_waits()
        timings = res.get("timings")
        if self.dev.is_gpu and isinstance(timings, dict):
            timings["gpu_s"] = sum(b - a for a, b, _ in spans)
            timings["gpu_spans"] = [[a, b, kind] for a, b, kind in spans]
            # queueing for the lock, inside check_s / bench_s
            timings["lock_wait_s"] = {k: round(v, 6) for k, v in waits.items()}
        if self._memory_wait_s is not None and isinstance(timings, dict):
            # a check alone on the GPU: the wait for the other workers' memory
            timings["memory_wait_s"] = round(self._memory_wait_s, 6)
        if isinstance(timings, dict):
            for k, v in self._phases.items():
                timings[k] = timings.get(k, 0.0) + v
            imported = memplan.import_report()  # once per worker: the fake-tensor import
            if imported is not None:
                timings["plan_import"] = imported
        return res

    def _attempt(self, job: Any, config: Any, artifact_dir: Any) -> dict:
        """_run, with an out-of-memory error from anywhere in it as _OutOfMemory."""
        try:
            return self._run(job, config, artifact_dir)
        except _OutOfMemory:
            raise
        except Exception as exc:
            if _is_out_of_memory(exc):
                raise _OutOfMemory(describe_exception(exc)) from exc
            raise

    def _run(self, job: Any, config: Any, artifact_dir: Any) -> dict:
        op, shape, dtype, params, target = job_fields(self.lib, job)
        if not isinstance(config, dict):
            raise BadRequest("'config' must be an object")
        if artifact_dir is not None and not isinstance(artifact_dir, str):
            raise BadRequest("'artifact_dir' must be a string path")
        t0 = time.perf_counter()
        mod = self.lib.launch_module(op)  # the template's module, imported by the first of its jobs
        self._phases["module_s"] = self._phases.get("module_s", 0.0) + time.perf_counter() - t0
        res: dict[str, Any] = {
            "status": "ok", "message": "", "exec_device": self.dev.name,
            "correctness": None, "latency": None, "artifact": None,
            "traffic": json_safe(mod.traffic(op, shape, dtype, params)),
            "timings": {"compile_s": 0.0, "check_s": 0.0, "bench_s": 0.0},
        }

        # The job's set-up on this worker (its memory plan, inputs drawn,
        # references computed) runs beside the compile (_SetUp: on the CPU
        # the plan alone); the check waits for it.
        self._setup_s = 0.0  # and its parts, this attempt's (an out-of-memory retry's second)
        self._phases.pop("inputs_s", None)
        self._phases.pop("reference_s", None)
        setup = self._start_setup(mod, op, shape, dtype, params, job, config)

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
            if setup is not None:
                setup.join(reraise=False)  # kept for the job's next candidate; its error then
            res["status"], res["message"] = stage["status"], stage["message"]
            return json_safe(res)

        # (2) correctness on the executing device -----------------------------
        if self.warm is not None:
            warmed = self.warm.wait()  # the first evaluation: its phases and the wait
            if warmed is not None:
                res["timings"]["warm_up"] = warmed
        t0 = time.perf_counter()
        try:
            if setup is not None:
                try:
                    setup.join()  # its error (out of memory...) is this check's
                finally:
                    # the part of check_s that waited for the set-up thread
                    res["timings"]["setup_wait_s"] = time.perf_counter() - t0
            # the set-up thread's plan, else computed here (also for run()'s retry)
            self._plan_now = self._plan(mod, op, shape, dtype, params)
            corr, inputs, out, last = self._check(mod, op, shape, dtype, params, config, job)
            res["correctness"] = corr
        except check.Incorrect as inc:
            res["status"], res["message"] = "incorrect", inc.message
            res["correctness"] = {"seeds": inc.stats.get("seeds", 1), "passed": False,
                                  "failed_seed": inc.stats.get("seed"),
                                  "seeds_used": inc.stats.get("seeds_used"),
                                  **{k: v for k, v in inc.stats.items()
                                     if k in ("max_abs_err", "max_rel_err", "atol", "rtol")}}
            res["timings"]["check_s"] = time.perf_counter() - t0
            return json_safe(res)
        except _LaunchError as le:
            res["status"], res["message"] = le.status, le.message
            res["timings"]["check_s"] = time.perf_counter() - t0
            return json_safe(res)
        res["timings"]["check_s"] = time.perf_counter() - t0
        # the part of check_s that set the job up on this worker (inputs drawn,
        # reference computed): paid by the first candidate of a job per worker
        res["timings"]["setup_s"] = self._setup_s
        if self._preload_s is not None:
            # the part of check_s that loaded the kernel before taking the lock
            res["timings"]["preload_s"] = self._preload_s

        # (3) benchmark on a GPU -----------------------------------------------
        bcfg = job.get("benchmark") or {}
        runs = int(bcfg.get("runs", 100) if bcfg.get("runs") is not None else 100)
        warmup = int(bcfg.get("warmup", 25) if bcfg.get("warmup") is not None else 25)
        if self.dev.is_gpu and runs > 0:
            self.yield_memory()
            t0 = time.perf_counter()
            try:
                # poisoned before the timed calls, compared after them
                # (_verify_after_bench): what the timed runs left is checked
                with self._shared_gpu_lock("check"):
                    _poison(out)
                cutoff = bcfg.get("cutoff_ms")
                with TimedBinaries() as timed:
                    res["latency"] = benchmark(lambda: mod.launch(op, inputs, out, config, params),
                                               warmup, runs, self.dev.name, target,
                                               cutoff_ms=float(cutoff) if isinstance(cutoff, (int, float)) else None)
                res["latency"].update(timed.describe())
            except Exception as exc:
                status, message = self._classify(exc)
                res["status"], res["message"] = status, "during the benchmark: " + message
            if res["status"] == "ok":
                self._verify_after_bench(res, out, last)
            res["timings"]["bench_s"] = time.perf_counter() - t0
            if res["status"] == "ok" and isinstance(res.get("artifact"), dict):
                # the binary timed is the binary shipped (docs/architecture.md)
                mismatch = match_timed([res["artifact"]], res["latency"], target, self.dev.arch)
                if mismatch:
                    res["status"], res["message"] = "incorrect", mismatch
        elif isinstance(res.get("artifact"), dict):
            untimed([res["artifact"]])
        return json_safe(res)

    # -------------------------------------------------------------------------
    def _verify_after_bench(self, res: dict, out, last) -> None:
        """The output the timed runs left (poisoned before them) against the
        last seed's reference: a kernel that is right once and wrong when
        timed (a race at warm caches, a partial write) is `incorrect`."""
        ref, seed, atol, rtol, memo = last
        t0 = time.perf_counter()
        try:
            with self._shared_gpu_lock("check"):
                self._sync()
                check.compare(out, ref, atol, rtol, seed, memo=memo)
        except check.Incorrect as inc:
            res["status"], res["message"] = "incorrect", "after the benchmark's timed runs: " + inc.message
        res["timings"]["bench_verify_s"] = time.perf_counter() - t0

    def _sync(self):
        if self.dev.is_gpu:
            import torch
            torch.cuda.synchronize()

    def _shared_gpu_lock(self, kind: str):
        """On a GPU the GPU lock held shared (gpulock.gpu_lock), recorded as `kind`;
        on the CPU nothing to hold."""
        return gpu_lock(shared=True, kind=kind) if self.dev.is_gpu else contextlib.nullcontext()

    def release_inputs(self, above_bytes: int = 0) -> None:
        """Drops the cached inputs when they hold more than above_bytes and
        gives the freed blocks back (the confirmation round draws its own input
        sets: a KernelBench-sized job's cached seeds beside them ran an H200
        out of memory). Same thread as run()."""
        if self.dev.is_gpu and _tensor_bytes(self.inputs.entries) > above_bytes:
            self._free_gpu_memory()

    def yield_memory(self) -> bool:
        """When another worker on this GPU has posted a live memory-pressure
        notice (processes/pressure.py), drops the cached inputs and gives the
        allocator's cached blocks back; True when it did. Called at safe
        points only -- the start of a check, before a benchmark, the end of
        an evaluation, before a confirmation -- never while a set-up thread
        uses the cache. Same thread as run()."""
        notices = pressure.others()
        if not notices:
            return False
        held = _tensor_bytes(self.inputs.entries)
        self._free_gpu_memory()
        log(f"memory pressure from pid {', '.join(str(n['pid']) for n in notices)} "
             f"({max(int(n.get('bytes', 0)) for n in notices) / float(1 << 30):.1f} GiB): "
             f"dropped {held} cached bytes")
        return True

    def _plan(self, mod, op, shape, dtype, params) -> "memplan.MemoryPlan | None":
        """The job's memory plan (memplan.py), computed once per job, and the
        cache's bound on the job's other seeds set from it."""
        key = _input_key(op, shape, dtype, params, self.dev.torch_device, None)[:-1]
        if key not in self.plans:
            t0 = time.perf_counter()
            plan = memplan.job_plan(mod, op, shape, dtype, params, self.share)
            self._phases["plan_s"] = self._phases.get("plan_s", 0.0) + time.perf_counter() - t0
            self.plans[key] = plan
            if plan is not None and plan.cache_bytes is not None:
                self.inputs.limit(key, plan.cache_bytes, tight=plan.cache_bytes < plan.entry_bytes)
        return self.plans[key]

    @contextlib.contextmanager
    def _alone(self, plan: "memplan.MemoryPlan | None", why: str, kind: str = "check"):
        """alone_on_gpu for this evaluation (its wait in timings.memory_wait_s)."""
        with alone_on_gpu(self.dev, plan, why, _tensor_bytes(self.inputs.entries), kind) as waited:
            self._memory_wait_s = (self._memory_wait_s or 0.0) + waited
            yield

    def _free_gpu_memory(self):
        self.inputs.clear()
        if self.dev.is_gpu:
            import gc
            gc.collect()
            _release_cached_gpu_memory()

    def _classify(self, exc: BaseException) -> tuple[str, str]:
        if _is_out_of_memory(exc):
            raise _OutOfMemory(describe_exception(exc)) from exc
        status, message = classify(exc, self.dev.name)
        if status == "crash":
            self._probe_device()
        return status, message

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
        atol, rtol = check.resolve_tolerances(job, mod, op, shape, params)
        seeds = check.seed_list(job, check.candidate_id(config))
        self._job = job
        updt = check.upcast_dtype(dtype)
        dev = self.dev.torch_device
        acc: dict[str, Any] = {}
        inputs = out = last = None
        self._preload_s = None
        self.yield_memory()
        plan = self._plan_now
        # A job whose working set passes this worker's share checks alone on
        # the GPU (nested in run()'s retry, which is alone already).
        alone = plan is not None and plan.alone and gpulock.held() != "exclusive"
        with self._alone(plan, "check") if alone else contextlib.nullcontext():
            for i, seed in enumerate(seeds):
                # the previous seed's copies are garbage before the next
                # seed's are taken (never two seeds' at once) and, for a big
                # job, back to the driver: the other workers share the GPU
                inputs = out = last = None
                if i and plan is not None and plan.big:
                    _release_cached_gpu_memory()
                try:
                    inputs, out, last = self._one_seed(mod, op, shape, dtype, params, config, seed,
                                                       updt, dev, atol, rtol, acc, first=i == 0)
                except check.Incorrect as inc:
                    inc.stats.update(seeds=i + 1, seed=seed, seeds_used=seeds[:i + 1])
                    raise
        corr = {"seeds": len(seeds), "seeds_used": seeds, "max_abs_err": acc.get("max_abs_err", 0.0),
                "max_rel_err": acc.get("max_rel_err", 0.0), "passed": True,
                "atol": acc.get("atol", atol), "rtol": rtol}
        return corr, inputs, out, last

    def _entry(self, mod, op, shape, dtype, params, seed, dev, job=None) -> dict:
        """The seed's inputs, drawn once per job and worker (the same numbers
        every time), on the GPU for a GPU device (common.randn). A seed of the
        candidate's own (check.seed_list) is kept only until the next
        candidate's (_InputCache: memory)."""
        import torch

        def draw():
            t0 = time.perf_counter()
            # Drawing runs kernels on the GPU: it holds the lock shared, like a
            # check, so that it never runs during another worker's benchmark.
            with self._shared_gpu_lock("setup"):
                torch.manual_seed(seed)
                # memo: compare()'s facts about the reference, once computed
                entry = {"pristine": check.snapshot(mod.make_inputs(op, shape, dtype, params, seed, dev)),
                         "ref": None, "memo": {}}
                self._sync()
            self._add_setup("inputs_s", time.perf_counter() - t0)
            return entry

        own = job is not None and seed not in check.seed_list(job)
        return self.inputs.get(_input_key(op, shape, dtype, params, dev, seed), draw, transient=own)

    def _start_setup(self, mod, op, shape, dtype, params, job, config=None) -> "_SetUp | None":
        """The job's set-up for this worker in a thread of its own, started
        before the candidate compiles, so that a worker's first candidate of a
        job does not wait for it after its compile (about 4% of the workers'
        time in an exploration, docs/performance-journal.md): the job's memory
        plan where this worker has none yet (_plan; a worker's first waits for
        the fake-tensor import, memplan.start_import), then, on a GPU, each
        seed's inputs drawn and its reference computed. On the CPU the plan
        alone. None when there is nothing to do: planned and set up already,
        inside the out-of-memory retry (which holds the GPU lock whole: all of
        it in run()'s thread), or planned and a job whose tolerances or seeds
        are bad (the check reports those), that does not fit its seeds, or
        that checks alone."""
        if gpulock.held() is not None:
            return None
        key = _input_key(op, shape, dtype, params, self.dev.torch_device, None)[:-1]
        planned = key in self.plans

        def plan_only() -> "_SetUp | None":
            return None if planned else _SetUp(lambda: self._plan(mod, op, shape, dtype, params))

        if not self.dev.is_gpu:
            return plan_only()
        try:
            seeds = check.seed_list(job, check.candidate_id(config))
            updt = check.upcast_dtype(dtype)
        except Exception:  # noqa: BLE001
            return plan_only()
        dev = self.dev.torch_device
        keys = [_input_key(op, shape, dtype, params, dev, seed) for seed in seeds]

        def set_up_ahead(plan) -> bool:
            if all(self.inputs.prepared(k) for k in keys) or self.inputs.tight(keys[0]):
                return False
            # a job that checks alone, or whose seeds do not fit: the check
            # draws its seeds one at a time
            return plan is None or not (plan.alone or not plan.seeds_fit(len(seeds)))

        if planned and not set_up_ahead(self.plans[key]):
            return None
        if all(self.inputs.prepared(k) for k in keys):
            return plan_only()

        def prepare():
            if not set_up_ahead(self._plan(mod, op, shape, dtype, params)):
                return
            if self.warm is not None:
                t0 = time.perf_counter()
                self.warm.join()  # the warm-up's kernels first (WarmUp)
                self._phases["setup_warm_wait_s"] = time.perf_counter() - t0
            self.yield_memory()  # the run()'s thread compiles: the cache is this thread's
            for seed in seeds:
                entry = self._entry(mod, op, shape, dtype, params, seed, dev, job)
                if entry["ref"] is None:
                    t0 = time.perf_counter()
                    with self._shared_gpu_lock("setup"):
                        entry["ref"] = _reference(mod, op, entry["pristine"], updt, params, seed)
                        self._sync()
                    self._add_setup("reference_s", time.perf_counter() - t0)

        return _SetUp(prepare)

    def _add_setup(self, phase: str, seconds: float) -> None:
        """seconds of the job's set-up (inputs_s or reference_s; setup_s their sum)."""
        self._setup_s += seconds
        self._phases[phase] = self._phases.get(phase, 0.0) + seconds

    def _one_seed(self, mod, op, shape, dtype, params, config, seed, updt, dev, atol, rtol,
                  acc, first=False):
        entry = self._entry(mod, op, shape, dtype, params, seed, dev, self._job)
        pristine = entry["pristine"]
        if first and self.dev.is_gpu:
            # the kernel's first-launch host work (JIT cache, module load)
            # before the lock, not holding it (preload.py)
            t0 = time.perf_counter()
            preload(mod, op, pristine, mod.output_like(op, pristine, params), config, params)
            self._preload_s = time.perf_counter() - t0
        # On a GPU the GPU part of the check holds the GPU lock shared: checks of
        # several workers run side by side, never during another's benchmark.
        with self._shared_gpu_lock("check"):
            return self._seed_on_device(mod, op, params, config, seed, updt, atol, rtol,
                                        acc, entry, pristine)

    def _seed_on_device(self, mod, op, params, config, seed, updt, atol, rtol, acc, entry,
                        pristine):
        import torch
        # The reference first, where this seed has none yet: its upcast copy
        # of the inputs is freed before the candidate's copies and output are
        # taken (memplan: the two never coexist).
        t0 = time.perf_counter()
        fresh = entry["ref"] is None
        if fresh:
            entry["ref"] = _reference(mod, op, pristine, updt, params, seed)
            self._sync()
            self._add_setup("reference_s", time.perf_counter() - t0)
        ref = entry["ref"]
        torch.manual_seed(seed)
        inputs = check.snapshot(pristine)  # the candidate's own copies
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
        stats = check.compare(out, ref, atol, rtol, seed, memo=entry["memo"])
        check.merge_stats(acc, stats)
        return inputs, out, (ref, seed, atol, rtol, entry["memo"])


@contextlib.contextmanager
def alone_on_gpu(dev, plan: "memplan.MemoryPlan | None", why: str, own_bytes: int = 0,
                 kind: str = "check"):
    """Inside: this worker alone on the GPU -- its memory-pressure notice
    posted (the other workers drop their caches at their next safe point:
    Evaluation.yield_memory), the GPU lock held exclusively, and up to
    pressure.WAIT_S waited until the plan's working set, less what this
    worker holds already (own_bytes cached, its allocator's free blocks), is
    free; then on regardless (an out-of-memory error is the caller's). Yields
    the seconds waited; the lock's span is recorded as `kind`. On the CPU no
    wait. Logs the wait to stderr on a GPU."""
    need = plan.working_set if plan is not None else 0
    with pressure.posted(need), gpu_lock(kind=kind):
        if not dev.is_gpu:
            yield 0.0
        else:
            import torch
            own = own_bytes
            try:
                own += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            except Exception:  # noqa: BLE001
                pass
            want = max(0, need - own)
            waited, have = pressure.wait_for_free(want, lambda: torch.cuda.mem_get_info()[0])
            gib = float(1 << 30)
            share = plan.share_bytes if plan is not None and plan.share_bytes else 0
            log(f"alone on the GPU ({why}): working set {need / gib:.1f} GiB, share {share / gib:.1f} GiB; "
                 f"waited {waited:.1f} s for {want / gib:.1f} GiB free (free {have / gib:.1f} GiB)")
            yield waited


def _reference(mod, op, pristine, updt, params, seed):
    """The reference output of one seed, on an upcast copy of its pristine
    inputs; the copy is garbage when this returns."""
    import torch
    torch.manual_seed(seed)
    return mod.reference(op, check.upcast(pristine, updt), params)


class _OutOfMemory(Exception):
    """The GPU ran out of memory during a check or benchmark (Evaluation.run retries)."""


def _poison(out) -> None:
    """NaN (integers: their max) in every element of an output buffer."""
    import torch
    if out.is_floating_point():
        out.fill_(float("nan"))
    else:
        out.fill_(torch.iinfo(out.dtype).max if out.dtype != torch.bool else True)


def _is_out_of_memory(exc: BaseException) -> bool:
    try:
        import torch
        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except Exception:  # pragma: no cover
        pass
    text = str(exc).lower()
    return "out of memory" in text and "shared" not in text


def _input_key(op, shape, dtype, params, dev, seed) -> tuple:
    """_InputCache's key of one seed of a job; everything but the seed names the job."""
    return (op, json.dumps(shape), dtype, json.dumps(params, sort_keys=True), str(dev), seed)


class _InputCache:
    """Inputs and reference output per (job, seed), shared by the candidates of a
    job that this worker evaluates. Every candidate still gets fresh copies of
    the inputs (so a kernel that writes them spoils nothing for the next one) and
    a NaN-filled output; the reference is computed once per seed. Holds the
    entries of the two most recent jobs (a worker may alternate between jobs),
    the older one only while it holds at most OTHER_JOBS_BYTES.

    How much of a job stays cached: a job with a limit (`limit`, from its
    memory plan: memplan.MemoryPlan.cache_bytes) keeps its other seeds while
    they hold at most that many bytes when one more is drawn -- candidates' own
    seeds are dropped first, then the job's oldest; a job without one keeps
    its seeds while all of them, the new one included, fit budget_bytes.
    Not thread-safe: one thread at a time (Evaluation: run()'s, or its
    set-up thread while run() compiles)."""

    JOBS = 2
    # Another job's entries are kept only while they hold at most this much:
    # a job of KernelBench size holds GiBs per seed, and several workers share
    # one GPU.
    OTHER_JOBS_BYTES = 1 << 30

    def __init__(self, budget_bytes: int | None = None):
        self.jobs: list[tuple] = []
        self.entries: dict[tuple, dict] = {}
        self.transient: set[tuple] = set()  # keys of candidates' own seeds
        # At most this much cached for the current job (None: no bound): when
        # one more seed would pass it, the job's other seeds are dropped first
        # and drawn again when needed (slower, but a job whose seeds do not
        # fit beside the other workers' still runs). Jobs that hit the bound
        # are `tight` (no set-up ahead of the check: it would only thrash).
        self.budget_bytes = budget_bytes
        self.tight_jobs: set[tuple] = set()
        self.limits: dict[tuple, int] = {}  # per job: bytes of its other seeds (limit)

    def limit(self, job: tuple, other_seeds_bytes: int, tight: bool = False) -> None:
        """The job's bound on its other seeds' bytes beside the one in use;
        `tight`: no set-up ahead of its checks (only the current seed fits)."""
        self.limits[job] = int(other_seeds_bytes)
        if tight:
            self.tight_jobs.add(job)

    def get(self, key: tuple, draw, transient: bool = False) -> dict:
        """The entry of key, drawn when missing. A transient entry (a
        candidate's own seed) replaces the previous transient one."""
        if transient and key not in self.transient:
            for k in list(self.transient):
                self.entries.pop(k, None)
            self.transient.clear()
        job = key[:-1]
        if job in self.jobs:
            self.jobs.remove(job)
        self.jobs.append(job)
        evicted = False
        keep = self.JOBS if self._bytes(exclude=job) <= self.OTHER_JOBS_BYTES else 1
        for old in self.jobs[:-keep]:
            for k in [k for k in self.entries if k[:-1] == old]:
                del self.entries[k]
                self.transient.discard(k)
                evicted = True
        self.jobs = self.jobs[-keep:]
        if evicted:
            _release_cached_gpu_memory()
        if key not in self.entries:
            self._make_room(job, key)
            self.entries[key] = draw()  # an out-of-memory error: Evaluation._attempt's
            if transient:
                self.transient.add(key)
        return self.entries[key]

    def _make_room(self, job: tuple, key: tuple) -> None:
        mine = [k for k in self.entries if k[:-1] == job and k != key]
        held = sum(_tensor_bytes(self.entries[k]) for k in mine)
        bound = self.limits.get(job)
        if bound is None:
            if self.budget_bytes is None or not mine or held + held // len(mine) <= self.budget_bytes:
                return
            bound = 0  # the job's others all go
        elif held <= bound:
            return
        dropped_job_seed = False
        for k in sorted(mine, key=lambda k: k not in self.transient):  # own seeds first
            if held <= bound:
                break
            held -= _tensor_bytes(self.entries.pop(k))
            dropped_job_seed |= k not in self.transient
            self.transient.discard(k)
        if dropped_job_seed:
            self.tight_jobs.add(job)
        _release_cached_gpu_memory()

    def tight(self, key: tuple) -> bool:
        """The job of key (a seed's key) did not fit its seeds in the budget."""
        return key[:-1] in self.tight_jobs

    def _bytes(self, exclude: tuple) -> int:
        """Bytes of the tensors cached for jobs other than `exclude`."""
        total = 0
        for k, entry in self.entries.items():
            if k[:-1] != exclude:
                total += _tensor_bytes(entry)
        return total

    def prepared(self, key: tuple) -> bool:
        """The seed's inputs drawn and its reference computed."""
        entry = self.entries.get(key)
        return entry is not None and entry["ref"] is not None

    def clear(self) -> None:
        """Drops every entry (the limits and tight marks stay: they are facts
        about the jobs)."""
        self.jobs.clear()
        self.entries.clear()
        self.transient.clear()


def _tensor_bytes(value) -> int:
    """Bytes of the tensors in value (nested dicts, lists and tuples)."""
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0


class _SetUp:
    """A job's set-up running in a thread beside the compile (Evaluation.
    _start_setup). join() waits for it and raises its error in the caller --
    an out-of-memory error there is the evaluation's, and Evaluation.run retries
    it -- or, with reraise=False, forgets it: what the set-up left undone, the
    check does itself."""

    def __init__(self, fn):
        import threading
        self.error: BaseException | None = None

        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed to join()
                self.error = exc

        self._thread = threading.Thread(target=run, name="kiln-setup", daemon=True)
        self._thread.start()

    def join(self, reraise: bool = True) -> None:
        self._thread.join()
        if self.error is not None and reraise:
            raise self.error


TRIM_BYTES = 1 << 30  # _trim_cached_gpu_memory's threshold


def _trim_cached_gpu_memory() -> None:
    """After an evaluation: when the allocator keeps more than TRIM_BYTES of
    freed blocks (a KernelBench-sized job leaves tens of GiB), give them back,
    so that a worker of the same GPU checking another job can have them. The
    inputs this worker caches stay allocated."""
    try:
        import torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > TRIM_BYTES:
                torch.cuda.empty_cache()
    except Exception:  # pragma: no cover
        pass


def _release_cached_gpu_memory() -> None:
    """Give the allocator's cached blocks back to the driver (after a job's
    inputs are dropped), so the other workers on this GPU can use them."""
    try:
        import torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover
        pass


class _LaunchError(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message
