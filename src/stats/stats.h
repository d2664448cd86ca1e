// Statistics over raw timing samples (milliseconds): what the confirmation
// round (src/explore), `kiln best` and `kiln nightly` compute from the
// catalog's stored samples. Pure functions, no state; deterministic (the
// bootstrap's generator is seeded by the caller, default kBootstrapSeed), so a
// statistic printed once is recomputed bit for bit from the same samples.
//
// Failure: an empty sample is a std::invalid_argument (there is no median of
// nothing); callers check sizes first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::stats {

constexpr std::uint64_t kBootstrapSeed = 20261201;
constexpr int kBootstrapResamples = 4000;

// The median (mean of the two middle values for an even count).
double median(std::vector<double> xs);

struct Interval {
  double lo = 0, hi = 0;
  bool contains(double v) const { return lo <= v && v <= hi; }
  bool overlaps(const Interval& o) const { return lo <= o.hi && o.lo <= hi; }
};

// Percentile bootstrap 95% interval (2.5th and 97.5th percentiles of the
// resampled medians) of the median of xs: `resamples` resamples with
// replacement drawn by a std::mt19937_64 seeded with `seed`.
Interval bootstrap_median_ci(const std::vector<double>& xs, int resamples = kBootstrapResamples,
                             std::uint64_t seed = kBootstrapSeed, double level = 0.95);

// Percentile bootstrap interval of median(num) / median(den), each sample
// resampled independently (the two were timed interleaved but call by call
// they are not paired). A speedup "eager / kernel" is ratio(eager, kernel).
Interval bootstrap_ratio_ci(const std::vector<double>& num, const std::vector<double>& den,
                            int resamples = kBootstrapResamples, std::uint64_t seed = kBootstrapSeed,
                            double level = 0.95);

// The same intervals for samples taken in `rounds` equal consecutive blocks,
// as a confirmation round takes them (each round its own lead-in, input set
// and call order; on a GPU at its power limit its own clock, so one round's
// samples move together and are not independent draws: on an H200 the
// round medians of one power-limited job spread 3-6%). A two-stage
// (hierarchical) bootstrap: `rounds` rounds drawn with replacement, then
// within each drawn round as many samples with replacement; the median of
// the pooled draw. For the ratio the same rounds are drawn for num and den
// (timed interleaved in the same rounds, a round's clock moves both).
// rounds < 2, or a sample size that is not a multiple of rounds: the plain
// bootstraps above.
Interval bootstrap_median_ci_rounds(const std::vector<double>& xs, size_t rounds,
                                    int resamples = kBootstrapResamples, std::uint64_t seed = kBootstrapSeed,
                                    double level = 0.95);
Interval bootstrap_ratio_ci_rounds(const std::vector<double>& num, const std::vector<double>& den, size_t rounds,
                                   int resamples = kBootstrapResamples, std::uint64_t seed = kBootstrapSeed,
                                   double level = 0.95);

// The ratio median(num) / median(den) of two samples timed apart (two runs,
// not paired), each taken in its own confirmation rounds: num_rounds and
// den_rounds. A side whose samples split into its rounds evenly (at least 2)
// is drawn two-stage as bootstrap_median_ci_rounds draws it, with rounds of
// its own; a side that does not is drawn call by call. With neither, the
// same interval as bootstrap_ratio_ci, bit for bit.
Interval bootstrap_ratio_ci_unpaired_rounds(const std::vector<double>& num, size_t num_rounds,
                                            const std::vector<double>& den, size_t den_rounds,
                                            int resamples = kBootstrapResamples, std::uint64_t seed = kBootstrapSeed,
                                            double level = 0.95);

struct MannWhitney {
  double u1 = 0;      // U of the first sample: pairs (x, y) with x > y, ties counting 1/2
  double z = 0;       // normal approximation, with the tie correction and a 0.5 continuity correction
  double p = 1;       // two-sided
};

// Mann-Whitney U test of x against y, normal approximation with tie
// correction and continuity correction: the same numbers as
// scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic",
// use_continuity=True). All values equal: p = 1.
MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace kiln::stats
