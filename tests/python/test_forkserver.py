"""kiln_worker.processes.forkserver as the engine uses it: a real server process on a
SOCK_SEQPACKET socket, forking real workers that answer the worker protocol
(CPU / Triton interpreter, the fixture template library).

The engine's side (src/evaluate/fork_server.cpp) is tested with a fake worker
in tests/cpp/fork_server_test.cpp; here the preload is the real one, so these
tests show that a forked worker computes what a worker started afresh does.
"""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from worker_client import HOME, TARGET_MI300X, worker_env  # noqa: E402


class Server:
    def __init__(self, env: dict):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-m", "kiln_worker.processes.forkserver"], stdin=theirs,
                                     stdout=theirs, stderr=subprocess.PIPE, env=env, cwd=str(HOME))
        theirs.close()
        self.seq = 0
        self.exits: dict[int, int] = {}

    def message(self, timeout: float = 120.0) -> dict:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        assert ready, f"the fork server said nothing in {timeout} s"
        data = self.sock.recv(1 << 16)
        assert data, f"the fork server exited: {self.proc.stderr.read().decode(errors='replace')[-3000:]}"
        return json.loads(data)

    def fork(self, env: dict) -> "Forked":
        self.seq += 1
        w = Forked()
        socket.send_fds(self.sock, [json.dumps({"seq": self.seq, "args": ["-m", "kiln_worker"], "env": env,
                                                "cwd": str(HOME)}).encode()], w.child_fds())
        w.close_child_fds()
        while True:
            m = self.message()
            if "exited" in m:
                self.exits[m["exited"]] = m["status"]
            elif m.get("seq") == self.seq:
                assert "pid" in m, m
                w.pid = m["pid"]
                return w

    def exit_status(self, pid: int, timeout: float = 30.0) -> int:
        while pid not in self.exits:
            m = self.message(timeout)
            if "exited" in m:
                self.exits[m["exited"]] = m["status"]
        return self.exits[pid]

    def close(self):
        self.sock.close()  # EOF: the server exits
        return self.proc.wait(30)


class Forked:
    """A forked worker's pipes: requests in, answers out, stderr to a file."""

    def __init__(self):
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        os.set_blocking(self.err_r, False)
        self.out = os.fdopen(self.out_r, "rb")
        self.stderr = b""
        self.pid = 0
        self.next_id = 0

    def child_fds(self):
        return [self.in_r, self.out_w, self.err_w]

    def close_child_fds(self):
        for fd in self.child_fds():
            os.close(fd)

    def read_stderr(self) -> str:
        try:
            while chunk := os.read(self.err_r, 65536):
                self.stderr += chunk
        except BlockingIOError:
            pass
        return self.stderr.decode(errors="replace")

    def call(self, method: str, timeout: float = 120.0, **fields) -> dict:
        self.next_id += 1
        os.write(self.in_w, (json.dumps({"id": self.next_id, "method": method, **fields}) + "\n").encode())
        while True:
            ready, _, _ = select.select([self.out_r], [], [], timeout)
            assert ready, f"no answer in {timeout} s; stderr:\n{self.read_stderr()[-3000:]}"
            line = self.out.readline()
            assert line, f"the worker closed stdout; stderr:\n{self.read_stderr()[-3000:]}"
            ans = json.loads(line)
            if ans.get("id") == self.next_id:
                return ans

    def close(self):
        os.close(self.in_w)  # the worker exits when its stdin closes
        self.out.close()


def add_job():
    return {"op": "add", "shape": [1000], "dtype": "fp32", "params": {}, "target": TARGET_MI300X,
            "constraints": [], "validation": {"seeds": 2, "atol": None, "rtol": None},
            "benchmark": {"warmup": 2, "runs": 5}}


def evaluate_add(w: Forked, tmp_path) -> dict:
    ans = w.call("evaluate", job=add_job(), config={"BLOCK": 128, "num_warps": 1, "num_stages": 1},
                 artifact_dir=str(tmp_path / f"art-{w.pid}"))
    assert ans["ok"] is True, ans
    return ans["result"]


@pytest.fixture()
def cpu_env():
    return worker_env(device="cpu")


def test_a_forked_worker_computes_with_the_preloaded_modules(cpu_env, tmp_path):
    server = Server(cpu_env)
    try:
        w = server.fork(dict(cpu_env, KILN_TEST_SLOT="7"))
        hello = w.call("hello")
        assert hello["ok"] is True, hello
        r = hello["result"]
        assert r["pid"] == w.pid != server.proc.pid
        assert r["device"]["kind"] == "cpu"
        assert r["startup"]["preload_s"] > 0.1  # torch and Triton, imported by the server
        assert r["startup"]["process_s"] < r["startup"]["preload_s"]  # forked: no imports of its own
        res = evaluate_add(w, tmp_path)
        assert res["status"] == "ok", res["message"]
        assert res["correctness"]["passed"]
        assert "starting afresh" not in w.read_stderr()
        w.close()
        assert server.exit_status(w.pid) == 0  # reaped by the server, status told
    finally:
        assert server.close() == 0


def test_a_worker_that_needs_the_other_triton_mode_starts_afresh(cpu_env, tmp_path):
    # The server preloads Triton for a GPU (no interpreter); this worker is on
    # the CPU, where Triton must be imported with its interpreter on.
    server = Server(dict(cpu_env, KILN_DEVICE="gpu"))
    try:
        w = server.fork(cpu_env)
        hello = w.call("hello")
        assert hello["ok"] is True, hello
        r = hello["result"]
        assert r["pid"] == w.pid  # the same process, exec'd afresh
        assert "preload_s" not in r["startup"]
        assert "starting afresh" in w.read_stderr()
        res = evaluate_add(w, tmp_path)
        assert res["status"] == "ok", res["message"]
        assert res["correctness"]["passed"]
        w.close()
        assert server.exit_status(w.pid) == 0
    finally:
        server.close()


def test_a_different_pythonpath_is_refused(cpu_env):
    server = Server(cpu_env)
    try:
        w = Forked()
        env = dict(cpu_env, PYTHONPATH=cpu_env["PYTHONPATH"] + os.pathsep + "/elsewhere")
        socket.send_fds(server.sock, [json.dumps({"seq": 1, "args": ["-m", "kiln_worker"],
                                                  "env": env}).encode()], w.child_fds())
        w.close_child_fds()
        assert server.message()["hello"] == "kiln_worker.processes.forkserver"  # first, before the preload
        m = server.message()
        assert m == {"seq": 1, "error": "PYTHONPATH differs from the fork server's"}
    finally:
        server.close()
