"""`kiln serve` and `kiln report` (src/server, docs/operations.md).

A real catalog: two nightly-like runs of the same two kernels through the
scripted H200 evaluator (tests/data/fake_evaluator: measured latencies,
confirmation rounds with eager and compile baselines, traffic), the second with
new keys, slower confirmed samples (a regression) and malformed replies (failed
candidates). A real `kiln serve` over it on a free loopback port answers the
API, /metrics (through promtool, and scraped by a real Prometheus, read back
through its HTTP API, with every Grafana panel's query evaluated there), keeps
answering 200 concurrent requests while a `kiln run` writes the same catalog,
and enforces its bounds (token, 401, request size, rate). The dashboard and
the static report load in headless Chromium with no console error and draw
their charts (series counted against the catalog, screenshots not blank).

KILN_BIN names the binary (default: build/kiln).
"""
import concurrent.futures
import hashlib
import http.client
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cdp  # noqa: E402
from conftest import KILN, ROOT, Prometheus, db_rows, kiln, require_kiln, stop  # noqa: E402

FAKE = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"

MANIFEST = """name: {name}
targets: [H200]
defaults: {{dtypes: [fp32], benchmark: {{runs: {runs}}},
           exploration: {{strategy: exhaustive, max_candidates: 6, baselines: [eager, compile]}}}}
operators: [{{op: add, shape: [4096]}}, {{op: add, shape: [8192]}}]
"""


def fake_env(tmp, **extra):
    return dict({"KILN_PYTHON": str(FAKE), "FAKE_EVALUATOR_LOG": str(tmp / "fake.log"),
                 "FAKE_EVALUATOR_CONFIGS": "6"}, **extra)


class Serve:
    """A running `kiln serve`; its base URL once it said where it listens."""

    def __init__(self, tmp, catalog, *args, env=None, name="serve"):
        self.err_path = tmp / f"{name}.err"
        self.proc = subprocess.Popen([str(KILN), "serve", "--catalog", str(catalog), *map(str, args)],
                                     stdout=subprocess.DEVNULL, stderr=open(self.err_path, "w"),
                                     env=dict(os.environ, **(env or {})))
        deadline = time.time() + 30
        self.base = None
        while self.base is None:
            m = re.search(r"at (http://[0-9.:\[\]]+)/", self.err_path.read_text())
            if m:
                self.base = m.group(1)
            elif self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"kiln serve did not start ({self.proc.poll()}):\n{self.err_path.read_text()}")
            else:
                time.sleep(0.05)
        self.host, self.port = self.base[len("http://"):].rsplit(":", 1)

    def get(self, path, headers=None, timeout=30):
        """(status, headers, body bytes)."""
        req = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def json(self, path, **kw):
        status, _, body = self.get(path, **kw)
        return status, json.loads(body)

    def stop(self):
        assert stop(self.proc, timeout=20), f"kiln serve did not exit on SIGTERM:\n{self.err_path.read_text()}"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    require_kiln()
    tmp = tmp_path_factory.mktemp("serve")
    cat = tmp / "kiln.db"
    for i, (runs, extra) in enumerate([(20, {}), (30, {"FAKE_CONFIRM_SCALE": "1.5",
                                                       "FAKE_MALFORMED": "ok_string,status_number"})]):
        m = tmp / f"night{i}.yaml"
        m.write_text(MANIFEST.format(name=f"night{i}", runs=runs))
        kiln("submit", m, catalog=cat, env=fake_env(tmp))
        kiln("run", "--device", "gpu", "--scratch", tmp / "s", catalog=cat, env=fake_env(tmp, **extra))
        time.sleep(0.05)  # the second night's jobs are created later
    assert db_rows(cat, "SELECT state, COUNT(*) FROM jobs GROUP BY state") == [("done", 4)]
    return {"tmp": tmp, "cat": cat}


@pytest.fixture(scope="module")
def served(catalog):
    s = Serve(catalog["tmp"], catalog["cat"], "--listen", "127.0.0.1:0", env=fake_env(catalog["tmp"]))
    yield dict(catalog, serve=s)
    s.stop()
    assert s.proc.returncode == 0, s.err_path.read_text()


