// The static performance model: ranks candidates for a target with no device of
// its kind here (every AMD target on a machine without AMD GPUs). Results from it
// are labelled `estimated` everywhere they are shown. docs/estimate.md explains it.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "evaluate/protocol.h"
#include "knowledge/targets.h"

namespace kiln {

struct KernelResources {
  int num_warps = 4;
  int warp_size = 64;
  std::array<long long, 3> grid{1, 1, 1};
  std::optional<int> registers;       // VGPRs / registers per thread
  std::optional<int> spills;          // spilled registers per thread
  std::optional<long long> shared_bytes;
  std::optional<long long> scratch_bytes;  // per thread
  std::optional<double> occupancy;    // AMD: waves per SIMD; NVIDIA: resident warps per SM

  // From the worker's artifact (evaluate/protocol.h); missing fields stay unset.
  static KernelResources from_artifact(const ArtifactInfo& artifact);
  // The same from an artifact object as stored (read_evaluation_result's rules).
  static KernelResources from_artifact(const nlohmann::json& artifact);
};

struct Estimate {
  double ms = 0;
  // The terms, for reports: memory and compute times at full machine use, the
  // fraction of the machine the launch keeps busy, the spill cost.
  // operand_ms: the row operand's re-reads by every column block of a tiled
  // contraction (needs the config's BLOCK_N and BLOCK_K).
  // in_flight: the bytes a resident block set keeps loading per SM over the
  // bytes the SM must have in flight to cover the memory latency (Little's
  // law), capped at 1; 1 where the config has no BLOCK_* knobs. It bounds the
  // latency hiding inside `utilisation`.
  double memory_ms = 0, compute_ms = 0, utilisation = 1, spill_ms = 0, operand_ms = 0, in_flight = 1;
  nlohmann::json to_json() const;
};

// The roofline: max(memory_ms, compute_ms) at the model's efficiencies, no
// launch or occupancy terms. The explorer's claim order uses it (bigger first).
// Throws std::invalid_argument if the target lacks bandwidth or compute units.
double roofline_ms(const Target& target, const std::string& dtype, const Traffic& traffic);

// `config` is the candidate's template config (BLOCK_* tile sizes, num_stages,
// num_warps); an empty object leaves out the terms that need it.
// Throws std::invalid_argument if the target lacks bandwidth or compute units.
Estimate estimate_latency(const Target& target, const std::string& dtype, const Traffic& traffic,
                          const KernelResources& kernel,
                          const nlohmann::json& config = nlohmann::json::object());

}  // namespace kiln
