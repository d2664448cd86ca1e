"""The cross-compiler in a child process, for workers that run the interpreter.

Why: with ``TRITON_INTERPRET=1`` every ``@triton.jit`` function -- the
templates' and Triton's own library functions such as ``tl.sum``, ``tl.max``,
``tl.cumsum`` -- is created as an ``InterpretedFunction`` when its module is
imported, and ``triton.compile`` cannot generate code from those (nor can the
interpreter run ``JITFunction`` objects). One process cannot hold both kinds of
``triton.language``, so a CPU worker starts this child once, with the
interpreter off, and sends it the compile step of each evaluation. A GPU worker
compiles in-process.

Protocol: one JSON request per line on stdin ({"op", "shape", "dtype",
"params", "config", "target", "artifact_dir"}), one JSON answer per line on
stdout ({"ok": true, "result": {"status", "message", "artifact"}} or
{"ok": false, "error"}). Logs go to stderr (shared with the worker). Exits on
stdin EOF, so it ends with the worker.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from .lifetime import die_with_parent


PARENT_ENV = "KILN_COMPILE_PARENT"  # the worker's pid, set by CompileClient


def child_main() -> int:
    parent = os.environ.get(PARENT_ENV, "")
    die_with_parent(int(parent) if parent.isdigit() else None)
    from ..service.server import protect_stdout
    out = protect_stdout()
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except Exception as exc:
        sys.stderr.write(f"kiln_worker compile child: cannot import torch/triton: {exc}\n")
        return 3
    from ..codeobject.targetcompile import compile_stage
    from ..service.jsonsafe import json_safe
    from ..evaluation.templates import Library
    lib = Library()
    for raw in sys.stdin.buffer:
        try:
            req = json.loads(raw)
            res = compile_stage(lib, req["op"], req["shape"], req["dtype"], req["params"],
                                req["config"], req["target"], req.get("artifact_dir"))
            ans = {"ok": True, "result": json_safe(res)}
        except Exception as exc:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            ans = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": tb[-4000:],
                   "template_error": type(exc).__name__ == "TemplateError"}
        out.write(json.dumps(ans, allow_nan=False) + "\n")
        out.flush()
    return 0


class CompileChildError(Exception):
    pass


class CompileChildDied(Exception):
    pass


class CompileClient:
    """The worker's handle on the compile child (started lazily, restarted after a death)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        env = dict(os.environ)
        env["TRITON_INTERPRET"] = "0"
        pkg_parent = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env[PARENT_ENV] = str(os.getpid())
        # The child's PR_SET_PDEATHSIG fires when the *thread* that started it
        # exits: start it from the worker's main thread (Evaluation.__init__,
        # compile()), never from a short-lived thread.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kiln_worker.processes.compile_child"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None, env=env)

    def start(self) -> None:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()

    def compile(self, request: dict) -> dict:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            assert self.proc and self.proc.stdin and self.proc.stdout
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except (BrokenPipeError, OSError):
                line = b""
            if not line:
                rc = self.proc.wait()
                self.proc = None
                why = (f"signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exit code {rc}")
                raise CompileChildDied(f"the Triton compiler process died ({why}) while compiling")
            ans = json.loads(line)
        if not ans.get("ok"):
            raise CompileChildError(ans.get("error", "compile child error") + "\n" +
                                    ans.get("traceback", ""))
        return ans["result"]

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
            self.proc = None


if __name__ == "__main__":
    sys.exit(child_main())
