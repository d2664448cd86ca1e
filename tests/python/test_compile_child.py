"""The compile child dies with its worker (issue 22, item 7): a ``kill -9`` of
the worker kills the child at once through PR_SET_PDEATHSIG, even while the
child is busy (importing torch/Triton, compiling) and not reading its stdin;
and a child whose worker is already gone when it starts exits by itself."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HOME = Path(__file__).resolve().parents[2]
WORKER = HOME / "worker"

# A stand-in worker: starts the real compile child through CompileClient and
# prints its pid, then waits to be killed.
STAND_IN = """
import sys, time
from kiln_worker.processes.compile_child import CompileClient
c = CompileClient()
c.start()
print(c.proc.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_child_dies_with_a_killed_worker():
    env = dict(os.environ, PYTHONPATH=str(WORKER))
    worker = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, env=env,
                              start_new_session=True)
    try:
        child = int(worker.stdout.readline())
        time.sleep(0.3)  # the child is importing torch/Triton (seconds): not reading stdin
        assert alive(child)
        os.kill(worker.pid, signal.SIGKILL)  # the worker alone, not its group
        worker.wait()
        deadline = time.time() + 0.5
        while alive(child) and time.time() < deadline:
            time.sleep(0.01)
        assert not alive(child), "the compile child outlived its worker"
    finally:
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_child_of_a_gone_worker_exits_at_once():
    # die_with_parent with a pid that is not our parent: the "parent" is gone
    code = ("from kiln_worker.processes.lifetime import die_with_parent\n"
            "die_with_parent(1 if __import__('os').getppid() != 1 else 2)\nprint('survived')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(WORKER)))
    assert r.returncode == 0 and "survived" not in r.stdout, r


def test_child_with_its_worker_alive_keeps_running():
    code = ("import os\nfrom kiln_worker.processes.lifetime import die_with_parent\n"
            "assert die_with_parent(os.getppid())\nprint('survived')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(WORKER)))
    assert r.returncode == 0 and "survived" in r.stdout, r