def samples(blob):
    return np.frombuffer(blob, dtype="<f4").astype(np.float64)


def newest_job(cat, shape):
    (job_id,), = db_rows(cat, "SELECT id FROM jobs WHERE shape = ? ORDER BY created_at DESC, id DESC LIMIT 1",
                         (json.dumps(shape, separators=(",", ":")),))
    return job_id


# --- the API -------------------------------------------------------------------

def test_best_answers_the_deployment_query(served):
    s, cat = served["serve"], served["cat"]
    status, b = s.json("/api/best?op=add&target=H200&shape=4096&dtype=fp32")
    assert status == 200 and b["found"] is True, b
    job = newest_job(cat, [4096])
    assert b["job_id"] == job and b["runs"] == 2 and b["basis"] == "measured" and b["device"] == "NVIDIA H200"
    # the confirmed median and its interval, recomputed from the catalog's raw samples
    (cand, run), = db_rows(cat, "SELECT candidate_id, confirmed_run FROM best WHERE job_id = ?", (job,))
    (blob,), = db_rows(cat, "SELECT samples FROM confirmations WHERE job_id = ? AND run_id = ? AND candidate_id = ?",
                       (job, run, cand))
    xs = samples(blob)
    c = b["confirmed"]
    assert c["run_id"] == run and c["n"] == len(xs) and c["basis"] == "device"
    assert c["median_ms"] == pytest.approx(float(np.median(xs)), rel=1e-9) == b["latency_ms"]
    lo, hi = c["ci95_ms"]
    assert xs.min() <= lo <= c["median_ms"] <= hi <= xs.max()
    # speedups against the baselines timed in the same round
    for name in ("eager", "compile"):
        (bblob,), = db_rows(cat, "SELECT samples FROM confirmations WHERE job_id = ? AND run_id = ? AND baseline = ?",
                            (job, run, name))
        sp = c["baselines"][name]
        assert sp["speedup"] == pytest.approx(float(np.median(samples(bblob)) / np.median(xs)), rel=1e-6)
        assert sp["speedup_ci95"][0] <= sp["speedup"] <= sp["speedup_ci95"][1]
    assert b["config"]["BLOCK"] % 64 == 0 and b["package_url"] == "/api/packages/H200"
    # aliases and other spellings of the shape name the same kernel
    for q in ("op=add&target=h200&shape=%5B4096%5D&dtype=fp32", "op=add&target=H200+SXM&shape=4096&dtype=fp32"):
        status2, b2 = s.json("/api/best?" + q)
        assert status2 == 200 and b2["job_id"] == job, (q, b2)


def test_best_for_a_shape_not_in_the_catalog_names_the_nearest(served):
    s = served["serve"]
    status, b = s.json("/api/best?op=add&target=H200&shape=5000&dtype=fp32")
    assert status == 404 and b["found"] is False
    assert [n["shape"] for n in b["nearest"]] == [[4096], [8192]]   # |log2(5000/4096)| < |log2(8192/5000)|
    assert "5000" in b["error"] and "nearest tuned shapes: 4096 fp32, 8192 fp32" in b["error"]
    status, b = s.json("/api/best?op=add&target=MI300X&shape=4096&dtype=fp32")
    assert status == 404 and b["nearest"] == [] and "no shape of add is tuned on MI300X" in b["error"]


