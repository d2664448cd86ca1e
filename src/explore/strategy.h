// Which configs of a template's space a job evaluates, in what order.
//
// The principles named by the job's knowledge_constraints act first
// (kiln::apply_principles): `prune` and `bound` rules remove configs, `order`
// rules sort what is left (stable, higher-weight principles first). Then the strategy picks up to
// max_candidates: `exhaustive` takes them in that order, `random` samples
// without replacement with the job's seed.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/principles.h"

namespace kiln {

struct Plan {
  std::vector<nlohmann::json> configs;  // to evaluate, in order
  size_t space_size = 0;                // the template's whole space
  size_t after_principles = 0;          // left after prune/bound rules
  std::vector<std::string> notes;       // what the principles did, for logs
};

// `backend` (hip | cuda) selects the principles that apply to the target.
Plan plan_candidates(const std::vector<nlohmann::json>& space,
                     const std::vector<const Principle*>& principles,
                     const std::string& backend, const std::string& strategy, int max_candidates,
                     unsigned long long seed);

}  // namespace kiln
