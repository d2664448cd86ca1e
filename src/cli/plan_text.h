// `kiln submit --dry-run`: the plan (batch/plan.h) as JSON and for people.
#pragma once
#include <ostream>

#include <nlohmann/json.hpp>

#include "batch/plan.h"
#include "manifest/manifest.h"

namespace kiln::cli {

// {manifest, name, jobs: [{index, name, target, dtype, generator, reference,
// where, op, shape, params | score, pattern, inputs, ..., reason}],
// served_by_template, need_llm, match_s, rss_growth_kib} (`--dry-run --json`).
nlohmann::json plan_json(const Manifest& m, const batch::SubmitPlan& p);

// The plan for people (`--dry-run`): a line per job.
void print_plan(std::ostream& os, const Manifest& m, const batch::SubmitPlan& p);

}  // namespace kiln::cli
