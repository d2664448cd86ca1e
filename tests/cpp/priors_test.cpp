// Halving's priors: the distance between jobs and the order of past jobs'
// fastest configs (src/search/priors.h).
#include "search/priors.h"

#include <cmath>

#include <gtest/gtest.h>

namespace kiln {
namespace {

using nlohmann::json;

MeasuredJob past(long long id, json shape, std::vector<int> blocks, json params = json::object(),
                 std::string dtype = "bf16") {
  MeasuredJob m;
  m.job_id = id;
  m.key = "key-" + std::to_string(id);
  m.shape = std::move(shape);
  m.params = std::move(params);
  m.dtype = std::move(dtype);
  double ms = 1;
  for (int b : blocks) m.best.emplace_back(json{{"BLOCK", b}}, ms += 0.1);
  return m;
}

TEST(PriorsDistance, LogRatiosOfDimsAndParamsAndDtype) {
  const json none = json::object();
  EXPECT_DOUBLE_EQ(job_distance({1024, 1024, 1024}, none, "bf16", {1024, 1024, 1024}, none, "bf16"), 0);
  // Twice one dim and a quarter of another: 1 + 2.
  EXPECT_DOUBLE_EQ(job_distance({2048, 256, 1024}, none, "bf16", {1024, 1024, 1024}, none, "bf16"), 3);
  EXPECT_DOUBLE_EQ(job_distance({1024}, none, "fp16", {1024}, none, "bf16"), 0.5);
  // Numeric params by ratio; other params 1 when they differ or one lacks them.
  const json a = {{"out_channels", 64}, {"kernel_size", 3}, {"causal", true}};
  const json b = {{"out_channels", 256}, {"kernel_size", 3}, {"causal", false}};
  EXPECT_DOUBLE_EQ(job_distance({8, 32}, a, "fp16", {8, 32}, b, "fp16"), 2 + 1);
  EXPECT_DOUBLE_EQ(job_distance({8, 32}, a, "fp16", {8, 32}, {{"out_channels", 64}, {"kernel_size", 3}}, "fp16"),
                   1);
  // Shapes of another rank, or not positive numbers, are not comparable.
  EXPECT_TRUE(std::isinf(job_distance({1024, 1024}, none, "bf16", {1024, 1024, 1024}, none, "bf16")));
  EXPECT_TRUE(std::isinf(job_distance({0, 1024}, none, "bf16", {1024, 1024}, none, "bf16")));
  EXPECT_TRUE(std::isinf(job_distance({"x", 1024}, none, "bf16", {1024, 1024}, none, "bf16")));
}

TEST(PriorsSelect, NearestJobsFirstTheirFastestInterleaved) {
  const std::vector<MeasuredJob> jobs = {
      past(1, {4096, 4096}, {10, 11, 12}),   // distance 4
      past(2, {2048, 1024}, {20, 10, 22}),   // distance 1
      past(3, {65536, 65536}, {30}),         // far: not among the nearest 2
      past(4, {1024, 1024, 1}, {40}),        // another rank: never
  };
  PriorSettings s;
  s.jobs = 2;
  const auto p = select_priors({1024, 1024}, json::object(), "bf16", "", jobs, s);
  std::vector<int> order;
  for (const Prior& x : p) order.push_back(x.config["BLOCK"].get<int>());
  // Job 2 (distance 1) before job 1 (distance 4); each one's fastest, then each
  // one's second (10 again: dropped), then the third.
  EXPECT_EQ(order, (std::vector<int>{20, 10, 11, 22, 12}));
  EXPECT_EQ(p[0].job_id, 2);
  EXPECT_DOUBLE_EQ(p[0].distance, 1);
  EXPECT_EQ(p[1].job_id, 1);
  EXPECT_DOUBLE_EQ(p[1].distance, 4);
}

TEST(PriorsSelect, TheJobItselfAndRepeatsOfAProblemCountOnce) {
  std::vector<MeasuredJob> jobs = {
      past(1, {1024, 1024}, {10}),  // the job itself (same key)
      past(2, {2048, 1024}, {20}),  // one problem...
      past(3, {2048, 1024}, {30}),  // ...explored twice: one neighbour
      past(4, {4096, 1024}, {40}),
  };
  PriorSettings s;
  s.jobs = 2;
  auto order = [&](const std::string& own, const PriorSettings& st) {
    std::vector<int> v;
    for (const Prior& x : select_priors({1024, 1024}, json::object(), "bf16", own, jobs, st))
      v.push_back(x.config["BLOCK"].get<int>());
    return v;
  };
  EXPECT_EQ(order("key-1", s), (std::vector<int>{20, 40}));
  // Another key with the job's own shape is a past run of the same problem: the best prior...
  EXPECT_EQ(order("", s), (std::vector<int>{10, 20}));
  // ...unless left out (replays, leave-one-out).
  s.skip_same_shape = true;
  EXPECT_EQ(order("", s), (std::vector<int>{20, 40}));
  s.jobs = 0;
  EXPECT_TRUE(order("", s).empty());
  EXPECT_TRUE(select_priors({1024, 1024}, json::object(), "bf16", "", {}, {}).empty());
}

}  // namespace
}  // namespace kiln
