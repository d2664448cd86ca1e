"""Evaluating generated (LLM) code against a reference module, in sandbox children.

``evaluate`` with ``"source"`` (see worker/README.md, "Generated code"):

1. **screen** the source (``screen.py``): a SyntaxError is ``compile_error``
   (rule ``syntax``); a violation is ``rejected`` with the rule, line and reason.
   Nothing has run yet.
2. **run** it in a sandbox child (``child.py``, mode ``run``): the
   reference module and the program are imported there, never in the worker;
   correctness on ``validation.seeds`` seeds (at least two calls) with the dynamic
   checks, the launches of ModelNew's kernels captured; on a GPU also the
   cross-compile for the job's target and the benchmark.
3. on the CPU, **cross-compile** the captured launches for the target in a second
   child (mode ``compile``, interpreter off); when the interpreted run failed inside
   a launch, the failing launch is compiled too: a Triton compile error there makes
   the answer ``compile_error`` with Triton's message.

Children are started ahead of time (one spare per mode, after the first
generated request) so the evaluation does not wait for torch to import; set
``KILN_SANDBOX_PREWARM=0`` to start them on demand. Each child serves one request
and exits, so nothing of one candidate survives into the next.
"""
from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import reference_module as rm
from . import confine
from ..service.jsonsafe import json_safe
from .screen import screen

STARTUP_TIMEOUT_S = 180.0
MAX_LAUNCHES_REPORTED = 64


class BadGeneratedRequest(ValueError):
    pass


def sandbox_cache_dir() -> str:
    env = os.environ.get("KILN_SANDBOX_CACHE_DIR")
    if env:
        return env
    from ..processes.compile_once import triton_cache_dir
    return triton_cache_dir().rstrip("/") + "-sandbox"


def gpu_lock_files() -> list[str]:
    """bench.py's GPU lock file and turnstile (bench.lock_path: keyed by the
    physical GPU, which the child resolves the same way)."""
    from ..processes.gpulock import lock_path
    path = lock_path()
    return [path, path + ".turn"]


