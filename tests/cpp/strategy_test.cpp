// Candidate planning: principles, then the strategy and the candidate budget;
// the config model and the halving strategy round by round.
#include "search/strategy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "explore/explorer.h"
#include "h200_like.h"

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

TEST(Strategy, NextRoundRunsTheOneRoundStrategiesAsBefore) {
  SearchSpace sp;
  sp.configs = space();
  SearchSettings st;
  st.strategy = "random";
  st.max_candidates = 6;
  st.seed = 42;
  Plan a = next_round(sp, {}, "hip", st, {});
  EXPECT_EQ(a.configs, plan_candidates(space(), {}, "hip", "random", 6, 42).configs);
  st.strategy = "annealing";
  EXPECT_THROW(next_round(sp, {}, "hip", st, {}), std::invalid_argument);
}

// --- the config model and halving ------------------------------------------------

Target gpu() { return testing_targets::h200_like(); }

// A GEMM space for M = N = K = 4096 bf16, with the grid and shared memory the
// matmul template reports.
SearchSpace gemm(const Target& t) {
  SearchSpace sp;
  sp.target = &t;
  sp.dtype = "bf16";
  sp.traffic.bytes = 3.0 * 4096 * 4096 * 2;
  sp.traffic.flops = 2.0 * 4096 * 4096 * 4096;
  for (int bm : {64, 128, 256})
    for (int bn : {64, 128, 256})
      for (int bk : {32, 64})
        for (int w : {4, 8})
          for (int st : {3, 4}) {
            if (bm * bn > 256 * 128) continue;
            sp.configs.push_back({{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"BLOCK_K", bk},
                                  {"num_warps", w}, {"num_stages", st}});
            sp.hints.push_back({{"grid", {(4096 / bm) * (4096 / bn), 1, 1}},
                                {"shared_bytes", (bm * bk + bk * bn) * 2 * st}});
          }
  return sp;
}

// A made-up latency landscape over the GEMM space: smooth in each knob, best
// at 128x256x64, 8 warps, 3 stages; tiles with 256 accumulators per thread spill.
double landscape(const json& c) {
  auto d = [](double v, double best) { return std::abs(std::log2(v / best)); };
  double ms = 0.19 * (1 + 0.15 * d(c["BLOCK_M"].get<double>(), 128) + 0.1 * d(c["BLOCK_N"].get<double>(), 256) +
                      0.12 * d(c["BLOCK_K"].get<double>(), 64) + 0.08 * d(c["num_warps"].get<double>(), 8) +
                      0.05 * d(c["num_stages"].get<double>(), 3));
  if (c["BLOCK_M"].get<int>() * c["BLOCK_N"].get<int>() / (c["num_warps"].get<int>() * 32) >= 256) ms *= 5;
  return ms;
}

// Runs a strategy round after round as the scheduler does.
std::vector<Evaluated> search(const SearchSpace& sp, const SearchSettings& st,
                              const std::function<std::optional<double>(const json&)>& score,
                              int* rounds = nullptr) {
  std::vector<Evaluated> h;
  std::set<std::string> seen;
  for (int r = 0; r < 100; ++r) {
    Plan p = next_round(sp, {}, "cuda", st, h);
    int fresh = 0;
    for (const auto& c : p.configs)
      if (seen.insert(c.dump()).second) {
        ++fresh;
        h.push_back({c, score(c), p.round});
      }
    if (fresh == 0) {
      if (rounds) *rounds = r;
      break;
    }
  }
  return h;
}

SearchSettings halving(int budget = 64, unsigned long long seed = 0) {
  SearchSettings s;
  s.strategy = "halving";
  s.max_candidates = budget;
  s.seed = seed;
  return s;
}

