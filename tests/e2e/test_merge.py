"""End-to-end tests of `kiln run --shard I/N` and `kiln merge OUT IN...`.

The job-array flow of scripts/slurm/array.sbatch without Slurm: each shard
submits the same manifest to its own fresh catalog, runs the jobs with
id % N == I, and the shard catalogs are merged into one.

KILN_BIN names the binary (default: build/kiln).
"""
import json
import shutil
import sqlite3

import pytest

from conftest import KILN, ROOT, db_rows as rows, kiln  # noqa: E402

MANIFEST = ROOT / "tests" / "data" / "manifests" / "slurm_small.yaml"
SHARDS = 2


def content(catalog):
    """Everything merge copies, by natural keys (ids differ between catalogs)."""
    q = {
        "batches": "SELECT id, name, manifest_sha256 FROM batches ORDER BY id",
        "jobs": "SELECT key, state, op, shape, dtype, params, target, spec FROM jobs ORDER BY key",
        "links": "SELECT bj.batch_id, j.key FROM batch_jobs bj JOIN jobs j ON j.id = bj.job_id ORDER BY 1, 2",
        "candidates": "SELECT j.key, c.key, c.config, c.template FROM candidates c JOIN jobs j ON j.id = c.job_id "
                      "ORDER BY 1, 2",
        "evaluations": "SELECT j.key, c.key, e.status, e.estimate_ms, e.max_rel_err, e.result FROM evaluations e "
                       "JOIN candidates c ON c.id = e.candidate_id JOIN jobs j ON j.id = c.job_id ORDER BY 1, 2",
        "artifacts": "SELECT j.key, c.key, a.target, a.sha256, a.kind FROM artifacts a "
                     "JOIN candidates c ON c.id = a.candidate_id JOIN jobs j ON j.id = c.job_id ORDER BY 1, 2, 3",
        "blobs": "SELECT sha256, size FROM blobs ORDER BY 1",
        "best": "SELECT j.key, c.key, b.basis, b.value_ms FROM best b JOIN jobs j ON j.id = b.job_id "
                "JOIN candidates c ON c.id = b.candidate_id ORDER BY 1",
    }
    return {k: rows(catalog, v) for k, v in q.items()}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first (scripts/setup.sh)")
    tmp = tmp_path_factory.mktemp("shards")
    out = []
    for i in range(SHARDS):
        cat = tmp / f"shard-{i}-of-{SHARDS}.db"
        kiln("submit", MANIFEST, catalog=cat)
        r = kiln("run", "--shard", f"{i}/{SHARDS}", "--device", "cpu", "--json", "--scratch", tmp / "scratch",
                 catalog=cat)
        out.append(dict(cat=cat, summary=json.loads(r.stdout)))
    return dict(tmp=tmp, shards=out)


def test_each_shard_runs_exactly_its_jobs(shards):
    done_keys = []
    for i, s in enumerate(shards["shards"]):
        states = rows(s["cat"], "SELECT id, state FROM jobs ORDER BY id")
        assert len(states) == 4
        for job_id, state in states:
            assert state == ("done" if job_id % SHARDS == i else "queued"), (i, states)
        assert s["summary"]["jobs_done"] == sum(1 for j, _ in states if j % SHARDS == i)
        # Nothing outside the shard was even proposed.
        other = rows(s["cat"], f"SELECT COUNT(*) FROM candidates c JOIN jobs j ON j.id = c.job_id "
                               f"WHERE j.id % {SHARDS} <> {i}")[0][0]
        assert other == 0
        done_keys += [k for (k,) in rows(s["cat"], "SELECT key FROM jobs WHERE state = 'done'")]
    # Same manifest, fresh catalogs: the same ids, so the shards split the jobs.
    assert len(done_keys) == len(set(done_keys)) == 4


def test_shard_usage_errors(tmp_path):
    for bad in ["2/2", "-1/2", "0/0", "1", "a/b", "1/2/3", "0/2x"]:
        r = kiln("run", "--shard", bad, catalog=tmp_path / "none.db", check=False)
        assert r.returncode == 2, (bad, r.stderr)
        assert "--shard must be I/N" in r.stderr
    assert not (tmp_path / "none.db").exists()


@pytest.fixture(scope="module")
def merged(shards):
    tmp = shards["tmp"]
    out = tmp / "merged.db"
    ins = [s["cat"] for s in shards["shards"]]
    r = kiln("merge", out, *ins, "--json")
    return dict(out=out, ins=ins, report=json.loads(r.stdout), tmp=tmp)


