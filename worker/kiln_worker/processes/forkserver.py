"""A fork server for evaluator workers: imports once, forks each worker.

Every worker used to import torch and Triton itself: about 4 s each on the
H200 node, 4.7 s when 12 start at once and 6.4 s for 24 on 16 cores, because
the imports compete for the cores. This process imports them once and forks a
worker per request, in milliseconds; the forked worker then runs as if started
with ``python3 ARGS`` (``-m kiln_worker``, or a script for the tests).

The engine starts it as ``python3 [FLAGS] -m kiln_worker.processes.forkserver
[--preload MODULES]`` with a SOCK_SEQPACKET socket on fds 0 and 1 (its stderr
is the engine's), and speaks in messages, one JSON object each
(src/evaluate/fork_server.cpp):

  server -> engine  {"hello": "kiln_worker.processes.forkserver", "pid": PID}  first, before
                    the preload (the engine gives up on a server that does not
                    greet it within seconds)
  engine -> server  {"seq": N, "args": [...], "env": {...}, "cwd": "..."}, with
                    three fds (SCM_RIGHTS): the worker's stdin, stdout, stderr
  server -> engine  {"seq": N, "pid": PID}     the worker is forked
                    {"seq": N, "error": "..."} it is not (the engine says why)
                    {"exited": PID, "status": S}  a worker ended (waitpid's raw
                                                  status, reaped here)

What the preload may not do: initialise CUDA or HIP (a forked child cannot use
its parent's driver state), or read the environment in a way that differs per
worker (each request carries the worker's whole environment, applied in the
child before its own code runs; the workers' device binding is such a
difference). Python's own start-up variables (PYTHONPATH and the like) must be
the server's: a request whose values differ is refused, so the engine starts
that worker itself. The engine's ``KILN_FORK_SERVER=0`` turns it off.

Each worker is its own process group (the engine kills a timed-out worker's
group), dies when this server dies (PR_SET_PDEATHSIG; the server dies with the
engine the same way), and is reaped here: the engine learns its exit status
from the "exited" message.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import time
import warnings

from ..log import log
from .lifetime import die_with_parent

MAX_MESSAGE = 1 << 20
# The worker's preload: what kiln_worker's main imports before it touches the
# device (device.select_device), without the modules that define @triton.jit
# kernels at import (their decoration depends on TRITON_INTERPRET, which the
# worker sets after choosing its device). Not torch._dynamo (~800 modules,
# which only a memory plan on fake tensors needs: memplan.job_plan). The
# modules before the first "triton" one are imported before Triton's mode is
# chosen.
DEFAULT_PRELOAD = ("yaml", "numpy", "torch", "triton", "triton.language", "triton.compiler",
                   "triton.backends.compiler", "kiln_worker.service.server", "kiln_worker.evaluation.evaluate",
                   "kiln_worker.evaluation.templates", "kiln_worker.processes.device",
                   "kiln_worker.evaluation.check")
# Variables the interpreter reads when it starts: a worker whose values differ
# from the server's would not get what it asks for.
INTERPRETER_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE",
                    "PYTHONUSERBASE", "PYTHONPLATLIBDIR", "PYTHONOPTIMIZE", "PYTHONDONTWRITEBYTECODE",
                    "PYTHONHASHSEED", "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONWARNINGS",
                    "PYTHONNODEBUGRANGES", "PYTHONPYCACHEPREFIX")

# Seconds the preload took, for the workers' hello (startup.preload_s).
preload_s: float | None = None
# Whether the preloaded Triton runs kernels in its interpreter (None: Triton is
# not preloaded). Triton decides at import (its own @jit library functions), so
# a worker that wants the other mode starts afresh (reexec_if_mismatched).
triton_interpret: bool | None = None
# In a forked worker: the arguments it was forked with (ARGS of python3 ARGS).
child_args: list[str] | None = None


def preload(modules) -> tuple[float, list[str]]:
    """Imports `modules`; a module that fails is skipped (its worker reports the
    missing package as a worker started directly would). Returns the seconds
    and the failures."""
    t0 = time.perf_counter()
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 -- the worker will say it better
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
    return time.perf_counter() - t0, failed


def choose_interpret() -> bool | None:
    """Triton's mode for the preload, as the workers' device.select_device will
    choose it (KILN_DEVICE cpu: the interpreter; gpu: not), without touching
    the GPU driver (a forked child could not use it): for auto, a GPU build of
    torch and the driver's device file. None when torch is not importable."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    mode = os.environ.get("KILN_DEVICE", "auto").strip().lower()
    if mode == "cpu":
        return True
    if mode == "gpu":
        return False
    if getattr(torch.version, "hip", None):
        return not os.path.exists("/dev/kfd")
    if getattr(torch.version, "cuda", None):
        return not os.path.exists("/dev/nvidiactl")
    return True