class Child:
    """One sandbox child process (own process group, private temp dir)."""

    def __init__(self, mode: str, interpret: bool):
        self.mode = mode
        base = os.environ.get("KILN_SANDBOX_TMPDIR") or tempfile.gettempdir()
        self.tmpdir = tempfile.mkdtemp(prefix=f"kiln-sbx-{mode}-", dir=base)
        self.buf = b""
        self.ready: dict | None = None
        pkg_parent = str(Path(__file__).resolve().parents[2])
        cache = sandbox_cache_dir()
        os.makedirs(cache, exist_ok=True)
        env = confine.child_env(os.environ, {
            "PYTHONPATH": pkg_parent,
            "TRITON_INTERPRET": "1" if (interpret and mode == "run") else "0",
            "TRITON_CACHE_DIR": cache,
            "KILN_SANDBOX_TMP": self.tmpdir,
            "TMPDIR": self.tmpdir,
            "KILN_SANDBOX_PARENT": str(os.getpid()),
            "CUDA_CACHE_PATH": os.path.join(cache, "nv-compute-cache"),
            "KILN_SANDBOX_WRITE_FILES": os.pathsep.join(gpu_lock_files()) if not interpret else "",
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        self.stderr_path = os.path.join(self.tmpdir, "stderr.log")
        self._err = open(self.stderr_path, "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kiln_worker.sandbox.child", mode], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._err, env=env, cwd=self.tmpdir, process_group=0)
        os.set_blocking(self.proc.stdout.fileno(), False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def read_line(self, deadline: float) -> bytes | None:
        """One line from the answer pipe; None on EOF; raises TimeoutError at deadline."""
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    return None
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def close(self) -> None:
        if self.alive():
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
                self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers of its process group
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self._err.close()
        except OSError:
            pass
        shutil.rmtree(self.tmpdir, ignore_errors=True)


class Pool:
    def __init__(self, interpret: bool):
        self.interpret = interpret
        self.spares: dict[str, Child] = {}
        self.prewarm = os.environ.get("KILN_SANDBOX_PREWARM", "1") != "0"

    def take(self, mode: str) -> Child:
        c = self.spares.pop(mode, None)
        if c is None or not c.alive():
            if c is not None:
                c.close()
            c = Child(mode, self.interpret)
        if self.prewarm:
            self.spares[mode] = Child(mode, self.interpret)
        return c

    def close(self) -> None:
        for c in self.spares.values():  # idle spares hold nothing: no need to wait for them
            c.kill()
            c.close()
        self.spares.clear()


def _relocate(ans: dict, child_dir: str, artifact_dir: str | None) -> None:
    """Moves the code objects the child wrote into its temp dir to artifact_dir."""
    from ..codeobject.targetcompile import write_artifact
    arts = [a for a in (ans.get("artifacts") or []) if isinstance(a, dict)]
    if isinstance(ans.get("artifact"), dict):  # a separate copy after JSON decoding
        arts.append(ans["artifact"])
    root = os.path.realpath(child_dir)
    moved: dict[str, str] = {}
    for a in arts:
        p = a.get("path")
        if not p:
            continue
        rp = os.path.realpath(p)
        if rp in moved:
            a["path"] = moved[rp]
            continue
        if not rp.startswith(root + "/") or artifact_dir is None:
            a["path"] = None
            continue
        with open(rp, "rb") as f:
            data = f.read()
        path, digest = write_artifact(data, artifact_dir, a.get("kind") or "bin")
        if digest != a.get("sha256"):
            raise RuntimeError(f"code object {p} changed on its way out of the sandbox")
        moved[rp] = a["path"] = path


def run_in_child(pool: Pool, mode: str, request: dict, timeout_s: float, cpu_s=None) -> dict:
    """Sends one request to a fresh child; its answer, or a timeout/crash result."""
    child = pool.take(mode)
    nonce = os.urandom(8).hex()
    request = dict(request, nonce=nonce)
    t0 = time.monotonic()
    try:
        try:
            line = child.read_line(child.started + STARTUP_TIMEOUT_S)
        except TimeoutError:
            child.kill()
            return {"status": "crash", "message": f"the sandbox child did not start within "
                    f"{STARTUP_TIMEOUT_S:.0f} s\n{child.stderr_tail()}"}
        if line is None:
            rc = child.proc.wait()
            return {"status": "crash", "message": f"the sandbox child failed to start (exit {rc})\n"
                    f"{child.stderr_tail()}"}
        ready = json.loads(line)
        try:
            child.proc.stdin.write(json.dumps(request).encode() + b"\n")
            child.proc.stdin.flush()
            child.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        t_send = time.monotonic()
        try:
            line = child.read_line(t_send + timeout_s)
        except TimeoutError:
            child.kill()
            child.proc.wait()
            return {"status": "timeout", "rule": "timeout",
                    "message": f"no answer within {timeout_s:g} s: the sandbox child was killed "
                               f"(SIGKILL){_tail_note(child)}",
                    "sandbox": {"network": ready.get("network"), "files": ready.get("files")}}
        if line is None:
            try:
                rc = child.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                rc = child.proc.wait()
            status, msg = confine.describe_exit(rc, cpu_s)
            res = {"status": status, "message": msg + _tail_note(child),
                   "sandbox": {"network": ready.get("network"), "files": ready.get("files")}}
            if status == "timeout":
                res["rule"] = "cpu_limit"
            return res
        try:
            ans = json.loads(line)
        except ValueError:
            return {"status": "crash", "message": "the sandbox child's answer is not JSON"}
        if ans.get("nonce") != nonce:
            return {"status": "crash", "message": "the sandbox child's answer has the wrong nonce"}
        ans.pop("nonce", None)
        ans.setdefault("timings", {})["sandbox_wall_s"] = time.monotonic() - t0
        _relocate(ans, child.tmpdir, request.get("artifact_dir"))
        return ans
    finally:
        child.close()


def _tail_note(child: Child) -> str:
    t = child.stderr_tail(1500)
    return f"\nlast output of the child:\n{t}" if t else ""


class GeneratedEvaluator:
    """The worker's handle for generated code (one per worker, lazily created)."""

    def __init__(self, dev):
        self.dev = dev
        self.pool = Pool(interpret=not dev.is_gpu)
        if dev.is_gpu:
            # the benchmark lock (bench.gpu_lock) and its turnstile must exist before a child
            # starts: Landlock lets the child write only files that are already there
            for p in gpu_lock_files():
                try:
                    with open(p, "a"):
                        pass
                except OSError:
                    pass

    # -- request parsing ------------------------------------------------------------
    def _job(self, req: dict) -> tuple[dict, dict]:
        job = req.get("job")
        if not isinstance(job, dict):
            raise BadGeneratedRequest("'job' must be an object")
        try:
            spec = rm.reference_spec(job)
        except rm.ReferenceError_ as exc:
            raise BadGeneratedRequest(str(exc)) from None
        target = job.get("target")
        if target is not None and not isinstance(target, dict):
            raise BadGeneratedRequest("job.target must be an object")
        return job, spec

    def _limits(self, req: dict, job: dict) -> dict:
        lim = {}
        explore = job.get("explore") or {}
        if isinstance(explore, dict) and explore.get("timeout_s"):
            lim["timeout_s"] = max(10.0, 0.8 * float(explore["timeout_s"]))
        env_t = os.environ.get("KILN_SANDBOX_TIMEOUT_S")
        if env_t:
            lim["timeout_s"] = float(env_t)
        for src in (job.get("limits"), req.get("limits")):
            if isinstance(src, dict):
                lim.update({k: v for k, v in src.items() if k in confine.DEFAULT_LIMITS})
        return lim

    @staticmethod
    def _child_job(job: dict) -> dict:
        return {k: job.get(k) for k in ("dtype", "validation", "benchmark", "target", "shape", "op")}

    # -- methods ---------------------------------------------------------------------
    def evaluate(self, req: dict) -> dict:
        source = req.get("source")
        if not isinstance(source, str):
            raise BadGeneratedRequest("'source' must be a string of Python code")
        artifact_dir = req.get("artifact_dir")
        if artifact_dir is not None and not isinstance(artifact_dir, str):
            raise BadGeneratedRequest("'artifact_dir' must be a string path")
        job, spec = self._job(req)
        target = job.get("target") or None
        res: dict[str, Any] = {
            "status": "ok", "message": "", "rule": None, "exec_device": self.dev.name,
            "correctness": None, "latency": None, "artifact": None, "artifacts": [],
            "traffic": None, "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
            "reference_sha256": rm.reference_sha256(spec),
            "timings": {"screen_s": 0.0, "compile_s": 0.0, "check_s": 0.0, "bench_s": 0.0},
        }
        t0 = time.perf_counter()
        try:
            v = screen(source)
        except SyntaxError as exc:
            res["timings"]["screen_s"] = time.perf_counter() - t0
            res.update(status="compile_error", rule="syntax",
                       message=f"SyntaxError: {exc.msg} (line {exc.lineno}, column {exc.offset})")
            return json_safe(res)
        res["timings"]["screen_s"] = time.perf_counter() - t0
        if v is not None:
            res.update(status="rejected", rule=v.rule, message=v.message,
                       violations=[v.as_json()] + [o.as_json() for o in v.others[:19]])
            return json_safe(res)

        limits = self._limits(req, job)
        timeout = float(limits.get("timeout_s") or confine.DEFAULT_LIMITS["timeout_s"])
        cpu_s = limits.get("cpu_s") if limits.get("cpu_s") is not None else 2 * timeout + 10
        request = {"task": "evaluate", "reference": spec, "source": source,
                   "job": self._child_job(job), "limits": limits, "artifact_dir": artifact_dir,
                   "compile_target": True}
        ans = run_in_child(self.pool, "run", request, timeout, cpu_s)
        if ans.get("status") == "reference_error":
            raise rm.ReferenceError_(ans.get("message", "reference failed"))
        self._merge(res, ans)

        launches = ans.get("launches") or []
        if not self.dev.is_gpu and target:
            failed = ans.get("failed_launch")
            if res["status"] == "ok" and launches:
                comp = self._compile(source, launches, target, artifact_dir, limits)
                res["artifacts"] = comp.get("artifacts") or []
                res["artifact"] = res["artifacts"][0] if res["artifacts"] else None
                res["timings"]["compile_s"] = (comp.get("timings") or {}).get("compile_s", 0.0)
                if comp.get("status") != "ok":
                    res.update(status=comp.get("status", "crash"), message=comp.get("message", ""),
                               rule=comp.get("rule"))
            elif res["status"] == "crash" and failed:
                comp = self._compile(source, [failed], target, artifact_dir, limits)
                if comp.get("status") in ("compile_error", "resource_error"):
                    last = [ln for ln in res["message"].splitlines() if ln.strip()][-1:] or [""]
                    res.update(status=comp["status"], rule=None,
                               message=comp.get("message", "") + "\n\n(the Triton interpreter "
                               "failed at the same launch with: " + last[0].strip()[:500] + ")")
                for a in comp.get("artifacts") or []:  # not a deliverable: drop the file
                    if a.get("path"):
                        try:
                            os.unlink(a["path"])
                        except OSError:
                            pass
        if not self.dev.is_gpu:
            from ..codeobject.launches import untimed
            untimed(res.get("artifacts") or [])
            if isinstance(res.get("artifact"), dict):
                untimed([res["artifact"]])
        res["launches"] = launches[:MAX_LAUNCHES_REPORTED]
        return json_safe(res)

    def _compile(self, source, launches, target, artifact_dir, limits) -> dict:
        timeout = float(limits.get("timeout_s") or confine.DEFAULT_LIMITS["timeout_s"])
        request = {"task": "compile", "source": source, "launches": launches, "target": target,
                   "artifact_dir": artifact_dir, "limits": limits}
        return run_in_child(self.pool, "compile", request, timeout)

    @staticmethod
    def _merge(res: dict, ans: dict) -> None:
        for k in ("status", "message", "rule", "correctness", "latency", "artifact", "artifacts",
                  "traffic", "sandbox", "failed_launch", "exec_device", "violations", "bench_check"):
            if k in ans and ans[k] is not None:
                res[k] = ans[k]
        if res.get("artifacts") is None:
            res["artifacts"] = []
        t = ans.get("timings") or {}
        res["timings"].update({k: v for k, v in t.items() if isinstance(v, (int, float))})
        if isinstance(t.get("gpu_spans"), list):
            res["timings"]["gpu_spans"] = t["gpu_spans"]

    def reference_info(self, req: dict) -> dict:
        job, spec = self._job(req)
        limits = self._limits(req, job)
        timeout = float(limits.get("timeout_s") or confine.DEFAULT_LIMITS["timeout_s"])
        request = {"task": "reference_info", "reference": spec, "job": self._child_job(job),
                   "limits": limits}
        ans = run_in_child(self.pool, "run", request, timeout)
        if ans.get("status") != "ok":
            raise rm.ReferenceError_(f"{ans.get('status')}: {ans.get('message', '')}")
        out = {"reference": {"path": spec.get("path"), "sha256": rm.reference_sha256(spec)}}
        for k in ("dtype", "inputs", "init_inputs", "outputs", "parameters", "source", "latency",
                  "traffic", "exec_device", "timings"):
            out[k] = ans.get(k)
        return json_safe(out)

    def close(self) -> None:
        self.pool.close()
