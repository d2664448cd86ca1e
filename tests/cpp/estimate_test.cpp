// The static model: it must prefer what the hardware prefers, all else equal.
#include "search/estimate.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

Target mi300x() {
  return {.name = "MI300X", .vendor = "amd", .backend = "hip", .arch = "gfx942", .warp_size = 64,
          .compute_units = 304, .simds_per_cu = 4, .max_waves_per_simd = 8, .memory_bandwidth_gbs = 5300,
          .peak_tflops = {{"fp32", 163.4}, {"fp16", 1307.4}}};
}

KernelResources kernel(long long blocks, int warps, double occupancy) {
  return {.num_warps = warps, .warp_size = 64, .grid = {blocks, 1, 1}, .spills = 0, .occupancy = occupancy};
}

TEST(Estimate, MemoryBoundTimeIsBytesOverBandwidth) {
  Traffic tr{1e9, 0};
  Estimate e = estimate_latency(mi300x(), "fp32", tr, kernel(304 * 16, 4, 8));
  EXPECT_NEAR(e.memory_ms, 1e9 / (5300e9 * 0.85) * 1e3, 1e-9);
  EXPECT_NEAR(e.utilisation, 1.0, 1e-9);
  EXPECT_NEAR(e.ms, e.memory_ms + 0.004, 1e-9);
}

TEST(Estimate, RooflineIsTheLargerTermWithoutLaunchOrOccupancy) {
  const Traffic memory_bound{1e9, 1e9}, compute_bound{1e6, 1e13};
  EXPECT_NEAR(roofline_ms(mi300x(), "fp16", memory_bound), 1e9 / (5300e9 * 0.85) * 1e3, 1e-9);
  const Estimate e = estimate_latency(mi300x(), "fp16", compute_bound, kernel(1, 4, 8));
  EXPECT_DOUBLE_EQ(roofline_ms(mi300x(), "fp16", compute_bound), e.compute_ms);
  EXPECT_GT(e.ms, e.compute_ms);  // the estimate adds the one-block grid's idle machine
  Target bare = mi300x();
  bare.memory_bandwidth_gbs = 0;
  EXPECT_THROW(roofline_ms(bare, "fp16", memory_bound), std::invalid_argument);
}

TEST(Estimate, ComputeBoundUsesTheDtypePeak) {
  Traffic tr{1e6, 1e12};
  Estimate fp16 = estimate_latency(mi300x(), "fp16", tr, kernel(304 * 16, 4, 8));
  Estimate fp32 = estimate_latency(mi300x(), "fp32", tr, kernel(304 * 16, 4, 8));
  EXPECT_GT(fp32.compute_ms, 7 * fp16.compute_ms);
  // A dtype without its own peak falls back to fp32's.
  Estimate bf16 = estimate_latency(mi300x(), "bf16", tr, kernel(304 * 16, 4, 8));
  EXPECT_DOUBLE_EQ(bf16.compute_ms, fp32.compute_ms);
}

TEST(Estimate, AGridThatCannotFillTheMachineIsSlower) {
  Traffic tr{1e8, 0};
  Estimate full = estimate_latency(mi300x(), "fp32", tr, kernel(304 * 8, 4, 8));
  Estimate tiny = estimate_latency(mi300x(), "fp32", tr, kernel(16, 4, 8));
  EXPECT_GT(tiny.ms, 5 * full.ms);
}

TEST(Estimate, ATailRoundCosts) {
  Traffic tr{1e8, 0};
  // 8 waves/SIMD x 4 SIMDs / 4 warps = 8 blocks per CU: 2432 slots.
  Estimate exact = estimate_latency(mi300x(), "fp32", tr, kernel(2432, 4, 8));
  Estimate tail = estimate_latency(mi300x(), "fp32", tr, kernel(2433, 4, 8));
  EXPECT_GT(tail.ms, 1.8 * exact.ms);
}

TEST(Estimate, LowOccupancyHidesLessLatency) {
  Traffic tr{1e8, 0};
  // One block of one warp per CU, occupancy 1: a quarter wave per SIMD.
  Estimate low = estimate_latency(mi300x(), "fp32", tr, kernel(304, 1, 1));
  Estimate high = estimate_latency(mi300x(), "fp32", tr, kernel(304 * 8, 4, 8));
  EXPECT_GT(low.ms, high.ms);
}

