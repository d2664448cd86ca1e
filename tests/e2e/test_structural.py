"""End-to-end: reference modules recognised by what they compute.

tests/data/structural holds KernelBench-form modules written in styles the
library's own text does not use (a hand-written RMS norm, `a @ b.t()`,
`torch.amax`, bias + tanh-GELU, a 1x1 and a 3x3 nn.Conv2d, causal SDPA, a
SwiGLU gate, a temperature softmax, an affine LayerNorm, Linear + GELU, a
cumulative sum) and one no family computes (a sort).

* `kiln submit --dry-run [--json]` plans them: each served module's template,
  binding and score, the sort's reason; nothing stored, well under a minute.
* `kiln submit` + `kiln run --device cpu` with no LLM configured: every served
  job is explored offline by its template under the Triton interpreter and
  checked (the reference module its oracle); the sort's job alone fails, with
  the message naming KILN_LLM_BASE_URL / KILN_LLM_MODEL; the run exits 4.
* An unreachable endpoint fails the LLM's job, not the run.

KILN_BIN names the binary (default: build/kiln).
"""
import json
import time

import pytest

from conftest import LLM_VARS, ROOT, db_dicts, free_port  # noqa: E402
from conftest import kiln as run_kiln  # noqa: E402

DATA = ROOT / "tests" / "data" / "structural"

# module, dtype, the operator that serves it (None: the LLM)
MODULES = [
    ("rms_manual", "fp32", "rmsnorm"), ("a_bt", "fp32", "bmm"), ("amax", "fp32", "row_max"),
    ("bias_tanh_gelu", "fp32", "bias_gelu"), ("conv1x1", "fp32", "conv2d"), ("causal_sdpa", "fp16", "attention"),
    ("swiglu_gate", "fp32", "pointwise"), ("temp_softmax", "fp32", "scaled_softmax"),
    ("affine_ln", "fp32", "layernorm"), ("linear_gelu", "fp16", "gemm_bias_act"), ("conv3x3", "fp32", "conv2d"),
    ("running_total", "fp32", "cumsum"), ("window_max_1d", "fp32", "pool2d"), ("sorted_rows", "fp32", None),
]


def kiln(*args, catalog, env=None, timeout=1500):
    """conftest.kiln without our LLM endpoint settings, not checked."""
    return run_kiln(*args, catalog=catalog, env=env, timeout=timeout, unset=LLM_VARS, check=False)


def rows(catalog, sql):
    return db_dicts(catalog, sql)


def manifest(tmp, modules, llm=None, **explore):
    ex = {"max_candidates": 1, "timeout_s": 600, **explore}
    lines = ["name: structural_e2e", "targets: [H200]"] + ([f"llm: {json.dumps(llm)}"] if llm else []) + [
             "defaults:", f"  exploration: {json.dumps(ex)}", "  validation: {seeds: 1}", "operators:"]
    for name, dtype, _ in modules:
        lines += [f"  - reference: {DATA / (name + '.py')}", f"    dtypes: [{dtype}]"]
    p = tmp / "structural.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_dry_run_plans_every_job(binary, tmp_path):
    m = manifest(tmp_path, MODULES)
    catalog = tmp_path / "kiln.db"
    t0 = time.monotonic()
    r = kiln("submit", m, "--dry-run", "--json", catalog=catalog)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert not catalog.exists(), "a dry run stores nothing"
    assert took < 60, took
    by_name = {j["name"]: j for j in plan["jobs"]}
    for name, dtype, op in MODULES:
        j = by_name[name]
        assert j["dtype"] == dtype
        if op is None:
            assert j["generator"] == "llm" and "sort" in j["reason"], j
        else:
            assert j["generator"] == "template" and j["op"] == op and j["score"] == 1.0, j
            assert j["inputs"], j
    assert plan["served_by_template"] == len(MODULES) - 1 and plan["need_llm"] == 1
    assert by_name["a_bt"]["params"]["trans_b"] is True
    assert by_name["temp_softmax"]["params"]["scale"] == pytest.approx(2.0)
    assert by_name["rms_manual"]["inputs"]["weight"] == {"param": "gain", "shape": [48]}
    # the text form says the same
    t = kiln("submit", m, "--dry-run", catalog=catalog)
    assert t.returncode == 0, t.stderr
    assert "13 served by templates, 1 need the LLM" in t.stdout
    assert "template rmsnorm 6x48" in t.stdout and "weight<-gain" in t.stdout


def test_template_generator_required_but_unmatched_is_an_error(binary, tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(f"targets: [H200]\noperators:\n  - reference: {DATA / 'sorted_rows.py'}\n"
                 "    exploration: {generator: template}\n")
    r = kiln("submit", p, catalog=tmp_path / "kiln.db")
    assert r.returncode == 2
    assert "m.yaml:3" in r.stderr and "no template family serves it" in r.stderr and "sort" in r.stderr
    assert not (tmp_path / "kiln.db").exists()


def test_offline_run_serves_templates_and_fails_only_the_llm_job(binary, tmp_path):
    m = manifest(tmp_path, MODULES)
    catalog = tmp_path / "kiln.db"
    r = kiln("submit", m, catalog=catalog)
    assert r.returncode == 0, r.stderr
    r = kiln("run", "--device", "cpu", "--workers", "2", "--scratch", tmp_path / "scratch", catalog=catalog)
    assert r.returncode == 4, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    assert "need an LLM" in r.stderr and "KILN_LLM_BASE_URL" in r.stderr
    jobs = rows(catalog, "SELECT op, state, message, spec FROM jobs ORDER BY id")
    assert len(jobs) == len(MODULES)
    served = {json.loads(j["spec"])["oracle"]["name"]: j for j in jobs if "oracle" in json.loads(j["spec"])}
    for name, _, op in MODULES:
        if op is None:
            continue
        j = served[name]
        assert j["op"] == op and j["state"] == "done", j
    llm = [j for j in jobs if "oracle" not in json.loads(j["spec"])]
    assert len(llm) == 1 and llm[0]["state"] == "failed"
    assert "KILN_LLM_BASE_URL" in llm[0]["message"] and "KILN_LLM_MODEL" in llm[0]["message"]
    # every served job has a correct candidate, checked on the CPU
    ok = rows(catalog, "SELECT c.job_id, COUNT(*) AS n FROM evaluations e JOIN candidates c ON c.id = e.candidate_id "
                       "WHERE e.status = 'ok' GROUP BY c.job_id")
    assert len(ok) == len(MODULES) - 1


def test_unreachable_endpoint_fails_the_llm_job_not_the_run(binary, tmp_path):
    mods = [m for m in MODULES if m[0] in ("amax", "sorted_rows")]
    catalog = tmp_path / "kiln.db"
    r = kiln("submit", manifest(tmp_path, mods, llm={"max_retries": 0}), catalog=catalog)
    assert r.returncode == 0, r.stderr
    url = f"http://127.0.0.1:{free_port()}/v1"
    r = kiln("run", "--device", "cpu", "--scratch", tmp_path / "scratch", catalog=catalog,
             env={"KILN_LLM_BASE_URL": url, "KILN_LLM_MODEL": "nobody"})
    assert r.returncode == 4, r.stderr[-3000:]
    jobs = {j["op"]: j for j in rows(catalog, "SELECT op, state, message FROM jobs")}
    assert jobs["row_max"]["state"] == "done"
    assert jobs["sorted_rows"]["state"] == "failed" and url in jobs["sorted_rows"]["message"]
