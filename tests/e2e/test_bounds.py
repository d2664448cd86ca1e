"""Errors that never look like empty results, and bounds wherever a user or a
file can push (issue 22, items 5 and 6), on the real `kiln` binary:

- a catalog whose pages are corrupted after a real run: `kiln status` and
  `kiln best` exit non-zero naming the file and SQLite's message;
- `kiln submit` refuses /dev/zero, a FIFO and an oversized file at once, and
  a manifest's out-of-range numbers with file:line; a huge name is rejected
  fast and echoed as an excerpt;
- `kiln query` stops at its time limit and refuses oversized results.
"""
import os
import sqlite3
import time

import pytest

from test_e2e import FAKE_EVALUATOR, KILN, kiln

MANIFEST = ("targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
            "  exploration: {strategy: exhaustive, max_candidates: 12}\n"
            "operators:\n  - op: add\n    input_shape: [4096]\n  - op: add\n    input_shape: [8192]\n")


@pytest.fixture
def ran(tmp_path):
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")
    catalog = tmp_path / "kiln.db"
    (tmp_path / "m.yaml").write_text(MANIFEST)
    kiln("submit", tmp_path / "m.yaml", catalog=catalog)
    kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s", catalog=catalog,
         env={"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp_path / "log.jsonl")})
    con = sqlite3.connect(catalog)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return catalog


def corrupt(catalog, how):
    """Overwrites pages with garbage: "middle", every page but the first and
    the last; "tables", the root pages of the tables the reports read, the
    schema intact (statements prepare, then fail as they step: the case that
    used to read as "no rows")."""
    page = 4096
    size = catalog.stat().st_size
    assert size >= 4 * page, size
    if how == "middle":
        spans = [(page, size - 2 * page)]
    else:
        con = sqlite3.connect(catalog)
        roots = [r for (r,) in con.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name IN "
            "('jobs', 'batches', 'batch_jobs', 'evaluations', 'candidates', 'best')")]
        con.close()
        assert len(roots) == 6 and min(roots) > 1, roots
        spans = [((r - 1) * page, page) for r in roots]
    with open(catalog, "r+b") as f:
        for at, n in spans:
            f.seek(at)
            f.write(bytes([0x5A]) * n)


@pytest.mark.parametrize("how", ["middle", "tables"])
def test_status_and_best_fail_loudly_on_a_corrupt_catalog(ran, how):
    assert "add" in kiln("best", catalog=ran).stdout  # healthy first
    corrupt(ran, how)
    for cmd in (["status"], ["best"], ["status", "--json"], ["best", "--json"]):
        r = kiln(*cmd, catalog=ran, check=False)
        assert r.returncode != 0, (cmd, r.stdout, r.stderr)
        assert str(ran) in r.stderr and "malformed" in r.stderr, (cmd, r.stderr)
        assert "integrity_check" in r.stderr, r.stderr
        assert "no jobs in the catalog" not in r.stdout + r.stderr


def test_submit_refuses_non_regular_and_oversized_files(tmp_path):
    catalog = tmp_path / "kiln.db"
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# " + b"x" * (17 << 20) + b"\n")
    for path, why in [("/dev/zero", "not a regular file"), (fifo, "not a regular file"),
                      (tmp_path, "not a regular file"), (big, "over the bound of 16 MiB")]:
        t0 = time.time()
        r = kiln("submit", path, catalog=catalog, check=False, timeout=20)
        assert r.returncode != 0 and why in r.stderr, (path, r.stderr)
        assert time.time() - t0 < 10
    assert not catalog.exists()


@pytest.mark.parametrize("n", ["0", "257", "100000"])
def test_workers_out_of_bounds_is_a_usage_error_before_anything_starts(tmp_path, n):
    """--workers 100000 used to spawn workers for a minute, ignoring SIGTERM."""
    catalog = tmp_path / "kiln.db"
    t0 = time.time()
    r = kiln("run", "--device", "cpu", "--workers", n, catalog=catalog, check=False, timeout=20)
    assert r.returncode == 2 and "--workers must be 1..256" in r.stderr, r.stderr
    assert time.time() - t0 < 10


def test_huge_name_rejected_fast_and_echoed_short(tmp_path):
    catalog = tmp_path / "kiln.db"
    man = tmp_path / "m.yaml"
    name = "q" * 4_000_000
    man.write_text(f"targets: [H200]\noperators:\n  - op: {name}\n    input_shape: [8]\n    dtype: fp32\n")
    t0 = time.time()
    r = kiln("submit", man, catalog=catalog, check=False, timeout=60)
    assert r.returncode != 0 and "unknown operator" in r.stderr, r.stderr[:500]
    assert time.time() - t0 < 10
    assert len(r.stderr) < 2000 and "4000000 characters" in r.stderr


@pytest.mark.parametrize("value", ["1e308", ".inf", "-5", "86401"])
def test_timeout_out_of_bounds_names_file_and_line(tmp_path, value):
    man = tmp_path / "m.yaml"
    man.write_text("targets: [H200]\noperators:\n  - op: add\n    input_shape: [8]\n    dtype: fp32\n"
                   f"    exploration: {{timeout_s: {value}}}\n")
    r = kiln("submit", man, catalog=tmp_path / "kiln.db", check=False)
    assert r.returncode == 2, r.stderr
    want = "must be a number" if value == ".inf" else "must be in (0, 86400]"  # .inf: not a number here
    assert f"{man}:6:30: exploration.timeout_s {want}" in r.stderr, r.stderr


def test_query_time_and_size_limits(ran):
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    t0 = time.time()
    r = kiln("query", endless, "--timeout", "1", catalog=ran, check=False, timeout=60)
    assert r.returncode != 0 and "time limit" in r.stderr and "--timeout" in r.stderr, r.stderr
    assert time.time() - t0 < 15
    r = kiln("query", "SELECT length(randomblob(1000000000))", catalog=ran, check=False, timeout=60)
    assert r.returncode != 0 and "too big" in r.stderr and "--max-bytes" in r.stderr, r.stderr
    many = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 50) SELECT x FROM c"
    r = kiln("query", many, "--max-rows", "10", catalog=ran, check=False)
    assert r.returncode != 0 and "more than 10 rows" in r.stderr and "--max-rows" in r.stderr, r.stderr
    assert kiln("query", many, "--max-rows", "50", catalog=ran).stdout.count("\n") >= 50
    wide = "SELECT hex(randomblob(100000)) FROM jobs"
    r = kiln("query", wide, "--max-bytes", "150000", catalog=ran, check=False)
    assert r.returncode != 0 and "--max-bytes" in r.stderr, r.stderr