def test_bad_queries_are_400_and_never_reach_sql(served):
    s, cat = served["serve"], served["cat"]
    for q, word in [("op=add&target=H200&shape=4096", "dtype"), ("op=add&target=NOPE&shape=4096&dtype=fp32", "unknown target"),
                    ("op=add&target=H200&shape=40x&dtype=fp32", "bad shape"), ("", "op")]:
        status, b = s.json("/api/best?" + q)
        assert status == 400 and word in b["error"], (q, b)
    before = db_rows(cat, "SELECT COUNT(*) FROM jobs")
    inj = urllib.parse.quote("add' OR '1'='1")
    status, b = s.json(f"/api/best?op={inj}&target=H200&shape=4096&dtype=fp32")
    assert status == 404 and b["nearest"] == []     # a value, not SQL
    status, b = s.json("/api/jobs?state=" + urllib.parse.quote("done' OR 1=1; DROP TABLE jobs; --"))
    assert status == 400
    assert db_rows(cat, "SELECT COUNT(*) FROM jobs") == before
    assert s.json("/api/jobs/1%20OR%201=1")[0] == 400
    assert s.json("/api/jobs/999999")[0] == 404
    assert s.json("/nope")[0] == 404
    assert s.json("/api/code-objects/xyz")[0] == 400
    assert s.json("/api/code-objects/" + "0" * 64)[0] == 404
    assert s.json("/api/packages/NOPE")[0] == 404
    status, b = s.json("/api/packages/MI300X")
    assert status == 404 and "no finished job" in b["error"]


def test_jobs_and_one_job_with_its_candidates(served):
    s, cat = served["serve"], served["cat"]
    status, j = s.json("/api/jobs")
    assert status == 200
    ids = [r[0] for r in db_rows(cat, "SELECT id FROM jobs ORDER BY id")]
    assert [x["id"] for x in j["jobs"]] == ids and len(j["batches"]) == 2
    assert s.json("/api/jobs?state=failed")[1]["jobs"] == []
    batch = j["batches"][0]["id"]
    assert len(s.json("/api/jobs?batch=" + batch)[1]["jobs"]) == 2
    # a batch the catalog lacks is a 404 naming it, for the list and the dashboard
    status, b = s.json("/api/jobs?batch=nope")
    assert status == 404 and "no batch 'nope'" in b["error"], (status, b)
    status, _, body = s.get("/?batch=nope")
    assert status == 404 and b"no batch 'nope'" in body, (status, body[:200])
    assert s.get("/?batch=" + batch)[0] == 200
    job = newest_job(cat, [8192])
    status, one = s.json(f"/api/jobs/{job}")
    assert status == 200 and one["id"] == job
    rows = db_rows(cat, "SELECT c.id, e.status, e.median_ms FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
                        "WHERE c.job_id = ? ORDER BY e.id", (job,))
    got = [(c["id"], c["evaluation"]["status"], c["evaluation"]["median_ms"]) for c in one["candidates"]]
    assert got == rows and one["candidate_count"] == len(rows)
    assert {st for _, st, _ in rows} > {"ok"}              # the malformed replies failed their candidates
    assert one["confirmed"]["baselines"].keys() == {"eager", "compile"}


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = re.match(r'^(\w+)(?:\{(.*)\})? (\S+)$', line)
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def test_metrics_per_kernel(served):
    s, cat = served["serve"], served["cat"]
    status, headers, body = s.get("/metrics")
    assert status == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = body.decode()
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr)
    m = parse_metrics(text)
    assert m[("kiln_catalog_jobs", frozenset({("state", "done")}))] == 4
    assert m[("kiln_catalog_kernels", frozenset())] == 2
    for shape in (4096, 8192):
        k = {("op", "add"), ("shape", str(shape)), ("dtype", "fp32"), ("target", "H200")}
        # the second night's samples are 1.5x the first's: both kernels regressed
        assert m[("kiln_catalog_kernel_regressed", frozenset(k | {("status", "regression")}))] == 1
        assert m[("kiln_catalog_kernel_runs", frozenset(k))] == 2
        job = newest_job(cat, [shape])
        (value_ms,), = db_rows(cat, "SELECT value_ms FROM best WHERE job_id = ?", (job,))
        assert m[("kiln_catalog_kernel_latency_seconds", frozenset(k | {("basis", "measured")}))] == pytest.approx(value_ms / 1000)
        _, b = s.json(f"/api/best?op=add&target=H200&shape={shape}&dtype=fp32")
        med = m[("kiln_catalog_kernel_confirmed_latency_seconds", frozenset(k | {("device", "NVIDIA H200"), ("bound", "median")}))]
        assert med == pytest.approx(b["confirmed"]["median_ms"] / 1000)
        eager = m[("kiln_catalog_kernel_speedup_ratio", frozenset(k | {("baseline", "eager"), ("bound", "median")}))]
        assert eager == pytest.approx(b["confirmed"]["baselines"]["eager"]["speedup"])


