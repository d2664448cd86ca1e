"""Output files never destroy the catalog, a device node or a database (issue 22;
docs/robustness.md, "Output files"): `kiln report --out`, `kiln nightly
--report` and `kiln run --metrics-file` refuse, with a message naming the path
and a non-zero exit, a target that is the catalog or one of its sidecars (by
name, symlink or hard link), an existing file that is not a regular file (FIFO,
device node) or an SQLite database; `kiln submit --catalog` refuses a catalog
path that is not a regular file. The real binary, real catalogs, the scripted
evaluator for `kiln run`.
"""
import hashlib
import os
import shutil
import stat
import sqlite3
import subprocess

import pytest

from test_e2e import FAKE_EVALUATOR, KILN, kiln

MANIFEST = "targets: [H200]\ndefaults:\n  dtypes: [fp32]\n  exploration: {strategy: exhaustive, max_candidates: 2}\n" \
           "operators:\n  - op: add\n    input_shape: [4096]\n"


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def submitted(tmp_path_factory):
    """A real catalog with one submitted job, made once per module (each
    `kiln submit` starts an evaluator)."""
    d = tmp_path_factory.mktemp("submitted")
    (d / "m.yaml").write_text(MANIFEST)
    c = d / "kiln.db"
    kiln("submit", d / "m.yaml", catalog=c)
    assert sorted(p.name for p in d.iterdir()) == ["kiln.db", "m.yaml"]  # no sidecar left to copy
    return c


@pytest.fixture
def cat(submitted, tmp_path):
    """A test's own copy of that catalog (and the manifest beside it)."""
    (tmp_path / "m.yaml").write_text(MANIFEST)
    c = tmp_path / "kiln.db"
    shutil.copyfile(submitted, c)
    sound(c)
    return c


def sound(c):
    """The catalog passes SQLite's integrity check and still holds its one job."""
    con = sqlite3.connect(f"file:{c}?mode=ro", uri=True)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 1
    finally:
        con.close()


def intact(c, digest):
    assert sha(c) == digest, f"{c} changed"
    sound(c)


def refused(r, path, why):
    assert r.returncode != 0, f"exit 0:\n{r.stdout}\n{r.stderr}"
    assert str(path) in r.stderr and why in r.stderr, r.stderr


def device_node(d):
    """A character device (null: 1,3) where we may make one, else a FIFO."""
    p = d / "node"
    if os.geteuid() == 0:
        try:
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            return p
        except OSError:
            pass
    os.mkfifo(p)
    return p


