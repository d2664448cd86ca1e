#include "explore/confirm.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "stats/stats.h"

namespace kiln {

using nlohmann::json;

ConfirmSettings confirm_settings(const json& spec, int rounds, int reps) {
  ConfirmSettings s;
  s.rounds = rounds;
  s.reps = reps;
  const json ex = spec.is_object() ? spec.value("explore", json::object()) : json::object();
  if (auto m = ex.find("confirm_margin"); m != ex.end() && m->is_number()) s.margin = m->get<double>();
  if (auto b = ex.find("baselines"); b != ex.end() && b->is_array()) {
    s.baselines = {"eager"};
    for (const auto& x : *b)
      if (x.is_string() && x != "eager") s.baselines.push_back(x.get<std::string>());
  }
  return s;
}

std::vector<Finalist> pick_finalists(const std::vector<EvaluatedCandidate>& evaluated, const Target& target,
                                     bool measured, const ConfirmSettings& settings) {
  std::vector<Finalist> scored;
  for (const auto& c : evaluated) {
    if (c.status != "ok" || c.generated) continue;
    std::optional<double> score;
    if (measured) {
      if (c.median_ms && !c.bench_device.empty() && TargetRegistry::matches_device(target, c.bench_device))
        score = c.median_ms;
    } else {
      score = c.estimate_ms;
    }
    if (score) scored.push_back({c.candidate_id, c.config, *score});
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const Finalist& a, const Finalist& b) { return a.score_ms < b.score_ms; });
  std::vector<Finalist> out;
  for (const auto& f : scored) {
    const bool within = f.score_ms <= scored.front().score_ms * (1 + settings.margin);
    if (static_cast<int>(out.size()) >= settings.max_finalists) break;
    if (!within && static_cast<int>(out.size()) >= settings.min_finalists) break;
    out.push_back(f);
  }
  return out;
}

json confirm_request(const json& job, const std::vector<Finalist>& finalists, const ConfirmSettings& settings) {
  json entries = json::array();
  for (const auto& f : finalists) entries.push_back({{"id", f.candidate_id}, {"config", f.config}});
  for (const auto& b : settings.baselines) entries.push_back({{"baseline", b}});
  return {{"method", "confirm"}, {"job", job}, {"entries", entries},
          {"rounds", settings.rounds}, {"reps", settings.reps},
          {"throttle_threshold", settings.throttle_threshold},
          {"throttle_recovery_s", settings.throttle_recovery_s},
          {"preheat_s", settings.preheat_s}};
}

std::vector<ConfirmationRow> confirmation_rows(long long job_id, const std::string& run_id,
                                               const std::vector<Finalist>& finalists, const json& result) {
  if (!result.is_object() || !result.contains("entries") || !result["entries"].is_array())
    throw std::runtime_error("confirm answer without entries");
  const std::string basis = result.value("basis", "");
  if (basis != "device" && basis != "cpu") throw std::runtime_error("confirm answer with basis '" + basis + "'");
  std::map<long long, bool> asked;
  for (const auto& f : finalists) asked[f.candidate_id] = true;
  const json conditions = result.value("conditions", json::object());
  std::vector<ConfirmationRow> rows;
  for (const auto& e : result["entries"]) {
    ConfirmationRow r;
    r.job_id = job_id;
    r.run_id = run_id;
    r.basis = basis;
    r.device = result.value("device", "");
    r.conditions = conditions;
    r.conditions["rounds_n"] = result.value("rounds", 0);
    if (e.contains("baseline")) {
      r.baseline = e["baseline"].get<std::string>();
    } else {
      const long long id = e.value("id", 0LL);
      if (!asked.count(id)) throw std::runtime_error("confirm answer names candidate " + std::to_string(id) +
                                                     ", which was not sent");
      r.candidate_id = id;
      r.conditions["check"] = e.value("check", json());
    }
    if (e.contains("inject_ms")) r.conditions["inject_ms"] = e["inject_ms"];
    for (const auto& x : e.value("samples_ms", json::array()))
      if (x.is_number()) r.samples_ms.push_back(x.get<double>());
    if (r.samples_ms.empty()) throw std::runtime_error("confirm answer: an entry without samples");
    r.median_ms = stats::median(r.samples_ms);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::optional<BestRow> select_confirmed(const std::vector<ConfirmationRow>& rows,
                                        const std::vector<EvaluatedCandidate>& evaluated) {
  const ConfirmationRow* best = nullptr;
  for (const auto& r : rows) {
    if (!r.candidate_id) continue;
    const json chk = r.conditions.value("check", json());
    if (!chk.is_object() || !chk.value("passed", false)) continue;
    if (!best || r.median_ms < best->median_ms) best = &r;
  }
  if (!best) return std::nullopt;
  BestRow b;
  b.job_id = best->job_id;
  b.candidate_id = *best->candidate_id;
  b.confirmed_run = best->run_id;
  b.confirmed_ms = best->median_ms;
  if (best->basis == "device") {
    b.basis = "measured";
    b.value_ms = best->median_ms;
    b.device = best->device;
    return b;
  }
  for (const auto& c : evaluated)
    if (c.candidate_id == b.candidate_id && c.estimate_ms) {
      b.basis = "estimated";
      b.value_ms = *c.estimate_ms;
      return b;
    }
  return std::nullopt;
}

}  // namespace kiln
