#include "package/shortlist.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "search/knob_model.h"

namespace kiln {

bool same_tile(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_object() || !b.is_object()) return a == b;
  nlohmann::json x = a, y = b;
  x.erase("num_stages");
  y.erase("num_stages");
  return x == y;
}

nlohmann::json blind_axes(const nlohmann::json& config) {
  if (!config.is_object()) return config;
  nlohmann::json out = nlohmann::json::object();
  for (auto it = config.begin(); it != config.end(); ++it)
    if (knob_model(it.key()) != KnobModel::kRanked) out[it.key()] = *it;
  return out;
}

std::vector<size_t> pick_shortlist(const std::vector<ShortlistEntry>& by_estimate, int max) {
  std::vector<size_t> out;
  if (by_estimate.empty()) return out;
  // 1. the first of each tile, in estimate order (rank 0 first)
  std::vector<size_t> tiles;
  for (size_t i = 0; i < by_estimate.size(); ++i) {
    bool dup = false;
    for (size_t k : tiles) dup = dup || same_tile(by_estimate[k].config, by_estimate[i].config);
    if (!dup) tiles.push_back(i);
  }
  // 2. (round, position in estimate order) for each after rank 0; a stable
  // sort by it gives every axes value one slot before any value a second
  std::map<std::string, size_t> seen;  // blind_axes dump -> candidates so far
  seen[blind_axes(by_estimate[0].config).dump()] = 1;
  std::vector<std::pair<size_t, size_t>> order;  // (round, index)
  for (size_t p = 1; p < tiles.size(); ++p)
    order.push_back({seen[blind_axes(by_estimate[tiles[p]].config).dump()]++, tiles[p]});
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  out.push_back(0);
  for (const auto& [round, i] : order) {
    if (static_cast<int>(out.size()) >= max) break;
    out.push_back(i);
  }
  std::sort(out.begin() + 1, out.end());  // ship in estimate order: the ranks stay the estimate's
  return out;
}

}  // namespace kiln
