"""Loading a template's kernel onto the GPU before its check takes the GPU lock.

The first launch of a freshly compiled kernel in a worker is mostly host work:
Triton's JIT binds and specialises the arguments, finds the compiled kernel in
its on-disk cache (the compile stage put it there), reads it back, builds the
launcher and loads the module into the CUDA context. That takes tens of
milliseconds per candidate -- more when the host is loaded -- and, done inside
the check, it was done holding the GPU lock, where it delays every benchmark
queued behind the check.

``preload`` runs the template's own ``launch`` with a Triton launch-enter hook
that raises: the JIT does all of the above, the launcher calls the hook just
before ``cuLaunchKernel`` and the exception stops it there. Nothing runs on the
GPU, and the check's real launch, under the lock, finds the kernel loaded. The
hook is Triton's public ``knobs.runtime.launch_enter_hook`` (a HookChain in
Triton 3.6); it is removed again before ``preload`` returns.

Only the first Triton launch of ``launch`` is loaded this way (the hook stops
it); a template that launches several kernels loads the others in its check.
Torch operations that a ``launch`` runs before its first kernel would run
outside the lock: Kiln's templates run none.
"""
from __future__ import annotations

import contextlib
from typing import Any


class _Stopped(Exception):
    """Raised by the launch-enter hook: the kernel was loaded, not launched."""


def _refuse(_metadata: Any) -> None:
    raise _Stopped()


@contextlib.contextmanager
def _launches_refused():
    from triton import knobs
    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):  # Triton 3.4+: a HookChain
        chain.add(_refuse)
        try:
            yield
        finally:
            chain.remove(_refuse)
    else:  # an older Triton: one hook or None
        knobs.runtime.launch_enter_hook = _refuse
        try:
            yield
        finally:
            knobs.runtime.launch_enter_hook = chain


def preload(mod: Any, op: str, inputs: dict, out: Any, config: dict, params: dict) -> bool:
    """Compile-or-find and load the kernel that ``mod.launch`` would launch,
    without launching it. True when the launch was stopped at the kernel (it is
    loaded now); False when ``launch`` returned or raised anything else (the
    check's own launch will meet the same error and report it)."""
    try:
        with _launches_refused():
            mod.launch(op, inputs, out, config, params)
    except _Stopped:
        return True
    except Exception:
        return False
    return False