# --- bounds and access -----------------------------------------------------------

def raw_request(serve, data, timeout=10):
    with socket.create_connection((serve.host, int(serve.port)), timeout=timeout) as c:
        c.sendall(data)
        out = b""
        while True:
            try:
                chunk = c.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
    return out


def test_request_size_and_method_are_bounded(served):
    s = served["serve"]
    big_header = b"GET /api/jobs HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
    assert raw_request(s, big_header).startswith(b"HTTP/1.1 431")
    big_body = b"GET /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
    assert raw_request(s, big_body).startswith(b"HTTP/1.1 413")
    post = b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    assert raw_request(s, post).startswith(b"HTTP/1.1 405")
    long_url = b"GET /api/best?op=" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    assert raw_request(s, long_url).startswith(b"HTTP/1.1 431")
    assert s.get("/healthz")[0] == 200                     # and it still answers


def test_non_loopback_needs_a_token_and_the_token_is_checked(catalog, tmp_path):
    cat = catalog["cat"]
    r = kiln("serve", "--listen", "0.0.0.0:0", catalog=cat, check=False, timeout=30)
    assert r.returncode == 2 and "not a loopback address" in r.stderr and "--token-file" in r.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    r = kiln("serve", "--listen", "127.0.0.1:0", "--token-file", empty, catalog=cat, check=False, timeout=30)
    assert r.returncode == 2 and "empty" in r.stderr
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    s = Serve(tmp_path, cat, "--listen", "0.0.0.0:0", "--token-file", token, name="tok")
    try:
        s.base = f"http://127.0.0.1:{s.port}"
        for path in ("/api/best?op=add&target=H200&shape=4096&dtype=fp32", "/metrics", "/", "/api/jobs"):
            status, headers, _ = s.get(path)
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), path
            assert s.get(path, {"Authorization": "Bearer wrong-token!"})[0] == 401
            assert s.get(path, {"Authorization": "Basic czNjcmV0LXRva2Vu"})[0] == 401
            assert s.get(path, {"Authorization": "Bearer s3cret-token"})[0] == 200, path
    finally:
        s.stop()


def test_rate_is_bounded_per_client(catalog, tmp_path):
    s = Serve(tmp_path, catalog["cat"], "--listen", "127.0.0.1:0", "--rate", "5", name="rate")
    try:
        codes = [s.get("/healthz")[0] for _ in range(12)]
        assert codes[:5] == [200] * 5 and 429 in codes[5:], codes
        time.sleep(1.2)                                      # the bucket refills
        assert s.get("/healthz")[0] == 200
    finally:
        s.stop()


def burst(serve, path, n=200):
    """n requests at once, each on its own connection: [(status, seconds)]."""
    def one(_):
        t0 = time.perf_counter()
        c = http.client.HTTPConnection(serve.host, int(serve.port), timeout=30)
        try:
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            return r.status, time.perf_counter() - t0
        finally:
            c.close()
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        return list(ex.map(one, range(n)))


def copy_catalog(cat, to):
    src, dst = sqlite3.connect(cat), sqlite3.connect(to)
    src.backup(dst)
    src.close()
    dst.close()
    return to


