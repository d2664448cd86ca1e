"""The worker's side of the protocol agrees with its schema, src/evaluate/protocol.json.

kiln_worker.protocol mirrors the schema's enums; a real worker (CPU, Triton
interpreter, the fixture template library) answers every method the schema lists,
and its answers validate against the schema. tests/cpp/protocol_test.cpp checks
the engine's side. docs/architecture.md's method table is the one generated here.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from worker_client import HOME, TARGET_H200, TARGET_MI300X, Worker  # noqa: E402

sys.path.insert(0, str(HOME / "worker"))
from kiln_worker import protocol  # noqa: E402

SCHEMA_PATH = HOME / "src" / "evaluate" / "protocol.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())


# -- a validator for the part of JSON Schema protocol.json uses ------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "null": lambda v: v is None,
}


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/$defs/"), ref
        node = SCHEMA["$defs"][ref[len("#/$defs/"):]]
    return node


def problems(value, node: dict, where: str = "result") -> list[str]:
    """Every way `value` breaks `node` (empty: it validates)."""
    node = _resolve(node)
    if "anyOf" in node:
        tries = [problems(value, alt, where) for alt in node["anyOf"]]
        return [] if any(not t for t in tries) else min(tries, key=len)
    out: list[str] = []
    if "enum" in node and value not in node["enum"]:
        return [f"{where}: {value!r} is not one of {node['enum']}"]
    if "type" in node:
        types = [node["type"]] if isinstance(node["type"], str) else node["type"]
        if not any(_TYPES[t](value) for t in types):
            return [f"{where}: {type(value).__name__} {value!r:.60} is not {'/'.join(types)}"]
    if isinstance(value, dict):
        for key in node.get("required", []):
            if key not in value:
                out.append(f"{where}: '{key}' is missing")
        for key, sub in node.get("properties", {}).items():
            if key in value:
                out += problems(value[key], sub, f"{where}.{key}")
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            out += problems(item, node["items"], f"{where}[{i}]")
    return out


def test_the_validator_can_fail():
    result = SCHEMA["methods"]["evaluate"]["result"]
    assert problems({"status": "ok"}, result) == []
    assert problems({"status": "fine"}, result)
    assert problems({"message": "x"}, result) == ["result: 'status' is missing"]
    assert problems({"status": "ok", "latency": {"median_ms": "fast"}}, result)
    assert problems({"status": "ok", "artifact": {"registers": 1.5}}, result)
    assert problems({"status": "ok", "correctness": None, "latency": None}, result) == []


# -- the mirror --------------------------------------------------------------------

def test_methods_and_statuses_mirror_the_schema():
    assert list(protocol.METHODS) == SCHEMA["$defs"]["method"]["enum"]
    assert list(protocol.STATUSES) == SCHEMA["$defs"]["status"]["enum"]
    assert set(protocol.TEMPLATE_STATUSES) <= set(protocol.STATUSES)
    assert set(SCHEMA["methods"]) == set(protocol.METHODS)
    codes = {int(k) for k in SCHEMA["exit_codes"]}
    assert codes == {protocol.EXIT_STDIN_CLOSED, protocol.EXIT_MISSING_PACKAGES, protocol.EXIT_DEVICE_LOST}


def test_the_server_serves_exactly_the_schemas_methods():
    from kiln_worker.service.server import Server
    for m in protocol.METHODS:
        assert callable(getattr(Server, m, None)), m


# -- a real worker's answers -------------------------------------------------------

def job(op="add", shape=(1000,), target=TARGET_MI300X):
    return {"op": op, "shape": list(shape), "dtype": "fp32", "params": {"alpha": 1.0}, "target": target,
            "constraints": [], "validation": {"seeds": 2, "atol": None, "rtol": None},
            "benchmark": {"warmup": 2, "runs": 5}}


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    assert w.close() == 0, w.stderr[-3000:]


def answer(worker, method, **fields):
    ans = worker.call(method, **fields)
    assert problems(ans, SCHEMA["$defs"]["answer"], "answer") == []
    assert ans["ok"] is True, ans
    found = problems(ans["result"], SCHEMA["methods"][method]["result"])
    assert found == [], found
    return ans["result"]


def test_hello_answers_the_schemas_methods_and_statuses(worker):
    r = answer(worker, "hello")
    assert r["methods"] == SCHEMA["$defs"]["method"]["enum"]  # traffic and confirm included
    assert r["generated"]["statuses"] == SCHEMA["$defs"]["status"]["enum"]


def test_space_and_traffic_answers_validate(worker):
    r = answer(worker, "space", job=job(target=TARGET_H200))
    assert r["configs"]
    r = answer(worker, "traffic", jobs=[job(), {"op": "no_such_op"}])
    assert r["traffic"][1] is None and r["space"][1] is None


@pytest.mark.parametrize("config,op,status", [
    ({"BLOCK": 256, "num_warps": 2, "num_stages": 1, "waves_per_eu": 0}, "add", "ok"),
    ({"BLOCK": 100, "num_warps": 1}, "add", "compile_error"),
    ({"BLOCK": 256, "num_warps": 1}, "add_wrong", "incorrect"),
    ({"BLOCK": 256, "num_warps": 1}, "add_crash", "crash"),
])
def test_evaluate_answers_validate(worker, tmp_path, config, op, status):
    r = answer(worker, "evaluate", job=job(op=op), config=config, artifact_dir=str(tmp_path))
    assert r["status"] == status and status in protocol.TEMPLATE_STATUSES


def test_confirm_answer_validates(worker):
    entries = [{"id": 1, "config": {"BLOCK": 256, "num_warps": 1}}, {"baseline": "eager"}]
    ans = worker.call("confirm", job=job(), entries=entries, rounds=1, reps=1)
    if not ans["ok"]:  # confirm needs a device of the target's kind, or KILN_CONFIRM_CPU
        assert "error" in ans
        return
    assert problems(ans["result"], SCHEMA["methods"]["confirm"]["result"]) == []


def test_an_unknown_method_names_every_method(worker):
    ans = worker.call("teleport")
    assert ans["ok"] is False
    for m in protocol.METHODS:
        assert m in ans["error"]


# -- the documentation ---------------------------------------------------------------

def method_table() -> str:
    """The table docs/architecture.md carries, generated from the schema."""
    rows = ["| method | request members | result |", "| --- | --- | --- |"]
    for m in SCHEMA["$defs"]["method"]["enum"]:
        spec = SCHEMA["methods"][m]
        req = ", ".join(f"`{k}`" for k in spec["request"]) or "--"
        res = _resolve(spec["result"])
        members = list(res.get("properties", {}))[:6]
        more = ", ..." if len(res.get("properties", {})) > 6 else ""
        rows.append(f"| `{m}` | {req} | {', '.join(f'`{k}`' for k in members)}{more} |")
    return "\n".join(rows) + "\n"


def test_architecture_doc_carries_the_generated_table():
    doc = (HOME / "docs" / "architecture.md").read_text()
    table = method_table()
    assert table in doc, "docs/architecture.md's method table differs from the schema; it should read:\n" + table


if __name__ == "__main__":  # print the table for docs/architecture.md
    print(method_table(), end="")
