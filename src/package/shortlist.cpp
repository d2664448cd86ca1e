#include "package/shortlist.h"

namespace kiln {

bool same_tile(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_object() || !b.is_object()) return a == b;
  nlohmann::json x = a, y = b;
  x.erase("num_stages");
  y.erase("num_stages");
  return x == y;
}

std::vector<size_t> pick_shortlist(const std::vector<ShortlistEntry>& by_estimate, int max) {
  std::vector<size_t> out;
  if (by_estimate.empty()) return out;
  out.push_back(0);
  for (size_t i = 1; i < by_estimate.size() && static_cast<int>(out.size()) < max; ++i) {
    bool dup = false;
    for (size_t k : out) dup = dup || same_tile(by_estimate[k].config, by_estimate[i].config);
    if (!dup) out.push_back(i);
  }
  return out;
}

}  // namespace kiln
