"""operators.yaml's param defaults have one owner, the engine.

`kiln submit` fills every param an entry leaves out with its operator's default
(knowledge/operators.h: OperatorSpec::with_defaults) when it expands the
manifest; the stored job (and so its key and every request the worker gets)
carries them all. The worker's Library.complete_params, which completes what
other clients leave out, must give the same values: checked here for every
operator of kernels/operators.yaml.
"""
from __future__ import annotations

import json
import sys

import pytest
import yaml
from conftest import KILN, ROOT, kiln

sys.path.insert(0, str(ROOT / "worker"))
from kiln_worker.evaluation.templates import Library  # noqa: E402

REGISTRY = yaml.safe_load((ROOT / "kernels" / "operators.yaml").read_text())["operators"]
REQUIRED = {"pointwise": {"expr": "(relu x0)"}}  # params with no default: the entry gives them


def entries():
    out = []
    for op, spec in REGISTRY.items():
        shape = spec["shape"]
        rank = shape.get("rank", shape.get("min_rank", 1))
        entry = {"op": op, "shapes": [[16] * rank], "dtypes": [spec["dtypes"][0]]}
        if op in REQUIRED:
            entry["params"] = REQUIRED[op]
        out.append(entry)
    return out


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    if not KILN.exists():
        pytest.skip(f"{KILN} not built")
    p = tmp_path_factory.mktemp("defaults") / "every_op.yaml"
    p.write_text(yaml.safe_dump({"name": "every-op", "targets": ["H200"], "operators": entries()}))
    return p


def test_engine_and_worker_fill_the_same_defaults(manifest, tmp_path):
    plan = json.loads(kiln("submit", manifest, "--dry-run", "--json", catalog=tmp_path / "k.db").stdout)
    lib = Library(ROOT / "kernels")
    by_op = {j["op"]: j["params"] for j in plan["jobs"]}
    assert set(by_op) == set(REGISTRY)
    for op, params in by_op.items():
        names = set((REGISTRY[op].get("params") or {}))
        assert set(params) == names, (op, params)  # every param, not only those given
        assert params == lib.complete_params(op, REQUIRED.get(op, {})), op


def test_stored_jobs_carry_every_param(manifest, tmp_path):
    catalog = tmp_path / "k.db"
    kiln("submit", manifest, catalog=catalog)
    rows = json.loads(kiln("query", "select op, params, spec from jobs", "--json", catalog=catalog).stdout)
    assert len(rows) == len(REGISTRY)
    for r in rows:
        names = set((REGISTRY[r["op"]].get("params") or {}))
        params = json.loads(r["params"]) if isinstance(r["params"], str) else r["params"]
        spec = json.loads(r["spec"]) if isinstance(r["spec"], str) else r["spec"]
        assert set(params) == names, r
        assert spec["params"] == params, r  # what the worker is sent
