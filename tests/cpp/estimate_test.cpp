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

TEST(Estimate, ATailRoundCostsAComputeBoundGrid) {
  Traffic tr{1e6, 1e13};
  // 8 waves/SIMD x 4 SIMDs / 4 warps = 8 blocks per CU: 2432 slots. Each CU's
  // math units are its own: one block more runs a second round on 1 of 2432
  // slots, the grid fills 2433 / (2 x 2432) of its slots.
  Estimate exact = estimate_latency(mi300x(), "fp16", tr, kernel(2432, 4, 8));
  Estimate tail = estimate_latency(mi300x(), "fp16", tr, kernel(2433, 4, 8));
  EXPECT_DOUBLE_EQ(exact.utilisation, 1.0);
  EXPECT_NEAR(tail.utilisation, 2433.0 / (2 * 2432), 1e-12);
  EXPECT_GT(tail.ms, 1.8 * exact.ms);
}

TEST(Estimate, AMemoryBoundTailWithoutBytesInFlightKeepsTheSlotTail) {
  Traffic tr{1e8, 0};
  // Memory-bound, no config: what a block keeps loading is unknown, so the
  // empty slots of the second round count as for a compute-bound grid.
  Estimate tail = estimate_latency(mi300x(), "fp32", tr, kernel(2433, 4, 8));
  EXPECT_NEAR(tail.utilisation, 2433.0 / (2 * 2432), 1e-12);
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

// Latency hiding by bytes in flight (Little's law), on an H200-like target:
// 132 SMs, 4.8 TB/s, a 700 ns memory latency (the model's default): an SM
// must keep 4.8e12 / 132 x 700e-9 = 25.5 KB loading to stream its share.
Target h200() {
  return {.name = "H200", .vendor = "nvidia", .backend = "cuda", .arch = "sm_90", .warp_size = 32,
          .compute_units = 132, .simds_per_cu = 4, .max_waves_per_simd = 16, .memory_bandwidth_gbs = 4800,
          .peak_tflops = {{"fp32", 66.9}, {"fp16", 989.4}}};
}

KernelResources nv_kernel(long long blocks, int warps, double occupancy) {
  return {.num_warps = warps, .warp_size = 32, .grid = {blocks, 1, 1}, .spills = 0, .occupancy = occupancy};
}

nlohmann::json gemm_tile(int bm, int bn, int bk, int stages, int warps = 4) {
  return {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"BLOCK_K", bk}, {"num_warps", warps}, {"num_stages", stages}};
}

TEST(Estimate, AShallowerPipelineHidesLessLatency) {
  // 4096^3 fp16: compute-bound. A 64x64x32 tile at 4 blocks per SM, equal
  // compute, equal grid: with 2 stages each block has one K step (8 KB)
  // loading, 32 KB per SM, short of the ~120 KB the SM consumes in one
  // latency at the tensor-core rate; with 4 stages three steps, 96 KB.
  const Traffic tr{3.0 * 4096 * 4096 * 2, 2.0 * 4096 * 4096 * 4096};
  const auto k = nv_kernel(64 * 64, 4, 16);
  const Estimate shallow = estimate_latency(h200(), "fp16", tr, k, gemm_tile(64, 64, 32, 2));
  const Estimate deep = estimate_latency(h200(), "fp16", tr, k, gemm_tile(64, 64, 32, 4));
  EXPECT_LT(shallow.in_flight, deep.in_flight);
  EXPECT_LT(deep.in_flight, 1.0);
  EXPECT_GT(shallow.ms, deep.ms);
  EXPECT_DOUBLE_EQ(shallow.compute_ms, deep.compute_ms);
  // A 128x128x64 tile with 3 stages at 2 blocks per SM has 128 KB loading,
  // more than it needs (its larger tile also needs fewer operand bytes per flop).
  const Estimate big = estimate_latency(h200(), "fp16", tr, nv_kernel(32 * 32, 4, 8), gemm_tile(128, 128, 64, 3));
  EXPECT_DOUBLE_EQ(big.in_flight, 1.0);
  EXPECT_LT(big.ms, deep.ms);
}

