"""The worker's ``match`` method: each reference job traced and matched.

Request: ``{"method": "match", "jobs": [JOB, ...], "threshold": 0.8}``; a JOB
without ``"reference"`` is answered null. Result: ``{"matches": [MATCH | null,
...], "trace_s": total seconds, "rss_growth_kib": the process's peak RSS growth
over the whole request}``, where MATCH is match.match_graph's answer plus
``"graph"`` (the canonical graph's text), ``"oracle"`` (what a served job
carries: the binding, the forward's inputs and constants), and for a served job
``"traffic"`` and ``"space"`` (the size of its config space on the job's
target). A module that cannot be traced is ``{"served": false, "score": 0,
"reason": ...}``: one job's failure never fails the request.
"""
from __future__ import annotations

import resource
import tempfile
import time

from .match import match_graph
from .trace import TraceError, trace_reference
from ..sandbox import reference_module as rm


def run(lib, req: dict) -> dict:
    jobs = req.get("jobs")
    if not isinstance(jobs, list):
        raise ValueError("match: 'jobs' must be a list")
    threshold = float(req.get("threshold", 0.8))
    t0 = time.perf_counter()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = []
    with tempfile.TemporaryDirectory(prefix="kiln-match-") as tmp:
        for job in jobs:
            if not isinstance(job, dict) or not job.get("reference"):
                out.append(None)
                continue
            out.append(match_job(lib, job, tmp, threshold))
    return {"matches": out, "trace_s": round(time.perf_counter() - t0, 3),
            "rss_growth_kib": max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0)}


def match_job(lib, job: dict, workdir: str, threshold: float = 0.8) -> dict:
    dtype = job.get("dtype", "fp32")
    thr = threshold
    llm = job.get("llm")
    if isinstance(llm, dict) and isinstance(llm.get("retrieval_threshold"), (int, float)):
        thr = float(llm["retrieval_threshold"])
    try:
        g, facts = trace_reference(job["reference"], workdir)
    except (TraceError, rm.ReferenceError_) as exc:
        return {"served": False, "score": 0.0, "reason": f"cannot trace the reference: {exc}"}
    except Exception as exc:  # noqa: BLE001 - one module's failure is its job's
        return {"served": False, "score": 0.0, "reason": f"cannot trace the reference: {type(exc).__name__}: {exc}"}
    m = match_graph(g, lib.operators, dtype, thr)
    m["graph"] = g.text()[:2000]
    m["trace_s"] = facts["trace_s"]
    if m.get("served"):
        m["oracle"] = {"inputs": m["inputs"], "forward_inputs": facts["inputs"], "consts": facts["consts"]}
        try:
            mod = lib.launch_module(m["op"])
            target = job.get("target") or {}
            m["traffic"] = mod.traffic(m["op"], m["shape"], dtype, lib.complete_params(m["op"], m["params"]))
            m["space"] = len(list(mod.config_space(m["op"], m["shape"], dtype,
                                                   lib.complete_params(m["op"], m["params"]), target)))
        except Exception as exc:  # noqa: BLE001
            m["served"] = False
            m["reason"] = f"the {m['op']} template cannot size this job: {type(exc).__name__}: {exc}"
            m["score"] = min(m["score"], 0.75)
        if m.get("served") and m.get("space") == 0:
            m["served"] = False
            m["reason"] = f"the {m['op']} template has no config for shape {m['shape']} on this target"
    return m