TEST(StrategyModel, PredictsSpillsAndTails) {
  const Target t = gpu();
  Traffic tr{3.0 * 4096 * 4096 * 2, 2.0 * 4096 * 4096 * 4096};
  const json big8 = {{"BLOCK_M", 128}, {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"num_warps", 8}, {"num_stages", 3}};
  json big4 = big8;
  big4["num_warps"] = 4;  // 256 accumulators per thread: spills
  const json hint = {{"grid", {512, 1, 1}}, {"shared_bytes", 147456}};
  auto a = predict_config(t, "bf16", tr, big8, hint);
  auto b = predict_config(t, "bf16", tr, big4, hint);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(a->spills);
  EXPECT_TRUE(b->spills);
  EXPECT_GT(b->ms, 1.5 * a->ms);
  EXPECT_EQ(a->blocks_per_cu, 1);  // 144 KiB of 228 KiB shared memory per SM
  // One block more than the SMs: a second, nearly empty wave.
  auto full = predict_config(t, "bf16", tr, big8, {{"grid", {132, 1, 1}}, {"shared_bytes", 147456}});
  auto tail = predict_config(t, "bf16", tr, big8, {{"grid", {133, 1, 1}}, {"shared_bytes", 147456}});
  ASSERT_TRUE(full && tail);
  EXPECT_NEAR(tail->utilisation, 133.0 / 264.0, 1e-9);
  EXPECT_GT(tail->ms, 1.9 * full->ms);
  // Bigger tiles re-read operands less.
  const json small = {{"BLOCK_M", 64}, {"BLOCK_N", 64}, {"BLOCK_K", 32}, {"num_warps", 4}, {"num_stages", 3}};
  auto s = predict_config(t, "bf16", tr, small, {{"grid", {4096, 1, 1}}, {"shared_bytes", 24576}});
  ASSERT_TRUE(s);
  EXPECT_GT(s->operand_ms, 2 * a->operand_ms);
  // A target without figures: no prediction.
  Target bare;
  EXPECT_FALSE(predict_config(bare, "bf16", tr, big8, hint));
}

TEST(StrategyModel, InstructionHintAddsIssueTime) {
  // A store-bound conv2d-like kernel: 1 GB of traffic, few flops; the template
  // estimates its thread instructions. Issue time = instructions / warp size /
  // (SMs x 4 schedulers x clock), added to the memory time.
  Target t = gpu();
  t.raw = {{"boost_clock_mhz", 2000}};
  const Traffic tr{1e9, 1e9};
  const json cfg = {{"BLOCK_M", 128}, {"BLOCK_N", 64}, {"num_warps", 4}, {"num_stages", 2}};
  const json grid = {{"grid", {132 * 8, 1, 1}}, {"shared_bytes", 24576}};
  auto plain = predict_config(t, "fp16", tr, cfg, grid);
  json few = grid, many = grid;
  few["instructions"] = 32.0 * 132 * 4 * 2000e6 * 1e-4;  // 0.1 ms of issue
  many["instructions"] = 2 * few["instructions"].get<double>();
  auto a = predict_config(t, "fp16", tr, cfg, few);
  auto b = predict_config(t, "fp16", tr, cfg, many);
  ASSERT_TRUE(plain && a && b);
  EXPECT_EQ(plain->issue_ms, 0);
  EXPECT_NEAR(a->issue_ms, 0.1, 1e-9);
  EXPECT_NEAR(b->issue_ms, 0.2, 1e-9);
  EXPECT_NEAR(b->ms - a->ms, 0.1 / a->utilisation, 1e-9);
  EXPECT_GT(a->ms, plain->ms);
  // No clock in the target file: no issue term.
  t.raw = json::object();
  auto c = predict_config(t, "fp16", tr, cfg, many);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->issue_ms, 0);
}

