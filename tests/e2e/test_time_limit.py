"""kiln run --time-limit: a run that must end by a deadline claims the
cheapest jobs first (so it finishes as many as it can) and, at the limit,
drains as on a signal -- unfinished jobs back in the queue, no lease held --
and exits 5."""
import json

from test_e2e import ROOT, db_rows, kiln

# Two jobs whose compile estimates differ (kernels/operators.yaml compile_s x
# one candidate): add is the cheap one, softmax the dear one.
MANIFEST = """\
name: time_limit
targets: [MI300X]
defaults:
  dtypes: [fp32]
  exploration: {strategy: exhaustive, max_candidates: 1, timeout_s: 120}
  validation: {seeds: 1}
  benchmark: {warmup: 1, runs: 2}
operators:
  - op: softmax
    input_shape: [4, 64]
  - op: add
    input_shape: [256]
"""


def submit(tmp_path):
    catalog = tmp_path / "k.db"
    (tmp_path / "m.yaml").write_text(MANIFEST)
    kiln("submit", tmp_path / "m.yaml", catalog=catalog)
    return catalog


def run(tmp_path, catalog, *extra, check=True):
    return kiln("run", "--device", "cpu", "--workers", "1", "--scratch", tmp_path / "s", "--json", *extra,
                catalog=catalog, check=check)


def test_a_limited_run_claims_the_cheapest_job_first(tmp_path):
    catalog = submit(tmp_path)
    est = dict(db_rows(catalog, "SELECT op, compile_est_s FROM jobs"))
    assert est["add"] < est["softmax"], est  # the premise: add is the cheaper job
    r = run(tmp_path, catalog, "--time-limit", "600")
    assert json.loads(r.stdout)["time_limited"] is False
    # One worker: the job claimed first is the one evaluated first.
    first = db_rows(catalog, "SELECT j.op FROM evaluations e JOIN candidates c ON c.id = e.candidate_id "
                             "JOIN jobs j ON j.id = c.job_id ORDER BY e.id LIMIT 1")
    assert first == [("add",)], first
    # (Without a limit the dearest goes first: tests/cpp/catalog_test.cpp.)


def test_at_the_limit_the_run_drains_and_exits_5(tmp_path):
    catalog = submit(tmp_path)
    # A limit shorter than a worker's start: the run stops before any job ends.
    r = run(tmp_path, catalog, "--time-limit", "0.2", check=False)
    assert r.returncode == 5, (r.returncode, r.stderr[-2000:])
    assert "time limit reached" in r.stderr and "back in the queue" in r.stderr, r.stderr[-2000:]
    assert json.loads(r.stdout)["time_limited"] is True
    states = db_rows(catalog, "SELECT state, lease_owner FROM jobs ORDER BY id")
    assert states == [("queued", None), ("queued", None)], states


def test_a_bad_limit_is_a_usage_error(tmp_path):
    catalog = tmp_path / "k.db"  # checked before the catalog is opened
    for bad in ("0", "-3", "nan"):
        r = run(tmp_path, catalog, "--time-limit", bad, check=False)
        assert r.returncode == 2 and "--time-limit must be" in r.stderr, (bad, r.returncode, r.stderr)
