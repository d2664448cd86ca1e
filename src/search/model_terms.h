// The static performance model's shared terms, for estimate.cpp (the latency
// estimate) and strategy.cpp (the halving predictor): the fractions of the
// datasheet peaks well-tuned kernels reach, the fixed launch cost, and how a
// target or config number is read. Internal to src/search.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::model_terms {

// Fractions of the datasheet peaks that well-tuned kernels reach in practice:
// a streaming copy reaches ~85-90% of HBM bandwidth (the same fraction is taken
// of L2 bandwidth), a large GEMM ~70-80% of the matrix peak. These are what the
// model calls "full machine use".
constexpr double kBandwidthEfficiency = 0.85;
constexpr double kComputeEfficiency = 0.75;
// Fixed launch cost per kernel.
constexpr double kLaunchMs = 0.004;
// Resident waves per SIMD needed to hide memory latency.
constexpr double kWavesToHideLatency = 2.0;
// Loaded DRAM latency, for the bytes-in-flight terms (Little's law: an SM
// streams at most its bytes in flight per latency), when the target file has
// no memory_latency_ns. Public pointer-chase microbenchmarks put Hopper's
// unloaded global-memory latency at several hundred ns (Chips and Cheese,
// "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023,
// https://chipsandcheese.com/2023/07/02/nvidias-h100-funny-l2-and-tons-of-bandwidth/;
// Luo et al., "Dissecting the NVIDIA Hopper Architecture through
// Microbenchmarking and Multiple Level Analysis", arXiv:2501.12084); under
// load it grows. HBM GPUs measure roughly 500-900 ns loaded; 700 ns is a
// middle value, not fitted to measurements.
constexpr double kMemoryLatencyNs = 700;
// L2 bandwidth as a multiple of HBM bandwidth when the target file has no
// l2_bandwidth_gbs (H100/H200 and MI300X both measure roughly 2-3x).
constexpr double kL2OverHbm = 2.0;

// obj[key] when obj is an object and that member is a number > 0; else nullopt.
inline std::optional<double> positive_number(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return std::nullopt;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return v > 0 ? std::optional<double>(v) : std::nullopt;
}

// Bytes per element of a dtype name (4 for one not listed).
inline double element_bytes(const std::string& dtype) {
  if (dtype == "fp64" || dtype == "int64") return 8;
  if (dtype == "fp16" || dtype == "bf16" || dtype == "int16") return 2;
  if (dtype == "int8" || dtype == "fp8" || dtype == "fp8e4m3" || dtype == "fp8e5m2") return 1;
  return 4;
}

}  // namespace kiln::model_terms
