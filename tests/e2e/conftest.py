"""What the end-to-end tests share: where the repository and the `kiln` binary
are, one way to run it, read a catalog, stop a child process, libkilnrt through
ctypes, and a real Prometheus scraping a kiln endpoint.

KILN_BIN names the binary (default: build/kiln); kiln-mpi, kiln-mpirun and
kiln-replay are found beside it. The test files import these names
(`from conftest import KILN, ROOT, kiln`).
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", ROOT / "build" / "kiln"))


def kiln(*args, catalog=None, check=True, timeout=900, env=None, base_env=None, unset=()):
    """Runs `kiln ARGS...` and returns its CompletedProcess (text stdout/stderr).

    The environment: `base_env` (default: ours), without the variables named in
    `unset`, with KILN_CATALOG=`catalog` when one is given, then `env` on top.
    With `check`, a non-zero exit raises AssertionError showing the command,
    its stdout and its stderr."""
    e = dict(os.environ if base_env is None else base_env)
    for k in unset:
        e.pop(k, None)
    if catalog is not None:
        e["KILN_CATALOG"] = str(catalog)
    e.update(env or {})
    r = subprocess.run([str(KILN), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=e)
    if check and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(map(str, args))} exited {r.returncode}\n"
                             f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def submitted(tmp, manifest, **env):
    """Writes `manifest` (YAML text) to tmp/m.yaml and submits it to a new
    catalog tmp/kiln.db; returns (the catalog, our environment naming it with
    `env` on top) for the commands that follow."""
    catalog = tmp / "kiln.db"
    (tmp / "m.yaml").write_text(manifest)
    e = dict(os.environ, KILN_CATALOG=str(catalog), **env)
    kiln("submit", tmp / "m.yaml", base_env=e)
    return catalog, e


def require_kiln():
    """Fails the test (it cannot run) when the binary has not been built."""
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first (scripts/setup.sh)")


@pytest.fixture(scope="module")
def binary():
    require_kiln()
    return KILN


def db_rows(catalog, sql, params=()):
    """The rows of `sql` on the catalog file, opened read-only (tuples)."""
    con = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def db_dicts(catalog, sql, params=()):
    """The rows of `sql` on the catalog file, opened read-only, as dicts."""
    con = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql, params).fetchall()]
    finally:
        con.close()


class OpenOptions(ctypes.Structure):
    """kiln_open_options of include/kiln/runtime.h."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("pubkey_pem", ctypes.c_char_p),
                ("target", ctypes.c_char_p), ("device", ctypes.c_int)]


def kilnrt():
    """libkilnrt through ctypes (KILN_RT_LIB, default libkilnrt.so beside the kiln
    binary), with the argument and result types of the calls the tests make.
    Fails the test when the library has not been built."""
    p = Path(os.environ.get("KILN_RT_LIB") or KILN.parent / "libkilnrt.so")
    if not p.exists():
        pytest.fail(f"{p} is missing: build first (cmake --build build --target kilnrt)")
    lib = ctypes.CDLL(str(p))
    c_handle, c_str, c_dims = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)
    out_handle = ctypes.POINTER(ctypes.c_void_p)
    lib.kiln_last_error.restype = c_str
    lib.kiln_package_open.argtypes = [c_str, c_handle, out_handle]
    lib.kiln_kernel_find.argtypes = [c_handle, c_str, c_dims, ctypes.c_int, c_str, out_handle]
    lib.kiln_kernel_find_params.argtypes = [c_handle, c_str, c_str, c_dims, ctypes.c_int, c_str, out_handle]
    lib.kiln_kernel_plan.restype = c_str
    lib.kiln_kernel_plan.argtypes = [c_handle]
    lib.kiln_kernel_tensor_bytes.restype = ctypes.c_int64
    lib.kiln_kernel_tensor_bytes.argtypes = [c_handle, ctypes.c_int]
    lib.kiln_kernel_free.argtypes = [c_handle]
    lib.kiln_package_close.argtypes = [c_handle]
    return lib


# The LLM endpoint settings a test unsets so that only its own endpoint counts.
LLM_VARS = ("KILN_LLM_BASE_URL", "KILN_LLM_MODEL", "KILN_LLM_API_KEY")


def stop(proc, timeout=10):
    """SIGTERM, then SIGKILL after `timeout` s; True when it exited on SIGTERM."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


class Prometheus:
    """Debian's prometheus on a free loopback port, scraping `target`
    (host:port) every second as job `job`, with the alert rules of
    configs/prometheus loaded. A context manager: stopped on exit."""

    def __init__(self, tmp, job, target):
        exe = shutil.which("prometheus")
        if not exe:
            pytest.fail("prometheus is missing: install Debian's `prometheus` package (scripts/setup.sh)")
        port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(f"global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n"
                       f"rule_files: [{ROOT / 'configs' / 'prometheus' / 'alerts.yml'}]\n"
                       f"scrape_configs:\n  - job_name: {job}\n"
                       f"    static_configs: [{{targets: ['{target}']}}]\n")
        self.log = tmp / "prometheus.log"
        self.proc = subprocess.Popen([exe, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{port}"],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        self.base = f"http://127.0.0.1:{port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def query(self, q):
        """The result vector of an instant query (the query must succeed)."""
        with urllib.request.urlopen(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": q}),
                                    timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def rules(self):
        """Every loaded rule with its health and alerts."""
        with urllib.request.urlopen(f"{self.base}/api/v1/rules", timeout=10) as r:
            return [x for g in json.loads(r.read())["data"]["groups"] for x in g["rules"]]

    def ready(self):
        with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2):
            return True

    def wait(self, until, timeout=60):
        """Polls `until()` (a refused connection counts as not yet) until it is
        true; fails with Prometheus's log when it exits or time runs out."""
        deadline = time.time() + timeout
        while True:
            try:
                if until():
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.time() < deadline and self.proc.poll() is None, self.log.read_text()
            time.sleep(0.3)


# The files whose tests take longest (a gate's pytest --durations, summed per
# file), slowest first. Collected first, so that pytest-xdist (--dist loadfile,
# which hands out files in collection order) starts them first and the short
# files fill in at the end, rather than a long file starting last and leaving
# the other processes idle. Order only: every test still runs.
SLOW_FIRST = ("test_output_safety.py", "test_llm.py", "test_package.py", "test_nightly.py",
              "test_structural.py", "test_e2e.py", "test_fork_server.py", "test_mpi.py",
              "test_hostile_inputs.py", "test_confirm.py", "test_merge.py", "test_metrics.py",
              "test_executor_policy.py", "test_package_new_families.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: file order kept
