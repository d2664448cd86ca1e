// Finding jobs other than by id: by key, and the earlier jobs of the same
// kernel instance (what kiln nightly compares a job's best against).
// Same threading rule as Catalog: one Catalog per thread. Every SQLite
// failure throws CatalogError.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "catalog/catalog.h"

namespace kiln {

// The job with this key; nullopt when there is none.
std::optional<JobRow> job_by_key(const Catalog& catalog, const std::string& key);

// The done jobs with a best row of the same kernel instance as job `job_id`
// ((op, shape, dtype, params, target) equal; shape and params are canonical
// JSON, so text equality is value equality) but another key, created before it
// (ties: a smaller id): (id, key), newest first. Empty when job_id is unknown.
std::vector<std::pair<long long, std::string>> earlier_jobs_of_kernel(const Catalog& catalog, long long job_id);

}  // namespace kiln
