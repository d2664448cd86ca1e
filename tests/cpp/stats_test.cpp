// src/stats: median, bootstrap intervals, Mann-Whitney U, the regression decision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "stats/regression.h"
#include "stats/stats.h"

using namespace kiln::stats;

TEST(Stats, Median) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_THROW(median({}), std::invalid_argument);
}

// Values from scipy 1.17.1, computed when this test was written:
//   scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic", use_continuity=True)
TEST(Stats, MannWhitneyMatchesScipy) {
  {
    // x=[1,2,3,4,5,5,6], y=[2.5,3.5,5,7,8,9] -> statistic=11.0, pvalue=0.17235939896143682
    const auto r = mann_whitney_u({1, 2, 3, 4, 5, 5, 6}, {2.5, 3.5, 5, 7, 8, 9});
    EXPECT_DOUBLE_EQ(r.u1, 11.0);
    EXPECT_NEAR(r.p, 0.17235939896143682, 1e-12);
  }
  {
    // a vs b below -> statistic=2.5, pvalue=0.00034554696078684224
    const std::vector<double> a = {0.101, 0.102, 0.100, 0.103, 0.101, 0.102, 0.104, 0.101, 0.100, 0.102};
    const std::vector<double> b = {0.104, 0.106, 0.105, 0.103, 0.107, 0.105, 0.104, 0.106, 0.108, 0.105};
    const auto r = mann_whitney_u(a, b);
    EXPECT_DOUBLE_EQ(r.u1, 2.5);
    EXPECT_NEAR(r.p, 0.00034554696078684224, 1e-12);
  }
  {
    // heavy ties: c=[1,1,1,2,2,3], d=[1,2,2,2,3,3,3,3] -> statistic=12.5, pvalue=0.1322717413964195
    const auto r = mann_whitney_u({1, 1, 1, 2, 2, 3}, {1, 2, 2, 2, 3, 3, 3, 3});
    EXPECT_DOUBLE_EQ(r.u1, 12.5);
    EXPECT_NEAR(r.p, 0.1322717413964195, 1e-12);
  }
  EXPECT_DOUBLE_EQ(mann_whitney_u({2, 2, 2}, {2, 2}).p, 1.0);  // all equal: no evidence
}

TEST(Stats, BootstrapMedianIntervalIsDeterministicAndSized) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(1.0, 0.01);
  std::vector<double> xs(400);
  for (auto& v : xs) v = noise(rng);
  const Interval a = bootstrap_median_ci(xs), b = bootstrap_median_ci(xs);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_TRUE(a.contains(median(xs)));
  // The median of n normal draws has standard error sigma * sqrt(pi / 2 / n):
  // a 95% interval about 2 x 1.96 x that wide (here 0.00245).
  const double expected = 2 * 1.96 * 0.01 * std::sqrt(M_PI / 2 / 400.0);
  EXPECT_GT(a.hi - a.lo, 0.6 * expected);
  EXPECT_LT(a.hi - a.lo, 1.6 * expected);
  // Another seed moves the interval only a little.
  const Interval c = bootstrap_median_ci(xs, kBootstrapResamples, 99);
  EXPECT_NEAR(c.lo, a.lo, 0.3 * expected);
}

TEST(Stats, BootstrapRatioIntervalCoversTheTrueRatio) {
  // 200 seeds: the 95% interval of median(1.05 x) / median(x) should cover 1.05 in most.
  int covered = 0;
  for (int seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(1000 + seed);
    std::lognormal_distribution<double> d(0.0, 0.02);
    std::vector<double> x(60), y(60);
    for (auto& v : x) v = d(rng);
    for (auto& v : y) v = 1.05 * d(rng);
    if (bootstrap_ratio_ci(y, x, 2000, seed).contains(1.05)) ++covered;
  }
  EXPECT_GE(covered, 175);  // nominal 190; percentile intervals of medians run a little short
  EXPECT_LE(covered, 200);
}

namespace {
// A confirmation's samples: `rounds` rounds of `per` calls, each round at its
// own clock (a common factor 1 + N(0, round_sd)), each call with its own noise.
std::vector<double> in_rounds(std::mt19937_64& rng, double scale, double round_sd, int rounds = 5, int per = 20) {
  std::normal_distribution<double> round_factor(0.0, round_sd), call(0.0, 0.002);
  std::vector<double> xs;
  for (int r = 0; r < rounds; ++r) {
    const double f = 1.0 + round_factor(rng);
    for (int i = 0; i < per; ++i) xs.push_back(scale * f * (1.0 + call(rng)));
  }
  return xs;
}
}  // namespace

