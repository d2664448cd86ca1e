"""Hostile inputs a new user tried (issue 22, acceptance 4; docs/robustness.md,
"Held-out trial"), each once a fault, kept here as a test: a foreign SQLite
file named as the catalog, terminal escape sequences in catalog and manifest
text, a measurements file with millions of samples, a pointwise expression
outside the worker's grammar, a manifest that is a link to a secret, SIGTERM
while the workers are still starting. The real `kiln` binary, real catalogs,
real processes (the scripted evaluator for `kiln run`).
"""
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import db_rows, submitted
from test_e2e import FAKE_EVALUATOR, KILN, kiln, worker_pids_with

MANIFEST = ("targets: [H200]\ndefaults:\n  dtypes: [fp32]\n  exploration: {strategy: exhaustive, max_candidates: 2}\n"
            "operators:\n  - op: add\n    input_shape: [4096]\n")


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


# -- 1. a foreign SQLite file as --catalog ------------------------------------

def foreign_db(path):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("INSERT INTO notes (body) VALUES ('keep me')")
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("cmd", ["submit", "status", "best", "run"])
def test_foreign_sqlite_file_is_not_made_a_catalog(tmp_path, cmd):
    db = foreign_db(tmp_path / "app.db")
    before = sha(db)
    (tmp_path / "m.yaml").write_text(MANIFEST)
    args = {"submit": ["submit", tmp_path / "m.yaml"], "status": ["status"], "best": ["best"],
            "run": ["run", "--scratch", tmp_path / "s"]}[cmd]
    r = kiln(*args, "--catalog", db, check=False, env={"KILN_PYTHON": str(FAKE_EVALUATOR)})
    assert r.returncode != 0, r.stdout + r.stderr
    assert "not a Kiln catalog" in r.stderr and str(db) in r.stderr, r.stderr
    assert sha(db) == before
    assert db_rows(db, "SELECT name FROM sqlite_master") == [("notes",)]
    assert not (tmp_path / "app.db-wal").exists()


def test_empty_file_and_empty_database_become_catalogs(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    kiln("submit", tmp_path / "m.yaml", "--catalog", empty)
    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).close()  # a database with no schema
    kiln("submit", tmp_path / "m.yaml", "--catalog", blank)
    for c in (empty, blank):
        assert db_rows(c, "SELECT COUNT(*) FROM jobs") == [(1,)]


# -- 2. terminal escape sequences ----------------------------------------------

def test_escape_sequences_from_the_catalog_are_not_sent_to_the_terminal(tmp_path):
    (tmp_path / "m.yaml").write_text('name: "evil\\e]0;owned\\a\\e[2J"\n' + MANIFEST)
    cat = tmp_path / "kiln.db"
    kiln("submit", tmp_path / "m.yaml", catalog=cat)
    # A failed job's message as a worker (or a merged shard) could write it.
    con = sqlite3.connect(cat)
    con.execute("UPDATE jobs SET state = 'failed', message = ?", ("boom\x1b[31m\x9b2J\x07\r\nhidden",))
    con.commit()
    con.close()
    for args in (["status"], ["best"], ["lineage", "--job", "1"]):
        out = kiln(*args, catalog=cat).stdout
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out, (args, out)
        assert "\\x1b" in out, (args, out)
    st = kiln("status", catalog=cat).stdout
    assert "evil\\x1b]0;owned\\x07\\x1b[2J" in st and "\\x0d\\x0ahidden" in st, st


@pytest.mark.parametrize("op,shown", [("add\\e[8m\\u009b", "add\\x1b[8m\\u009b"),
                                      ("add\\0x", "add\\x00x'")])  # a NUL once cut the message short