TEST(Estimate, ARowKernelWithFewBytesInFlightIsBandwidthStarved) {
  // A streaming row kernel, 16384 rows of 4096 fp32 (256 MiB), one row block
  // per program, 16 warps, 4 programs per SM: 256-wide chunks keep 4 KB
  // loading per SM (of the 25.5 KB needed); whole 4096-wide rows 64 KB.
  const Traffic tr{16384.0 * 4096 * 4, 16384.0 * 4096};
  const auto k = nv_kernel(16384, 16, 64);
  const nlohmann::json chunk = {{"BLOCK_M", 1}, {"BLOCK_N", 256}, {"num_warps", 16}, {"num_stages", 1}};
  const nlohmann::json row = {{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_warps", 16}, {"num_stages", 1}};
  const Estimate starved = estimate_latency(h200(), "fp32", tr, k, chunk);
  const Estimate fed = estimate_latency(h200(), "fp32", tr, k, row);
  EXPECT_NEAR(starved.in_flight, 4.0 * 1024 / (4800e9 / 132 * 700e-9), 1e-9);
  EXPECT_DOUBLE_EQ(fed.in_flight, 1.0);
  EXPECT_GT(starved.ms, 4 * fed.ms);
  EXPECT_DOUBLE_EQ(starved.memory_ms, fed.memory_ms);
}

TEST(Estimate, AMemoryBoundGridSmallerThanItsSlotsLosesNothingWhenItsBytesCoverTheLatency) {
  // 16 warps and 64 resident warps per SM: 4 blocks per SM, 528 slots. A grid
  // of 264 whole 4096-wide fp32 rows (16 KiB each) puts 2 blocks on every
  // SM: 2 x 16 warps / 4 SIMDs = 8 waves per SIMD (>= 2), 32 KiB loading per
  // SM of the 4.8e12 / 132 x 700e-9 = 25.5 KB needed. Half the slots are
  // empty, but the DRAM streams at full rate: utilisation 1 (the slot count
  // alone would say 264 / 528 = 0.5). With 1024-wide chunks (4 KiB a block)
  // the same grid keeps 8 KiB per SM loading: 8192 / 25454.5 of the rate.
  const Traffic tr{264.0 * 4096 * 4, 264.0 * 4096};
  const auto k = nv_kernel(264, 16, 64);
  const nlohmann::json row = {{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_warps", 16}, {"num_stages", 1}};
  const nlohmann::json chunk = {{"BLOCK_M", 1}, {"BLOCK_N", 1024}, {"num_warps", 16}, {"num_stages", 1}};
  EXPECT_DOUBLE_EQ(estimate_latency(h200(), "fp32", tr, k, row).utilisation, 1.0);
  EXPECT_NEAR(estimate_latency(h200(), "fp32", tr, k, chunk).utilisation, 2 * 4096.0 / (4800e9 / 132 * 700e-9),
              1e-12);
}

TEST(Estimate, ASinglePassGridHasNoLastRoundOfItsOwn) {
  // Whole 4096-wide fp32 rows (16 KiB a block, loaded at once), 16 warps, 64
  // resident warps per SM: 4 blocks per SM, 528 slots. 529 blocks: one more
  // than a round. The first round's blocks retire one after another as the
  // DRAM serves them and the 529th starts in the first freed slot, so the
  // grid streams at the full round's rate throughout; utilisation 1, as for
  // exactly one round (the lock-step slot count would say 529 / (2 x 528)).
  const nlohmann::json row = {{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_warps", 16}, {"num_stages", 1}};
  const Estimate over = estimate_latency(h200(), "fp32", Traffic{529.0 * 4096 * 4, 529.0 * 4096},
                                         nv_kernel(529, 16, 64), row);
  const Estimate exact = estimate_latency(h200(), "fp32", Traffic{528.0 * 4096 * 4, 528.0 * 4096},
                                          nv_kernel(528, 16, 64), row);
  EXPECT_DOUBLE_EQ(over.utilisation, 1.0);
  EXPECT_DOUBLE_EQ(exact.utilisation, 1.0);
  EXPECT_NEAR(over.ms, over.memory_ms + 0.004, 1e-12);
  // 16384 rows, one a block (31 rounds and 16 blocks) against two a block
  // (8192 blocks: 15 rounds and 272): the same bytes, both keep 64 KiB or
  // more loading per SM, so the same estimate; the size of the last round
  // does not rank them.
  const Traffic tr{16384.0 * 4096 * 4, 16384.0 * 4096};
  const nlohmann::json two = {{"BLOCK_M", 2}, {"BLOCK_N", 4096}, {"num_warps", 16}, {"num_stages", 1}};
  const Estimate one_row = estimate_latency(h200(), "fp32", tr, nv_kernel(16384, 16, 64), row);
  const Estimate two_rows = estimate_latency(h200(), "fp32", tr, nv_kernel(8192, 16, 64), two);
  EXPECT_DOUBLE_EQ(one_row.utilisation, 1.0);
  EXPECT_DOUBLE_EQ(one_row.ms, two_rows.ms);
}

TEST(Estimate, ASinglePassGridStillLosesWhatItsResidentBlocksCannotHide) {
  // 1024-wide chunks (4 KiB a block), 4 blocks per SM: 16 KiB loading per SM
  // of the 4.8e12 / 132 x 700e-9 = 25.5 KB needed, whatever the number of
  // rounds (here 31 and 16 blocks).
  const Traffic tr{16384.0 * 4096 * 4, 16384.0 * 4096};
  const nlohmann::json chunk = {{"BLOCK_M", 1}, {"BLOCK_N", 1024}, {"num_warps", 16}, {"num_stages", 1}};
  const Estimate e = estimate_latency(h200(), "fp32", tr, nv_kernel(16384, 16, 64), chunk);
  EXPECT_NEAR(e.utilisation, 4 * 4096.0 / (4800e9 / 132 * 700e-9), 1e-12);
  EXPECT_DOUBLE_EQ(e.utilisation, e.in_flight);
}

TEST(Estimate, AMemoryBoundContractionsTailCostsWhatItsLastBlockCannotHide) {
  // A memory-bound tiled contraction: M = 529 x 128, N = 64, K = 256 fp16
  // (0.0106 ms of bytes against 0.003 ms of flops), 128 x 64 tiles, BLOCK_K
  // 32, 2 stages: one K step of both operands (12 KiB) loading a block. Its
  // blocks loop over K and run in lock-step rounds. 16 warps at 16 resident
  // warps per SM: 1 block per SM, 132 slots; 529 blocks make 4 full rounds
  // and one of a single block. That block streams at what its own bytes in
  // flight allow, 1/132 of a full round's: its 1/132 of a round's bytes take
  // a whole round. Time 4 / full + (1/132) / (full/132) = 5 / full rounds for
  // 529/132 of work.
  const double m = 529.0 * 128, n = 64, kdim = 256;
  const Traffic tr{(m * kdim + kdim * n + m * n) * 2, 2 * m * n * kdim};
  const auto k = nv_kernel(529, 16, 16);
  const Estimate tail = estimate_latency(h200(), "fp16", tr, k, gemm_tile(128, 64, 32, 2, 16));
  ASSERT_GT(tail.memory_ms, tail.compute_ms);
  const double full = tail.in_flight;  // a full round's hiding: 16 warps / 4 SIMDs hide, bytes do not
  ASSERT_LT(full, 0.9);
  EXPECT_NEAR(tail.utilisation, (529.0 / 132) / (5 / full), 1e-12);
  // The same tile as a single-pass block (no K loop): no last round of its
  // own, the grid runs at the full round's hiding.
  const nlohmann::json flat = {{"BLOCK_M", 128}, {"BLOCK_N", 64}, {"num_warps", 16}, {"num_stages", 2}};
  const Estimate single = estimate_latency(h200(), "fp16", tr, k, flat);
  EXPECT_LT(single.in_flight, 1.0);
  EXPECT_DOUBLE_EQ(single.utilisation, single.in_flight);
}

TEST(Estimate, APersistentProgramsPipelineDepthCountsInFlight) {
  // One persistent program of 16 warps per SM (grid 132) streaming 1x4096
  // fp32 rows: 16 KB per stage; 2 stages keep one row loading, 3 keep two.
  const Traffic tr{16384.0 * 4096 * 4, 16384.0 * 4096};
  const auto k = nv_kernel(132, 16, 64);
  auto persistent = [](int stages) {
    return nlohmann::json{{"BLOCK_M", 1}, {"BLOCK_N", 4096}, {"num_warps", 16}, {"num_stages", stages},
                          {"programs", 132}};
  };
  const Estimate two = estimate_latency(h200(), "fp32", tr, k, persistent(2));
  const Estimate three = estimate_latency(h200(), "fp32", tr, k, persistent(3));
  EXPECT_NEAR(two.in_flight, 16.0 * 1024 / (4800e9 / 132 * 700e-9), 1e-9);
  EXPECT_DOUBLE_EQ(three.in_flight, 1.0);
  EXPECT_GT(two.ms, three.ms);
  // Without `programs` the stages do not pipeline rows: a plain one-row
  // program keeps one row loading whatever num_stages says.
  auto plain = persistent(3);
  plain.erase("programs");
  EXPECT_DOUBLE_EQ(estimate_latency(h200(), "fp32", tr, k, plain).in_flight, two.in_flight);
}

TEST(Estimate, TheTargetsMemoryLatencyScalesTheBytesNeeded) {
  const Traffic tr{16384.0 * 4096 * 4, 16384.0 * 4096};
  const auto k = nv_kernel(16384, 16, 64);
  const nlohmann::json chunk = {{"BLOCK_M", 1}, {"BLOCK_N", 256}, {"num_warps", 16}};
  Target fast = h200();
  fast.raw = {{"memory_latency_ns", 350}};
  const double dflt = estimate_latency(h200(), "fp32", tr, k, chunk).in_flight;
  EXPECT_NEAR(estimate_latency(fast, "fp32", tr, k, chunk).in_flight, 2 * dflt, 1e-9);
}

TEST(Estimate, NoBytesInFlightTermWithoutTileKnobs) {
  const Traffic tr{1e9, 1e9};
  const auto k = nv_kernel(16, 4, 16);  // a tiny grid: the term would bite if it applied
  const Estimate none = estimate_latency(h200(), "fp32", tr, k);
  EXPECT_DOUBLE_EQ(none.in_flight, 1.0);
  const Estimate knobs = estimate_latency(h200(), "fp32", tr, k, {{"num_warps", 4}, {"num_stages", 3}});
  EXPECT_DOUBLE_EQ(knobs.in_flight, 1.0);
  EXPECT_DOUBLE_EQ(knobs.ms, none.ms);
  EXPECT_EQ(none.to_json()["in_flight"], 1.0);
}

}  // namespace
}  // namespace kiln
