"""Prometheus metrics of `kiln run` (src/metrics, docs/operations.md).

A real `kiln run` on the CPU (Triton interpreter) with --metrics on a free
loopback port and --metrics-file: it is scraped with urllib while it runs, every
scrape goes through `promtool check metrics`, and the final values (the textfile)
are compared with the catalog afterwards. The alert rules are checked and unit
tested with promtool.

KILN_BIN names the binary (default: build/kiln).
"""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import KILN, ROOT, Prometheus, db_rows, free_port, require_kiln, submitted  # noqa: E402

RULES = ROOT / "configs" / "prometheus"

# Three small jobs, three candidates each: long enough to be scraped mid-run.
MANIFEST = """name: metrics
targets: [H200]
defaults:
  exploration: {strategy: exhaustive, max_candidates: 3}
operators:
  - {op: add, shapes: [[64], [96]], dtype: fp32}
  - {op: softmax, input_shape: [4, 32], dtype: fp32}
"""


def promtool():
    p = shutil.which("promtool")
    if not p:
        pytest.fail("promtool is missing: install Debian's `prometheus` package (scripts/setup.sh)")
    return p


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def parse(text):
    """The text format 0.0.4 -> ({(name, frozenset(labels)): value}, {name: type}, [family order])."""
    samples, types, order = {}, {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
            order.append(name)
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = {}
        if m.group(2):
            pos = 0
            while pos < len(m.group(2)):
                lm = _LABEL.match(m.group(2), pos)
                assert lm, f"bad labels in {line!r}"
                labels[lm.group(1)] = re.sub(r'\\(.)', lambda x: {"n": "\n"}.get(x.group(1), x.group(1)), lm.group(2))
                pos = lm.end()
        key = (m.group(1), frozenset(labels.items()))
        assert key not in samples, f"duplicate series {line!r}"
        samples[key] = float(m.group(3))
    return samples, types, order


def series(samples, name):
    """{labels dict as a frozenset: value} of one family."""
    return {k[1]: v for k, v in samples.items() if k[0] == name}


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def check_metrics(text):
    r = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr, text)


@pytest.fixture(scope="module")
def observed_run(tmp_path_factory):
    require_kiln()
    tmp = tmp_path_factory.mktemp("metrics")
    catalog, env = submitted(tmp, MANIFEST)
    prom = tmp / "textfile" / "kiln.prom"
    prom.parent.mkdir()
    err = open(tmp / "run.err", "w")
    proc = subprocess.Popen([str(KILN), "run", "--device", "cpu", "--workers", "1", "--scratch", str(tmp / "s"),
                             "--metrics", "127.0.0.1:0", "--metrics-file", str(prom),
                             "--metrics-file-interval", "0.5", "--json"],
                            stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    url, scrapes, files = None, [], []
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            if url is None:
                m = re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)", (tmp / "run.err").read_text())
                url = m.group(1) if m else None
            if url:
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        scrapes.append((r.headers.get("Content-Type"), r.read().decode()))
                except (urllib.error.URLError, ConnectionError):
                    # the endpoint closes as the run ends, a moment before the
                    # process exits: refused is an error only if it keeps running
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        raise
                    break
            if prom.exists():
                files.append(prom.read_text())
            time.sleep(0.2)
        out, _ = proc.communicate(timeout=max(1, deadline - time.time()))
    finally:
        if proc.poll() is None:
            proc.kill()
    err.close()
    stderr = (tmp / "run.err").read_text()
    assert proc.returncode == 0, stderr
    assert url, "no 'metrics at http://...' line:\n" + stderr
    return {"catalog": catalog, "scrapes": scrapes, "files": files, "final": prom.read_text(),
            "summary": json.loads(out.strip().splitlines()[-1]), "stderr": stderr, "url": url}


