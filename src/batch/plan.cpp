#include "batch/plan.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "batch/errors.h"
#include "evaluate/worker_process.h"
#include "explore/explorer.h"

namespace kiln::batch {

using nlohmann::json;

SubmitPlan plan_manifest(Manifest& m, const Knowledge& knowledge) {
  json specs = json::array(), refs = json::array();
  bool any_reference = false;
  for (const JobSpec& js : m.jobs) {
    const Target* t = knowledge.targets.find(js.target);
    specs.push_back(t ? js.to_json(*t) : json::object());
    refs.push_back(!js.reference.is_null() && t ? specs.back() : json());
    any_reference = any_reference || !js.reference.is_null();
  }
  std::vector<json> reqs = {{{"method", "hello"}}};
  if (any_reference) reqs.push_back({{"method", "match"}, {"jobs", refs}});
  reqs.push_back({{"method", "traffic"}, {"jobs", specs}});
  std::vector<json> replies;
  try {
    replies = call_worker(evaluator_options("cpu", {}, false), reqs, std::chrono::seconds(900));
    if (!replies[0].value("ok", false))
      throw std::runtime_error("worker hello failed: " + replies[0].value("error", ""));
  } catch (const std::exception& e) {
    throw EvaluatorUnavailable(std::string("cannot start the Python evaluator: ") + e.what());
  }
  SubmitPlan p;
  p.hello = replies[0]["result"];
  json matches = json::array();
  if (any_reference) {
    const json& r = replies[1];
    if (r.value("ok", false) && r["result"].is_object()) {
      matches = r["result"].value("matches", json::array());
      p.match_s = r["result"].value("trace_s", 0.0);
      p.rss_growth_kib = r["result"].value("rss_growth_kib", 0LL);
    } else {
      // An evaluator without `match` (or one that failed): every reference is the LLM's.
      json why = {{"served", false}, {"score", 0.0},
                  {"reason", "the evaluator could not match references: " + r.value("error", std::string("?"))}};
      for (size_t i = 0; i < m.jobs.size(); ++i) matches.push_back(m.jobs[i].reference.is_null() ? json() : why);
    }
  }
  p.entries = apply_serve_plan(m, matches, knowledge.operators);
  const json& tr = replies.back();
  const bool sized = tr.value("ok", false);
  json traffic = sized ? tr["result"].value("traffic", json::array()) : json::array();
  json space = sized ? tr["result"].value("space", json::array()) : json::array();
  // A served reference was not sizable as a reference; its match sized it as the template's job.
  for (const PlanEntry& e : p.entries)
    if (e.reference && e.generator == "template" && e.match.is_object()) {
      while (traffic.size() <= e.job) traffic.push_back(nullptr);
      while (space.size() <= e.job) space.push_back(nullptr);
      traffic[e.job] = e.match.value("traffic", json());
      space[e.job] = e.match.value("space", json());
    }
  p.hello["job_traffic"] = traffic;
  p.hello["job_space"] = space;
  return p;
}

}  // namespace kiln::batch
