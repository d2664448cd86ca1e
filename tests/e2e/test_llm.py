"""End-to-end tests of the llm generator with a scripted OpenAI-compatible server.

`kiln submit` a manifest whose operator is a PyTorch reference module
(tests/data/reference/llm_e2e/relu_scale.py) with `generator: llm`, then `kiln
run` on this machine's CPU (Triton interpreter) against
tests/fixtures/scripted_llm.py on loopback, which answers round 0 with code that
does not compile, round 1 with a wrong kernel and round 2 with a correct one.
Checked: the loop (3 rounds), the lineage (parent ids, rounds, `kiln lineage`),
the stored prompts (the knowledge text; the previous round's code and
diagnosis), token usage and the final kernel. Then an endpoint nobody listens on
and one that accepts and never answers: the run exits non-zero naming the URL,
the job fails with that message, and no candidate rows are written.

KILN_BIN names the binary (default: build/kiln).
"""
import json
import subprocess
import sys

import pytest

from conftest import LLM_VARS, ROOT, db_dicts, free_port, stop  # noqa: E402
from conftest import kiln as run_kiln  # noqa: E402

DATA = ROOT / "tests" / "data" / "reference" / "llm_e2e"
SERVER = ROOT / "tests" / "fixtures" / "scripted_llm.py"



def kiln(*args, catalog, env=None, timeout=900):
    """conftest.kiln without our LLM endpoint settings, not checked."""
    return run_kiln(*args, catalog=catalog, env=env, timeout=timeout, unset=LLM_VARS, check=False)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def rows(catalog, sql, *params):
    return db_dicts(catalog, sql, params)


class Scripted:
    """tests/fixtures/scripted_llm.py in a child process."""

    def __init__(self, tmp, steps=None, hang=False):
        self.log = tmp / "requests.jsonl"
        args = [sys.executable, str(SERVER), "--log", str(self.log), "--lifetime", "600"]
        if hang:
            args.append("--hang")
        else:
            script = tmp / "script.json"
            script.write_text(json.dumps(steps))
            args += ["--script", str(script)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), f"scripted server did not start: {line!r}"
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def requests(self):
        if not self.log.exists():
            return []
        return [json.loads(l) for l in self.log.read_text().splitlines() if l.strip()]

    def stop(self):
        stop(self.proc)


def write_manifest(tmp, **llm):
    """A copy of the test manifest whose reference is the absolute path, with llm overrides."""
    settings = {"model": "scripted-coder", "rounds": 3, "timeout_s": 30, "max_retries": 1,
                "instance_timeout_s": 900}
    settings.update(llm)
    m = tmp / "llm.yaml"
    m.write_text(
        "name: llm_e2e\n"
        "targets: [MI300X]\n"
        "operators:\n"
        f"  - reference: {DATA / 'relu_scale.py'}\n"
        "    description: \"ReLU followed by a constant scale\"\n"
        "    knowledge_constraints: [coalesce_memory_access]\n"
        "    exploration: {generator: llm, instances: 1, timeout_s: 240}\n"
        "    validation: {seeds: 2}\n"
        f"    llm: {json.dumps(settings)}\n")
    return m


# --- the repair loop ------------------------------------------------------------------

