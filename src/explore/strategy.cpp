#include "explore/strategy.h"

#include <algorithm>
#include <random>
#include <stdexcept>

namespace kiln {

Plan plan_candidates(const std::vector<nlohmann::json>& space,
                     const std::vector<const Principle*>& principles,
                     const std::string& backend, const std::string& strategy,
                     int max_candidates, unsigned long long seed) {
  if (strategy != "exhaustive" && strategy != "random")
    throw std::invalid_argument("unknown strategy '" + strategy + "' (exhaustive, random)");
  Plan plan;
  plan.space_size = space.size();
  RuleResult ruled = apply_principles(space, principles, backend);
  if (ruled.relaxed)
    plan.notes.push_back("principles would remove every one of " + std::to_string(space.size()) +
                         " configs; keeping all, ordered by the principles");
  else if (ruled.removed > 0)
    plan.notes.push_back("principles removed " + std::to_string(ruled.removed) + " of " +
                         std::to_string(space.size()) + " configs");
  std::vector<nlohmann::json>& kept = ruled.configs;
  plan.after_principles = kept.size();

  const size_t n = std::min<size_t>(kept.size(), static_cast<size_t>(std::max(0, max_candidates)));
  if (strategy == "exhaustive") {
    if (n < kept.size())
      plan.notes.push_back("max_candidates " + std::to_string(max_candidates) + " < space " +
                           std::to_string(kept.size()) + ": evaluating the first " +
                           std::to_string(n) + " in principle order");
    plan.configs.assign(kept.begin(), kept.begin() + static_cast<long>(n));
  } else {
    std::mt19937_64 rng(seed);
    std::vector<size_t> idx(kept.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(n);
    std::sort(idx.begin(), idx.end());  // keep principle order among the sampled
    for (size_t i : idx) plan.configs.push_back(kept[i]);
  }
  return plan;
}

}  // namespace kiln
