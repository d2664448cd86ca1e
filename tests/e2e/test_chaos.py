"""The chaos suite (issue 22): `kiln run` under the faults a real cluster and a
hostile-but-honest user produce, on the real binary, a real SQLite catalog
and the scripted evaluator (tests/data/fake_evaluator) as its workers:

- `kill -9` of `kiln run` at seeded random points, each followed by a resume;
- two `kiln run`s at once on one catalog;
- a corrupt catalog (and a file that is no catalog at all);
- a full filesystem under the catalog mid-run (a small tmpfs, else a loop
  file; skipped, saying why, where neither can be mounted);
- a worker that misbehaves in every way the engine must survive (malformed
  replies, wrong types, artifacts outside its scratch directory, a hang, a
  crash, an exit, a huge reply, junk bytes);
- a hostile catalog merged into a good one.

Each test checks what the issue asks of all of them: nothing lost (every job
done, every candidate evaluated once the run is resumed), nothing evaluated
twice (one evaluation per candidate), nothing outside the run touched (a
sentinel directory's snapshot), and `PRAGMA integrity_check` = ok.

KILN_CHAOS_SEED picks the kill points (default 22); a failure prints them.
"""
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_e2e import FAKE_EVALUATOR, KILN, db_rows, kiln, worker_pids_with

SEED = int(os.environ.get("KILN_CHAOS_SEED", "22"))
N_JOBS = 6
N_CONFIGS = 12


def manifest(n_jobs=N_JOBS, timeout_s=None):
    shapes = "".join(f"  - op: add\n    input_shape: [{4096 * (i + 1)}]\n" for i in range(n_jobs))
    explore = f"{{strategy: exhaustive, max_candidates: {N_CONFIGS}" + (
        f", timeout_s: {timeout_s}}}" if timeout_s else "}")
    return f"targets: [H200]\ndefaults:\n  dtypes: [fp32]\n  exploration: {explore}\noperators:\n{shapes}"


@pytest.fixture
def need_kiln():
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")


# --- what every test checks ----------------------------------------------------------


def snapshot(d):
    """Every file under d: relative path -> (sha256, size, mode, mtime_ns)."""
    out = {}
    for p in sorted(Path(d).rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p.relative_to(d))] = ("link", os.readlink(p))
        elif p.is_file():
            out[str(p.relative_to(d))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size, st.st_mode,
                                          st.st_mtime_ns)
        else:
            out[str(p.relative_to(d))] = ("dir", st.st_mode)
    return out


@pytest.fixture
def sentinel(tmp_path):
    """A directory beside the run that nothing may touch: files, a nested
    directory, a symlink. Yields a check()."""
    d = tmp_path / "sentinel"
    (d / "nested").mkdir(parents=True)
    (d / "precious.bin").write_bytes(b"the user's own bytes\n" * 64)
    (d / "nested" / "kiln.db").write_bytes(b"not this run's catalog\n")
    (d / "nested" / "k.cubin").write_bytes(os.urandom(512))
    os.symlink("precious.bin", d / "link")
    before = snapshot(d)

    class Sentinel:
        path = d
        file = d / "precious.bin"

        @staticmethod
        def check():
            assert snapshot(d) == before, "something outside the run was touched"
    return Sentinel


def integrity_ok(catalog):
    con = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        con.close()


def no_duplicates(catalog):
    """No candidate evaluated twice, no candidate stored twice, at most one best per job."""
    assert db_rows(catalog, "SELECT candidate_id FROM evaluations GROUP BY candidate_id "
                            "HAVING COUNT(*) > 1") == []
    assert db_rows(catalog, "SELECT job_id, key FROM candidates GROUP BY job_id, key HAVING COUNT(*) > 1") == []
    assert db_rows(catalog, "SELECT key FROM jobs GROUP BY key HAVING COUNT(*) > 1") == []
    assert db_rows(catalog, "SELECT job_id FROM best GROUP BY job_id HAVING COUNT(*) > 1") == []


def nothing_lost(catalog, n_jobs=N_JOBS, n_configs=N_CONFIGS):
    """Every job done, with each of its configs a candidate evaluated exactly once."""
    assert db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state") == [("done", n_jobs)]
    per_job = db_rows(catalog, "SELECT j.id, COUNT(DISTINCT c.id), COUNT(e.candidate_id) FROM jobs j "
                               "LEFT JOIN candidates c ON c.job_id = j.id "
                               "LEFT JOIN evaluations e ON e.candidate_id = c.id GROUP BY j.id")
    assert len(per_job) == n_jobs and all(c == e == n_configs for _, c, e in per_job), per_job
    assert db_rows(catalog, "SELECT COUNT(*) FROM best") == [(n_jobs,)]


