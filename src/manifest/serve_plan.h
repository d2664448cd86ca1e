// The serving plan of a manifest: which generator serves each job, decided
// before anything runs. A reference entry (a KernelBench-form module) is
// matched by the evaluator's `match` method against the template families'
// graph patterns (worker/kiln_worker/structural); this file applies those
// answers to the expanded jobs. Pure: no process, no catalog.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/operators.h"
#include "manifest/manifest.h"

namespace kiln {

struct PlanEntry {
  size_t job = 0;              // index into Manifest::jobs
  std::string name;            // the entry's op (a reference entry's name)
  std::string generator;       // "template" | "llm": what will serve it
  bool reference = false;      // a reference entry
  bool served_by_template = false;
  double score = 0;            // the structural match's similarity (reference entries)
  std::string op;              // the library operator that serves it ("" when none)
  nlohmann::json match;        // the worker's answer for a reference entry (null otherwise)
  std::string reason;          // why no template serves a reference entry
};

// Applies the worker's `match` answers -- one per m.jobs entry, null (or
// missing) for library operators -- to m's reference jobs, in place:
//  - generator "auto" or "template" with a served match (score at or above the
//    entry's llm.retrieval_threshold): the job becomes the library operator's
//    job (op, shape, dtype, params with defaults filled, generator template)
//    and carries "oracle" (the module, the binding, the score) instead of
//    "reference";
//  - "auto" without one: an llm job;
//  - "template" without one: throws ManifestError at the entry's line, naming
//    the reason;
//  - "llm": unchanged (the LLM writes it even where a template would serve).
// Returns one entry per job, in m.jobs' order.
std::vector<PlanEntry> apply_serve_plan(Manifest& m, const nlohmann::json& matches, const OperatorRegistry& ops);

}  // namespace kiln