TEST(Stats, RoundBootstrapCoversWhatTheRoundsClocksMove) {
  // Runs whose rounds each settle at their own clock (2% apart): the interval
  // over the samples alone treats 100 calls as independent and covers the
  // job's true median in under half the runs; the one over the rounds and
  // their samples in most.
  int iid = 0, rounds = 0;
  for (int seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(5000 + seed);
    const std::vector<double> xs = in_rounds(rng, 1.0, 0.02);
    iid += bootstrap_median_ci(xs, 2000, seed).contains(1.0);
    rounds += bootstrap_median_ci_rounds(xs, 5, 2000, seed).contains(1.0);
  }
  EXPECT_LT(iid, 100);
  EXPECT_GE(rounds, 150);  // five rounds: a percentile interval over five clusters runs short of 95%
  EXPECT_GT(rounds, iid + 60);
}

TEST(Stats, RoundBootstrapIsDeterministicAndFallsBackWithoutRounds) {
  std::mt19937_64 rng(3);
  const std::vector<double> xs = in_rounds(rng, 0.4, 0.01);
  const Interval a = bootstrap_median_ci_rounds(xs, 5), b = bootstrap_median_ci_rounds(xs, 5);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_TRUE(a.contains(median(xs)));
  // one round, or a size that is not a multiple of the rounds: the plain bootstrap, bit for bit
  for (size_t r : {size_t(0), size_t(1), size_t(3), size_t(200)}) {
    const Interval plain = bootstrap_median_ci(xs), got = bootstrap_median_ci_rounds(xs, r);
    EXPECT_EQ(got.lo, plain.lo) << r;
    EXPECT_EQ(got.hi, plain.hi) << r;
  }
  EXPECT_THROW(bootstrap_median_ci_rounds({}, 5), std::invalid_argument);
}

TEST(Stats, RoundRatioBootstrapDrawsTheSameRoundsForBoth) {
  // Kernel and baseline timed in the same rounds: a round's clock moves both,
  // their ratio (1.05) does not move with it. Drawing the same rounds for
  // both cancels the clock in the ratio; resampling the two apart counts it
  // twice (a wider interval, here about 3.6x).
  int paired = 0, apart = 0;
  double paired_width = 0, apart_width = 0;
  for (int seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(9000 + seed);
    std::normal_distribution<double> round_factor(0.0, 0.02), call(0.0, 0.002);
    std::vector<double> kernel, eager;
    for (int r = 0; r < 5; ++r) {
      const double f = 1.0 + round_factor(rng);
      for (int i = 0; i < 20; ++i) kernel.push_back(f * (1.0 + call(rng)));
      for (int i = 0; i < 20; ++i) eager.push_back(1.05 * f * (1.0 + call(rng)));
    }
    const Interval p = bootstrap_ratio_ci_rounds(eager, kernel, 5, 2000, seed);
    const Interval q = bootstrap_ratio_ci(eager, kernel, 2000, seed);
    paired += p.contains(1.05);
    apart += q.contains(1.05);
    paired_width += p.hi - p.lo;
    apart_width += q.hi - q.lo;
  }
  std::printf("ratio coverage: paired rounds %d/200 (mean width %.5f), samples apart %d/200 (%.5f)\n", paired,
              paired_width / 200, apart, apart_width / 200);
  EXPECT_GE(paired, 170);
  EXPECT_LE(paired, 200);
  EXPECT_LT(paired_width, 0.5 * apart_width);  // the rounds' common clock cancels in the ratio
}

TEST(Stats, UnpairedRoundRatioCoversTwoRunsEachAtItsOwnClocks) {
  // Two runs of a job 5% apart, each in 5 rounds at clocks of their own (2%
  // apart): the interval over the calls alone covers the true 1.05 in few
  // runs; the one over each run's rounds, drawn apart (the runs share no
  // rounds), in most.
  int calls = 0, rounds = 0;
  for (int seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(7000 + seed);
    const std::vector<double> before = in_rounds(rng, 1.0, 0.02), now = in_rounds(rng, 1.05, 0.02);
    calls += bootstrap_ratio_ci(now, before, 2000, seed).contains(1.05);
    rounds += bootstrap_ratio_ci_unpaired_rounds(now, 5, before, 5, 2000, seed).contains(1.05);
  }
  EXPECT_LT(calls, 100);
  EXPECT_GE(rounds, 150);
  EXPECT_GT(rounds, calls + 60);
}

