// Candidate planning: principles, then the strategy and the candidate budget.
#include "explore/strategy.h"

#include <gtest/gtest.h>

#include <set>

namespace kiln {
namespace {

using nlohmann::json;

std::vector<json> space() {
  std::vector<json> s;
  for (int b : {64, 128, 256, 512})
    for (int w : {1, 4})
      for (int st : {1, 2}) s.push_back({{"BLOCK_SIZE", b}, {"num_warps", w}, {"num_stages", st}});
  return s;
}

Principle principle(const std::string& name, double weight, json rules) {
  Principle p;
  p.name = name;
  p.weight = weight;
  p.rules = {{"prune", rules.value("prune", json::array())},
             {"bound", rules.value("bound", json::array())},
             {"order", rules.value("order", json::array())}};
  return p;
}

TEST(Strategy, ExhaustiveTakesTheSpaceInOrderUpToTheBudget) {
  Plan p = plan_candidates(space(), {}, "hip", "exhaustive", 5, 0);
  ASSERT_EQ(p.configs.size(), 5u);
  EXPECT_EQ(p.space_size, 16u);
  EXPECT_EQ(p.configs[0], space()[0]);
  EXPECT_EQ(p.configs[4], space()[4]);
  EXPECT_FALSE(p.notes.empty());  // says the budget truncated the space
}

TEST(Strategy, RandomIsSeededAndDistinct) {
  Plan a = plan_candidates(space(), {}, "hip", "random", 6, 42);
  Plan b = plan_candidates(space(), {}, "hip", "random", 6, 42);
  Plan c = plan_candidates(space(), {}, "hip", "random", 6, 7);
  EXPECT_EQ(a.configs, b.configs);
  EXPECT_NE(a.configs, c.configs);
  std::set<std::string> seen;
  for (const auto& j : a.configs) seen.insert(j.dump());
  EXPECT_EQ(seen.size(), 6u);
}

TEST(Strategy, PrinciplesBoundAndOrder) {
  Principle p = principle("avoid_global_memory", 1.0,
                          {{"order", {{{"key", "BLOCK_*"}, {"dir", "desc"}}}},
                           {"bound", {{{"key", "num_stages"}, {"op", ">="}, {"value", 2}}}}});
  Plan plan = plan_candidates(space(), {&p}, "hip", "exhaustive", 100, 0);
  ASSERT_EQ(plan.configs.size(), 8u);
  for (const auto& c : plan.configs) EXPECT_GE(c["num_stages"].get<int>(), 2);
  EXPECT_EQ(plan.configs.front()["BLOCK_SIZE"], 512);
  EXPECT_EQ(plan.configs.back()["BLOCK_SIZE"], 64);
}

TEST(Strategy, PrinciplesNeverPruneEverything) {
  Principle p = principle("impossible", 1.0,
                          {{"bound", {{{"key", "num_stages"}, {"op", ">="}, {"value", 9}}}}});
  Plan plan = plan_candidates(space(), {&p}, "hip", "exhaustive", 100, 0);
  EXPECT_EQ(plan.configs.size(), 16u);
  EXPECT_FALSE(plan.notes.empty());
}

TEST(Strategy, BackendSpecificPrinciplesApplyOnlyThere) {
  Principle p = principle("amd_only", 1.0,
                          {{"prune", {{{"key", "num_warps"}, {"op", "=="}, {"value", 1}}}}});
  p.backends = {"hip"};
  EXPECT_EQ(plan_candidates(space(), {&p}, "hip", "exhaustive", 100, 0).configs.size(), 8u);
  EXPECT_EQ(plan_candidates(space(), {&p}, "cuda", "exhaustive", 100, 0).configs.size(), 16u);
}

TEST(Strategy, UnknownStrategyIsAnError) {
  EXPECT_THROW(plan_candidates(space(), {}, "hip", "annealing", 4, 0), std::invalid_argument);
}

}  // namespace
}  // namespace kiln
