// The knob classification is what the estimate reads: knobs no term reads do
// not move it, the ones it ranks do, and num_warps moves it only through
// occupancy, rounds and latency hiding.
#include "search/knob_model.h"

#include <gtest/gtest.h>

#include "h200_like.h"
#include "search/estimate.h"

namespace kiln {
namespace {

using testing_targets::h200_like;

KernelResources kernel(long long blocks, int warps, double occupancy) {
  return {.num_warps = warps, .warp_size = 32, .grid = {blocks, 1, 1}, .spills = 0, .occupancy = occupancy};
}

TEST(KnobModel, Classes) {
  for (const char* k : {"BLOCK", "BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_P", "num_stages", "programs"})
    EXPECT_EQ(knob_model(k), KnobModel::kRanked) << k;
  EXPECT_EQ(knob_model("num_warps"), KnobModel::kWeak);
  for (const char* k : {"stream", "l2hint", "GROUP_M", "GROUP_H", "persistent", "tma", "maxnreg", "q_regs",
                        "prefetch", "spec", "transpose", "block"})
    EXPECT_EQ(knob_model(k), KnobModel::kBlind) << k;
}

TEST(KnobModel, RankedKnobRefusesAnUnclassifiedName) {
  const nlohmann::json c = {{"BLOCK_M", 64}, {"stream", 1}, {"num_stages", 0}};
  EXPECT_EQ(ranked_knob(c, "BLOCK_M"), 64.0);
  EXPECT_EQ(ranked_knob(c, "num_stages"), std::nullopt);  // not > 0
  EXPECT_EQ(ranked_knob(c, "BLOCK_N"), std::nullopt);
  EXPECT_THROW(ranked_knob(c, "stream"), std::logic_error);
  EXPECT_THROW(ranked_knob(c, "num_warps"), std::logic_error);
}

TEST(KnobModel, BlindKnobsDoNotMoveTheEstimate) {
  const Target t = h200_like();
  struct Case {
    Traffic traffic;
    std::string dtype;
    KernelResources k;
    nlohmann::json config;
  };
  const std::vector<Case> cases = {
      // a row kernel, memory-bound, a partial last round
      {{2.7e8, 6.7e7}, "fp32", kernel(16384, 16, 64), {{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_stages", 1}}},
      // a persistent row kernel
      {{2.7e8, 6.7e7}, "fp32", kernel(261, 8, 64),
       {{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_stages", 2}, {"programs", 261}}},
      // a GEMM, compute-bound
      {{5.7e7, 5.8e10}, "bf16", kernel(576, 8, 16),
       {{"BLOCK_M", 128}, {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"num_stages", 3}}},
  };
  for (const Case& c : cases) {
    const double base = estimate_latency(t, c.dtype, c.traffic, c.k, c.config).ms;
    for (const char* knob : {"stream", "l2hint", "GROUP_M", "GROUP_H", "persistent", "tma", "maxnreg", "prefetch"}) {
      nlohmann::json with = c.config;
      with[knob] = 8;
      EXPECT_EQ(estimate_latency(t, c.dtype, c.traffic, c.k, with).ms, base) << knob;
    }
    // and the ranked ones do: shrink each tile size 64-fold
    for (const char* knob : {"BLOCK_N", "BLOCK_K"}) {
      if (!c.config.contains(knob)) continue;
      nlohmann::json with = c.config;
      with[knob] = c.config[knob].get<int>() / 64;
      EXPECT_NE(estimate_latency(t, c.dtype, c.traffic, c.k, with).ms, base) << knob;
    }
  }
}

TEST(KnobModel, WarpsMoveTheEstimateOnlyThroughOccupancyAndRounds) {
  // 64 resident warps per SM (the compiler's occupancy), split into blocks of
  // 4, 8 or 16 warps; a grid that fills whole rounds at every split. The
  // estimate is the same: no term counts what a warp does.
  const Target t = h200_like();
  const Traffic tr{2.7e8, 6.7e7};
  const nlohmann::json c = {{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_stages", 1}};
  const long long blocks = 132 * 16 * 4;  // 4 rounds of 4-warp blocks, 16 of 16-warp blocks
  const double w4 = estimate_latency(t, "fp32", tr, kernel(blocks, 4, 64), c).ms;
  EXPECT_EQ(estimate_latency(t, "fp32", tr, kernel(blocks, 8, 64), c).ms, w4);
  EXPECT_EQ(estimate_latency(t, "fp32", tr, kernel(blocks, 16, 64), c).ms, w4);
  // fewer resident warps than hide latency: then the count matters
  EXPECT_GT(estimate_latency(t, "fp32", tr, kernel(132, 4, 4), c).ms,
            estimate_latency(t, "fp32", tr, kernel(132, 8, 8), c).ms);
}

}  // namespace
}  // namespace kiln