def test_scraped_during_the_run(observed_run):
    scrapes = observed_run["scrapes"]
    assert len(scrapes) >= 3, observed_run["stderr"]
    for ctype, body in scrapes:
        assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    parsed = [parse(body)[0] for _, body in scrapes]
    assert any(value(s, "kiln_run_running") == 1 for s in parsed)
    # the run was seen working: a job running, candidates counted
    assert any(value(s, "kiln_jobs", state="running") >= 1 for s in parsed)
    assert any(0 < sum(series(s, "kiln_candidates_evaluated_total").values()) for s in parsed)
    # counters never go back from one scrape to the next
    for a, b in zip(parsed, parsed[1:]):
        for (name, labels), v in a.items():
            if name.endswith("_total") and (name, labels) in b:
                assert b[(name, labels)] >= v, (name, labels)
    # a running job's best so far names a job of the catalog, and is never
    # below the best it finally got (the minimum over all its candidates)
    jobs = {str(i): (op, "x".join(map(str, json.loads(shape))), dtype, target, best)
            for i, op, shape, dtype, target, best in db_rows(
                observed_run["catalog"],
                "SELECT j.id, op, shape, dtype, target, b.value_ms FROM jobs j LEFT JOIN best b ON b.job_id = j.id")}
    seen = 0
    for s in parsed:
        for (name, labels), v in s.items():
            if name != "kiln_job_best_latency_seconds":
                continue
            seen += 1
            l = dict(labels)
            op, shape, dtype, target, best_ms = jobs[l["job"]]
            assert (l["op"], l["shape"], l["dtype"], l["target"], l["basis"]) == (op, shape, dtype, target, "estimated")
            assert v >= best_ms / 1000 * (1 - 1e-9), (l, v, best_ms)
    assert seen > 0, "no best-so-far latency was ever scraped"


def test_every_scrape_and_the_file_pass_promtool(observed_run):
    for _, body in observed_run["scrapes"][:: max(1, len(observed_run["scrapes"]) // 5)]:
        check_metrics(body)
    check_metrics(observed_run["final"])
    # the periodic rewrites were whole files (written atomically), each valid
    assert len(observed_run["files"]) >= 2
    for text in observed_run["files"]:
        assert text.endswith("\n") and "# TYPE kiln_run_running gauge" in text
        parse(text)


def test_final_values_match_the_catalog(observed_run):
    s, types, order = parse(observed_run["final"])
    catalog = observed_run["catalog"]
    assert order == sorted(order) and all(n.startswith("kiln_") for n in order)
    assert types["kiln_candidates_evaluated_total"] == "counter" and types["kiln_jobs"] == "gauge"
    assert value(s, "kiln_run_running") == 0
    assert value(s, "kiln_workers", state="total") == 1
    states = dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))
    assert states.get("done") == 3, states
    for st in ("queued", "running", "done", "failed"):
        assert value(s, "kiln_jobs", state=st) == states.get(st, 0), st
    by_status = dict(db_rows(catalog, "SELECT status, COUNT(*) FROM evaluations GROUP BY status"))
    got = {dict(k[1])["status"]: v for k, v in s.items() if k[0] == "kiln_candidates_evaluated_total" and v}
    assert got == by_status
    assert sum(got.values()) == observed_run["summary"]["candidates"]
    assert value(s, "kiln_jobs_finished_total", result="done") == observed_run["summary"]["jobs_done"] == 3
    # compile and check seconds: the sums of what the catalog recorded per evaluation
    (compile_s, check_s), = db_rows(catalog, "SELECT SUM(json_extract(result, '$.timings.compile_s')), "
                                             "SUM(json_extract(result, '$.timings.check_s')) FROM evaluations")
    assert compile_s > 0
    assert value(s, "kiln_compile_seconds_total") == pytest.approx(compile_s, rel=1e-6)
    assert value(s, "kiln_check_seconds_total") == pytest.approx(check_s, rel=1e-6)
    # nothing runs at the end: no best-so-far series, nothing queued or in flight; no restarts
    assert not [k for k in s if k[0] == "kiln_job_best_latency_seconds"]
    assert value(s, "kiln_queue_candidates") == 0 and value(s, "kiln_candidates_in_flight") == 0
    assert sum(v for k, v in s.items() if k[0] == "kiln_worker_restarts_total") == 0
    # the CPU run has no GPU: no GPU series at all (an alert must not read 0% busy)
    assert not [k for k in s if k[0].startswith("kiln_gpu_")]
    assert value(s, "kiln_run_last_update_time_seconds") >= value(s, "kiln_run_start_time_seconds") > 0


