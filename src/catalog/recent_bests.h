// The most recently selected best kernels of the catalog: what the llm
// generator's retrieval offers as worked examples (src/generate/retrieval.h).
// Same threading rule as Catalog: one Catalog per thread; every SQLite failure
// throws CatalogError.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln {

struct RecentBest {
  long long job_id = 0, candidate_id = 0;
  std::string op, target, dtype;
  nlohmann::json spec;                 // the job's spec (discarded when not JSON)
  std::string generator;               // template | llm
  std::string template_name;           // "" when none
  nlohmann::json config;               // canonical JSON as stored (discarded when not JSON)
  std::string source;                  // generated code; "" for a template config
  double value_ms = 0;
  std::string basis;                   // measured | estimated
};

// The best rows of every job but `exclude_job`, most recently selected first,
// at most `limit`.
std::vector<RecentBest> recent_bests(const Catalog& catalog, long long exclude_job, int limit = 200);

}  // namespace kiln
