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

// The median of a resample of xs (scratch reused).
double resampled_median(const std::vector<double>& xs, std::mt19937_64& rng, std::vector<double>& scratch) {
  std::uniform_int_distribution<size_t> pick(0, xs.size() - 1);
  scratch.resize(xs.size());
  for (auto& v : scratch) v = xs[pick(rng)];
  const size_t n = scratch.size(), mid = n / 2;
  std::nth_element(scratch.begin(), scratch.begin() + mid, scratch.end());
  const double upper = scratch[mid];
  if (n % 2) return upper;
  const double lower = *std::max_element(scratch.begin(), scratch.begin() + mid);
  return 0.5 * (lower + upper);
}

Interval percentile_interval(std::vector<double> draws, double level) {
  std::sort(draws.begin(), draws.end());
  const double tail = (1 - level) / 2;
  return {quantile_sorted(draws, tail), quantile_sorted(draws, 1 - tail)};
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
  std::mt19937_64 rng(seed);
  std::vector<double> draws, scratch;
  draws.reserve(static_cast<size_t>(std::max(1, resamples)));
  for (int i = 0; i < std::max(1, resamples); ++i) draws.push_back(resampled_median(xs, rng, scratch));
  return percentile_interval(std::move(draws), level);
}

Interval bootstrap_ratio_ci(const std::vector<double>& num, const std::vector<double>& den, int resamples,
                            std::uint64_t seed, double level) {
  require(num, "bootstrap_ratio_ci");
  require(den, "bootstrap_ratio_ci");
  std::mt19937_64 rng(seed);
  std::vector<double> draws, scratch;
  for (int i = 0; i < std::max(1, resamples); ++i) {
    const double a = resampled_median(num, rng, scratch);
    const double b = resampled_median(den, rng, scratch);
    draws.push_back(b != 0 ? a / b : INFINITY);
  }
  return percentile_interval(std::move(draws), level);
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
