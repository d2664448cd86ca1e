// Which variants an estimated target's package ships for one kernel: the
// static model only narrows the field, and `kiln-rt tune` on a device of that
// kind picks among them (docs/packaging.md "Estimated targets ship a
// shortlist"). Pure functions; no I/O, no state; thread-safe.
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
// candidates in increasing estimate (ties in candidate order). Returns the
// indices to ship, at most `max` (at least rank 0; none for an empty pool),
// in increasing order (rank 0, then by estimate); which ones:
//  1. One per tile: of candidates that share a tile (same_tile), only the
//     first by estimate counts.
//  2. Rank 0, then every blind spot of the model once before any twice: the
//     remaining candidates are taken in rounds; round r holds each one that
//     is the r-th of its blind_axes value (rank 0 is the 0th of its own, so
//     its value's next candidate waits for round 1), each round in estimate
//     order, until `max` are taken. A smaller `max` keeps a prefix of that
//     order.
// The list is always filled, however far an estimate lies from rank 0's: the
// model's error on shapes it was not fitted on reaches 2x, and a slot costs
// only tuning time.
std::vector<size_t> pick_shortlist(const std::vector<ShortlistEntry>& by_estimate, int max);

// True when the configs differ at most in num_stages: the model barely tells
// them apart and they measure alike, so a second copy would take the slot of
// a different tile.
bool same_tile(const nlohmann::json& a, const nlohmann::json& b);

// The config's knobs the static estimate does not rank (search/knob_model.h:
// the weakly modelled num_warps and every knob no term reads), as an object
// of those members; a config that is not an object maps to itself. A knob a
// config leaves out is its own value (templates read absent as off).
nlohmann::json blind_axes(const nlohmann::json& config);

}  // namespace kiln