def no_workers_left(marker, within_s=5.0):
    deadline = time.monotonic() + within_s
    while worker_pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker_pids_with(marker) == [], "a worker outlived its run"


def evaluator_env(tmp, **extra):
    return {"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp / "log.jsonl"), **extra}


def submit(tmp, text=None):
    catalog = tmp / "kiln.db"
    (tmp / "m.yaml").write_text(text or manifest())
    kiln("submit", tmp / "m.yaml", catalog=catalog)
    return catalog


def run_args(scratch, *extra):
    return [str(KILN), "run", "--device", "gpu", "--workers", "1", "--scratch", str(scratch), "--json", *extra]


# --- kill -9 at seeded random points, each followed by a resume ------------------------


def test_kill9_at_random_points_then_resume(need_kiln, tmp_path, sentinel):
    # 144 evaluations of 50 ms: ~7 s of work, of which 12 kills within the
    # first second of each run (start-up included) leave most undone.
    n_jobs = 12
    catalog = submit(tmp_path, manifest(n_jobs=n_jobs))
    scratch = tmp_path / "s"
    env = dict(os.environ, KILN_CATALOG=str(catalog), **evaluator_env(tmp_path, FAKE_EVALUATOR_DELAY_S="0.05"))
    rng = random.Random(SEED)
    points = [rng.uniform(0.05, 1.0) for _ in range(12)]
    history = []
    for i, at in enumerate(points):
        p = subprocess.Popen(run_args(scratch), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(at)
        finished = p.poll() is not None
        p.send_signal(signal.SIGKILL)
        p.wait()
        states = dict(db_rows(catalog, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))
        evals = db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0]
        history.append((i, round(at, 3), finished, states, evals))
        info = f"seed {SEED}, kill points so far (i, s, finished first, states, evaluations): {history}"
        integrity_ok(catalog)
        no_duplicates(catalog)
        no_workers_left(str(scratch))
        assert evals >= (history[-2][4] if len(history) > 1 else 0), info  # nothing recorded is lost
    print(f"seed {SEED}: (kill, at s, finished first, job states, evaluations) {history}")
    assert sum(1 for h in history if not h[2]) >= 10, f"fewer than 10 kills landed mid-run: {history}"
    r = subprocess.run(run_args(scratch), capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, (history, r.stderr[-3000:])
    nothing_lost(catalog, n_jobs=n_jobs)
    no_duplicates(catalog)
    integrity_ok(catalog)
    no_workers_left(str(scratch))
    sentinel.check()


# --- two runs at once on one catalog ---------------------------------------------------


def test_two_concurrent_runs_split_the_work(need_kiln, tmp_path, sentinel):
    catalog = submit(tmp_path)
    env = dict(os.environ, KILN_CATALOG=str(catalog), **evaluator_env(tmp_path, FAKE_EVALUATOR_DELAY_S="0.02"))
    procs = [subprocess.Popen(run_args(tmp_path / f"s{i}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "locked" not in err.lower() and "busy" not in err.lower(), err[-3000:]
    done = [json.loads(out.splitlines()[-1])["jobs_done"] for out, _ in outs]
    assert sum(done) == N_JOBS, done  # each job done by exactly one of them
    nothing_lost(catalog)
    no_duplicates(catalog)
    integrity_ok(catalog)
    sentinel.check()


# --- a corrupt catalog -----------------------------------------------------------------


def test_corrupt_catalog_is_a_clear_error_and_stays_as_it_was(need_kiln, tmp_path, sentinel):
    # A catalog in use: one batch done, a second one queued (what the next run resumes).
    catalog = submit(tmp_path)
    kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s", catalog=catalog,
         env=evaluator_env(tmp_path))
    (tmp_path / "more.yaml").write_text(manifest(n_jobs=2).replace("4096", "777"))
    kiln("submit", tmp_path / "more.yaml", catalog=catalog)
    con = sqlite3.connect(catalog)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    roots = [r for (r,) in con.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' "
                                       "AND name IN ('jobs', 'candidates', 'evaluations')")]
    con.close()
    with open(catalog, "r+b") as f:
        for r in roots:
            f.seek((r - 1) * 4096)
            f.write(b"\x5a" * 4096)
    digest = hashlib.sha256(catalog.read_bytes()).hexdigest()
    (tmp_path / "m2.yaml").write_text(manifest(n_jobs=1).replace("4096", "12345"))
    for cmd in (["run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s"], ["status"], ["best"],
                ["submit", tmp_path / "m2.yaml"]):
        r = kiln(*cmd, catalog=catalog, check=False, env=evaluator_env(tmp_path), timeout=120)
        assert r.returncode != 0, (cmd, r.stdout, r.stderr)
        assert str(catalog) in r.stderr and "integrity_check" in r.stderr, (cmd, r.stderr)
        assert "Traceback" not in r.stderr and "terminate called" not in r.stderr, r.stderr
    assert hashlib.sha256(catalog.read_bytes()).hexdigest() == digest, "a failed command wrote to the catalog"
    # a file that is no catalog at all
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database, but the user's file\n" * 200)
    jd = hashlib.sha256(junk.read_bytes()).hexdigest()
    for cmd in (["status"], ["run", "--device", "gpu", "--scratch", tmp_path / "s"], ["submit", tmp_path / "m2.yaml"]):
        r = kiln(*cmd, catalog=junk, check=False, env=evaluator_env(tmp_path), timeout=120)
        assert r.returncode != 0, (cmd, r.stdout, r.stderr)
        assert str(junk) in r.stderr and "not a database" in r.stderr, (cmd, r.stderr)
    assert hashlib.sha256(junk.read_bytes()).hexdigest() == jd
    assert sorted(p.name for p in tmp_path.glob("junk.db*")) == ["junk.db"]
    sentinel.check()


# --- a full filesystem -----------------------------------------------------------------


def mount_small_fs(where, size_kib):
    """Mounts a size_kib filesystem at `where`: tmpfs, else an ext4 loop file.
    Returns an unmount function, or skips the test saying why neither worked."""
    where.mkdir()
    why = []
    if os.geteuid() == 0 and shutil.which("mount"):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return lambda: subprocess.run(["umount", "-l", str(where)], check=False)
        why.append(f"tmpfs: {r.stderr.strip()}")
        img = where.parent / "fs.img"
        if shutil.which("mkfs.ext4"):
            with open(img, "wb") as f:
                f.truncate(max(size_kib, 512) * 1024)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], capture_output=True)
            r = subprocess.run(["mount", "-o", "loop", str(img), str(where)], capture_output=True, text=True)
            if r.returncode == 0:
                return lambda: subprocess.run(["umount", "-l", str(where)], check=False)
            why.append(f"loop file: {r.stderr.strip()}")
        else:
            why.append("loop file: mkfs.ext4 not installed")
    else:
        why.append("not root: cannot mount")
    msg = "no small filesystem to fill: " + "; ".join(why)
    print(msg, file=sys.stderr)
    pytest.skip(msg)


def test_full_filesystem_fails_cleanly_and_resumes(need_kiln, tmp_path, sentinel):
    fs = tmp_path / "fs"
    umount = mount_small_fs(fs, 8192)
    try:
        catalog = fs / "kiln.db"
        (tmp_path / "m.yaml").write_text(manifest())
        kiln("submit", tmp_path / "m.yaml", catalog=catalog)
        con = sqlite3.connect(catalog)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        # Leave ~48 KiB: enough to start, not enough for 72 evaluations.
        free = os.statvfs(fs).f_bavail * os.statvfs(fs).f_frsize
        (fs / "filler").write_bytes(b"\0" * max(0, free - 48 * 1024))
        r = kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s", "--json", catalog=catalog,
                 check=False, env=evaluator_env(tmp_path), timeout=300)
        assert r.returncode != 0, ("the run did not hit the full disk", r.stdout[-2000:])
        assert "full" in r.stderr.lower(), r.stderr[-3000:]
        assert "terminate called" not in r.stderr and "Segmentation" not in r.stderr, r.stderr[-3000:]
        assert db_rows(catalog, "SELECT COUNT(*) FROM evaluations")[0][0] < N_JOBS * N_CONFIGS
        integrity_ok(catalog)
        no_duplicates(catalog)
        (fs / "filler").unlink()
        r = kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s", "--json", catalog=catalog,
                 env=evaluator_env(tmp_path), timeout=300)
        nothing_lost(catalog)
        no_duplicates(catalog)
        integrity_ok(catalog)
        no_workers_left(str(tmp_path / "s"))
    finally:
        umount()
    sentinel.check()