TEST(Stats, UnpairedRoundRatioFallsBackSideBySide) {
  std::mt19937_64 rng(11);
  const std::vector<double> a = in_rounds(rng, 1.05, 0.01), b = in_rounds(rng, 1.0, 0.01);
  // no rounds on either side (or sizes they do not split): bootstrap_ratio_ci bit for bit
  for (size_t r : {size_t(0), size_t(1), size_t(3)}) {
    const Interval plain = bootstrap_ratio_ci(a, b), got = bootstrap_ratio_ci_unpaired_rounds(a, r, b, r);
    EXPECT_EQ(got.lo, plain.lo) << r;
    EXPECT_EQ(got.hi, plain.hi) << r;
  }
  // rounds on one side only: wider than none, narrower than or as wide as both
  const Interval none = bootstrap_ratio_ci_unpaired_rounds(a, 0, b, 0);
  const Interval one = bootstrap_ratio_ci_unpaired_rounds(a, 5, b, 0);
  const Interval both = bootstrap_ratio_ci_unpaired_rounds(a, 5, b, 5);
  EXPECT_GT(one.hi - one.lo, none.hi - none.lo);
  EXPECT_GT(both.hi - both.lo, one.hi - one.lo);
  // deterministic, and different round counts per side (4 x 25 against 5 x 20)
  const Interval again = bootstrap_ratio_ci_unpaired_rounds(a, 4, b, 5);
  EXPECT_EQ(again.lo, bootstrap_ratio_ci_unpaired_rounds(a, 4, b, 5).lo);
  EXPECT_TRUE(again.contains(median(a) / median(b)));
  EXPECT_THROW(bootstrap_ratio_ci_unpaired_rounds({}, 5, b, 5), std::invalid_argument);
}

TEST(Regression, TheRatioIntervalIsOverTheRoundsWhereKnownAndTheVerdictIsNot) {
  std::mt19937_64 rng(21);
  const std::vector<double> before = in_rounds(rng, 1.0, 0.02), now = in_rounds(rng, 1.0, 0.02);
  const RegressionDecision calls = decide_regression(before, now);
  const RegressionDecision rounds = decide_regression(before, now, {}, 5, 5);
  EXPECT_EQ(rounds.verdict, calls.verdict);
  EXPECT_EQ(rounds.p, calls.p);
  EXPECT_EQ(rounds.ratio, calls.ratio);
  const Interval want = bootstrap_ratio_ci_unpaired_rounds(now, 5, before, 5);
  EXPECT_EQ(rounds.ratio_ci.lo, want.lo);
  EXPECT_EQ(rounds.ratio_ci.hi, want.hi);
  EXPECT_GT(rounds.ratio_ci.hi - rounds.ratio_ci.lo, calls.ratio_ci.hi - calls.ratio_ci.lo);
}

namespace {
std::vector<double> draw(std::mt19937_64& rng, double scale, int n = 100) {
  // Kernel timings: a floor plus right-skewed noise, with rare outliers.
  std::gamma_distribution<double> g(4.0, 0.004);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> xs(n);
  for (auto& v : xs) v = scale * (1.0 + g(rng) + (u(rng) < 0.02 ? 0.3 : 0.0));
  return xs;
}
}  // namespace

TEST(Regression, AaRunsRarelyRegress) {
  int regressed = 0;
  for (int seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    const auto a = draw(rng, 1.0), b = draw(rng, 1.0);
    if (decide_regression(a, b).verdict == "regressed") ++regressed;
  }
  EXPECT_LE(regressed, 2);  // p < 0.01 AND > 3%: almost never for equal kernels
}

TEST(Regression, FivePercentSlowerIsDetected) {
  int detected = 0;
  for (int seed = 0; seed < 100; ++seed) {
    std::mt19937_64 rng(5000 + seed);
    const auto a = draw(rng, 1.0), b = draw(rng, 1.05);
    const auto d = decide_regression(a, b);
    if (d.verdict == "regressed") ++detected;
    EXPECT_GT(d.ratio, 1.0);
  }
  EXPECT_GE(detected, 95);
}

TEST(Regression, SmallButSignificantEffectIsUnchanged) {
  // 1.5% slower with tight samples: the test sees it, the minimum effect does not count it.
  std::mt19937_64 rng(11);
  const auto a = draw(rng, 1.0, 400), b = draw(rng, 1.015, 400);
  const auto d = decide_regression(a, b);
  EXPECT_LT(d.p, 0.01);
  EXPECT_EQ(d.verdict, "unchanged");
  // With no minimum effect the same samples are a regression.
  EXPECT_EQ(decide_regression(a, b, {0.01, 0.0}).verdict, "regressed");
}

TEST(Regression, FasterIsImproved) {
  std::mt19937_64 rng(12);
  const auto a = draw(rng, 1.0), b = draw(rng, 0.9);
  const auto d = decide_regression(a, b);
  EXPECT_EQ(d.verdict, "improved");
  EXPECT_LT(d.ratio_ci.hi, 1.0);
  EXPECT_EQ(d.n_previous, 100);
}