TEST(StrategyModel, BytesInFlightBoundTheMemoryTime) {
  // A row kernel (hint bytes_in_flight per program): an SM needs bandwidth /
  // SMs x latency bytes in flight (4800 GB/s / 132 x 700 ns = 25.5 KB); fewer
  // stretch the memory time by Little's law, more change nothing.
  const Target t = gpu();
  const Traffic tr{268435456.0, 5.0 * 16384 * 4096};
  const json cfg = {{"BLOCK_M", 1}, {"BLOCK_N", 512}, {"num_warps", 16}, {"num_stages", 1}};
  auto with = [&](double bytes, int grid) {
    return predict_config(t, "bf16", tr, cfg, {{"grid", {grid, 1, 1}}, {"bytes_in_flight", bytes}});
  };
  auto plenty = with(16384, 16384);   // 4 blocks per SM (64 warps / 16) x 16 KiB
  auto starved = with(1024, 16384);   // 4 x 1 KiB
  auto none = predict_config(t, "bf16", tr, cfg, {{"grid", {16384, 1, 1}}});
  ASSERT_TRUE(plenty && starved && none);
  EXPECT_DOUBLE_EQ(plenty->memory_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(none->memory_efficiency, 1.0);
  const double need = 4800e9 / 132 * 700e-9;
  EXPECT_NEAR(starved->memory_efficiency, 4 * 1024 / need, 1e-9);
  EXPECT_GT(starved->ms, 5 * plenty->ms);
}

TEST(StrategyHalving, RoundZeroIsASpreadSampleOfTheBestPredicted) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  SearchSettings st = halving();
  st.initial = 4;
  st.tiles = 0;  // the model's picks only
  Plan p = next_round(sp, {}, "cuda", st, {});
  EXPECT_EQ(p.round, 0);
  ASSERT_EQ(p.configs.size(), 4u);
  EXPECT_EQ(p.space_size, sp.configs.size());
  std::set<std::string> seen;
  for (const auto& c : p.configs) {
    seen.insert(c.dump());
    // the model's best tier: the largest tiles with 8 warps (no spills)
    EXPECT_EQ(c["BLOCK_M"].get<int>() * c["BLOCK_N"].get<int>(), 128 * 256) << c.dump();
    EXPECT_EQ(c["num_warps"], 8) << c.dump();
  }
  EXPECT_EQ(seen.size(), 4u);
  for (size_t i = 0; i < p.configs.size(); ++i)  // spread: no two differ in one knob only
    for (size_t j = i + 1; j < p.configs.size(); ++j) {
      int diff = 0;
      for (auto it = p.configs[i].begin(); it != p.configs[i].end(); ++it) diff += p.configs[j][it.key()] != *it;
      EXPECT_GE(diff, 2);
    }
  EXPECT_FALSE(p.notes.empty());
}

TEST(StrategyHalving, HalfOfRoundZeroGoesToTilesNoOtherPickHas) {
  // The default tiles = 0.5: two picks from the model's best tier, then the best
  // predicted config of two other tile shapes (BLOCK_M x BLOCK_N), so that a
  // model wrong about a whole tile shape cannot fill the round.
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  SearchSettings st = halving();
  st.initial = 4;
  Plan p = next_round(sp, {}, "cuda", st, {});
  ASSERT_EQ(p.configs.size(), 4u);
  auto tile = [](const json& c) { return std::to_string(c["BLOCK_M"].get<int>()) + "x" + std::to_string(c["BLOCK_N"].get<int>()); };
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(p.configs[i]["BLOCK_M"].get<int>() * p.configs[i]["BLOCK_N"].get<int>(), 128 * 256) << p.configs[i].dump();
  std::set<std::string> tiles;
  for (size_t i = 0; i < 4; ++i) tiles.insert(tile(p.configs[i]));
  // the two tile picks add two shapes the first two do not have
  const std::set<std::string> first = {tile(p.configs[0]), tile(p.configs[1])};
  EXPECT_EQ(tiles.size(), first.size() + 2) << p.configs[2].dump() << " " << p.configs[3].dump();
}

TEST(StrategyHalving, IsAPureFunctionOfItsInputs) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  auto h1 = search(sp, halving(), [](const json& c) { return std::optional<double>(landscape(c)); });
  auto h2 = search(sp, halving(), [](const json& c) { return std::optional<double>(landscape(c)); });
  ASSERT_EQ(h1.size(), h2.size());
  for (size_t i = 0; i < h1.size(); ++i) EXPECT_EQ(h1[i].config, h2[i].config);
  // Any prefix of the history (an interrupted run) gives the same next round.
  std::vector<Evaluated> prefix(h1.begin(), h1.begin() + 4);
  Plan again = next_round(sp, {}, "cuda", halving(), prefix);
  Plan before = next_round(sp, {}, "cuda", halving(), prefix);
  EXPECT_EQ(again.configs, before.configs);
  EXPECT_EQ(again.round, 1);
}