@pytest.fixture(scope="module")
def loop(binary, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llm_loop")
    catalog = tmp / "kiln.db"
    server = Scripted(tmp, [{"content_file": str(DATA / "replies" / "0_syntax_error.md")},
                            {"content_file": str(DATA / "replies" / "1_incorrect.md")},
                            {"content_file": str(DATA / "replies" / "2_correct.md")}])
    try:
        sub = json.loads(ok(kiln("submit", DATA / "manifest.yaml", "--json", catalog=catalog)).stdout)
        run = kiln("run", "--device", "cpu", "--workers", "1", "--json", "--scratch", tmp / "scratch",
                   "--metrics-file", tmp / "kiln.prom",
                   catalog=catalog, env={"KILN_LLM_BASE_URL": server.base_url})
    finally:
        server.stop()
    return dict(catalog=catalog, sub=sub, run=run, requests=server.requests(), server=server, tmp=tmp)


def test_llm_metrics_match_the_calls_recorded(loop):
    """--metrics-file: LLM calls, tokens and seconds as the catalog's llm_calls rows."""
    ok(loop["run"])
    values = {}
    for line in (loop["tmp"] / "kiln.prom").read_text().splitlines():
        if line.startswith("kiln_llm_"):
            name, v = line.rsplit(" ", 1)
            values[name] = float(v)
    calls = rows(loop["catalog"], "SELECT model, status, prompt_tokens, completion_tokens, latency_s FROM llm_calls")
    assert len(calls) == 3
    model = calls[0]["model"]
    assert all(c["status"] == "ok" and c["model"] == model for c in calls)
    assert values[f'kiln_llm_calls_total{{model="{model}",status="ok"}}'] == 3
    prompt = sum(c["prompt_tokens"] or 0 for c in calls)
    completion = sum(c["completion_tokens"] or 0 for c in calls)
    assert prompt > 0 and completion > 0
    assert values[f'kiln_llm_tokens_total{{model="{model}",kind="prompt"}}'] == prompt
    assert values[f'kiln_llm_tokens_total{{model="{model}",kind="completion"}}'] == completion
    assert values[f'kiln_llm_call_seconds_total{{model="{model}"}}'] == pytest.approx(
        sum(c["latency_s"] for c in calls), rel=1e-6)


def test_loop_runs_and_job_is_done(loop):
    ok(loop["run"])
    assert loop["sub"]["new_jobs"] == 1
    jobs = rows(loop["catalog"], "SELECT op, state, message, shape, spec FROM jobs")
    assert len(jobs) == 1
    assert jobs[0]["op"] == "relu_scale", jobs[0]
    assert jobs[0]["state"] == "done", jobs[0]["message"]
    spec = json.loads(jobs[0]["spec"])
    assert spec["reference"]["path"] == str(DATA / "relu_scale.py")
    assert "class Model" in spec["reference"]["source"]
    assert spec["explore"]["generator"] == "llm" and spec["llm"]["rounds"] == 3


def test_three_rounds_with_lineage(loop):
    cands = rows(loop["catalog"], "SELECT c.id, c.parent_id, c.round, c.instance, c.generator, c.source, e.status, "
                                  "e.message FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
                                  "ORDER BY c.id")
    assert [c["round"] for c in cands] == [0, 1, 2]
    assert all(c["generator"] == "llm" and c["instance"] == 0 for c in cands)
    assert cands[0]["parent_id"] is None
    assert cands[1]["parent_id"] == cands[0]["id"]
    assert cands[2]["parent_id"] == cands[1]["id"]
    assert [c["status"] for c in cands] == ["compile_error", "incorrect", "ok"], [c["message"] for c in cands]
    assert "SyntaxError" in cands[0]["message"]


def test_requests_reached_the_server(loop):
    reqs = loop["requests"]
    assert len(reqs) == 3
    for r in reqs:
        assert r["path"] == "/v1/chat/completions"
        assert r["body"]["model"] == "scripted-coder"
        assert r["body"]["messages"][0]["role"] == "system"
        assert r["authorization"] is None  # no key configured, none sent


def test_prompts_carry_knowledge_and_diagnoses(loop):
    calls = rows(loop["catalog"], "SELECT * FROM llm_calls ORDER BY id")
    cands = rows(loop["catalog"], "SELECT id FROM candidates ORDER BY id")
    assert [c["status"] for c in calls] == ["ok", "ok", "ok"]
    assert [c["round"] for c in calls] == [0, 1, 2]
    assert [c["candidate_id"] for c in calls] == [c["id"] for c in cands]
    assert [c["parent_id"] for c in calls] == [None, cands[0]["id"], cands[1]["id"]]
    for c in calls:
        assert c["model"] == "scripted-coder"
        assert c["url"] == loop["server"].base_url + "/chat/completions"
        assert c["prompt_tokens"] > 0 and c["completion_tokens"] > 0
        assert c["latency_s"] >= 0 and c["attempts"] == 1
        user = json.loads(c["prompt"])[1]["content"]
        # Knowledge: the target's specs and the principles, and the reference itself.
        assert "## Hardware: MI300X" in user and "wavefront size: 64" in user and "LDS per CU: 64 KiB" in user
        assert "coalesce_memory_access" in user and "required" in user
        assert "Make consecutive lanes access consecutive addresses" in user
        assert "return torch.relu(x) * self.scale" in user
        assert "ReLU followed by a constant scale" in user
    first, second, third = (json.loads(c["prompt"])[1]["content"] for c in calls)
    assert "Previous attempt" not in first
    # Round 1 repairs round 0: its code, the syntax diagnosis, a constraint.
    assert "Diagnosis: syntax_error" in second and "SyntaxError" in second
    assert "def relu_scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr)\n" in second
    assert "syntactically valid Python module" in second
    # Round 2 repairs round 1: the wrong kernel and the mismatch.
    assert "Diagnosis: incorrect" in third and "forgot the scale" in third
    assert "syntactically valid Python module" in third  # constraints accumulate


def test_best_is_the_correct_kernel(loop):
    best = rows(loop["catalog"], "SELECT c.round, c.source, b.basis FROM best b JOIN candidates c "
                                 "ON c.id = b.candidate_id")
    assert len(best) == 1
    assert best[0]["round"] == 2
    assert "tl.maximum(x, 0.0) * scale" in best[0]["source"]
    assert "```" not in best[0]["source"]  # the code, not the reply


def test_lineage_command(loop):
    job = rows(loop["catalog"], "SELECT id FROM jobs")[0]["id"]
    out = json.loads(ok(kiln("lineage", "--job", job, "--json", catalog=loop["catalog"])).stdout)
    cands = out["candidates"]
    assert [c["round"] for c in cands] == [0, 1, 2]
    assert [c["status"] for c in cands] == ["compile_error", "incorrect", "ok"]
    assert cands[2]["parent_id"] == cands[1]["id"] and cands[1]["parent_id"] == cands[0]["id"]
    assert all(c["llm_call"]["model"] == "scripted-coder" for c in cands)
    assert out["job"]["best_candidate_id"] == cands[2]["id"]
    chain = json.loads(ok(kiln("lineage", "--candidate", cands[2]["id"], "--json",
                               catalog=loop["catalog"])).stdout)["chain"]
    assert chain == [c["id"] for c in cands]
    text = ok(kiln("lineage", "--job", job, catalog=loop["catalog"])).stdout
    assert "round 2" in text and "* best" in text and "compile_error" in text


def test_rerun_asks_nothing(loop, tmp_path):
    # The job is done: a second run claims nothing and calls no LLM (no server needed).
    r = ok(kiln("run", "--device", "cpu", "--json", "--scratch", tmp_path, catalog=loop["catalog"],
                env={"KILN_LLM_BASE_URL": "http://127.0.0.1:9/v1"}))
    assert json.loads(r.stdout)["jobs_done"] == 0
    assert len(rows(loop["catalog"], "SELECT id FROM llm_calls")) == 3


# --- endpoints that fail ------------------------------------------------------------------

def assert_failed_cleanly(catalog, url, r):
    assert r.returncode != 0, r.stdout + r.stderr
    assert url in r.stderr, r.stderr
    assert "KILN_LLM_BASE_URL" in r.stderr
    jobs = rows(catalog, "SELECT state, message FROM jobs")
    assert [j["state"] for j in jobs] == ["failed"]
    assert url in jobs[0]["message"]
    assert rows(catalog, "SELECT COUNT(*) AS n FROM candidates")[0]["n"] == 0
    assert rows(catalog, "SELECT COUNT(*) AS n FROM evaluations")[0]["n"] == 0
    calls = rows(catalog, "SELECT status, error, candidate_id, prompt FROM llm_calls")
    assert calls and all(c["status"] == "error" and c["candidate_id"] is None for c in calls)
    assert all(url in c["error"] and c["prompt"] for c in calls)
    return jobs[0]["message"]


def test_unreachable_endpoint_fails_job_naming_url(binary, tmp_path):
    catalog = tmp_path / "kiln.db"
    ok(kiln("submit", write_manifest(tmp_path, max_retries=1), catalog=catalog))
    url = f"http://127.0.0.1:{free_port()}/v1"
    r = kiln("run", "--device", "cpu", "--scratch", tmp_path / "scratch", catalog=catalog,
             env={"KILN_LLM_BASE_URL": url})
    msg = assert_failed_cleanly(catalog, url, r)
    assert "cannot reach LLM endpoint" in msg and "connection refused" in msg
    assert "2 attempts" in msg  # one retry


def test_hung_endpoint_times_out_with_retries(binary, tmp_path):
    catalog = tmp_path / "kiln.db"
    ok(kiln("submit", write_manifest(tmp_path, timeout_s=2, max_retries=1), catalog=catalog))
    server = Scripted(tmp_path, hang=True)
    try:
        r = kiln("run", "--device", "cpu", "--scratch", tmp_path / "scratch", catalog=catalog,
                 env={"KILN_LLM_BASE_URL": server.base_url}, timeout=300)
    finally:
        server.stop()
    msg = assert_failed_cleanly(catalog, server.base_url, r)
    assert "did not answer within 2 s" in msg and "2 attempts" in msg
    assert len(server.requests()) == 2  # the first request and one retry


def test_missing_model_is_a_clear_error(binary, tmp_path):
    catalog = tmp_path / "kiln.db"
    ok(kiln("submit", write_manifest(tmp_path, model=""), catalog=catalog))
    r = kiln("run", "--device", "cpu", "--scratch", tmp_path / "scratch", catalog=catalog,
             env={"KILN_LLM_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"})
    assert r.returncode != 0
    assert "KILN_LLM_MODEL" in r.stderr
    assert rows(catalog, "SELECT state FROM jobs")[0]["state"] == "failed"