# --- a worker that misbehaves in every mode --------------------------------------------

# (mode, how its candidate must end: status, a phrase of its message)
WORKER_MODES = [
    ("result_string", "crash", "malformed worker reply"),
    ("status_number", "crash", "malformed worker reply"),
    ("latency_string", "crash", "malformed worker reply"),
    ("ok_string", "crash", "malformed worker reply"),
    ("no_result", "crash", "malformed worker reply"),
    ("artifact_string", "crash", "malformed worker reply"),
    ("traffic_string", "crash", "malformed worker reply"),
    ("not_object", "crash", "malformed worker reply"),
    ("sha_missing", "crash", "malformed worker reply"),
    ("status_unknown", "crash", "triumph"),
    ("artifact_outside", "crash", "outside the evaluation's artifact directory"),
    ("artifact_symlink", "crash", "is a symbolic link"),
    ("artifact_dotdot", "crash", "outside the evaluation's artifact directory"),
    ("artifact_kind_null", "crash", "outside the evaluation's artifact directory"),
    ("hang", "timeout", ""),
    ("crash", "crash", "signal 11"),
    ("exit", "crash", "exited with code 3"),
    ("huge", "crash", "longer than"),
    ("garbage", "ok", ""),
]


def test_misbehaving_worker_in_every_mode(need_kiln, tmp_path, sentinel):
    n_configs = len(WORKER_MODES) + 3
    catalog = submit(tmp_path, manifest(n_jobs=1, timeout_s=5).replace(
        f"max_candidates: {N_CONFIGS}", f"max_candidates: {n_configs}"))
    scratch = tmp_path / "s"
    r = kiln("run", "--device", "gpu", "--workers", "1", "--scratch", scratch, "--json", catalog=catalog,
             check=False, timeout=300,
             env=evaluator_env(tmp_path, FAKE_MALFORMED=",".join(m for m, _, _ in WORKER_MODES),
                               FAKE_EVALUATOR_CONFIGS=str(n_configs), FAKE_OUTSIDE_FILE=str(sentinel.file)))
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    evs = dict((b, (s, m)) for b, s, m in db_rows(
        catalog, "SELECT json_extract(c.config, '$.BLOCK'), e.status, e.message FROM evaluations e "
                 "JOIN candidates c ON c.id = e.candidate_id"))
    problems = []
    for i, (mode, status, phrase) in enumerate(WORKER_MODES):
        got = evs.get(64 * (i + 2))
        if got is None or got[0] != status or phrase not in (got[1] or ""):
            problems.append((mode, status, phrase, got and (got[0], (got[1] or "")[:200])))
    assert problems == [], problems
    # the well-behaved configs around them are evaluated normally, and the best is one of them
    for b in (64, 64 * (len(WORKER_MODES) + 2), 64 * (len(WORKER_MODES) + 3)):
        assert evs[b][0] == "ok", (b, evs[b])
    assert db_rows(catalog, "SELECT json_extract(c.config, '$.BLOCK') FROM best b "
                            "JOIN candidates c ON c.id = b.candidate_id") == [(64,)]
    nothing_lost(catalog, n_jobs=1, n_configs=n_configs)
    assert db_rows(catalog, "SELECT COUNT(*) FROM artifacts") == [(0,)]
    no_duplicates(catalog)
    integrity_ok(catalog)
    no_workers_left(str(scratch))
    sentinel.check()