def test_endpoint_gone_after_the_run(observed_run):
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(observed_run["url"], timeout=5)


def test_bad_metrics_flags_are_usage_errors(tmp_path):
    catalog, env = submitted(tmp_path, MANIFEST)
    for args, why in ((["--metrics", "0.0.0.0:0"], "--metrics-allow-remote"),
                      (["--metrics", "nohost"], "HOST:PORT"),
                      (["--metrics-file", str(tmp_path / "missing" / "k.prom")], "does not exist")):
        r = subprocess.run([str(KILN), "run", "--device", "cpu", *args], capture_output=True, text=True, env=env,
                           timeout=120)
        assert r.returncode == 2 and why in r.stderr, (args, r.returncode, r.stderr)
    # nothing ran: every job still queued
    assert db_rows(catalog, "SELECT DISTINCT state FROM jobs") == [("queued",)]


def test_port_in_use_is_refused(tmp_path):
    import socket
    catalog, env = submitted(tmp_path, MANIFEST)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([str(KILN), "run", "--device", "cpu", "--metrics", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in r.stderr, r.stderr
    assert db_rows(catalog, "SELECT DISTINCT state FROM jobs") == [("queued",)]


def test_alert_rules_pass_promtool():
    r = subprocess.run([promtool(), "check", "rules", str(RULES / "alerts.yml")], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, (r.stdout, r.stderr)
    r = subprocess.run([promtool(), "test", "rules", "alerts_test.yml"], cwd=RULES, capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, (r.stdout, r.stderr)


# --- kiln-mpi run: rank 0 publishes ------------------------------------------------

KILN_MPIRUN = KILN.parent / "kiln-mpirun"


@pytest.mark.skipif(shutil.which("mpirun") is None and not os.environ.get("KILN_REQUIRE_MPI"),
                    reason="Open MPI (mpirun) is not installed")
def test_mpi_rank0_writes_the_metrics_file(tmp_path):
    from test_mpi import session_base
    catalog, env = submitted(tmp_path, MANIFEST, OMPI_ALLOW_RUN_AS_ROOT="1",
                             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                             OMPI_MCA_btl="self,vader", OMPI_MCA_btl_vader_single_copy_mechanism="none",
                             # its own session tree: concurrent mpiruns race on the shared one
                             # (open-mpi/ompi#8510; tests/e2e/test_mpi.py session_base)
                             OMPI_MCA_orte_tmpdir_base=session_base(tmp_path))
    prom = tmp_path / "kiln.prom"
    proc = subprocess.Popen([str(KILN_MPIRUN), "--oversubscribe", "-np", "2", str(KILN.parent / "kiln-mpi"), "run",
                             "--device", "cpu", "--scratch", str(tmp_path / "s"), "--metrics", "127.0.0.1:0",
                             "--metrics-file", str(prom), "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    assert proc.returncode == 0, err
    assert re.search(r"kiln-mpi run: metrics at http://127\.0\.0\.1:\d+/metrics", err), err
    text = prom.read_text()
    check_metrics(text)
    s, _, _ = parse(text)
    assert value(s, "kiln_run_running") == 0
    by_status = dict(db_rows(catalog, "SELECT status, COUNT(*) FROM evaluations GROUP BY status"))
    got = {dict(k[1])["status"]: v for k, v in s.items() if k[0] == "kiln_candidates_evaluated_total" and v}
    assert got == by_status and sum(got.values()) > 0
    states = dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))
    for st in ("queued", "running", "done", "failed"):
        assert value(s, "kiln_jobs", state=st) == states.get(st, 0), st
    assert value(s, "kiln_jobs_finished_total", result="done") == states.get("done") == 3


# --- the GPU accounts, up to the device boundary --------------------------------------

FAKE_EVALUATOR = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"


def test_gpu_kernel_account_matches_the_run_summary(tmp_path):
    """The scripted evaluator (tests/data/fake_evaluator) says it is an H200 and
    reports benchmark latencies: the device-event account in the metrics is the
    run's own gpu_kernel_s / gpu_kernel_fraction (kiln run --json)."""
    catalog, env = submitted(tmp_path, "name: g\ntargets: [H200]\n"
                                       "defaults:\n  exploration: {strategy: exhaustive, max_candidates: 4}\n"
                                       "operators:\n  - {op: add, shapes: [[64], [96]], dtype: fp32}\n",
                             KILN_PYTHON=str(FAKE_EVALUATOR), FAKE_EVALUATOR_LOG=str(tmp_path / "requests.jsonl"))
    prom = tmp_path / "kiln.prom"
    r = subprocess.run([str(KILN), "run", "--device", "gpu", "--scratch", str(tmp_path / "s"), "--json",
                        "--metrics-file", str(prom)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["gpu_kernel_s"] > 0, summary
    text = prom.read_text()
    check_metrics(text)
    s, _, _ = parse(text)
    assert value(s, "kiln_gpu_kernel_seconds_total", gpu="default") == pytest.approx(summary["gpu_kernel_s"], rel=1e-9)
    assert value(s, "kiln_gpu_busy_ratio", gpu="default", account="device_kernel") == pytest.approx(
        summary["gpu_kernel_fraction"], rel=0.05)
    # measured on the target's kind: the candidates' medians were the best-so-far basis
    (done,), = db_rows(catalog, "SELECT COUNT(*) FROM best WHERE basis = 'measured'")
    assert done == 2


# --- a real Prometheus scrapes a running kiln run --------------------------------------

def test_prometheus_scrapes_a_running_kiln_run(tmp_path):
    """Debian's prometheus on loopback scrapes `kiln run --metrics` every second
    and loads configs/prometheus/alerts.yml; the scraped series are read back
    through its HTTP API."""
    kiln_port = free_port()
    with Prometheus(tmp_path, "kiln", f"127.0.0.1:{kiln_port}") as prom:
        prom.wait(prom.ready)
        catalog, env = submitted(tmp_path, MANIFEST)
        run = subprocess.Popen([str(KILN), "run", "--device", "cpu", "--scratch", str(tmp_path / "s"),
                                "--metrics", f"127.0.0.1:{kiln_port}", "--metrics-linger", "3"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
        # Prometheus scraped the run: a short CPU run may end before the first
        # scrape, so what is certain is the final values --metrics-linger served
        # (kiln_run_running during a run: test_scraped_during_the_run)
        assert prom.query('max_over_time(up{job="kiln"}[10m])')[0]["value"][1] == "1"
        evaluated = prom.query("sum(max_over_time(kiln_candidates_evaluated_total[10m]))")
        (n_eval,), = db_rows(catalog, "SELECT COUNT(*) FROM evaluations")
        assert float(evaluated[0]["value"][1]) == n_eval > 0
        jobs = prom.query('max_over_time(kiln_jobs{state="done"}[10m])')
        (n_done,), = db_rows(catalog, "SELECT COUNT(*) FROM jobs WHERE state = 'done'")
        assert float(jobs[0]["value"][1]) == n_done > 0
        # the alert rules loaded and evaluated without error
        rules = prom.rules()
        assert len(rules) == 7 and all(rule["health"] in ("ok", "unknown") for rule in rules), rules