TEST(StrategyHalving, LaterRoundsProposeUnevaluatedNeighboursOfTheBest) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  SearchSettings st = halving();
  st.initial = 4;
  Plan r0 = next_round(sp, {}, "cuda", st, {});
  std::vector<Evaluated> h;
  for (const auto& c : r0.configs) h.push_back({c, landscape(c), 0});
  Plan r1 = next_round(sp, {}, "cuda", st, h);
  EXPECT_EQ(r1.round, 1);
  ASSERT_FALSE(r1.configs.empty());
  // survivors: the best 4 * 0.5 = 2 measured
  std::vector<Evaluated> sorted = h;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return *a.score_ms < *b.score_ms; });
  for (const auto& c : r1.configs) {
    for (const auto& e : h) EXPECT_NE(c, e.config);  // nothing evaluated twice
    int d0 = 0, d1 = 0;
    for (auto it = c.begin(); it != c.end(); ++it) {
      d0 += sorted[0].config[it.key()] != *it;
      d1 += sorted[1].config[it.key()] != *it;
    }
    EXPECT_TRUE(d0 == 1 || d1 == 1) << c.dump();
  }
}

TEST(StrategyHalving, FindsTheBestWithAFractionOfTheEvaluations) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  double best = 1e9;
  for (const auto& c : sp.configs) best = std::min(best, landscape(c));
  for (unsigned long long seed = 0; seed < 20; ++seed) {
    int rounds = 0;
    auto h = search(sp, halving(64, seed), [](const json& c) { return std::optional<double>(landscape(c)); },
                    &rounds);
    double found = 1e9;
    for (const auto& e : h) found = std::min(found, *e.score_ms);
    EXPECT_LE(found, best * 1.03) << "seed " << seed;
    EXPECT_LE(h.size() * 4, sp.configs.size()) << "seed " << seed;  // at least 4x fewer
    EXPECT_GE(rounds, 2);
  }
}

TEST(StrategyHalving, NeverProposesWhatTheModelPrunes) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  auto h = search(sp, halving(), [](const json& c) { return std::optional<double>(landscape(c)); });
  for (const auto& e : h)  // 256 fp32 accumulators per thread: predicted to spill
    EXPECT_LT(e.config["BLOCK_M"].get<int>() * e.config["BLOCK_N"].get<int>() /
                  (e.config["num_warps"].get<int>() * 32),
              256)
        << e.config.dump();
}

TEST(StrategyHalving, RespectsTheBudget) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  for (int budget : {1, 3, 5}) {
    auto h = search(sp, halving(budget), [](const json& c) { return std::optional<double>(landscape(c)); });
    EXPECT_EQ(static_cast<int>(h.size()), budget);
  }
}

TEST(StrategyHalving, SpendsAtMostTheBudgetShareOfTheSpace) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  const auto score = [](const json& c) { return std::optional<double>(landscape(c)); };
  // A tenth of the 64 configs: 6 (the default, a fifth, does not bind here:
  // the search converges within 12).
  const size_t cap = static_cast<size_t>(std::floor(0.1 * static_cast<double>(sp.configs.size())));
  size_t most = 0;
  for (unsigned long long seed = 0; seed < 10; ++seed) {
    SearchSettings st = halving(64, seed);
    st.budget_share = 0.1;
    const size_t used = search(sp, st, score).size();
    EXPECT_LE(used, cap) << "seed " << seed;
    most = std::max(most, used);
  }
  // Without the cap (budget_share 1, or 0) the same searches go further.
  SearchSettings open = halving(64, 0);
  size_t most_open = 0;
  for (double share : {0.0, 1.0}) {
    open.budget_share = share;
    for (unsigned long long seed = 0; seed < 10; ++seed) {
      open.seed = seed;
      most_open = std::max(most_open, search(sp, open, score).size());
    }
  }
  EXPECT_GT(most_open, most);
  // Never below round 0: a share of a tiny space still evaluates round 0.
  SearchSettings tiny = halving(64, 0);
  tiny.budget_share = 0.01;
  tiny.initial = 3;
  EXPECT_EQ(search(sp, tiny, score).size(), 3u);
  EXPECT_DOUBLE_EQ(SearchSettings::from_explore({{"halving", {{"budget_share", 0.5}}}}).budget_share, 0.5);
  EXPECT_DOUBLE_EQ(SearchSettings::from_explore({{"halving", {{"budget_share", 7}}}}).budget_share, 1.0);
}

TEST(StrategyHalving, FailuresAreNotSurvivorsAndTheSearchGoesOn) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  SearchSettings st = halving();
  st.initial = 3;
  // Everything with 8 warps fails (say, a compile error).
  auto score = [](const json& c) -> std::optional<double> {
    if (c["num_warps"] == 8) return std::nullopt;
    return landscape(c);
  };
  auto h = search(sp, st, score);
  bool any_ok = false;
  for (const auto& e : h) any_ok = any_ok || e.score_ms.has_value();
  EXPECT_TRUE(any_ok);
  EXPECT_GT(h.size(), 3u);
}