def reexec_if_mismatched(stdout_fd: int) -> None:
    """In a forked worker, after it chose its device: if the preloaded Triton
    is in the other interpreter mode, replaces this process by a fresh
    ``python3 ARGS`` (same pid, process group and pipes; `stdout_fd` is put
    back on fd 1 first). Returns when the modes agree."""
    if triton_interpret is None or child_args is None:
        return
    want = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if want == triton_interpret:
        return
    prefix = sys.orig_argv[:sys.orig_argv.index("-m")]
    log(f"the fork server preloaded Triton {'with' if triton_interpret else 'without'} its "
        f"interpreter; this worker needs the other: starting afresh")
    os.dup2(stdout_fd, 1)
    os.execvp(prefix[0], prefix + child_args)


def interpreter_mismatch(env: dict) -> str | None:
    for var in INTERPRETER_VARS:
        if env.get(var) != os.environ.get(var):
            return var
    return None


def run_child(args: list[str], env: dict, cwd: str | None) -> None:
    """In the forked child, with fds 0-2 already the worker's: becomes the
    worker (`python3 ARGS`) and never returns."""
    global child_args
    child_args = list(args)
    code = 1
    try:
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        import runpy
        if args and args[0] == "-m":
            if len(args) < 2:
                raise SystemExit("kiln_worker.processes.forkserver: -m needs a module")
            sys.argv = ["-m"] + args[2:]
            sys.path[0] = os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    except BaseException:  # noqa: BLE001 -- as the interpreter would: traceback, exit 1
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit
            atexit._run_exitfuncs()
            for f in (sys.stdout, sys.stderr):
                f.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code & 0xFF)


