"""`kiln retry` end to end: jobs that failed for real (candidates out of GPU
memory, a worker killed by SIGSEGV, no LLM configured) are retried on the real
binary and a real catalog, then `kiln run` again does exactly that work.

The scripted evaluator (tests/data/fake_evaluator) stands in for the worker:
$FAKE_STATUSES makes it answer a config with a status (crash: out of GPU
memory; incorrect: a wrong result), $FAKE_MALFORMED=crash kills it while it
evaluates BLOCK 128. Each test takes about a second.
"""
import json

from conftest import LLM_VARS, ROOT, db_dicts, kiln

FAKE = ROOT / "tests" / "data" / "fake_evaluator" / "fake_python.sh"

MANIFEST = ("name: retry\ntargets: [H200]\n"
            "defaults:\n  exploration: {strategy: exhaustive, max_candidates: 3}\n"
            "operators:\n"
            "  - {op: add, input_shape: [64], dtype: fp32}\n")
# A job only an LLM can serve: the library template matches at 0.999, below the threshold.
LLM_ENTRY = ("  - {op: add, input_shape: [128], dtype: fp32, exploration: {generator: llm},\n"
             "     llm: {retrieval_threshold: 1.0}}\n")


def setup(tmp, manifest):
    catalog = tmp / "kiln.db"
    (tmp / "m.yaml").write_text(manifest)
    env = {"KILN_PYTHON": str(FAKE), "FAKE_EVALUATOR_LOG": str(tmp / "requests.jsonl"),
           "FAKE_EVALUATOR_CONFIGS": "3"}
    kiln("submit", tmp / "m.yaml", catalog=catalog, env=env)
    return catalog, env


def run(tmp, catalog, env, **extra):
    """kiln run on the scripted evaluator; (its CompletedProcess, the BLOCKs it was asked to evaluate)."""
    log = tmp / "requests.jsonl"
    log.unlink(missing_ok=True)
    r = kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp / "s", catalog=catalog,
             env={**env, **extra}, unset=LLM_VARS, check=False)
    asked = [json.loads(line)["config"]["BLOCK"] for line in log.read_text().splitlines()] if log.exists() else []
    return r, sorted(asked)


def snapshot(catalog):
    """Every table's rows, through `kiln query --json`."""
    tables = json.loads(kiln("query", "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
                             "--json", catalog=catalog).stdout)
    names = [row["name"] if isinstance(row, dict) else row[0] for row in tables]
    assert "jobs" in names and "retries" in names, names
    return {t: kiln("query", f"SELECT * FROM {t} ORDER BY 1", "--json", catalog=catalog).stdout for t in names}


def evaluations(catalog):
    """BLOCK -> (evaluation id, status) of the add 64 job's candidates."""
    rows = db_dicts(catalog, "SELECT json_extract(c.config, '$.BLOCK') AS block, e.id, e.status FROM candidates c "
                             "JOIN evaluations e ON e.candidate_id = c.id JOIN jobs j ON j.id = c.job_id "
                             "WHERE j.shape = '[64]'")
    return {r["block"]: (r["id"], r["status"]) for r in rows}


