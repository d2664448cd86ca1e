#include "manifest/serve_plan.h"

#include <string>

namespace kiln {

using nlohmann::json;

namespace {

[[noreturn]] void fail_at(const std::string& where, const std::string& message) {
  const auto colon = where.rfind(':');
  int line = 0;
  std::string file = where;
  if (colon != std::string::npos) {
    file = where.substr(0, colon);
    try {
      line = std::stoi(where.substr(colon + 1));
    } catch (const std::exception&) {
      line = 0;
    }
  }
  throw ManifestError(file, line, 1, message);
}

}  // namespace

std::vector<PlanEntry> apply_serve_plan(Manifest& m, const json& matches, const OperatorRegistry& ops) {
  std::vector<PlanEntry> plan;
  for (size_t i = 0; i < m.jobs.size(); ++i) {
    JobSpec& j = m.jobs[i];
    PlanEntry e;
    e.job = i;
    e.name = j.op;
    if (j.reference.is_null()) {  // a library operator
      e.generator = j.explore.generator;
      e.op = j.op;
      e.served_by_template = true;  // its own template (the llm generator too retrieves it first)
      e.score = 1.0;
      plan.push_back(std::move(e));
      continue;
    }
    e.reference = true;
    const json mt = (matches.is_array() && i < matches.size()) ? matches[i] : json();
    e.match = mt;
    const bool served = mt.is_object() && mt.value("served", false) && mt.contains("op") && mt["op"].is_string() &&
                        mt.contains("shape") && mt["shape"].is_array();
    const OperatorSpec* op = served ? ops.find(mt["op"].get<std::string>()) : nullptr;
    e.score = mt.is_object() && mt.contains("score") && mt["score"].is_number() ? mt["score"].get<double>() : 0.0;
    if (mt.is_object() && mt.contains("reason") && mt["reason"].is_string()) e.reason = mt["reason"].get<std::string>();
    if (!mt.is_object()) e.reason = "the evaluator could not match the module";
    const bool usable = served && op && e.score >= j.llm.retrieval_threshold;
    if (served && !op) e.reason = "the evaluator named operator '" + mt["op"].get<std::string>() + "', which is not in kernels/operators.yaml";
    if (j.explore.generator == "llm") {  // asked for: the LLM writes it
      e.generator = "llm";
      if (usable) e.reason = "generator: llm given (" + op->name + " would serve it at " + std::to_string(e.score) + ")";
      plan.push_back(std::move(e));
      continue;
    }
    if (!usable) {
      if (j.explore.generator == "template")
        fail_at(j.where, "reference '" + j.op + "' has generator: template but no template family serves it: " +
                             e.reason + " (give exploration: {generator: llm}, or leave the generator out)");
      j.explore.generator = "llm";  // auto
      e.generator = "llm";
      plan.push_back(std::move(e));
      continue;
    }
    json oracle = mt.value("oracle", json::object());
    oracle["reference"] = j.reference;
    oracle["name"] = j.op;
    oracle["score"] = e.score;
    oracle["pattern"] = mt.value("pattern", std::string());
    j.oracle = oracle;
    j.reference = nullptr;
    j.op = op->name;
    j.shape = mt["shape"].get<std::vector<long long>>();
    j.params = op->with_defaults(mt.value("params", json::object()));
    j.explore.generator = "template";
    e.generator = "template";
    e.op = op->name;
    e.served_by_template = true;
    e.reason.clear();
    plan.push_back(std::move(e));
  }
  return plan;
}

}  // namespace kiln
