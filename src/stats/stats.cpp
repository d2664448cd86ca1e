#include "stats/stats.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace kiln::stats {

namespace {

// The q-quantile of sorted values, linear between closest ranks (numpy's default).
double quantile_sorted(const std::vector<double>& s, double q) {
  const double pos = q * static_cast<double>(s.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (s[hi] - s[lo]) * (pos - static_cast<double>(lo));
}

void require(const std::vector<double>& xs, const char* what) {
  if (xs.empty()) throw std::invalid_argument(std::string(what) + ": empty sample");
}

// Medians of resamples of xs (with replacement, xs.size() draws each). A
// resample is drawn as n uniform picks of an index; its median is read off
// the picks' ranks in sorted xs by counting them, which gives the very value
// sorting the resample (or nth_element) would, in O(n) and without moving a
// double: the bootstrap's intervals stay bit for bit what they were.
class MedianResampler {
 public:
  explicit MedianResampler(const std::vector<double>& xs) : sorted_(xs.size()), rank_(xs.size()), counts_(xs.size()) {
    std::vector<size_t> order(xs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return xs[a] < xs[b]; });
    for (size_t r = 0; r < order.size(); ++r) {
      sorted_[r] = xs[order[r]];
      rank_[order[r]] = r;
    }
  }

  double draw(std::mt19937_64& rng) {
    const size_t n = rank_.size();
    std::uniform_int_distribution<size_t> pick(0, n - 1);
    std::fill(counts_.begin(), counts_.end(), 0);
    for (size_t i = 0; i < n; ++i) ++counts_[rank_[pick(rng)]];
    return resample_median();
  }

  // The second stage of a two-stage resample: xs taken as blocks.size()
  // equal consecutive blocks (rounds), `blocks` the rounds drawn (with
  // replacement, by the caller); within each drawn round its samples drawn
  // with replacement.
  double draw_blocks(std::mt19937_64& rng, const std::vector<size_t>& blocks) {
    const size_t per = rank_.size() / blocks.size();
    std::uniform_int_distribution<size_t> pick(0, per - 1);
    std::fill(counts_.begin(), counts_.end(), 0);
    for (size_t b : blocks)
      for (size_t i = 0; i < per; ++i) ++counts_[rank_[b * per + pick(rng)]];
    return resample_median();
  }

 private:
  double resample_median() const {
    const size_t n = rank_.size();
    const size_t mid = n / 2;
    const double upper = order_statistic(mid);
    if (n % 2) return upper;
    const double lower = order_statistic(mid - 1);
    return 0.5 * (lower + upper);
  }

  // The k-th smallest (0-based) value of the current resample.
  double order_statistic(size_t k) const {
    size_t below = 0, r = 0;
    while (below + counts_[r] <= k) below += counts_[r++];
    return sorted_[r];
  }

  std::vector<double> sorted_;   // xs ascending
  std::vector<size_t> rank_;     // xs[i] is sorted_[rank_[i]]
  std::vector<size_t> counts_;   // picks of each rank in the current resample
};

Interval percentile_interval(std::vector<double> draws, double level) {
  std::sort(draws.begin(), draws.end());
  const double tail = (1 - level) / 2;
  return {quantile_sorted(draws, tail), quantile_sorted(draws, 1 - tail)};
}

bool in_rounds(size_t n, size_t rounds) { return rounds >= 2 && n >= rounds && n % rounds == 0; }

// The median of one resample of xs: two-stage (its rounds with replacement,
// then the samples within each drawn round) where xs splits into `rounds`
// evenly, else call by call (MedianResampler::draw).
class RoundsResampler {
 public:
  RoundsResampler(const std::vector<double>& xs, size_t rounds)
      : resample_(xs), blocks_(in_rounds(xs.size(), rounds) ? rounds : 0) {}

  double draw(std::mt19937_64& rng) {
    if (blocks_.empty()) return resample_.draw(rng);
    std::uniform_int_distribution<size_t> pick_round(0, blocks_.size() - 1);
    for (size_t& b : blocks_) b = pick_round(rng);
    return resample_.draw_blocks(rng, blocks_);
  }