# --- 1. kiln report --out the catalog or its sidecars ----------------------------------
@pytest.mark.parametrize("name", ["kiln.db", "kiln.db-wal", "kiln.db-shm", "kiln.db-journal"])
def test_report_refuses_the_catalog_and_its_sidecars(cat, tmp_path, name):
    digest = sha(cat)
    side = tmp_path / name
    before = sha(side) if side.exists() else None
    r = subprocess.run([str(KILN), "report", "--out", name, "--catalog", "kiln.db"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    refused(r, name, "catalog")
    assert (sha(side) if side.exists() else None) == before, f"{side} written"
    intact(cat, digest)


@pytest.mark.parametrize("how", ["symlink", "hardlink", "relative"])
def test_report_refuses_the_catalog_by_another_name(cat, tmp_path, how):
    digest = sha(cat)
    if how == "symlink":
        out = tmp_path / "report.html"
        out.symlink_to(cat)
    elif how == "hardlink":
        out = tmp_path / "report.html"
        os.link(cat, out)
    else:
        (tmp_path / "sub").mkdir()
        out = tmp_path / "sub" / ".." / "kiln.db"
    r = kiln("report", "--out", out, catalog=cat, check=False)
    refused(r, out, "catalog")
    intact(cat, digest)


# --- 2. kiln nightly --report the catalog ---------------------------------------------
@pytest.mark.parametrize("name", ["kiln.db", "kiln.db-wal"])
def test_nightly_report_refuses_the_catalog(cat, tmp_path, name):
    digest = sha(cat)
    r = kiln("nightly", tmp_path / "m.yaml", "--report-only", "--report", tmp_path / name, "--device", "cpu",
             catalog=cat, check=False)
    refused(r, tmp_path / name, "catalog")
    intact(cat, digest)


# --- 3. kiln run --metrics-file the catalog ------------------------------------------
@pytest.mark.parametrize("name", ["kiln.db", "kiln.db-wal"])
def test_run_metrics_file_refuses_the_catalog(cat, tmp_path, name):
    r = kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s", "--metrics-file",
             tmp_path / name, catalog=cat, check=False, timeout=300,
             env={"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp_path / "log.jsonl")})
    refused(r, tmp_path / name, "catalog")
    sound(cat)


# --- 4. device nodes and FIFOs are never renamed over --------------------------------
@pytest.mark.parametrize("kind", ["node", "fifo"])
def test_report_refuses_a_device_node_or_fifo(cat, tmp_path, kind):
    if kind == "node":
        p = device_node(tmp_path)
    else:
        p = tmp_path / "fifo"
        os.mkfifo(p)
    mode = os.lstat(p).st_mode
    r = kiln("report", "--out", p, catalog=cat, check=False)
    refused(r, p, "refusing")
    assert os.lstat(p).st_mode == mode and not stat.S_ISREG(os.lstat(p).st_mode)
    assert [q.name for q in tmp_path.iterdir() if ".tmp" in q.name] == []


def test_run_metrics_file_refuses_a_fifo(cat, tmp_path):
    p = tmp_path / "metrics.prom"
    os.mkfifo(p)
    r = kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s", "--metrics-file", p,
             catalog=cat, check=False, timeout=300,
             env={"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp_path / "log.jsonl")})
    refused(r, p, "FIFO")
    assert stat.S_ISFIFO(os.lstat(p).st_mode)


# --- 5. somebody else's database is never overwritten; a plain file is (a re-run) ---
def test_report_refuses_another_database_and_replaces_a_plain_file(cat, tmp_path):
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE precious(x)")
    con.execute("INSERT INTO precious VALUES (42)")
    con.commit()
    con.close()
    digest = sha(other)
    r = kiln("report", "--out", other, catalog=cat, check=False)
    refused(r, other, "SQLite database")
    assert sha(other) == digest

    old = tmp_path / "report.html"
    old.write_text("yesterday's report\n")
    kiln("report", "--out", old, catalog=cat)
    assert old.read_text().lstrip().lower().startswith("<!doctype html")


def test_nightly_report_refuses_another_database(cat, tmp_path):
    other = tmp_path / "night.md"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    digest = sha(other)
    r = kiln("nightly", tmp_path / "m.yaml", "--report-only", "--report", other, catalog=cat, check=False)
    refused(r, other, "SQLite database")
    assert sha(other) == digest


# --- 12. a catalog path that is not a regular file -----------------------------------
def test_submit_refuses_a_catalog_that_is_not_a_regular_file(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    node = device_node(tmp_path) if os.geteuid() == 0 else None
    if node is None or stat.S_ISFIFO(os.lstat(node).st_mode):
        pytest.skip("needs a character device node in a temporary directory (root)")
    r = kiln("submit", tmp_path / "m.yaml", "--catalog", node, check=False, timeout=60)
    refused(r, node, "not a catalog file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml", "node"]


def test_submit_refuses_dev_null_as_catalog(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    before = os.path.exists("/dev/null-journal")
    r = kiln("submit", tmp_path / "m.yaml", "--catalog", "/dev/null", check=False, timeout=60)
    refused(r, "/dev/null", "not a catalog file")
    if not before:
        assert not os.path.exists("/dev/null-journal")
    # refused before the plan starts an evaluator: with none that can start,
    # the answer is still the catalog's, not "no evaluator" (exit 3)
    r = kiln("submit", tmp_path / "m.yaml", "--catalog", "/dev/null", check=False, timeout=60,
             env={"KILN_PYTHON": str(tmp_path / "no-such-python")})
    refused(r, "/dev/null", "not a catalog file")
    assert r.returncode != 3, r.stderr
