// Which template config knobs the static estimate (estimate.cpp) has a term
// for. The estimate reads a config only through `ranked_knob`, so the
// classification below is what the model reads, not a list kept beside it: a
// term that reads a new knob must first classify it here (ranked_knob throws
// on any other name). The shortlist an estimated target ships
// (package/shortlist.h) spans the knobs the model does not rank.
// Pure functions; no state; thread-safe.
#pragma once
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln {

enum class KnobModel {
  // A term reads the knob by name and ranks its values: the BLOCK_* tile
  // sizes (the bytes a block keeps in flight; a contraction's BLOCK_N and
  // BLOCK_K also its operand re-reads), num_stages (pipelined K steps in
  // flight) and programs (a persistent program's tiles in flight).
  kRanked,
  // num_warps: the estimate reads it only as the compiled kernel's warp count,
  // in two places: blocks per CU = floor(resident waves / warps) and latency
  // hiding = resident waves per SIMD / kWavesToHideLatency, capped at 1. The
  // resident waves come from the compiler's occupancy (registers, shared
  // memory), not from how they are split into blocks, so at one occupancy the
  // warp count moves the estimate only through rounding and the grid's
  // rounds, and not at all once the resident waves hide latency. No term
  // counts the work a warp does (elements per thread, the cross-warp part of
  // a reduction, issue slots), which is what the count trades on a device.
  kWeak,
  // Every other knob (evict-first loads, L2 hints, GROUP_M swizzles,
  // persistent variants, TMA, register caps, ...): no term reads it. The
  // estimate sees such a knob at most through what it does to the compiled
  // kernel's grid, registers or occupancy, never its purpose.
  kBlind,
};

KnobModel knob_model(std::string_view name);

// True for the tile-size knobs (names starting with BLOCK).
bool is_tile_knob(std::string_view name);

// config[name] when config is an object and that member is a number > 0;
// else nullopt. Throws std::logic_error when `name` is not kRanked: the
// estimate reads config knobs only through this.
std::optional<double> ranked_knob(const nlohmann::json& config, std::string_view name);

}  // namespace kiln