json gemm_config(int bm, int bn, int bk, int w, int st) {
  return {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"BLOCK_K", bk}, {"num_warps", w}, {"num_stages", st}};
}

TEST(StrategyHalving, RoundZeroStartsFromThePriors) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  const json small = gemm_config(64, 64, 32, 4, 3);        // far down the model's ranking
  const json spills = gemm_config(256, 128, 64, 4, 3);     // predicted to spill: pruned by the model
  sp.priors = {small, {{"BLOCK_M", 512}}, small, spills, gemm_config(64, 128, 32, 4, 3)};
  SearchSettings st = halving();
  st.initial = 4;
  Plan p = next_round(sp, {}, "cuda", st, {});
  // Two priors (the default), skipping one not in the space and a repeat, then
  // the model's picks, two fewer (4 - 2); a prior is measured evidence, so the
  // model never prunes it.
  ASSERT_EQ(p.configs.size(), 4u);
  EXPECT_EQ(p.configs[0], small);
  EXPECT_EQ(p.configs[1], spills);
  for (size_t i = 2; i < p.configs.size(); ++i) EXPECT_NE(p.configs[i], small);
  EXPECT_NE(std::find_if(p.notes.begin(), p.notes.end(),
                         [](const std::string& n) { return n.find("fastest on similar jobs") != std::string::npos; }),
            p.notes.end());
  // The model keeps at least two picks.
  st.initial = 3;
  EXPECT_EQ(next_round(sp, {}, "cuda", st, {}).configs.size(), 4u);
  st.initial = 1;
  EXPECT_EQ(next_round(sp, {}, "cuda", st, {}).configs.size(), 3u);
  st.initial = 4;
  // Without priors, or with `priors: 0`, round 0 is the model's alone.
  st.priors = 0;
  Plan none = next_round(sp, {}, "cuda", st, {});
  EXPECT_EQ(none.configs.size(), 4u);
  sp.priors.clear();
  st.priors = 2;
  EXPECT_EQ(next_round(sp, {}, "cuda", st, {}).configs, none.configs);
  // A budget smaller than the priors: the priors alone, up to the budget.
  sp.priors = {small, spills};
  EXPECT_EQ(next_round(sp, {}, "cuda", halving(1), {}).configs, std::vector<json>{small});
}

TEST(StrategyHalving, APriorTheSpaceLacksStandsForItsNearestConfig) {
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  // BLOCK_K 128 is not in this space: BLOCK_K 32 and 64 are one knob away, and
  // the model predicts 64 faster (fewer K steps, same operand traffic).
  sp.priors = {gemm_config(64, 64, 128, 4, 3)};
  SearchSettings st = halving();
  st.initial = 2;
  Plan p = next_round(sp, {}, "cuda", st, {});
  ASSERT_EQ(p.configs.size(), 3u);
  EXPECT_EQ(p.configs[0], gemm_config(64, 64, 64, 4, 3));
  // More than two knobs away from everything: no stand-in.
  sp.priors = {{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"BLOCK_K", 16}, {"num_warps", 4}, {"num_stages", 3}}};
  EXPECT_EQ(next_round(sp, {}, "cuda", st, {}).configs.size(), 2u);
}

TEST(StrategyHalving, PriorsFindABestTheModelRanksLow) {
  // The model ranks the large tiles first; this GPU's best is 64x64 tiles with
  // BLOCK_K 32 on 4 warps and 4 stages, which no seed finds from the model's
  // picks. A prior one knob away (3 stages) leads there.
  const Target t = gpu();
  SearchSpace sp = gemm(t);
  auto score = [](const json& c) -> std::optional<double> {
    auto d = [](double v, double best) { return std::abs(std::log2(v / best)); };
    return 0.2 * (1 + 0.3 * d(c["BLOCK_M"].get<double>(), 64) + 0.3 * d(c["BLOCK_N"].get<double>(), 64) +
                  0.1 * d(c["BLOCK_K"].get<double>(), 32) + 0.1 * d(c["num_warps"].get<double>(), 4) +
                  0.1 * d(c["num_stages"].get<double>(), 4));
  };
  const json best = gemm_config(64, 64, 32, 4, 4);
  auto found = [&](const SearchSpace& s, unsigned long long seed) {
    std::optional<double> f;
    for (const auto& e : search(s, halving(64, seed), score))
      if (e.score_ms && (!f || *e.score_ms < *f)) f = e.score_ms;
    return *f;
  };
  int without = 0, with = 0;
  for (unsigned long long seed = 0; seed < 10; ++seed) {
    without += found(sp, seed) <= *score(best) * 1.03;
    SearchSpace primed = sp;
    primed.priors = {gemm_config(64, 64, 32, 4, 3)};
    with += found(primed, seed) <= *score(best) * 1.03;
  }
  EXPECT_EQ(with, 10);
  EXPECT_LT(without, 10);
}

