// The evaluated candidates of one job: the one read model behind the
// explorer's history (what a strategy's next round sees), the best selection
// (src/explore/select.h), the confirmation round's finalists
// (Catalog::evaluated_candidates) and the offline replay (bench/replay.cpp).
// Same threading rule as Catalog: one Catalog per thread.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln {

struct JobEvaluation {
  CandidateRow candidate;                  // evaluated is true
  std::string status;                      // ok | compile_error | ... (EvaluationIn::status)
  std::string message;                     // "" when none
  nlohmann::json result;                   // the worker's reply as stored; discarded when not JSON
  std::optional<std::string> bench_device; // unset when not benchmarked
  std::optional<double> median_ms, estimate_ms;
};

// Every evaluated candidate of the job, by candidate id. Throws CatalogError
// on any SQLite failure.
std::vector<JobEvaluation> evaluations(const Catalog& catalog, long long job_id);

}  // namespace kiln