def test_retry_reevaluates_crashed_candidates_and_keeps_verdicts(binary, tmp_path):
    catalog, env = setup(tmp_path, MANIFEST)
    # BLOCK 64 out of GPU memory, BLOCK 128 kills its worker, BLOCK 192 computes a wrong result.
    r, asked = run(tmp_path, catalog, env, FAKE_STATUSES="crash,ok,incorrect", FAKE_MALFORMED="crash")
    assert r.returncode == 0, r.stderr[-3000:]
    (job,) = db_dicts(catalog, "SELECT id, state, message, attempts FROM jobs")
    assert job["state"] == "failed" and "no correct candidate among 3" in job["message"], job
    first = evaluations(catalog)
    assert {b: s for b, (_, s) in first.items()} == {64: "crash", 128: "crash", 192: "incorrect"}, first
    assert "out of GPU memory" in db_dicts(catalog, "SELECT message FROM evaluations WHERE status = 'crash' "
                                                    "ORDER BY id")[0]["message"]

    # --dry-run says what would change, and changes nothing.
    before = snapshot(catalog)
    dry = kiln("retry", "--dry-run", catalog=catalog)
    assert f"job {job['id']} add 64 fp32 H200: would retry" in dry.stdout, dry.stdout
    assert "2 evaluation(s) forgotten (crash 2)" in dry.stdout and "nothing changed" in dry.stdout, dry.stdout
    dry_json = json.loads(kiln("retry", "--dry-run", "--json", catalog=catalog).stdout)
    assert dry_json["dry_run"] is True and dry_json["retried"] == 1 and dry_json["forgotten"] == 2, dry_json
    assert snapshot(catalog) == before

    # Unknown ids: exit 1 naming the id, nothing changed -- as kiln lineage and
    # kiln status answer an id the catalog lacks (2 is for usage errors).
    bad = kiln("retry", "--job", str(job["id"]), "--job", "4242", catalog=catalog, check=False)
    assert bad.returncode == 1 and "no job 4242" in bad.stderr and "nothing changed" in bad.stderr, bad.stderr
    lineage = kiln("lineage", "--job", "4242", catalog=catalog, check=False)
    assert lineage.returncode == bad.returncode and "no job 4242" in lineage.stderr, lineage.stderr
    bad = kiln("retry", "--batch", "0123456789ab", catalog=catalog, check=False)
    assert bad.returncode == 1 and "no batch 0123456789ab" in bad.stderr, bad.stderr
    status = kiln("status", "--batch", "0123456789ab", catalog=catalog, check=False)
    assert status.returncode == bad.returncode and "no batch 0123456789ab" in status.stderr, status.stderr
    assert snapshot(catalog) == before

    out = json.loads(kiln("retry", "--json", catalog=catalog).stdout)
    assert out["dry_run"] is False and out["retried"] == 1 and out["forgotten"] == 2, out
    (entry,) = out["jobs"]
    assert entry["id"] == job["id"] and entry["retried"] and entry["forgotten"] == {"crash": 2}, entry
    assert entry["message"] == job["message"] and entry["op"] == "add" and entry["shape"] == [64], entry
    (queued,) = db_dicts(catalog, "SELECT state, message FROM jobs")
    assert queued["state"] == "queued" and queued["message"].startswith("retried at "), queued
    assert queued["message"].endswith("; was: " + job["message"]), queued
    (log,) = db_dicts(catalog, "SELECT job_id, attempts, message, forgotten FROM retries")
    assert log["job_id"] == job["id"] and log["attempts"] == job["attempts"] and log["message"] == job["message"]
    forgotten = json.loads(log["forgotten"])
    assert sorted(f["status"] for f in forgotten) == ["crash", "crash"], forgotten
    assert any("out of GPU memory" in f["message"] for f in forgotten), forgotten
    assert evaluations(catalog) == {192: first[192]}  # the verdict stays, the crashes are gone

    # The cause is gone: the next run evaluates the two crashed candidates again,
    # never the incorrect one, and the job ends done.
    r, asked = run(tmp_path, catalog, env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert asked == [64, 128], asked
    (done,) = db_dicts(catalog, "SELECT state, attempts FROM jobs")
    assert done == {"state": "done", "attempts": job["attempts"] + 1}, done
    again = evaluations(catalog)
    assert again[192] == first[192]
    for b in (64, 128):
        assert again[b][1] == "ok" and again[b][0] > max(i for i, _ in first.values()), again

    # A done job named is left alone, and says so.
    before = snapshot(catalog)
    left = kiln("retry", "--job", str(job["id"]), catalog=catalog)
    assert "left alone: done" in left.stdout and "retried 0 job(s)" in left.stdout, left.stdout
    assert snapshot(catalog) == before


def test_retry_requeues_a_job_that_failed_for_want_of_an_llm(binary, tmp_path):
    catalog, env = setup(tmp_path, MANIFEST + LLM_ENTRY)
    r, _ = run(tmp_path, catalog, env)
    assert r.returncode == 4, r.stderr[-3000:]
    jobs = {j["shape"]: j for j in db_dicts(catalog, "SELECT id, shape, state, message FROM jobs")}
    llm = jobs["[128]"]
    assert jobs["[64]"]["state"] == "done" and llm["state"] == "failed", jobs
    assert llm["message"].startswith("this job needs an LLM and none is configured"), llm

    batch = db_dicts(catalog, "SELECT id FROM batches")[0]["id"]
    out = kiln("retry", "--batch", batch, catalog=catalog)
    assert f"job {llm['id']} add 128 fp32 H200: retried; was: this job needs an LLM" in out.stdout, out.stdout
    assert "no evaluation forgotten" in out.stdout and "retried 1 job(s)" in out.stdout, out.stdout
    assert db_dicts(catalog, "SELECT state FROM jobs WHERE id = ?", (llm["id"],)) == [{"state": "queued"}]

    # Still no LLM: it fails again the same way; the done job was not run again.
    r, asked = run(tmp_path, catalog, env)
    assert r.returncode == 4 and "need an LLM" in r.stderr, r.stderr[-3000:]
    assert asked == []
    (again,) = db_dicts(catalog, "SELECT state, message, attempts FROM jobs WHERE id = ?", (llm["id"],))
    assert again["state"] == "failed" and again["message"] == llm["message"] and again["attempts"] == 2, again
    assert db_dicts(catalog, "SELECT count(*) AS n FROM retries") == [{"n": 1}]


def test_retry_never_creates_a_catalog(binary, tmp_path):
    r = kiln("retry", catalog=tmp_path / "none.db", check=False)
    assert r.returncode == 1 and "no catalog at" in r.stderr, r.stderr
    assert not (tmp_path / "none.db").exists()
    r = kiln("retry", "--job", "seven", catalog=tmp_path / "none.db", check=False)
    assert r.returncode == 2 and "usage: kiln retry" in r.stderr, r.stderr
