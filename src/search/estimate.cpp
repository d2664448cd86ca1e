#include "search/estimate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "search/knob_model.h"
#include "search/model_terms.h"

namespace kiln {

namespace {

using namespace model_terms;

}  // namespace

KernelResources KernelResources::from_artifact(const ArtifactInfo& a) {
  KernelResources k;
  if (a.num_warps) k.num_warps = static_cast<int>(*a.num_warps);
  if (a.warp_size) k.warp_size = static_cast<int>(*a.warp_size);
  for (size_t i = 0; i < 3 && i < a.grid.size(); ++i) k.grid[i] = a.grid[i];
  if (a.registers) k.registers = static_cast<int>(*a.registers);
  if (a.spills) k.spills = static_cast<int>(*a.spills);
  k.shared_bytes = a.shared_bytes;
  k.scratch_bytes = a.scratch_bytes;
  k.occupancy = a.occupancy;
  return k;
}

KernelResources KernelResources::from_artifact(const nlohmann::json& artifact) {
  const EvaluationResult r = read_evaluation_result({{"artifact", artifact}});
  return r.artifact ? from_artifact(*r.artifact) : KernelResources{};
}

nlohmann::json Estimate::to_json() const {
  return {{"ms", ms}, {"memory_ms", memory_ms}, {"compute_ms", compute_ms},
          {"utilisation", utilisation}, {"in_flight", in_flight}, {"spill_ms", spill_ms},
          {"operand_ms", operand_ms}};
}

namespace {

// The memory and compute terms of the roofline (ms at the model's efficiencies).
std::pair<double, double> roofline_terms(const Target& t, const std::string& dtype, const Traffic& traffic) {
  if (t.memory_bandwidth_gbs <= 0 || t.compute_units <= 0)
    throw std::invalid_argument("target " + t.name + " lacks memory_bandwidth_gbs or compute_units");
  const double bw = t.memory_bandwidth_gbs * 1e9 * kBandwidthEfficiency;  // bytes/s
  double peak = 0;
  if (auto it = t.peak_tflops.find(dtype); it != t.peak_tflops.end()) peak = it->second;
  if (peak <= 0)
    if (auto it = t.peak_tflops.find("fp32"); it != t.peak_tflops.end()) peak = it->second;
  return {traffic.bytes / bw * 1e3, peak > 0 ? traffic.flops / (peak * 1e12 * kComputeEfficiency) * 1e3 : 0};
}

// Little's law: an SM that keeps `in_flight` bytes loading at a time streams
// at most in_flight / latency bytes per second. The fraction of the rate it
// needs that it reaches (<= 1), or nullopt where the config does not say what
// a block has in flight (no BLOCK_* knobs).
//  - a tiled contraction (BLOCK_M, BLOCK_N, BLOCK_K): each block's software
//    pipeline has num_stages - 1 K steps of both operand tiles loading,
//    (BLOCK_M + BLOCK_N) x BLOCK_K elements each; to run at the roofline
//    (`ideal_ms`) the SM must load its share of the operand traffic,
//    flops / 2 x (1/BLOCK_M + 1/BLOCK_N) elements in all, in that time.
//  - any other tiled kernel (row kernels, elementwise): one tile, the product
//    of its BLOCK_* knobs, per block (a persistent program, knob `programs`,
//    has num_stages - 1 of them in flight); the SM needs its share of the
//    device bandwidth.
std::optional<double> in_flight_fraction(const Target& t, const std::string& dtype, const Traffic& traffic,
                                         const nlohmann::json& config, double resident_blocks, double ideal_ms) {
  if (!config.is_object() || resident_blocks <= 0) return std::nullopt;
  const double eb = element_bytes(dtype);
  const double latency_s = positive_number(t.raw, "memory_latency_ns").value_or(kMemoryLatencyNs) * 1e-9;
  const double stages = ranked_knob(config, "num_stages").value_or(1);
  const double pipelined = std::max(1.0, stages - 1);
  const auto bm = ranked_knob(config, "BLOCK_M"), bn = ranked_knob(config, "BLOCK_N"),
             bk = ranked_knob(config, "BLOCK_K");
  double per_block, rate;  // bytes one block has loading; bytes/s one SM must load
  if (bk) {
    if (!bm || !bn || traffic.flops <= 0 || ideal_ms <= 0) return std::nullopt;
    per_block = pipelined * (*bm + *bn) * *bk * eb;
    const double operand_bytes = traffic.flops / 2.0 * eb * (1.0 / *bm + 1.0 / *bn);
    rate = operand_bytes / (ideal_ms * 1e-3) / t.compute_units;
  } else {
    double tile = 0;
    for (auto it = config.begin(); it != config.end(); ++it)
      if (is_tile_knob(it.key()))
        if (auto v = ranked_knob(config, it.key())) tile = (tile > 0 ? tile : 1) * *v;
    if (tile <= 0) return std::nullopt;
    per_block = tile * eb * (ranked_knob(config, "programs") ? pipelined : 1.0);
    rate = t.memory_bandwidth_gbs * 1e9 / t.compute_units;
  }
  return std::clamp(resident_blocks * per_block / (rate * latency_s), 1e-3, 1.0);
}

}  // namespace

double roofline_ms(const Target& t, const std::string& dtype, const Traffic& traffic) {
  const auto [memory_ms, compute_ms] = roofline_terms(t, dtype, traffic);
  return std::max(memory_ms, compute_ms);
}

Estimate estimate_latency(const Target& t, const std::string& dtype, const Traffic& traffic,
                          const KernelResources& k, const nlohmann::json& config) {
  Estimate e;
  std::tie(e.memory_ms, e.compute_ms) = roofline_terms(t, dtype, traffic);
  const double bw = t.memory_bandwidth_gbs * 1e9 * kBandwidthEfficiency;  // bytes/s

  // How much of the machine the launch keeps busy. Blocks resident per CU come
  // from the compiler's occupancy (waves per SIMD on AMD, warps per SM on
  // NVIDIA); the grid then runs in `rounds` of that many blocks machine-wide,
  // and the last round may be partly empty (tail effect; what that costs
  // depends on the bound, below).
  const int simds = std::max(1, t.simds_per_cu);
  const int warps = std::max(1, k.num_warps);
  double waves_per_cu;  // resident waves (warps) per CU/SM the registers/LDS allow
  if (k.occupancy && *k.occupancy > 0) {
    waves_per_cu = t.vendor == "amd" ? *k.occupancy * simds : *k.occupancy;
  } else {
    waves_per_cu = std::max(1, t.max_waves_per_simd) * simds;  // unknown: assume no limit
  }
  const double blocks_per_cu = std::max(1.0, std::floor(waves_per_cu / warps));
  const double blocks = double(std::max(1LL, k.grid[0])) * std::max(1LL, k.grid[1]) *
                        std::max(1LL, k.grid[2]);
  const double slots = blocks_per_cu * t.compute_units;
  const double rounds = std::ceil(blocks / slots);
  const double ideal_ms = std::max(e.memory_ms, e.compute_ms);
  // Latency hiding with `per_cu` blocks resident per CU: the resident waves per
  // SIMD (kWavesToHideLatency of them hide memory latency) and, where the
  // config says what a block loads, the bytes in flight (Little's law): a
  // shallow pipeline or a small tile cannot cover the memory latency however
  // many warps are resident.
  auto hiding_at = [&](double per_cu, double* in_flight) {
    double h = std::min(1.0, per_cu * warps / simds / kWavesToHideLatency);
    if (auto f = in_flight_fraction(t, dtype, traffic, config, per_cu, ideal_ms)) {
      if (in_flight) *in_flight = *f;
      h = std::min(h, *f);
    }
    return std::clamp(h, 1e-3, 1.0);
  };
  // A full round: min(blocks, slots) blocks resident machine-wide.
  const double hiding = hiding_at(std::min(blocks, slots) / t.compute_units, &e.in_flight);
  const bool knows_in_flight =
      in_flight_fraction(t, dtype, traffic, config, 1.0, ideal_ms).has_value();
  // A single-pass block loads its one tile, all of it at once, and retires: a
  // tiled kernel whose config has neither a contraction's K loop (BLOCK_K)
  // nor a persistent program's row loop (`programs`): row kernels,
  // elementwise. (Attention's configs have no BLOCK_K though its blocks loop
  // over K/V; they count here as in in_flight_fraction, a rough stand-in.)
  const bool single_pass = !ranked_knob(config, "BLOCK_K") && !ranked_knob(config, "programs");
  if (e.memory_ms >= e.compute_ms && knows_in_flight && single_pass) {
    // Memory-bound single-pass blocks do not run in rounds. Each block puts
    // its whole tile in flight when it starts, and nothing paces the blocks
    // of a round alike: the DRAM serves the round's loads over the round's
    // duration, whichever block's bytes come back first retires first, and
    // the scheduler starts the next block in its slot at once. After the
    // first round the resident blocks are at staggered stages and the grid
    // streams at the full round's rate until its queue is empty; a partly
    // filled last round is not a phase of its own (the lock-step formula
    // below charged the best row_sum 16384x4096 config, 31 rounds and 16
    // blocks, a last round alone). What remains is the drain of the last
    // resident blocks, about one memory latency for every config of this
    // kind, which the model leaves out as it leaves out the launch ramp. So
    // the utilisation is the latency hiding of the resident blocks,
    // min(blocks, slots) of them: a grid of one partial round still runs at
    // the hiding its own count reaches.
    e.utilisation = hiding;
  } else if (e.memory_ms >= e.compute_ms && knows_in_flight) {
    // Memory-bound blocks that loop (a contraction's K steps, a persistent
    // program's rows) run in lock-step rounds: each keeps only its pipeline's
    // few steps in flight and waits for them before loading more, which
    // paces every block alike, so blocks started together finish together. Every CU streams from the one DRAM, so a slot left empty
    // costs nothing while the resident blocks keep the bytes in flight the
    // DRAM needs; the blocks of a partly filled last round each get a larger
    // share of the bandwidth. Time in full-round units: rounds - 1 full
    // rounds at `hiding`, then the last round's blocks (last / slots of a
    // round's bytes) at the hiding their own count reaches. Ideal: the
    // grid's blocks / slots rounds at full bandwidth. Only where the config
    // says what a block loads: without it the model cannot tell that a
    // partly filled round still covers the latency.
    const double last = blocks - (rounds - 1) * slots;
    const double time = (rounds - 1) / hiding + (last / slots) / hiding_at(last / t.compute_units, nullptr);
    e.utilisation = std::clamp((blocks / slots) / time, 1e-3, 1.0);
  } else {
    // Compute-bound (or no bytes in flight known): each CU's math units are
    // its own, so the grid runs in
    // `rounds` of `slots` blocks and an empty slot of the last round is lost
    // (tail: the fraction of slots filled on average).
    const double tail = blocks / (rounds * slots);
    e.utilisation = std::clamp(tail * hiding, 1e-3, 1.0);
  }

  // Spilled registers go to scratch memory: every thread writes and reads them.
  if (k.spills && *k.spills > 0) {
    const double threads = blocks * warps * k.warp_size;
    e.spill_ms = threads * (*k.spills) * 4.0 * 2.0 / bw * 1e3;
  }
  // Operand re-reads of a tiled contraction (a config with BLOCK_K: GEMM,
  // conv2d as implicit GEMM, attention): every column block (BLOCK_N wide)
  // reads the whole row operand again, flops / 2 / BLOCK_N elements in all,
  // from L2 at best. A narrow BLOCK_N re-reads (for conv2d: re-gathers) the
  // input many times; the minimum traffic above counts it once.
  if (ranked_knob(config, "BLOCK_K") && traffic.flops > 0)
    if (auto bn = ranked_knob(config, "BLOCK_N")) {
      const double l2 = positive_number(t.raw, "l2_bandwidth_gbs").value_or(kL2OverHbm * t.memory_bandwidth_gbs);
      e.operand_ms = traffic.flops / 2.0 / *bn * element_bytes(dtype) / (l2 * 1e9 * kBandwidthEfficiency) * 1e3;
    }
  e.ms = std::max(e.memory_ms, e.compute_ms) / e.utilisation + e.operand_ms + e.spill_ms + kLaunchMs;
  return e;
}

}  // namespace kiln
