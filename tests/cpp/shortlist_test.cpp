// The shortlist an estimated target ships: rank 0, then one variant per tile,
// each value of the knobs the model does not rank (num_warps and knobs no
// term reads) once before any twice, in estimate order, at most max. The
// list is returned in estimate order; the order in which candidates enter
// shows as the cap grows.
#include "package/shortlist.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

nlohmann::json cfg(int bm, int bn, int stages, int warps = 4) {
  return {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"num_stages", stages}, {"num_warps", warps}};
}

TEST(Shortlist, SameTileIgnoresOnlyNumStages) {
  EXPECT_TRUE(same_tile(cfg(64, 64, 2), cfg(64, 64, 3)));
  EXPECT_FALSE(same_tile(cfg(64, 64, 2), cfg(64, 128, 2)));
  EXPECT_FALSE(same_tile(cfg(64, 64, 2, 4), cfg(64, 64, 2, 8)));
}

TEST(Shortlist, KeepsRankZeroAndFillsToMaxHoweverFarTheEstimate) {
  const std::vector<ShortlistEntry> pool = {
      {1.0, cfg(64, 64, 2)}, {1.2, cfg(128, 64, 2)}, {1.49, cfg(64, 128, 2)}, {3.0, cfg(128, 128, 2)}};
  EXPECT_EQ(pick_shortlist(pool, 8), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(pick_shortlist(pool, 2), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(pick_shortlist({}, 8).size(), 0u);
}

TEST(Shortlist, ATileRepeatedAcrossNumStagesTakesOneSlot) {
  // Each tile twice (num_stages 2 and 3), in estimate order: the cap of 4 is
  // spent on four tiles, not two tiles twice.
  std::vector<ShortlistEntry> pool;
  const int tiles[][2] = {{64, 64}, {64, 128}, {128, 64}, {128, 128}, {256, 64}};
  double e = 1.0;
  for (const auto& t : tiles)
    for (int stages : {2, 3}) pool.push_back({e += 0.01, cfg(t[0], t[1], stages)});
  const auto picked = pick_shortlist(pool, 4);
  ASSERT_EQ(picked.size(), 4u);
  for (size_t a = 0; a < picked.size(); ++a)
    for (size_t b = a + 1; b < picked.size(); ++b)
      EXPECT_FALSE(same_tile(pool[picked[a]].config, pool[picked[b]].config));
  // the first of each tile by estimate: every pick has an even index
  for (size_t i : picked) EXPECT_EQ(i % 2, 0u);
}

nlohmann::json with(nlohmann::json c, const char* knob, int v) {
  c[knob] = v;
  return c;
}

TEST(Shortlist, BlindAxesAreTheKnobsTheEstimateDoesNotRank) {
  const nlohmann::json c = {{"BLOCK_M", 1},   {"BLOCK_N", 4096}, {"num_stages", 2}, {"programs", 264},
                            {"num_warps", 16}, {"stream", 1},     {"GROUP_M", 8}};
  EXPECT_EQ(blind_axes(c), (nlohmann::json{{"num_warps", 16}, {"stream", 1}, {"GROUP_M", 8}}));
  EXPECT_EQ(blind_axes(cfg(64, 64, 2, 4)), (nlohmann::json{{"num_warps", 4}}));
  EXPECT_EQ(blind_axes(nlohmann::json::object()), nlohmann::json::object());
}

TEST(Shortlist, TwoBlindValuesAlternateAfterRankZero) {
  // 10 tiles in estimate order; the first 8 lack the unranked knob `stream`,
  // the last two have it. The plain estimate order would ship indices 0..7,
  // all without `stream`. Rounds: rank 0 is its value's 0th, so index 8 (the
  // first with `stream`) is round 0 and comes first; then round 1: index 1
  // (second without) and 9 (second with), in estimate order; then the rest
  // without `stream`, one per round, until 8.
  std::vector<ShortlistEntry> pool;
  for (int i = 0; i < 10; ++i) {
    nlohmann::json c = cfg(64 * (i + 1), 64, 2);
    if (i >= 8) c["stream"] = 1;
    pool.push_back({1.0 + 0.1 * i, c});
  }
  EXPECT_EQ(pick_shortlist(pool, 2), (std::vector<size_t>{0, 8}));
  EXPECT_EQ(pick_shortlist(pool, 3), (std::vector<size_t>{0, 1, 8}));
  EXPECT_EQ(pick_shortlist(pool, 4), (std::vector<size_t>{0, 1, 8, 9}));
  EXPECT_EQ(pick_shortlist(pool, 5), (std::vector<size_t>{0, 1, 2, 8, 9}));
  EXPECT_EQ(pick_shortlist(pool, 8), (std::vector<size_t>{0, 1, 2, 3, 4, 5, 8, 9}));
  EXPECT_EQ(pick_shortlist(pool, 20), (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Shortlist, AlternatingPoolKeepsTheEstimateOrder) {
  // 10 tiles whose `stream` alternates off/on with the estimate: the rounds
  // take them in plain estimate order.
  std::vector<ShortlistEntry> pool;
  for (int i = 0; i < 10; ++i) {
    nlohmann::json c = cfg(64 * (i + 1), 64, 2);
    if (i % 2) c["stream"] = 1;
    pool.push_back({1.0 + 0.1 * i, c});
  }
  for (int max = 1; max <= 10; ++max) {
    std::vector<size_t> prefix(max);
    for (int i = 0; i < max; ++i) prefix[i] = i;
    EXPECT_EQ(pick_shortlist(pool, max), prefix) << max;
  }
}

TEST(Shortlist, WarpsAndBlindKnobsCombine) {
  // Values of (num_warps, stream): rank 0 is (4, off). The pool's next are
  // three more (4, off) tiles, then (8, off), (4, on), (8, on), each twice.
  // Round 0: the first of (8, off), (4, on), (8, on) in estimate order:
  // 4, 6, 8; round 1: the second of each of the four values: 1, 5, 7, 9.
  std::vector<ShortlistEntry> pool;
  double e = 1.0;
  auto add = [&](int bm, int warps, bool stream) {
    nlohmann::json c = cfg(bm, 64, 2, warps);
    if (stream) c["stream"] = 1;
    pool.push_back({e += 0.1, c});
  };
  add(64, 4, false);  // 0: rank 0
  for (int bm : {128, 256, 512}) add(bm, 4, false);  // 1, 2, 3
  for (int bm : {64, 128}) add(bm, 8, false);        // 4, 5
  for (int bm : {64, 128}) add(bm, 4, true);         // 6, 7
  for (int bm : {64, 128}) add(bm, 8, true);         // 8, 9
  EXPECT_EQ(pick_shortlist(pool, 4), (std::vector<size_t>{0, 4, 6, 8}));
  EXPECT_EQ(pick_shortlist(pool, 6), (std::vector<size_t>{0, 1, 4, 5, 6, 8}));
  EXPECT_EQ(pick_shortlist(pool, 8), (std::vector<size_t>{0, 1, 4, 5, 6, 7, 8, 9}));
  // a knob the estimate ranks (programs) is no axis: it splits no value
  for (auto& p : pool) p.config["programs"] = p.config["BLOCK_M"];
  EXPECT_EQ(pick_shortlist(pool, 4), (std::vector<size_t>{0, 4, 6, 8}));
}

TEST(Shortlist, OnePerTileBeforeTheRounds) {
  // Index 1 repeats rank 0's tile with another num_stages: it takes no slot
  // and does not count as its value's candidate. Index 3 has `stream`.
  const std::vector<ShortlistEntry> pool = {{1.0, cfg(64, 64, 2)},
                                            {1.0, cfg(64, 64, 3)},
                                            {1.1, cfg(128, 64, 2)},
                                            {1.2, with(cfg(64, 128, 2), "stream", 1)},
                                            {1.3, with(cfg(64, 128, 3), "stream", 1)},
                                            {1.4, cfg(256, 64, 2)}};
  EXPECT_EQ(pick_shortlist(pool, 2), (std::vector<size_t>{0, 3}));
  EXPECT_EQ(pick_shortlist(pool, 8), (std::vector<size_t>{0, 2, 3, 5}));
}

TEST(Shortlist, MaxOneShipsRankZeroAlone) {
  const std::vector<ShortlistEntry> pool = {{1.0, cfg(64, 64, 2)}, {1.0, cfg(128, 64, 2)}};
  EXPECT_EQ(pick_shortlist(pool, 1), (std::vector<size_t>{0}));
}

}  // namespace
}  // namespace kiln
