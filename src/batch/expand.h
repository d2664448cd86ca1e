// A planned manifest's jobs as catalog rows (kiln submit, kiln nightly).
//
// Each job is keyed by content (catalog/job_key.h: its spec, with every param
// of its operator filled in by the manifest, the template version from the
// hello and the Triton version), so submitting the same manifest again adds
// nothing; duplicate keys are kept once, the first. The claim order: each
// job's compile estimate (compile_est_s: its candidates -- the space's size
// from the hello's job_space, at most the entry's max_candidates -- times the
// seconds one takes to compile: the catalog's compile history for the
// operator on the arch (Catalog::compile_seconds), else the operator's
// compile_s in kernels/operators.yaml), then its priority (its roofline time
// on its target from the hello's job_traffic); 0 where unknown.
//
// A pure function: no I/O, no shared state. The manifest must be validated
// (load_manifest / load_misses): every job's target is known.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "knowledge/knowledge.h"
#include "manifest/manifest.h"

namespace kiln::batch {

// hello: SubmitPlan::hello (batch/plan.h). compile_history: (op, arch) ->
// seconds per candidate.
std::vector<NewJob> expand_jobs(const Manifest& m, const Knowledge& knowledge, const nlohmann::json& hello,
                                const std::map<std::pair<std::string, std::string>, double>& compile_history = {});

}  // namespace kiln::batch
