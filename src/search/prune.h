// Pruning by reflection: a template's config space shrunk by what its
// evaluated candidates taught (src/reflect diagnoses the same outcomes for the
// llm generator's repair prompts).
//
// Threading: pure functions, no state.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/candidate.h"

namespace kiln {

// The product of a config's block sizes (keys starting with BLOCK); nullopt
// when it has none.
std::optional<double> block_product(const nlohmann::json& config);

// Template pruning from outcomes: a resource_error (LDS / shared memory or
// registers exceeded) at block product P and num_stages S drops every config
// of the space whose block product is >= P and whose num_stages is >= S (when
// both have num_stages): a larger tile with as deep a pipeline needs at least
// as much. Configs that were evaluated are never dropped (their outcome stands).
struct PruneResult {
  std::vector<nlohmann::json> configs;
  std::vector<size_t> kept;   // indices into the space of `configs` (for parallel arrays)
  size_t removed = 0;
  std::vector<std::string> notes;
};
PruneResult prune_space(const std::vector<nlohmann::json>& space, const std::vector<Outcome>& history);

}  // namespace kiln