TEST(StrategyHalving, WithoutAModelFollowsThePrincipleOrder) {
  SearchSpace sp;
  sp.configs = space();  // no target: no model
  SearchSettings st = halving();
  st.initial = 2;
  Plan p = next_round(sp, {}, "hip", st, {});
  ASSERT_EQ(p.configs.size(), 2u);
  EXPECT_EQ(p.configs[0], space()[0]);
  // the second is the first config that differs from it in two knobs or more
  EXPECT_EQ(p.configs[1], space()[3]);
}

TEST(StrategyHalving, SettingsFromTheJobSpec) {
  SearchSettings s = SearchSettings::from_explore(
      {{"strategy", "halving"}, {"max_candidates", 64}, {"seed", 7}, {"budget", 12},
       {"halving", {{"initial", 6}, {"keep", 0.25}, {"prune", 2.0}, {"priors", 3}}}});
  EXPECT_EQ(s.strategy, "halving");
  EXPECT_EQ(s.max_candidates, 12);
  EXPECT_EQ(s.initial, 6);
  EXPECT_DOUBLE_EQ(s.keep, 0.25);
  EXPECT_DOUBLE_EQ(s.prune, 2.0);
  EXPECT_EQ(s.priors, 3);
  EXPECT_EQ(s.seed, 7u);
  SearchSettings d = SearchSettings::from_explore({{"strategy", "halving"}, {"max_candidates", 10}});
  EXPECT_EQ(d.max_candidates, 10);
  EXPECT_EQ(d.initial, 0);
  EXPECT_DOUBLE_EQ(d.keep, 0.5);
  EXPECT_EQ(d.priors, 2);
  EXPECT_EQ(strategy_names().size(), 3u);
}

TEST(StrategyBusy, GpuBusyIsTheUnionOfTheWorkersSpans) {
  // two workers checking side by side, one benchmark after; clipped to the run
  EXPECT_DOUBLE_EQ(union_seconds({{0, 4}, {2, 6}, {7, 8}}, 0, 10), 7.0);
  EXPECT_DOUBLE_EQ(union_seconds({{-5, 1}, {9, 20}}, 0, 10), 2.0);
  EXPECT_DOUBLE_EQ(union_seconds({}, 0, 10), 0.0);
  EXPECT_DOUBLE_EQ(union_seconds({{3, 3}, {1, 2}, {1.5, 2.5}}, 0, 10), 1.5);
}

TEST(StrategyBusy, SpansComeFromTheEvaluatorsReplies) {
  std::vector<std::pair<double, double>> all, bench;
  const nlohmann::json reply = {
      {"ok", true},
      {"result", {{"timings", {{"gpu_spans", {{1.0, 2.0, "check"}, {2.5, 4.0, "bench"}, {"bad"}}}}}}}};
  const EvaluationResult typed = read_evaluation_result(reply);
  append_gpu_spans(typed, all, &bench);
  EXPECT_EQ(all, (std::vector<std::pair<double, double>>{{1.0, 2.0}, {2.5, 4.0}}));
  EXPECT_EQ(bench, (std::vector<std::pair<double, double>>{{2.5, 4.0}}));
  append_gpu_spans(typed, all);  // without a bench list
  EXPECT_EQ(all.size(), 4u);
  append_gpu_spans(read_evaluation_result({{"ok", true}, {"result", {{"status", "ok"}}}}), all, &bench);  // none
  append_gpu_spans(EvaluationResult{}, all, &bench);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(bench.size(), 1u);
}

}  // namespace
}  // namespace kiln
