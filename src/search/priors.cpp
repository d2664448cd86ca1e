#include "search/priors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace kiln {

using nlohmann::json;

namespace {

double log_ratio(double a, double b) { return std::abs(std::log2(a / b)); }

}  // namespace

double job_distance(const json& shape_a, const json& params_a, const std::string& dtype_a,
                    const json& shape_b, const json& params_b, const std::string& dtype_b) {
  constexpr double kFar = std::numeric_limits<double>::infinity();
  if (!shape_a.is_array() || !shape_b.is_array() || shape_a.size() != shape_b.size()) return kFar;
  double d = 0;
  for (size_t i = 0; i < shape_a.size(); ++i) {
    if (!shape_a[i].is_number() || !shape_b[i].is_number()) return kFar;
    const double a = shape_a[i].get<double>(), b = shape_b[i].get<double>();
    if (a <= 0 || b <= 0) return kFar;
    d += log_ratio(a, b);
  }
  const json empty = json::object();
  const json& pa = params_a.is_object() ? params_a : empty;
  const json& pb = params_b.is_object() ? params_b : empty;
  std::set<std::string> names;
  for (auto it = pa.begin(); it != pa.end(); ++it) names.insert(it.key());
  for (auto it = pb.begin(); it != pb.end(); ++it) names.insert(it.key());
  for (const std::string& name : names) {
    auto a = pa.find(name), b = pb.find(name);
    if (a != pa.end() && b != pb.end() && a->is_number() && b->is_number() && !a->is_boolean() &&
        !b->is_boolean() && a->get<double>() > 0 && b->get<double>() > 0)
      d += log_ratio(a->get<double>(), b->get<double>());
    else if (a == pa.end() || b == pb.end() || *a != *b)
      d += 1;
  }
  if (dtype_a != dtype_b) d += 0.5;
  return d;
}

std::vector<Prior> select_priors(const json& shape, const json& params, const std::string& dtype,
                                 const std::string& own_key, const std::vector<MeasuredJob>& past,
                                 const PriorSettings& settings) {
  std::vector<std::pair<double, const MeasuredJob*>> near;
  for (const MeasuredJob& m : past) {
    if (m.key == own_key || m.best.empty()) continue;
    const double d = job_distance(shape, params, dtype, m.shape, m.params, m.dtype);
    if (!std::isfinite(d) || (settings.skip_same_shape && d == 0)) continue;
    near.emplace_back(d, &m);
  }
  // Nearest first; the older job first among equals (job ids grow).
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // One job per problem: a shape explored twice (say exhaustively and by
  // halving) is one neighbour, not two.
  std::set<std::string> problems;
  std::vector<std::pair<double, const MeasuredJob*>> distinct;
  for (const auto& n : near)
    if (distinct.size() < static_cast<size_t>(std::max(0, settings.jobs)) &&
        problems.insert(n.second->shape.dump() + n.second->params.dump() + n.second->dtype).second)
      distinct.push_back(n);
  near = std::move(distinct);

  std::vector<Prior> out;
  std::set<std::string> seen;
  for (size_t rank = 0;; ++rank) {
    bool any = false;
    for (const auto& [d, m] : near) {
      if (rank >= m->best.size()) continue;
      any = true;
      const json& config = m->best[rank].first;
      if (seen.insert(config.dump()).second) out.push_back({config, m->job_id, d});
    }
    if (!any) break;
  }
  return out;
}

}  // namespace kiln
