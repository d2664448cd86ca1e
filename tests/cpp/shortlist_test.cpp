// The shortlist an estimated target ships: rank 0, then the first tiles by
// estimate however far their estimate lies, one variant per tile, at most max.
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

TEST(Shortlist, MaxOneShipsRankZeroAlone) {
  const std::vector<ShortlistEntry> pool = {{1.0, cfg(64, 64, 2)}, {1.0, cfg(128, 64, 2)}};
  EXPECT_EQ(pick_shortlist(pool, 1), (std::vector<size_t>{0}));
}

}  // namespace
}  // namespace kiln
