// DriverUtilisation: the drivers' utilisation samples, merged from several
// workers' answers (explore/utilisation.h).
#include "explore/utilisation.h"

#include <gtest/gtest.h>

using kiln::CheckedAnswer;
using kiln::DriverUtilisation;
using nlohmann::json;

namespace {

// One evaluate answer with these samples, checked and typed as the slot pool hands it on.
CheckedAnswer answer(json samples) {
  kiln::WorkerOutcome o;
  o.reply = json{{"id", 1}, {"ok", true},
                 {"result", {{"status", "ok"}, {"timings", {{"check_s", 0.1}, {"util_samples", std::move(samples)}}}}}};
  return kiln::check_answer("evaluate", std::move(o));
}

}  // namespace

TEST(DriverUtilisation, WorkersOfOneGpuRepeatSamplesCountedOnce) {
  DriverUtilisation u(1);
  CheckedAnswer a = answer({{100.0, 50}, {100.5, 100}});
  CheckedAnswer b = answer({{100.5, 100}, {101.0, 0}});  // the second worker read the same buffer
  u.take(0, a);
  u.take(0, b);
  auto f = u.figure(0, 99, 103);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->samples, 3u);
  EXPECT_DOUBLE_EQ(f->fraction, 0.5);  // (50 + 100 + 0) / 3 %
  EXPECT_DOUBLE_EQ(f->coverage, 0.25);  // 1 s of samples over a 4 s window
}

TEST(DriverUtilisation, SamplesAreTakenOutOfEveryViewOfTheAnswer) {
  DriverUtilisation u(1);
  CheckedAnswer a = answer({{10.0, 80}, {11.0, 40}});
  ASSERT_EQ(a.typed.result.timings.util_samples.size(), 2u);
  u.take(0, a);
  EXPECT_EQ(u.figure(0, 0, 20)->samples, 2u);
  // the typed timings, the result that is recorded, the reply as received
  EXPECT_TRUE(a.typed.result.timings.util_samples.empty());
  EXPECT_FALSE(a.typed.result.raw["timings"].contains("util_samples"));
  EXPECT_FALSE(a.outcome.reply["result"]["timings"].contains("util_samples"));
  EXPECT_DOUBLE_EQ(a.typed.result.raw["timings"]["check_s"].get<double>(), 0.1);  // the rest stays
  EXPECT_EQ(a.typed.result.timings.check_s, 0.1);
}

TEST(DriverUtilisation, OnlyTheWindowAndWellFormedSamplesCount) {
  DriverUtilisation u(1);
  CheckedAnswer a = answer({{5.0, 100}, {10.0, 20}, {"x", 50}, {12.0}, {13.0, 140}, {14.0, -1}, {15.0, 40}, {30.0, 100}});
  u.take(0, a);
  auto f = u.figure(0, 10, 20);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->samples, 2u);  // 10 and 15: 5 and 30 outside, the rest malformed or out of range
  EXPECT_DOUBLE_EQ(f->fraction, 0.3);
  EXPECT_FALSE(u.figure(0, 40, 50));  // no samples there
  EXPECT_FALSE(u.figure(0, 20, 10));  // an empty window
}

TEST(DriverUtilisation, EachGpuApartAndTheirMean) {
  DriverUtilisation u(2);
  CheckedAnswer a = answer({{1.0, 100}, {2.0, 100}});
  CheckedAnswer b = answer({{1.0, 20}, {3.0, 40}});  // the same time on another GPU is another sample
  u.take(0, a);
  u.take(1, b);
  EXPECT_DOUBLE_EQ(u.figure(0, 0, 4)->fraction, 1.0);
  EXPECT_DOUBLE_EQ(u.figure(1, 0, 4)->fraction, 0.3);
  auto all = u.overall(0, 4);
  ASSERT_TRUE(all);
  EXPECT_DOUBLE_EQ(all->fraction, 0.65);
  EXPECT_EQ(all->samples, 4u);
  EXPECT_DOUBLE_EQ(all->coverage, 0.25);  // GPU 0's 1 s of 4
  CheckedAnswer none = answer(json::array());
  DriverUtilisation empty(1);
  empty.take(0, none);
  EXPECT_FALSE(empty.overall(0, 4));
  CheckedAnswer out_of_range = answer({{1.0, 50}});
  empty.take(5, out_of_range);  // no such GPU: ignored, still taken out
  EXPECT_FALSE(out_of_range.typed.result.raw["timings"].contains("util_samples"));
}

TEST(DriverUtilisation, DropLeavesTheRestOfTheAnswer) {
  json a = answer({{1.0, 50}}).outcome.reply;
  kiln::drop_util_samples(a);
  EXPECT_FALSE(a["result"]["timings"].contains("util_samples"));
  EXPECT_TRUE(a["result"]["timings"].contains("check_s"));
  json odd = json::array({1, 2});  // not an answer: left alone
  kiln::drop_util_samples(odd);
  EXPECT_EQ(odd.size(), 2u);
}