def test_escape_sequences_in_a_manifest_are_escaped_in_its_error(tmp_path, op, shown):
    (tmp_path / "m.yaml").write_text(MANIFEST.replace("op: add", f'op: "{op}"'))
    r = kiln("submit", tmp_path / "m.yaml", catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode == 2, r.stderr
    assert "\x1b" not in r.stderr and "\u009b" not in r.stderr and "\0" not in r.stderr, r.stderr
    assert shown in r.stderr and "known operators" in r.stderr, r.stderr
    assert not (tmp_path / "kiln.db").exists()


# -- 3. millions of samples ----------------------------------------------------

def test_three_million_samples_are_refused_for_the_real_reason(tmp_path):
    f = tmp_path / "tune.json"
    samples = ",".join(["0.5"] * 3_000_000)
    f.write_text('{"format": "kiln-measurements/1", "device": "NVIDIA H200", "target": "H200", "kernels": '
                 '[{"job_key": "k", "candidate_id": 1, "median_ms": 0.5, "samples": [' + samples + ']}]}')
    r = kiln("import-measurements", f, catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode != 0
    assert "3000000 samples" in r.stderr and "at most 100000" in r.stderr, r.stderr
    assert not (tmp_path / "kiln.db").exists()


def test_kiln_rt_refuses_more_reps_than_an_import_takes(tmp_path):
    rt = KILN.parent / "kiln-rt"
    if not rt.exists():
        pytest.fail(f"{rt} is missing: build the kiln-rt target")
    for reps in ("3000000", "0", "12abc"):
        r = subprocess.run([str(rt), "tune", str(tmp_path), "--out", str(tmp_path / "t.json"), "--reps", reps],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert f"--reps {reps}" in r.stderr and "100000" in r.stderr, r.stderr


def test_kiln_rt_refuses_a_bad_preheat(tmp_path):
    rt = KILN.parent / "kiln-rt"
    if not rt.exists():
        pytest.fail(f"{rt} is missing: build the kiln-rt target")
    for cmd in (["bench", str(tmp_path)], ["tune", str(tmp_path), "--out", str(tmp_path / "t.json")]):
        for flag in ("--preheat", "--preheat-max"):
            for s in ("-1", "61", "nan", "0.3s"):
                r = subprocess.run([str(rt), *cmd, flag, s], capture_output=True, text=True, timeout=60)
                assert r.returncode == 2 and f"{flag} {s}" in r.stderr, r.stderr


# -- 4. a pointwise expression outside the grammar ------------------------------

@pytest.mark.parametrize("expr,why", [
    ("(__import__ x0)", "unknown operation '__import__'"),
    ("(add x0 os)", "unknown atom 'os'"),
    ("(add x0 x9)", "input x9 out of range"),
    ("(relu x0", "missing ')'"),
])
def test_pointwise_expr_outside_the_grammar_is_refused_at_submit(tmp_path, expr, why):
    m = tmp_path / "m.yaml"
    m.write_text("targets: [H200]\ndefaults: {dtypes: [fp32]}\noperators:\n"
                 "  - op: pointwise\n    input_shape: [64, 64]\n"
                 f"    params: {{expr: {json.dumps(expr)}, inputs: full}}\n")
    r = kiln("submit", m, catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{m}:6:" in r.stderr and "param 'expr'" in r.stderr and why in r.stderr, r.stderr
    assert not (tmp_path / "kiln.db").exists()


# -- 5. a manifest that is a link to a secret -----------------------------------

@pytest.mark.parametrize("content", [
    "root:$y$j9T$SECRETSALT$SECRETHASH:19000:0:99999:7:::\n",
    '{"token": "SECRET-TOKEN-1234"\n',
    "SECRET-1 SECRET-2\n- SECRET-3\n",
])
def test_errors_do_not_quote_a_linked_files_content(tmp_path, content):
    secret = tmp_path / "secret"
    secret.write_text(content)
    link = tmp_path / "manifest.yaml"
    link.symlink_to(secret)
    for args in (["submit", link], ["submit", "--misses", link], ["import-measurements", link]):
        r = kiln(*args, catalog=tmp_path / "kiln.db", check=False)
        assert r.returncode != 0, (args, r.stdout)
        assert "SECRET" not in r.stderr and "$y$" not in r.stderr, (args, r.stderr)
        assert str(link) in r.stderr, (args, r.stderr)
    assert not (tmp_path / "kiln.db").exists()


# -- 6. SIGTERM while the workers are starting -----------------------------------

@pytest.mark.parametrize("fork_server", ["0", "1"])
def test_sigterm_while_workers_start_stops_cleanly(tmp_path, fork_server):
    (tmp_path / "m.yaml").write_text(MANIFEST.replace("input_shape: [4096]", "shapes: [[4096], [8192], [16384]]"))
    cat = tmp_path / "kiln.db"
    kiln("submit", tmp_path / "m.yaml", catalog=cat)
    # A worker that takes long to start (as one importing torch and Triton on a
    # loaded node does): it answers nothing for 60 s, then is the scripted evaluator.
    slow = tmp_path / "slow_python"
    slow.write_text(f"#!{sys.executable}\nimport os, sys, time\ntime.sleep(60)\n"
                    f"os.execv({str(FAKE_EVALUATOR)!r}, [{str(FAKE_EVALUATOR)!r}] + sys.argv[1:])\n")
    slow.chmod(0o755)
    scratch = tmp_path / "scratch"
    env = dict(os.environ, KILN_CATALOG=str(cat), KILN_PYTHON=str(slow), KILN_FORK_SERVER=fork_server)
    p = subprocess.Popen([str(KILN), "run", "--device", "gpu", "--workers", "2", "--scratch", str(scratch)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not worker_pids_with(str(scratch)):
            time.sleep(0.05)
        assert worker_pids_with(str(scratch)), "no worker started"
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, (p.returncode, err)
    assert db_rows(cat, "SELECT state, COUNT(*) FROM jobs GROUP BY state") == [("queued", 3)], err
    assert db_rows(cat, "SELECT COUNT(*) FROM jobs WHERE lease_owner IS NOT NULL") == [(0,)]
    deadline = time.time() + 5
    while time.time() < deadline and worker_pids_with(str(scratch)):
        time.sleep(0.1)
    assert worker_pids_with(str(scratch)) == [], "worker processes outlived the run"
    con = sqlite3.connect(f"file:{cat}?mode=ro", uri=True)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()


# -- held-out trial: catalog paths ------------------------------------------------

def test_empty_and_dangling_catalog_paths_are_clear_errors(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    r = kiln("submit", tmp_path / "m.yaml", "--catalog", "", check=False)
    assert r.returncode != 0 and "catalog path is empty" in r.stderr, r.stderr
    link = tmp_path / "k.db"
    link.symlink_to(tmp_path / "missing" / "x.db")
    r = kiln("submit", tmp_path / "m.yaml", "--catalog", link, check=False)
    assert r.returncode != 0 and "symbolic link" in r.stderr and "does not exist" in r.stderr, r.stderr
    assert not (tmp_path / "missing").exists() and link.is_symlink()


# -- held-out trial: crafted packages for kiln-rt ------------------------------------

def kiln_rt(*args):
    rt = KILN.parent / "kiln-rt"
    if not rt.exists():
        pytest.fail(f"{rt} is missing: build the kiln-rt target")
    return subprocess.run([str(rt), *map(str, args)], capture_output=True, timeout=60)


@pytest.mark.parametrize("line,why", [
    ("0" * 64 + "  " + "a" * 5_000_000, b"longer than 1024 bytes"),   # was a 5 MB filesystem error
    ("0" * 64 + "  manifest.json\r", b"carriage return"),              # was "not listed in SHA256SUMS"
    ("0" * 64 + "  obj\x1b[2J", b"control character"),
], ids=["5MB-path", "CRLF", "ESC"])
def test_kiln_rt_refuses_odd_sha256sums_lines_briefly(tmp_path, line, why):
    (tmp_path / "SHA256SUMS").write_text(line + "\n")
    r = kiln_rt("verify", tmp_path, "--target", "H200")
    assert r.returncode == 1, r.stderr[:300]
    assert why in r.stderr and len(r.stderr) < 1000 and b"\x1b" not in r.stderr, r.stderr[:300]


@pytest.mark.parametrize("doc,why", [
    ({"format": "\x1b]0;owned\x07"}, b"(not a format name)"),
    ({"format": "kiln-package/2", "targets": [{"name": "H200\x1b[2J", "arch": "sm_90"}], "kernels": []},
     b"control character"),
])
def test_kiln_rt_refuses_control_characters_in_a_package_manifest(tmp_path, doc, why):
    m = json.dumps(doc)
    (tmp_path / "manifest.json").write_text(m)
    (tmp_path / "SHA256SUMS").write_text(hashlib.sha256(m.encode()).hexdigest() + "  manifest.json\n")
    r = kiln_rt("info", tmp_path, "--target", "H200")
    assert r.returncode != 0 and b"\x1b" not in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert why in r.stderr, r.stderr


# -- held-out trial: a parent cycle in a merged catalog -------------------------------

def test_lineage_shows_candidates_in_a_parent_cycle(tmp_path):
    cat, env = submitted(tmp_path, MANIFEST, KILN_PYTHON=str(FAKE_EVALUATOR),
                         FAKE_EVALUATOR_LOG=str(tmp_path / "log.jsonl"))
    kiln("run", "--device", "gpu", "--scratch", tmp_path / "s", base_env=env)
    ids = [r[0] for r in db_rows(cat, "SELECT id FROM candidates ORDER BY id")]
    assert len(ids) == 2
    con = sqlite3.connect(cat)
    con.execute("UPDATE candidates SET parent_id = ? WHERE id = ?", (ids[1], ids[0]))
    con.execute("UPDATE candidates SET parent_id = ? WHERE id = ?", (ids[0], ids[1]))
    con.commit()
    con.close()
    r = kiln("lineage", "--job", "1", base_env=env, timeout=30)
    assert f"#{ids[0]} round" in r.stdout and f"#{ids[1]} round" in r.stdout, r.stdout
    assert "(a parent cycle)" in r.stdout, r.stdout


# -- held-out trial: JSON numbers out of range, a reference that is a device -----------

def test_json_number_out_of_range_names_the_file(tmp_path):
    f = tmp_path / "tune.json"
    f.write_text('{"format": "kiln-measurements/1", "device": "d", "kernels": [{"job_key": "k", '
                 '"candidate_id": 1e400, "median_ms": 1, "samples": [1]}]}')
    r = kiln("import-measurements", f, catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode == 2 and str(f) in r.stderr and "out of range" in r.stderr, r.stderr
    m = tmp_path / "misses.jsonl"
    m.write_text('{"op": "add", "shape": [1e400], "dtype": "fp32", "target": "H200"}\n')
    r = kiln("submit", "--misses", m, catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode == 2 and f"{m}:1:" in r.stderr and "out of range" in r.stderr, r.stderr
    assert not (tmp_path / "kiln.db").exists()


@pytest.mark.parametrize("ref", ["/dev/zero", "."])
def test_reference_that_is_not_a_file_is_named_so(tmp_path, ref):
    (tmp_path / "m.yaml").write_text(f"targets: [H200]\noperators:\n  - reference: {ref}\n")
    r = kiln("submit", tmp_path / "m.yaml", catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr


def test_kiln_rt_manifest_number_out_of_range_is_a_format_error(tmp_path):
    m = '{"format": "kiln-package/2", "targets": [], "kernels": [], "x": 1e400}'
    (tmp_path / "manifest.json").write_text(m)
    (tmp_path / "SHA256SUMS").write_text(hashlib.sha256(m.encode()).hexdigest() + "  manifest.json\n")
    r = kiln_rt("info", tmp_path, "--target", "H200")
    assert r.returncode == 1 and b"manifest.json: not JSON (a number out of range)" in r.stderr, r.stderr


# -- held-out trial: a stdlib module's name in the working directory --------------------

def test_files_in_the_working_directory_do_not_replace_the_workers_modules(tmp_path):
    """A user's http.py beside their manifest was imported by torch inside the
    worker (`python3 -m` puts the working directory first on sys.path): kiln
    submit said "Python package 'torch' is missing or broken"."""
    (tmp_path / "m.yaml").write_text(MANIFEST)
    (tmp_path / "http.py").write_text("raise SystemExit('the user http.py was imported')\n")
    (tmp_path / "random.py").write_text("raise SystemExit('the user random.py was imported')\n")
    r = subprocess.run([str(KILN), "submit", "m.yaml", "--catalog", "kiln.db"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert db_rows(tmp_path / "kiln.db", "SELECT COUNT(*) FROM jobs") == [(1,)]