class Server:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.children: set[int] = set()
        self.private_fds: list[int] = []  # the server's own (closed in each child)

    def send(self, msg: dict) -> None:
        try:
            self.sock.send(json.dumps(msg).encode())
        except OSError:
            pass  # the engine is gone; the loop sees EOF next

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.send({"exited": pid, "status": status})

    def fork(self, msg: dict, fds: list[int]) -> None:
        seq = msg.get("seq")
        try:
            if len(fds) != 3:
                raise ValueError(f"expected 3 fds (stdin, stdout, stderr), got {len(fds)}")
            args, env = msg.get("args"), msg.get("env")
            if not isinstance(args, list) or not args or not isinstance(env, dict):
                raise ValueError("a request needs args (a non-empty list) and env (an object)")
            if (var := interpreter_mismatch(env)) is not None:
                raise ValueError(f"{var} differs from the fork server's")
        except ValueError as exc:
            for fd in fds:
                os.close(fd)
            self.send({"seq": seq, "error": str(exc)})
            return
        sys.stdout.flush()
        sys.stderr.flush()
        server = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory: the engine starts this one itself
            for fd in fds:
                os.close(fd)
            self.send({"seq": seq, "error": f"fork failed: {exc}"})
            return
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setpgid(0, 0)
                die_with_parent(server)  # SIGKILL when the server dies
                self.sock.close()
                for fd in self.private_fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                for target, fd in enumerate(fds):
                    os.dup2(fd, target, inheritable=True)
                for fd in fds:
                    if fd > 2:
                        os.close(fd)
                # The preloaded objects stay frozen (gc.freeze): the worker's
                # collections never touch them, so their pages stay shared.
            except BaseException:  # noqa: BLE001
                os._exit(127)
            run_child([str(a) for a in msg["args"]], {str(k): str(v) for k, v in env.items()},
                      msg.get("cwd") or None)
        try:
            os.setpgid(pid, pid)  # also here: the engine may kill the group before the child runs
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        self.children.add(pid)
        self.send({"seq": seq, "pid": pid})

    def serve(self) -> int:
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        self.private_fds = [wake_r, wake_w, sel.fileno()]
        while True:
            for key, _ in sel.select():
                if key.fileobj == wake_r:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                    continue
                try:
                    data, fds, flags, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 3)
                except OSError:
                    return 0
                if not data:
                    return 0  # the engine closed its end: workers die with us
                try:
                    msg = json.loads(data)
                    if not isinstance(msg, dict):
                        raise ValueError("not an object")
                except ValueError as exc:
                    for fd in fds:
                        os.close(fd)
                    self.send({"seq": None, "error": f"bad request: {exc}"})
                    continue
                self.fork(msg, fds)
            self.reap()


def main(argv: list[str] | None = None) -> int:
    global preload_s, triton_interpret
    p = argparse.ArgumentParser(prog="python3 -m kiln_worker.processes.forkserver")
    p.add_argument("--preload", default=None,
                   help="comma-separated modules to import before forking (default: the worker's)")
    a = p.parse_args(argv)
    # The engine's socket is on fds 0 and 1. Move it away, so nothing the
    # preloaded modules print can reach the engine as a message.
    sock = socket.socket(fileno=os.dup(0))
    if sock.type != socket.SOCK_SEQPACKET:
        sys.stderr.write("kiln_worker.processes.forkserver: fd 0 must be a SOCK_SEQPACKET socket (the engine starts this)\n")
        return 2
    sock.send(json.dumps({"hello": "kiln_worker.processes.forkserver", "pid": os.getpid()}).encode())
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    if a.preload is None:
        # torch first: Triton's mode follows from it (choose_interpret).
        first = list(DEFAULT_PRELOAD[:next(i for i, m in enumerate(DEFAULT_PRELOAD) if m.startswith("triton"))])
        preload_s, failed = preload(first)
        interpret = choose_interpret()
        if interpret is not None:
            os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
            seconds, more = preload([m for m in DEFAULT_PRELOAD if m not in first])
            preload_s += seconds
            failed += more
            if "triton" in sys.modules:
                triton_interpret = interpret
    else:
        preload_s, failed = preload([m for m in a.preload.split(",") if m])
    if failed:
        sys.stderr.write("kiln_worker.processes.forkserver: not preloaded (the workers import them): "
                         + "; ".join(failed) + "\n")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        # A preloaded module touched the GPU: forked workers could not use it.
        sys.stderr.write("kiln_worker.processes.forkserver: the preload initialised CUDA; not forking "
                         "(the engine starts the workers itself)\n")
        return 3
    # A thread of a preloaded library (OpenBLAS's pool) makes Python warn at
    # each fork; those libraries re-create their threads in the child.
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    gc.collect()
    gc.freeze()  # the preloaded objects stay shared with the workers (no copy on write by the collector)
    return Server(sock).serve()


if __name__ == "__main__":
    # Run as kiln_worker.processes.forkserver, not __main__, so a forked worker finds
    # preload_s where it looks (sys.modules["kiln_worker.processes.forkserver"]).
    from kiln_worker.processes import forkserver as _self
    sys.exit(_self.main())