def test_keeps_answering_while_kiln_run_writes(catalog, tmp_path):
    """200 concurrent requests, in rounds, while a kiln run writes the same
    catalog (a copy of the module's, so the other tests' counts stay): no
    error, and the run is not blocked (it finishes, 0)."""
    cat = copy_catalog(catalog["cat"], tmp_path / "kiln.db")
    s = Serve(tmp_path, cat, "--listen", "127.0.0.1:0", name="load")
    m = tmp_path / "more.yaml"
    m.write_text(MANIFEST.format(name="more", runs=40).replace("max_candidates: 6", "max_candidates: 12")
                 .split("operators:")[0] + "operators:\n" +
                 "".join(f"  - op: add\n    shape: [{2 ** k}]\n" for k in range(12, 18)))
    env = fake_env(tmp_path, FAKE_EVALUATOR_CONFIGS="12")
    kiln("submit", m, catalog=cat, env=env)
    evaluations = lambda: db_rows(cat, "SELECT COUNT(*) FROM evaluations")[0][0]  # noqa: E731
    evals_before = evaluations()
    run = subprocess.Popen([str(KILN), "run", "--device", "gpu", "--scratch", str(tmp_path / "s")],
                           env=dict(os.environ, KILN_CATALOG=str(cat), **env),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rounds, overlapped = [], 0
    try:
        while run.poll() is None or len(rounds) < 2:
            n0 = evaluations()
            rounds.append(burst(s, "/api/best?op=add&target=H200&shape=4096&dtype=fp32"))
            overlapped += evaluations() > n0                 # the run wrote during this burst
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert overlapped >= 1, "no burst overlapped the run's writes"
        assert evaluations() > evals_before
        statuses = [st for r in rounds for st, _ in r]
        assert statuses == [200] * len(statuses), {x: statuses.count(x) for x in set(statuses)}
        assert len(s.json("/api/jobs?state=done")[1]["jobs"]) == 10
    finally:
        if run.poll() is None:
            run.kill()
        s.stop()


@pytest.mark.parametrize("staleness", [0, 1.0])
def test_a_cached_best_gives_way_to_a_new_best(catalog, tmp_path, staleness):
    """/api/best answers are cached with bounded staleness: repeated, the same
    answer, each saying how stale it may be; after a kiln run writes a newer
    job of the kernel (and a shape not tuned before), a request sent
    --max-staleness after the run's last commit answers with it -- a cached
    answer never outlives a commit by more than that (the 404 for the untuned
    shape included). With --max-staleness 0, the very next request does."""
    cat = copy_catalog(catalog["cat"], tmp_path / "kiln.db")
    s = Serve(tmp_path, cat, "--listen", "127.0.0.1:0", "--max-staleness", staleness, name="cache")
    try:
        best = "/api/best?op=add&target=H200&shape=4096&dtype=fp32"
        new_shape = "/api/best?op=add&target=H200&shape=2048&dtype=fp32"
        first = [s.get(best) for _ in range(3)]
        for status, headers, _ in first:
            assert status == 200 and headers["X-Kiln-Max-Staleness-Ms"] == str(int(staleness * 1000)), headers
            assert 0 <= int(headers["X-Kiln-Staleness-Ms"]) <= staleness * 1000 + 1000, headers  # + its own compute
        first = [json.loads(body) for _, _, body in first]
        assert first[0]["found"] and first[0]["runs"] == 2 and first[1] == first[0] == first[2]
        assert s.json(new_shape)[0] == 404
        m = tmp_path / "night2.yaml"
        m.write_text(MANIFEST.format(name="night2", runs=25).replace("shape: [8192]", "shape: [2048]"))
        kiln("submit", m, catalog=cat, env=fake_env(tmp_path))
        kiln("run", "--device", "gpu", "--scratch", tmp_path / "s", catalog=cat, env=fake_env(tmp_path))
        time.sleep(staleness)  # the run's last commit was before this
        status, after = s.json(best)
        assert status == 200 and after["job_id"] == newest_job(cat, [4096]) != first[0]["job_id"], after
        assert after["runs"] == 3
        status, b = s.json(new_shape)
        assert status == 200 and b["job_id"] == newest_job(cat, [2048]), b
    finally:
        s.stop()


# --- Prometheus scrapes kiln serve; the Grafana panels' queries -------------------

def test_prometheus_scrapes_kiln_serve_and_runs_the_grafana_queries(served, tmp_path):
    s = served["serve"]
    with Prometheus(tmp_path, "kiln-serve", f"{s.host}:{s.port}") as prom:
        prom.wait(lambda: prom.query('kiln_catalog_kernels{job="kiln-serve"}'))
        (n_done,), = db_rows(served["cat"], "SELECT COUNT(*) FROM jobs WHERE state = 'done'")
        done = prom.query('kiln_catalog_jobs{job="kiln-serve",state="done"}')
        assert float(done[0]["value"][1]) == n_done
        regressed = prom.query('kiln_catalog_kernel_regressed{job="kiln-serve"} == 1')
        assert sorted(r["metric"]["shape"] for r in regressed) == ["4096", "8192"]
        speed = prom.query('kiln_catalog_kernel_speedup_ratio{bound="median",baseline="eager",shape="4096"}')
        _, b = s.json("/api/best?op=add&target=H200&shape=4096&dtype=fp32")
        assert float(speed[0]["value"][1]) == pytest.approx(b["confirmed"]["baselines"]["eager"]["speedup"], rel=1e-9)
        # every query of the Grafana dashboard parses and evaluates in this Prometheus
        dash = json.loads((ROOT / "configs" / "grafana" / "kiln.json").read_text())
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        assert len(exprs) >= 15
        for e in exprs:
            prom.query(e.replace("$__rate_interval", "1m").replace("$instance", ".*"))
        # the dashboard shows only families kiln exports: serve's /metrics, and kiln run's and
        # kiln nightly's families as docs/operations.md lists them
        exported = set(re.findall(r"^# TYPE (\w+)", s.get("/metrics")[2].decode(), re.M))
        exported |= set(re.findall(r"`(kiln_\w+)`", (ROOT / "docs" / "operations.md").read_text()))
        used = {n for e in exprs for n in re.findall(r"\b(kiln_\w+)", e)}
        assert used <= exported, used - exported
        # the alert rules loaded and evaluated
        rules = prom.rules()
        assert {x["name"] for x in rules} >= {"KilnCatalogKernelRegressed", "KilnFailureRate", "KilnRunStalled",
                                              "KilnWorkerRestarts", "KilnKernelRegressed"}
        assert all(x["health"] in ("ok", "unknown") for x in rules), rules
        # the catalog's two regressed kernels: the alert pending (for: 5m)
        deadline = time.time() + 20
        while True:
            cat_rule = next(x for x in prom.rules() if x["name"] == "KilnCatalogKernelRegressed")
            if len(cat_rule["alerts"]) == 2 or time.time() > deadline:
                break
            time.sleep(0.5)
        assert {(a["labels"]["shape"], a["state"]) for a in cat_rule["alerts"]} == {("4096", "pending"), ("8192", "pending")}


# --- the dashboard and the static report in headless Chromium --------------------

def expected_charts(s, cat):
    """data-chart id -> (series count, {series name: points}) from the API and the catalog."""
    exp = {}
    _, jobs = s.json("/api/jobs")
    for j in jobs["jobs"]:
        _, one = s.json(f"/api/jobs/{j['id']}")
        ev = [c["evaluation"] for c in one["candidates"] if c["evaluation"]]
        ok = [e for e in ev if e["status"] == "ok"]
        bad = len(ev) - len(ok)
        exp[f"job-{j['id']}-candidates"] = (1 + (bad > 0), {"correct": len(ok), **({"failed (at the floor)": bad} if bad else {})})
        exp[f"job-{j['id']}-convergence"] = (2, {"each correct candidate": len(ok)})
    kernels = {}
    for j in sorted(jobs["jobs"], key=lambda j: (j["created_at"], j["id"])):
        kernels.setdefault(json.dumps(j["shape"]), []).append(j)
    for runs in kernels.values():
        exp[f"history-{runs[-1]['id']}"] = (2, {"best latency": len(runs), "confirmed median, 95% CI": len(runs)})
    exp["speedup"] = (3, {"compile": len(kernels), "eager": len(kernels), "1x (level)": 1})  # the level line: one path
    exp["roofline-H200"] = (3, {"measured kernels": len(kernels)})   # bandwidth, fp32 peak, the kernels
    statuses = {r[0] for r in db_rows(cat, "SELECT DISTINCT status FROM evaluations WHERE status <> 'ok'")}
    if statuses:
        exp["failures"] = (1, {"candidates": len(statuses)})
    return exp


CHARTS_JS = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(svg => {
  const r = svg.getBoundingClientRect();
  return {id: svg.dataset.chart, w: r.width, h: r.height, x: r.left + window.scrollX, y: r.top + window.scrollY,
          series: [...svg.querySelectorAll('g.series')].map(g => ({name: g.dataset.name,
             marks: g.querySelectorAll('circle,path,rect').length,
             drawn: [...g.querySelectorAll('circle,path,rect')].filter(e => {
                 const b = e.getBoundingClientRect(); return b.width > 0 || b.height > 0; }).length}))};
}))"""


def check_page(browser, url, expected, shots):
    errors = browser.load(url)
    assert errors == [], errors
    charts = {c["id"]: c for c in json.loads(browser.evaluate(CHARTS_JS))}
    assert charts.keys() == expected.keys(), (sorted(charts), sorted(expected))
    for cid, (n_series, points) in expected.items():
        c = charts[cid]
        assert c["w"] > 100 and c["h"] > 100, c
        assert len(c["series"]) == n_series, (cid, c["series"])
        by_name = {x["name"]: x for x in c["series"]}
        for name, n in points.items():
            assert by_name[name]["drawn"] >= min(n, 1) and by_name[name]["marks"] >= n, (cid, name, by_name[name], n)
    # screenshots of two charts: rendered pixels, not a blank box
    for cid in ("roofline-H200", "speedup"):
        c = charts[cid]
        png = browser.screenshot({"x": c["x"], "y": c["y"], "width": c["w"], "height": c["h"]})
        shots.append(png)
        w, h, colors = cdp.png_pixels(png)
        assert w >= 100 and h >= 100 and len(colors) > 20, (cid, w, h, len(colors))
    return charts


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = cdp.Browser(tmp_path_factory.mktemp("chromium") / "chromium.log")
    yield b
    b.close()


def test_dashboard_and_report_render_in_chromium(served, browser, tmp_path):
    s, cat = served["serve"], served["cat"]
    expected = expected_charts(s, cat)
    shots = []
    served_charts = check_page(browser, s.base + "/", expected, shots)
    report = tmp_path / "report.html"
    r = kiln("report", "--out", report, catalog=cat)
    assert "wrote" in r.stderr and report.stat().st_size > 10000
    html = report.read_text()
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    static_charts = check_page(browser, report.as_uri(), expected, shots)
    assert {k: len(v["series"]) for k, v in served_charts.items()} == {k: len(v["series"]) for k, v in static_charts.items()}
    (tmp_path / "roofline.png").write_bytes(shots[0])
    # one batch only: its two jobs' charts, nothing of the other batch
    _, jobs = s.json("/api/jobs")
    batch = jobs["batches"][-1]["id"]
    one = tmp_path / "one.html"
    kiln("report", "--batch", batch, "--out", one, catalog=cat)
    mine = {j["id"] for j in s.json("/api/jobs?batch=" + batch)[1]["jobs"]}
    ids = {int(x) for x in re.findall(r'data-chart="job-(\d+)-candidates"', one.read_text())}
    assert ids == mine
    r = kiln("report", "--out", tmp_path / "missing" / "x.html", catalog=cat, check=False)
    assert r.returncode == 2 and "no directory" in r.stderr


def test_report_of_an_unknown_batch_is_an_error_not_a_usage_error(catalog, tmp_path):
    # An id the catalog lacks: exit 1 naming it, nothing written -- as kiln
    # status and kiln retry answer it (2 is for usage errors of the command line).
    cat, out = catalog["cat"], tmp_path / "x.html"
    r = kiln("report", "--batch", "nope", "--out", out, catalog=cat, check=False)
    assert r.returncode == 1 and "no batch 'nope'" in r.stderr and not out.exists(), (r.returncode, r.stderr)
    status = kiln("status", "--batch", "nope", catalog=cat, check=False)
    retry = kiln("retry", "--batch", "nope", "--dry-run", catalog=cat, check=False)
    assert status.returncode == retry.returncode == r.returncode, (status.stderr, retry.stderr)
    # a usage error stays 2
    r = kiln("report", "--batch", "nope", catalog=cat, check=False)
    assert r.returncode == 2 and "--out" in r.stderr, r.stderr


# --- code objects and packages from a real run --------------------------------------

REAL = ROOT / "tests" / "data" / "manifests" / "serve_package.yaml"


def test_code_object_download_and_package_tar(tmp_path):
    """A real CPU run (Triton cross-compiles the H200 code objects): /api/best's
    download link gives the code object's bytes; /api/packages/H200 builds a
    kiln-package/2 with the package code (the scripted evaluator answers
    package_info) and serves it as a tar, then from the cache."""
    import tarfile
    cat = tmp_path / "kiln.db"
    # submitted through the scripted evaluator (its hello is instant; the real
    # one's would import torch once more just for the job keys), run by the real one
    kiln("submit", REAL, catalog=cat, env=fake_env(tmp_path))
    kiln("run", "--device", "cpu", "--workers", "1", "--scratch", tmp_path / "s", catalog=cat, timeout=600)
    s = Serve(tmp_path, cat, "--listen", "127.0.0.1:0", "--cache-dir", tmp_path / "cache",
              env={"KILN_PYTHON": str(FAKE)}, name="pkg")
    try:
        status, b = s.json("/api/best?op=add&target=H200&shape=256&dtype=fp32")
        assert status == 200 and b["code_object"]["kind"] == "cubin", b
        status, headers, data = s.get(b["code_object"]["url"])
        assert status == 200 and headers["Content-Type"] == "application/octet-stream"
        assert hashlib.sha256(data).hexdigest() == b["code_object"]["sha256"]
        (blob,), = db_rows(cat, "SELECT data FROM blobs WHERE sha256 = ?", (b["code_object"]["sha256"],))
        assert data == blob and data[:4] == b"\x7fELF"
        status, headers, tar1 = s.get("/api/packages/H200", timeout=300)
        assert status == 200, tar1[:2000]
        assert headers["Content-Type"] == "application/x-tar" and headers["X-Kiln-Package"] == "built"
        (tmp_path / "p.tar").write_bytes(tar1)
        with tarfile.open(tmp_path / "p.tar") as t:
            t.extractall(tmp_path / "x")
        pkg = tmp_path / "x" / "kiln-H200"
        manifest = json.loads((pkg / "manifest.json").read_text())
        assert manifest["format"].startswith("kiln-package/2"), manifest.get("format")
        sums = dict(reversed(line.split(None, 1)) for line in (pkg / "SHA256SUMS").read_text().splitlines())
        assert sums and all(hashlib.sha256((pkg / f).read_bytes()).hexdigest() == h for f, h in sums.items())
        assert any((pkg / f).read_bytes() == blob for f in sums)   # the served code object is in it
        status, headers, tar2 = s.get("/api/packages/H200")
        assert status == 200 and headers["X-Kiln-Package"] == "cached" and tar2 == tar1
        # a new best set builds a new package and evicts the stale one it built; files it
        # did not build are neither served nor deleted, whatever their names
        cache = tmp_path / "cache"
        (old,) = [p.name for p in cache.glob("H200-*.tar")]
        fp = old.split("-")[1]
        planted = [cache / f"H200-{fp}.tar", cache / "H200-0000000000000000.tar", cache / "MI300X-0000000000000000.tar"]
        for p in planted:
            p.write_bytes(b"not a package")
        with sqlite3.connect(cat) as db:
            db.execute("UPDATE best SET value_ms = value_ms * 1.01 WHERE job_id IN "
                       "(SELECT id FROM jobs WHERE target = 'H200')")
        status, headers, tar3 = s.get("/api/packages/H200", timeout=300)
        assert status == 200 and headers["X-Kiln-Package"] == "built" and tar3[:2000] != b"not a package", tar3[:200]
        left = sorted(p.name for p in cache.glob("*.tar"))
        assert old not in left and all(p.name in left for p in planted) and len(left) == 4, left
        status, headers, tar4 = s.get("/api/packages/H200")
        assert status == 200 and headers["X-Kiln-Package"] == "cached" and tar4 == tar3
    finally:
        s.stop()
