// The planning step of a submission (kiln submit, kiln nightly): one evaluator
// on the CPU answers hello (versions, template hashes), `match` (each
// reference entry traced under fake tensors and matched against the template
// families: worker/kiln_worker/structural) and `traffic` (each job's minimum
// traffic and config-space size, for the claim order); the matches are applied
// to the manifest's jobs (manifest/serve_plan.h). Nothing runs at full size.
//
// Threading: none of its own; one call runs one worker process to its end.
// Ownership: the plan is a value; plan_manifest changes the Manifest it is given.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/knowledge.h"
#include "manifest/manifest.h"
#include "manifest/serve_plan.h"

namespace kiln::batch {

struct SubmitPlan {
  // The worker's hello (python, torch, triton, templates) with job_traffic and
  // job_space added: per job of the manifest, in order, its minimum traffic
  // and config-space size (null where the library cannot size one).
  nlohmann::json hello;
  std::vector<PlanEntry> entries;  // one per job of the manifest, in order
  double match_s = 0;              // the worker's tracing and matching seconds
  long long rss_growth_kib = 0;    // the worker's peak RSS growth while matching
};

// Plans m in place: a reference entry a template serves becomes that
// template's job. Throws EvaluatorUnavailable (batch/errors.h) when the
// evaluator cannot start or answer hello, ManifestError for a `generator:
// template` reference entry no template serves. An evaluator that cannot
// match leaves every reference entry to the LLM (the reason says why).
SubmitPlan plan_manifest(Manifest& m, const Knowledge& knowledge);

}  // namespace kiln::batch
