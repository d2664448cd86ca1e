#include "search/prune.h"

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>

#include "common/number_text.h"

namespace kiln {

using nlohmann::json;

std::optional<double> block_product(const json& config) {
  if (!config.is_object()) return std::nullopt;
  double p = 1;
  bool any = false;
  for (const auto& [k, v] : config.items())
    if (k.rfind("BLOCK", 0) == 0 && v.is_number()) {
      p *= v.get<double>();
      any = true;
    }
  return any ? std::optional<double>(p) : std::nullopt;
}

PruneResult prune_space(const std::vector<json>& space, const std::vector<Outcome>& history) {
  PruneResult r;
  struct Limit {
    double product;
    std::optional<double> stages;
  };
  std::vector<Limit> limits;
  std::set<std::string> evaluated;
  for (const Outcome& o : history) {
    evaluated.insert(o.candidate.config.dump());
    if (o.status != "resource_error") continue;
    auto p = block_product(o.candidate.config);
    if (!p) continue;
    std::optional<double> st;
    if (auto it = o.candidate.config.find("num_stages"); it != o.candidate.config.end() && it->is_number())
      st = it->get<double>();
    limits.push_back({*p, st});
  }
  if (limits.empty()) {
    r.configs = space;
    for (size_t i = 0; i < space.size(); ++i) r.kept.push_back(i);
    return r;
  }
  for (size_t i = 0; i < space.size(); ++i) {
    const json& c = space[i];
    bool drop = false;
    if (!evaluated.count(c.dump()))
      if (auto p = block_product(c))
        for (const Limit& l : limits) {
          if (*p < l.product) continue;
          auto it = c.find("num_stages");
          if (l.stages && it != c.end() && it->is_number() && it->get<double>() < *l.stages) continue;
          drop = true;
          break;
        }
    if (drop) {
      ++r.removed;
    } else {
      r.configs.push_back(c);
      r.kept.push_back(i);
    }
  }
  if (r.removed > 0) {
    double smallest = limits.front().product;
    for (const Limit& l : limits) smallest = std::min(smallest, l.product);
    r.notes.push_back("reflection: " + std::to_string(limits.size()) + " resource_error(s); dropped " +
                      std::to_string(r.removed) + " config(s) with a BLOCK product >= " + number_text(smallest, 10) +
                      " and as many stages");
  }
  return r;
}

}  // namespace kiln
