// SlotAffinity: an idle slot keeps to the jobs it has set up.
#include "explore/dispatch.h"

#include <gtest/gtest.h>

#include <map>

using namespace kiln;

TEST(SlotAffinity, NewSlotGoesWhereTheMostWorkPerEvaluatorIs) {
  SlotAffinity a;
  // job 1: 10 ready, 4 out (10/5 = 2); job 2: 6 ready, 0 out (6/1 = 6)
  EXPECT_EQ(a.pick(0, {{1, 10, 4}, {2, 6, 0}}), 2);
  // ties: the first listed
  EXPECT_EQ(a.pick(0, {{1, 4, 1}, {2, 2, 0}}), 1);
  EXPECT_EQ(a.pick(0, {{1, 0, 3}, {2, 0, 0}}), std::nullopt);
  EXPECT_EQ(a.pick(0, {}), std::nullopt);
}

TEST(SlotAffinity, SlotKeepsItsRecentJobsWhileTheyHaveWork) {
  SlotAffinity a;
  a.took(3, 1);
  // job 2 needs more evaluators, but slot 3 has job 1's inputs
  EXPECT_EQ(a.pick(3, {{1, 1, 7}, {2, 20, 0}}), 1);
  // another slot goes by need
  EXPECT_EQ(a.pick(4, {{1, 1, 7}, {2, 20, 0}}), 2);
  // job 1 ran dry: slot 3 moves on
  EXPECT_EQ(a.pick(3, {{1, 0, 7}, {2, 20, 0}}), 2);
  // the most recent first: after 1 then 2, job 2 is preferred; job 1 still beats a stranger
  a.took(3, 2);
  EXPECT_EQ(a.pick(3, {{1, 5, 0}, {2, 5, 0}}), 2);
  EXPECT_EQ(a.pick(3, {{1, 5, 0}, {2, 0, 0}, {9, 50, 0}}), 1);
  // only kRecent jobs are remembered
  a.took(3, 9);
  EXPECT_EQ(a.pick(3, {{1, 5, 0}, {2, 0, 0}, {7, 50, 0}}), 7);
}

TEST(SlotAffinity, ForgottenJobIsNoLongerPreferred) {
  SlotAffinity a;
  a.took(0, 5);
  a.forget(5);
  EXPECT_EQ(a.pick(0, {{5, 1, 9}, {6, 20, 0}}), 6);
}

TEST(SlotAffinity, SlotsSpreadOverJobsInProportionToWork) {
  // 12 idle slots, job 1 with 24 candidates and job 2 with 8: the slots split
  // about 3 : 1, and each keeps to its job afterwards.
  SlotAffinity a;
  std::map<long long, JobLoad> jobs = {{1, {1, 24, 0}}, {2, {2, 8, 0}}};
  std::map<long long, int> slots_on;
  std::map<int, long long> took;
  for (int s = 0; s < 12; ++s) {
    std::vector<JobLoad> v;
    for (auto& [id, j] : jobs) v.push_back(j);
    auto id = a.pick(s, v);
    ASSERT_TRUE(id);
    a.took(s, *id);
    took[s] = *id;
    --jobs[*id].pending;
    ++jobs[*id].in_flight;
    ++slots_on[*id];
  }
  EXPECT_EQ(slots_on[1], 9);
  EXPECT_EQ(slots_on[2], 3);
  std::vector<JobLoad> v = {jobs[1], jobs[2]};
  for (int s = 0; s < 12; ++s) EXPECT_EQ(a.pick(s, v), took[s]) << "slot " << s;
}

TEST(SlotAffinity, MinReadyKeepsNewSlotsOffJobsWithLittleWorkPerEvaluator) {
  SlotAffinity a;
  // job 1: 9 ready with 2 out: 9/3 = 3 per evaluator once a third joins
  EXPECT_EQ(a.pick(0, {{1, 9, 2}}, 4), std::nullopt);
  EXPECT_EQ(a.pick(0, {{1, 9, 2}}, 3), 1);
  EXPECT_EQ(a.pick(0, {{1, 9, 2}}), 1);  // 0: no threshold
  // the best qualifying job, not the first
  EXPECT_EQ(a.pick(0, {{1, 9, 2}, {2, 12, 1}}, 4), 2);
  // a slot's own job is always allowed: its set-up is paid
  a.took(5, 1);
  EXPECT_EQ(a.pick(5, {{1, 1, 7}}, 4), 1);
}

TEST(SlotAffinity, MinReadyBoundsTheSlotsThatSetAJobUp) {
  // 24 idle slots and one exhaustive job of 32 candidates: with min_ready 4 only
  // the first slots join (the others would claim other jobs); without, all 24.
  for (double min_ready : {0.0, 4.0}) {
    SlotAffinity a;
    JobLoad job{1, 32, 0};
    int joined = 0;
    for (int s = 0; s < 24; ++s) {
      if (auto id = a.pick(s, {job}, min_ready)) {
        a.took(s, *id);
        --job.pending;
        ++job.in_flight;
        ++joined;
      }
    }
    if (min_ready == 0) EXPECT_EQ(joined, 24);
    else EXPECT_EQ(joined, 6);  // the 7th would see 26 / 7 < 4
  }
}