 private:
  MedianResampler resample_;
  std::vector<size_t> blocks_;  // the rounds drawn; empty: no rounds
};

// The percentile interval of the medians of `resamples` resamples of xs
// (RoundsResampler: over its rounds where it has them).
Interval median_ci(const std::vector<double>& xs, size_t rounds, int resamples, std::uint64_t seed, double level) {
  std::mt19937_64 rng(seed);
  RoundsResampler resample(xs, rounds);
  std::vector<double> draws;
  draws.reserve(static_cast<size_t>(std::max(1, resamples)));
  for (int i = 0; i < std::max(1, resamples); ++i) draws.push_back(resample.draw(rng));
  return percentile_interval(std::move(draws), level);
}

// The percentile interval of median(num) / median(den) over resamples that
// draw the two apart, each over its own rounds where it has them.
Interval ratio_ci_apart(const std::vector<double>& num, size_t num_rounds, const std::vector<double>& den,
                        size_t den_rounds, int resamples, std::uint64_t seed, double level) {
  std::mt19937_64 rng(seed);
  RoundsResampler a(num, num_rounds), b(den, den_rounds);
  std::vector<double> draws;
  draws.reserve(static_cast<size_t>(std::max(1, resamples)));
  for (int i = 0; i < std::max(1, resamples); ++i) {
    const double x = a.draw(rng);
    const double y = b.draw(rng);
    draws.push_back(y != 0 ? x / y : INFINITY);
  }
  return percentile_interval(std::move(draws), level);
}

}  // namespace

double median(std::vector<double> xs) {
  require(xs, "median");
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

Interval bootstrap_median_ci(const std::vector<double>& xs, int resamples, std::uint64_t seed, double level) {
  require(xs, "bootstrap_median_ci");
  return median_ci(xs, 0, resamples, seed, level);
}

Interval bootstrap_ratio_ci(const std::vector<double>& num, const std::vector<double>& den, int resamples,
                            std::uint64_t seed, double level) {
  require(num, "bootstrap_ratio_ci");
  require(den, "bootstrap_ratio_ci");
  return ratio_ci_apart(num, 0, den, 0, resamples, seed, level);
}

Interval bootstrap_median_ci_rounds(const std::vector<double>& xs, size_t rounds, int resamples, std::uint64_t seed,
                                    double level) {
  require(xs, "bootstrap_median_ci_rounds");
  return median_ci(xs, rounds, resamples, seed, level);  // without rounds: bootstrap_median_ci's draws
}

Interval bootstrap_ratio_ci_rounds(const std::vector<double>& num, const std::vector<double>& den, size_t rounds,
                                   int resamples, std::uint64_t seed, double level) {
  require(num, "bootstrap_ratio_ci_rounds");
  require(den, "bootstrap_ratio_ci_rounds");
  if (!in_rounds(num.size(), rounds) || !in_rounds(den.size(), rounds))
    return bootstrap_ratio_ci(num, den, resamples, seed, level);
  std::mt19937_64 rng(seed);
  MedianResampler resample_num(num), resample_den(den);
  std::uniform_int_distribution<size_t> pick_round(0, rounds - 1);
  std::vector<size_t> blocks(rounds);
  std::vector<double> draws;
  for (int i = 0; i < std::max(1, resamples); ++i) {
    for (size_t& b : blocks) b = pick_round(rng);  // the same rounds for both: they shared them
    const double a = resample_num.draw_blocks(rng, blocks);
    const double b = resample_den.draw_blocks(rng, blocks);
    draws.push_back(b != 0 ? a / b : INFINITY);
  }
  return percentile_interval(std::move(draws), level);
}

Interval bootstrap_ratio_ci_unpaired_rounds(const std::vector<double>& num, size_t num_rounds,
                                            const std::vector<double>& den, size_t den_rounds, int resamples,
                                            std::uint64_t seed, double level) {
  require(num, "bootstrap_ratio_ci_unpaired_rounds");
  require(den, "bootstrap_ratio_ci_unpaired_rounds");
  return ratio_ci_apart(num, num_rounds, den, den_rounds, resamples, seed, level);
}

MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  require(x, "mann_whitney_u");
  require(y, "mann_whitney_u");
  const double n1 = static_cast<double>(x.size()), n2 = static_cast<double>(y.size());
  // Midranks of the pooled sample; tie groups for the variance correction.
  std::vector<std::pair<double, int>> all;
  all.reserve(x.size() + y.size());
  for (double v : x) all.push_back({v, 0});
  for (double v : y) all.push_back({v, 1});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double rank_sum_x = 0, tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double midrank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_x += midrank;
    tie_term += t * t * t - t;
    i = j;
  }
  MannWhitney r;
  r.u1 = rank_sum_x - n1 * (n1 + 1) / 2;
  const double n = n1 + n2;
  const double mu = n1 * n2 / 2;
  const double var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (!(var > 0)) {
    r.z = 0;
    r.p = 1;
    return r;
  }
  // scipy: U = max(U1, U2), z = (U - mu - 0.5) / s, p = 2 * sf(z), clipped to 1.
  const double u = std::max(r.u1, n1 * n2 - r.u1);
  r.z = (u - mu - 0.5) / std::sqrt(var);
  r.p = std::min(1.0, std::erfc(r.z / std::sqrt(2.0)));
  return r;
}

}  // namespace kiln::stats