# --- a hostile catalog merged ----------------------------------------------------------


def hostile_catalog(tmp):
    """A real catalog (a run of one job), then rows edited as a hostile shard
    could carry them, each within the schema's CHECKs: a job op that climbs out
    of a package directory and a spec that is not JSON, negative latencies, a
    blob whose bytes do not match its sha256."""
    d = tmp / "hostile"
    d.mkdir()
    catalog = submit(d, manifest(n_jobs=1).replace("4096", "1234"))
    kiln("run", "--device", "gpu", "--workers", "1", "--scratch", d / "s", catalog=catalog, env=evaluator_env(d))
    con = sqlite3.connect(catalog)
    con.execute("UPDATE jobs SET op = '../../x/pwn', spec = 'not json {'")
    con.execute("UPDATE evaluations SET median_ms = -1, mean_ms = -1")
    con.execute("UPDATE best SET value_ms = -5")
    con.execute("INSERT INTO blobs (sha256, size, data) VALUES (?, 1, x'78')", ("a" * 64,))
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return catalog


def catalog_content(catalog):
    return {t: db_rows(catalog, f"SELECT * FROM {t} ORDER BY 1") for (t,) in db_rows(
        catalog, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1")}


def test_hostile_catalog_merge_is_refused(need_kiln, tmp_path, sentinel):
    target = submit(tmp_path)
    kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp_path / "s", catalog=target,
         env=evaluator_env(tmp_path))
    before = catalog_content(target)
    hostile = hostile_catalog(tmp_path)
    h_digest = hashlib.sha256(hostile.read_bytes()).hexdigest()
    r = kiln("merge", target, hostile, check=False, catalog=target, timeout=120)
    sentinel.check()
    assert hashlib.sha256(hostile.read_bytes()).hexdigest() == h_digest, "merge wrote to its input"
    integrity_ok(target)
    assert r.returncode != 0, ("kiln merge accepted a hostile catalog", r.stdout[-2000:], r.stderr[-2000:])
    assert str(hostile) in r.stderr, r.stderr
    assert catalog_content(target) == before, "a refused merge changed the target catalog"
