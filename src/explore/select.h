// Choosing a job's best candidate from its evaluations in the catalog.
#pragma once
#include <optional>
#include <string>

#include "catalog/catalog.h"
#include "knowledge/targets.h"

namespace kiln {

struct Selection {
  std::optional<BestRow> best;  // nullopt: no correct candidate
  int evaluated = 0, correct = 0;
  std::string failure_summary;  // "3 compile_error, 1 incorrect" when nothing is correct
};

// Among the job's correct (status ok) candidates: the lowest median latency
// measured on a device of the target's kind, when any such measurement exists;
// otherwise the lowest static estimate, labelled `estimated`. Measured and
// estimated values are never compared with each other.
Selection select_best(const Catalog& catalog, long long job_id, const Target& target);

}  // namespace kiln
