// Which variants an estimated target's package ships for one kernel: the
// static model only narrows the field, and `kiln-rt tune` on a device of that
// kind picks among them (docs/packaging.md "Estimated targets ship a
// shortlist"). Pure function; no I/O, no state.
#pragma once
#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

struct ShortlistEntry {
  double estimate_ms = 0;
  nlohmann::json config;  // the template config
};

// `by_estimate`: rank 0 (the selected candidate) first, then the other correct
// candidates in increasing estimate. Returns the indices to ship, in order:
// rank 0, then the first candidates by estimate whose tile no earlier pick
// shares, until `max` in all (at least rank 0). The list is always filled:
// the model's error on shapes it was not fitted on reaches 1.6x, so a cut by
// estimate ratio drops the configs that tuning on the device would pick, and
// a slot costs only tuning time. Two configs share a tile when they differ
// only in num_stages: the model barely tells them apart and they measure
// alike, so a second copy would take the slot of a different tile.
std::vector<size_t> pick_shortlist(const std::vector<ShortlistEntry>& by_estimate, int max);

// True when the configs differ at most in num_stages.
bool same_tile(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace kiln