TEST(Estimate, SpillsCost) {
  Traffic tr{1e8, 0};
  KernelResources k = kernel(304 * 8, 4, 8);
  Estimate clean = estimate_latency(mi300x(), "fp32", tr, k);
  k.spills = 32;
  Estimate spilled = estimate_latency(mi300x(), "fp32", tr, k);
  EXPECT_GT(spilled.spill_ms, 0);
  EXPECT_GT(spilled.ms, clean.ms);
}

TEST(Estimate, RejectsATargetWithoutSpecs) {
  Target t = mi300x();
  t.memory_bandwidth_gbs = 0;
  EXPECT_THROW(estimate_latency(t, "fp32", Traffic{1, 1}, kernel(1, 1, 1)), std::invalid_argument);
}

TEST(Estimate, ReadsTheWorkersArtifactReport) {
  nlohmann::json a = {{"num_warps", 8}, {"warp_size", 32}, {"grid", {10, 2, 1}},
                      {"registers", 40}, {"spills", nullptr}, {"occupancy", 48}};
  KernelResources k = KernelResources::from_artifact(a);
  EXPECT_EQ(k.num_warps, 8);
  EXPECT_EQ(k.grid[0], 10);
  EXPECT_EQ(k.grid[1], 2);
  EXPECT_EQ(*k.registers, 40);
  EXPECT_FALSE(k.spills.has_value());
  EXPECT_DOUBLE_EQ(*k.occupancy, 48);
}


nlohmann::json tile(int bm, int bn, int bk) {
  return {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"BLOCK_K", bk}, {"num_warps", 4}, {"num_stages", 2}};
}

TEST(Estimate, NarrowColumnBlocksRereadTheRowOperand) {
  // Same work, same launch: a tiled contraction whose column blocks are 4x
  // narrower re-reads (conv2d: re-gathers) its row operand 4x as often.
  const Traffic tr{1e8, 1e11};
  const auto k = kernel(304 * 8, 4, 8);
  const Estimate wide = estimate_latency(mi300x(), "fp16", tr, k, tile(128, 128, 32));
  const Estimate narrow = estimate_latency(mi300x(), "fp16", tr, k, tile(128, 32, 32));
  EXPECT_GT(wide.operand_ms, 0);
  EXPECT_GT(narrow.operand_ms, wide.operand_ms);
  EXPECT_GT(narrow.ms, wide.ms);
  // More flops through the same tiles: more re-reads.
  const Estimate more = estimate_latency(mi300x(), "fp16", Traffic{1e8, 2e11}, k, tile(128, 128, 32));
  EXPECT_GT(more.operand_ms, wide.operand_ms);
}

TEST(Estimate, OperandRereadsNeedATiledContraction) {
  const Traffic tr{1e8, 1e8};
  const auto k = kernel(304 * 8, 4, 8);
  // No config, or a config without a reduction step (elementwise, row kernels): no term.
  EXPECT_EQ(estimate_latency(mi300x(), "fp16", tr, k).operand_ms, 0);
  const nlohmann::json row = {{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_warps", 4}};
  const Estimate r = estimate_latency(mi300x(), "fp16", tr, k, row);
  EXPECT_EQ(r.operand_ms, 0);
  EXPECT_DOUBLE_EQ(r.ms, estimate_latency(mi300x(), "fp16", tr, k).ms);
}

TEST(Estimate, AFasterL2MakesOperandRereadsCheaper) {
  const Traffic tr{1e8, 1e11};
  const auto k = kernel(304 * 8, 4, 8);
  Target slow = mi300x(), fast = mi300x();
  slow.raw = {{"l2_bandwidth_gbs", 8000}};
  fast.raw = {{"l2_bandwidth_gbs", 16000}};
  const double s = estimate_latency(slow, "fp16", tr, k, tile(128, 64, 32)).operand_ms;
  const double f = estimate_latency(fast, "fp16", tr, k, tile(128, 64, 32)).operand_ms;
  EXPECT_GT(s, f);
  // Without the figure the target's HBM bandwidth stands in: a target with
  // more HBM bandwidth also re-reads faster.
  Target more_hbm = mi300x();
  more_hbm.memory_bandwidth_gbs *= 2;
  EXPECT_GT(estimate_latency(mi300x(), "fp16", tr, k, tile(128, 64, 32)).operand_ms,
            estimate_latency(more_hbm, "fp16", tr, k, tile(128, 64, 32)).operand_ms);
  // Wider elements move more bytes per re-read.
  EXPECT_GT(estimate_latency(mi300x(), "fp32", tr, k, tile(128, 64, 32)).operand_ms,
            estimate_latency(mi300x(), "fp16", tr, k, tile(128, 64, 32)).operand_ms);
}

}  // namespace
}  // namespace kiln