def test_merge_gathers_every_shard(merged):
    out = merged["out"]
    assert rows(out, "SELECT state, COUNT(*) FROM jobs GROUP BY state") == [("done", 4)]
    total = lambda sql: sum(rows(c, sql)[0][0] for c in merged["ins"])
    for table in ["candidates", "evaluations", "artifacts", "best"]:
        assert rows(out, f"SELECT COUNT(*) FROM {table}")[0][0] == total(f"SELECT COUNT(*) FROM {table}"), table
    assert merged["report"]["jobs"] == {"total": 4, "done": 4}
    assert merged["report"]["total"]["jobs_new"] == 4 and merged["report"]["total"]["jobs_updated"] == 2
    # Every best points at a candidate of its own job, with its code object.
    bad = rows(out, "SELECT COUNT(*) FROM best b JOIN candidates c ON c.id = b.candidate_id "
                    "WHERE c.job_id <> b.job_id")[0][0]
    assert bad == 0
    best = json.loads(kiln("best", "--json", "--catalog", out).stdout)
    assert len(best) == 4
    for b in best:
        assert b["state"] == "done" and b["basis"] == "estimated"
        assert b["code_object"]["elf_machine"] == "AMDGPU" and b["code_object"]["gfx"] == "gfx942"
    con = sqlite3.connect(out)
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_merged_catalog_packages(merged, tmp_path):
    # the scripted evaluator answers package_info (tests/data/fake_evaluator)
    fake = {"KILN_PYTHON": str(ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh")}
    kiln("package", "--target", "MI300X", "--out", tmp_path / "pkg", "--catalog", merged["out"], env=fake)
    man = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert man["format"] == "kiln-package/2" and len(man["kernels"]) == 4


def test_merge_is_idempotent(merged):
    before = content(merged["out"])
    r = kiln("merge", merged["out"], *merged["ins"], "--json")
    t = json.loads(r.stdout)["total"]
    assert all(v == 0 for k, v in t.items() if k != "skipped_tables"), t
    assert content(merged["out"]) == before


def test_merge_order_does_not_matter(merged, tmp_path):
    other = tmp_path / "reversed.db"
    kiln("merge", other, *reversed(merged["ins"]))
    assert content(other) == content(merged["out"])
    # Merging merged catalogs again changes nothing either.
    kiln("merge", other, merged["out"])
    assert content(other) == content(merged["out"])


def test_merge_resubmit_and_rerun_evaluate_nothing(merged, tmp_path):
    cat = tmp_path / "again.db"
    shutil.copy(merged["out"], cat)
    sub = json.loads(kiln("submit", MANIFEST, "--json", "--catalog", cat).stdout)
    assert sub["new_jobs"] == 0
    r = json.loads(kiln("run", "--json", "--device", "cpu", "--catalog", cat).stdout)
    assert r["candidates"] == 0


def test_merge_keeps_the_better_best(merged, tmp_path):
    """Of two best selections for one job: measured beats estimated; on the same
    basis the lower value wins, whichever file comes first."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    shutil.copy(merged["out"], a)
    shutil.copy(merged["out"], b)
    key = rows(a, "SELECT key FROM jobs ORDER BY id LIMIT 1")[0][0]
    con = sqlite3.connect(b)
    con.execute("UPDATE best SET value_ms = value_ms / 2 WHERE job_id = (SELECT id FROM jobs WHERE key = ?)", (key,))
    key2 = rows(a, "SELECT key FROM jobs ORDER BY id LIMIT 1 OFFSET 1")[0][0]
    con.execute("UPDATE best SET basis = 'measured', device = 'AMD Instinct MI300X', value_ms = 1000 "
                "WHERE job_id = (SELECT id FROM jobs WHERE key = ?)", (key2,))
    con.commit()
    con.close()
    get = lambda cat, k: rows(cat, "SELECT b.basis, b.value_ms FROM best b JOIN jobs j ON j.id = b.job_id "
                                   "WHERE j.key = ?", (k,))[0]
    for order in [(a, b), (b, a)]:
        out = tmp_path / f"out-{order[0].stem}.db"
        kiln("merge", out, *order)
        assert get(out, key) == get(b, key)            # lower value
        assert get(out, key2) == ("measured", 1000.0)  # measured beats estimated
    # Into an existing catalog: a's worse best is replaced by b's.
    r = json.loads(kiln("merge", a, b, "--json").stdout)
    assert r["total"]["best_replaced"] == 2
    assert get(a, key) == get(b, key)


def test_merge_errors_leave_out_untouched(merged, tmp_path):
    out = tmp_path / "out.db"
    r = kiln("merge", out, tmp_path / "missing.db", check=False)
    assert r.returncode == 2 and "no catalog at" in r.stderr
    assert not out.exists()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n")
    r = kiln("merge", out, merged["ins"][0], junk, check=False)
    assert r.returncode == 1, r.stderr
    # The first input's merge committed; the junk file changed nothing after it.
    assert rows(out, "SELECT COUNT(*) FROM jobs")[0][0] == 4
    r = kiln("merge", out, out, check=False)
    assert r.returncode == 1 and "output catalog itself" in r.stderr
    r = kiln("merge", out, check=False)
    assert r.returncode == 2
    assert "usage: kiln merge" in kiln("merge", "--help").stdout


# --- a hostile shard: every row merge imports is checked ---------------------------------------

FIRST = "(SELECT MIN(id) FROM {t})"

# (name, SQL run on a copy of a good shard, fragments the refusal must name)
HOSTILE = [
    ("type", "UPDATE evaluations SET median_ms = 'fast' WHERE id = " + FIRST.format(t="evaluations"),
     ["evaluations row", "median_ms", "is text, not a number"]),
    ("not finite", "UPDATE evaluations SET estimate_ms = 1e999 WHERE id = " + FIRST.format(t="evaluations"),
     ["evaluations row", "estimate_ms", "not finite"]),
    ("range", "UPDATE best SET value_ms = -1 WHERE job_id = (SELECT MIN(job_id) FROM best)",
     ["best row", "value_ms", "outside"]),
    ("negative count", "UPDATE jobs SET attempts = -5 WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "attempts", "outside"]),
    ("status", "UPDATE evaluations SET status = 'trusted' WHERE id = " + FIRST.format(t="evaluations"),
     ["evaluations row", "status", "'trusted' is not one of"]),
    ("state", "UPDATE jobs SET state = 'owned' WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "state", "is not one of"]),
    ("artifact kind", "UPDATE artifacts SET kind = 'elf' WHERE id = " + FIRST.format(t="artifacts"),
     ["artifacts row", "kind"]),
    ("op escapes", "UPDATE jobs SET op = '../../x/pwn' WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "op '../../x/pwn'", "file path"]),
    ("target escapes", "UPDATE jobs SET target = '..' WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "target", "starts with '.'"]),
    ("template escapes", "UPDATE candidates SET template = '../../../etc/passwd' WHERE id = "
     + FIRST.format(t="candidates"), ["candidates row", "template"]),
    ("kernel name escapes", "UPDATE artifacts SET kernel_name = '/tmp/owned' WHERE id = "
     + FIRST.format(t="artifacts"), ["artifacts row", "kernel_name"]),
    ("shape", "UPDATE jobs SET shape = '[0, -1]' WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "shape", "is not a shape"]),
    ("spec disagrees", "UPDATE jobs SET dtype = 'int8' WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "dtype 'int8' is not what its spec says"]),
    ("candidate key", "UPDATE candidates SET key = '" + "ab" * 32 + "' WHERE id = " + FIRST.format(t="candidates"),
     ["candidates row", "key", "is not the key of its generator"]),
    ("job key", "UPDATE jobs SET key = 'not-a-hash' WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "key 'not-a-hash' is not 64 lowercase hex digits"]),
    ("blob checksum", "UPDATE blobs SET data = x'00112233', size = 4 WHERE sha256 = (SELECT MIN(sha256) FROM blobs)",
     ["blobs row", "sha256", "is not the checksum of its data"]),
    ("blob size", "UPDATE blobs SET size = size + 1 WHERE sha256 = (SELECT MIN(sha256) FROM blobs)",
     ["blobs row", "size", "bytes"]),
    ("text size", "UPDATE jobs SET message = hex(zeroblob(8500000)) WHERE id = " + FIRST.format(t="jobs"),
     ["jobs row", "message", "more than"]),
    ("best of another job", "UPDATE best SET candidate_id = (SELECT c.id FROM candidates c WHERE c.job_id <> best.job_id "
     "LIMIT 1) WHERE job_id = (SELECT MIN(job_id) FROM best)", ["best row", "is not a candidate of job"]),
    ("own parent", "UPDATE candidates SET parent_id = id WHERE id = " + FIRST.format(t="candidates"),
     ["candidates row", "parent_id chain comes back to it"]),
    ("parent cycle", "UPDATE candidates SET parent_id = (SELECT MAX(c2.id) FROM candidates c2 WHERE c2.job_id = "
     "candidates.job_id) WHERE id = " + FIRST.format(t="candidates") + "; UPDATE candidates SET parent_id = "
     + FIRST.format(t="candidates") + " WHERE id = (SELECT MAX(c2.id) FROM candidates c2 WHERE c2.job_id = "
     "(SELECT job_id FROM candidates WHERE id = " + FIRST.format(t="candidates") + ")) AND id <> "
     + FIRST.format(t="candidates"), ["candidates row", "parent_id chain comes back to it"]),
    ("missing job", "PRAGMA foreign_keys = OFF; UPDATE candidates SET job_id = 999999 WHERE id = "
     + FIRST.format(t="candidates"), ["references job 999999"]),
    ("imported latency", "INSERT INTO imported_measurements (job_id, candidate_id, target, device, versions, "
     "median_ms, samples, source, imported_at) SELECT c.job_id, c.id, 'MI300X', 'MI300X', '{}', -1, '[1]', 'x', 1.7e9 "
     "FROM candidates c LIMIT 1", ["imported_measurements row", "median_ms", "outside"]),
    ("imported of another job", "INSERT INTO imported_measurements (job_id, candidate_id, target, device, versions, "
     "median_ms, samples, source, imported_at) SELECT (SELECT MAX(job_id) FROM candidates), c.id, 'MI300X', 'MI300X', "
     "'{}', 0.05, '[0.05]', 'x', 1.7e9 FROM candidates c WHERE c.job_id = (SELECT MIN(job_id) FROM candidates) LIMIT 1",
     ["imported_measurements row", "is not a candidate of job"]),
]


@pytest.mark.parametrize("name,sql,expect", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_merge_refuses_a_hostile_shard_and_imports_nothing(merged, tmp_path, name, sql, expect):
    """A shard whose rows a merge must not trust (written here with Python's
    sqlite3, CHECK constraints off): the merge is refused with a message naming
    the table, row and column, nothing of the shard is imported, and the good
    shard still merges afterwards."""
    good, other = merged["ins"]
    out = tmp_path / "out.db"
    kiln("merge", out, good)
    before = content(out)
    hostile = tmp_path / "hostile.db"
    shutil.copy(other, hostile)
    con = sqlite3.connect(hostile)
    con.execute("PRAGMA ignore_check_constraints = ON")
    con.executescript(sql)
    con.commit()
    con.close()
    r = kiln("merge", out, hostile, check=False)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "refused, nothing was merged" in r.stderr, r.stderr
    for fragment in expect:
        assert fragment in r.stderr, (fragment, r.stderr)
    assert len(r.stderr) < 2000  # a short excerpt, never the whole value
    assert content(out) == before
    kiln("merge", out, other)
    assert content(out) == content(merged["out"])


def test_merge_copies_imported_measurements(merged, tmp_path):
    """A shard's `kiln import-measurements` rows (kiln-rt tune on a deployment
    node) come with it, their job and candidate remapped, once per (candidate,
    device)."""
    good, other = merged["ins"]
    shard = tmp_path / "tuned.db"
    shutil.copy(other, shard)
    con = sqlite3.connect(shard)
    con.execute("INSERT INTO imported_measurements (job_id, candidate_id, target, device, driver, uuid, versions, "
                "median_ms, samples, source, imported_at) SELECT c.job_id, c.id, j.target, 'AMD Instinct MI300X', "
                "'ROCm 6.2', 'GPU-1', '{}', 0.0512, '[0.0512, 0.0515]', '/tmp/tune.json', 1.7e9 FROM candidates c "
                "JOIN jobs j ON j.id = c.job_id JOIN evaluations e ON e.candidate_id = c.id WHERE e.status = 'ok' "
                "ORDER BY c.id LIMIT 1")
    want = con.execute("SELECT j.key, c.key, m.median_ms, m.driver FROM imported_measurements m "
                       "JOIN jobs j ON j.id = m.job_id JOIN candidates c ON c.id = m.candidate_id").fetchall()
    con.commit()
    con.close()
    assert len(want) == 1
    out = tmp_path / "out.db"
    kiln("merge", out, good)
    r = json.loads(kiln("merge", out, shard, "--json").stdout)
    assert r["total"]["imported_measurements"] == 1 and "imported_measurements" not in r["total"]["skipped_tables"]
    got = rows(out, "SELECT j.key, c.key, m.median_ms, m.driver FROM imported_measurements m "
                    "JOIN jobs j ON j.id = m.job_id JOIN candidates c ON c.id = m.candidate_id")
    assert got == want
    r = json.loads(kiln("merge", out, shard, "--json").stdout)
    assert r["total"]["imported_measurements"] == 0
    assert rows(out, "SELECT COUNT(*) FROM imported_measurements")[0][0] == 1
