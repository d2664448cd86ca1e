"""The engine trusts nothing a worker says (issue 22, items 2 and 4), against
the scripted evaluator (tests/data/fake_evaluator) in its misbehaving modes:

- a worker that names a file outside the run as its code object: the file is
  neither read into the catalog nor deleted, and no candidate is `ok` with it;
- a worker that lies about its code object's sha256: no `ok` candidate;
- malformed replies of several kinds: each fails its candidate alone as an
  infrastructure fault, the worker is replaced and the run finishes the rest.
"""
import hashlib
import json
import os

import pytest

from test_e2e import FAKE_EVALUATOR, KILN, db_rows, kiln

MANIFEST = ("targets: [H200]\ndefaults:\n  dtypes: [fp32]\n"
            "  exploration: {strategy: exhaustive, max_candidates: 12}\n"
            "operators:\n  - op: add\n    input_shape: [4096]\n")


def run(tmp, **env):
    if not KILN.exists():
        pytest.fail(f"{KILN} is missing: build first")
    catalog = tmp / "kiln.db"
    (tmp / "m.yaml").write_text(MANIFEST)
    kiln("submit", tmp / "m.yaml", catalog=catalog)
    r = kiln("run", "--device", "gpu", "--workers", "1", "--scratch", tmp / "s", "--json", catalog=catalog,
             check=False, timeout=300,
             env={"KILN_PYTHON": str(FAKE_EVALUATOR), "FAKE_EVALUATOR_LOG": str(tmp / "log.jsonl"), **env})
    return catalog, r


def evaluations(catalog):
    return db_rows(catalog, "SELECT json_extract(c.config, '$.BLOCK'), e.status, e.message "
                            "FROM evaluations e JOIN candidates c ON c.id = e.candidate_id ORDER BY 1")


def test_artifact_outside_the_run_is_neither_read_nor_deleted(tmp_path):
    outside = tmp_path / "outside" / "precious.bin"
    outside.parent.mkdir()
    outside.write_bytes(b"not a code object: the user's file\n" * 10)
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    catalog, r = run(tmp_path, FAKE_ARTIFACT_PATH=str(outside))
    assert outside.exists() and hashlib.sha256(outside.read_bytes()).hexdigest() == digest
    evs = evaluations(catalog)
    assert len(evs) == 12, (r.stdout, r.stderr)
    assert all(s == "crash" and "outside the evaluation's artifact directory" in m for _, s, m in evs), evs
    assert db_rows(catalog, f"SELECT COUNT(*) FROM blobs WHERE sha256 = '{digest}'") == [(0,)]
    assert db_rows(catalog, "SELECT COUNT(*) FROM artifacts") == [(0,)]
    assert db_rows(catalog, "SELECT COUNT(*) FROM best") == [(0,)]


def test_artifact_with_a_false_sha256_is_rejected(tmp_path):
    catalog, r = run(tmp_path, FAKE_ARTIFACT_LIE="1")
    evs = evaluations(catalog)
    assert len(evs) == 12, (r.stdout, r.stderr)
    assert all(s == "crash" and "sha256" in m for _, s, m in evs), evs
    assert db_rows(catalog, "SELECT COUNT(*) FROM artifacts") == [(0,)]


MODES = ["result_string", "status_number", "latency_string", "ok_string", "no_result", "artifact_string",
         "traffic_string", "not_object", "sha_missing"]


def test_malformed_replies_fail_their_candidate_alone(tmp_path):
    catalog, r = run(tmp_path, FAKE_MALFORMED=",".join(MODES))
    assert r.returncode == 0, (r.stdout, r.stderr)
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["candidates"] == 12 and summary["jobs_done"] == 1, summary
    evs = evaluations(catalog)
    bad = {b: m for b, s, m in evs if s != "ok"}
    assert sorted(bad) == [64 * i for i in range(2, 2 + len(MODES))], evs
    assert all(m.startswith("infrastructure fault: malformed worker reply") for m in bad.values()), bad
    assert [b for b, s, _ in evs if s == "ok"] == [64, 704, 768]
    # the job's best is among the well-formed ones
    assert db_rows(catalog, "SELECT json_extract(c.config, '$.BLOCK') FROM best b "
                            "JOIN candidates c ON c.id = b.candidate_id") == [(64,)]
    assert db_rows(catalog, "SELECT COUNT(*) FROM jobs WHERE state = 'running'") == [(0,)]
