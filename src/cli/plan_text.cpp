#include "cli/plan_text.h"

#include <iomanip>
#include <string>

#include "cli/cli_util.h"

namespace kiln::cli {

json plan_json(const Manifest& m, const batch::SubmitPlan& p) {
  json jobs = json::array();
  int served = 0, llm = 0;
  for (const PlanEntry& e : p.entries) {
    const JobSpec& js = m.jobs[e.job];
    json j = {{"index", e.job}, {"name", e.name}, {"target", js.target}, {"dtype", js.dtype},
              {"generator", e.generator}, {"reference", e.reference}, {"where", js.where}};
    if (e.generator == "template") {
      ++served;
      j["op"] = js.op;
      j["shape"] = js.shape;
      j["params"] = js.params;
    } else {
      ++llm;
    }
    if (e.reference) {
      j["score"] = e.score;
      if (e.match.is_object()) {
        for (const char* k : {"pattern", "inputs", "alternatives", "graph", "trace_s"})
          if (e.match.contains(k)) j[k] = e.match[k];
        if (e.generator != "template" && e.match.contains("op")) j["nearest_op"] = e.match["op"];
      }
      if (!e.reason.empty()) j["reason"] = e.reason;
    }
    jobs.push_back(j);
  }
  return {{"manifest", m.path.string()}, {"name", m.name}, {"jobs", jobs}, {"served_by_template", served},
          {"need_llm", llm}, {"match_s", p.match_s}, {"rss_growth_kib", p.rss_growth_kib}};
}

namespace {

std::string binding_text(const json& inputs) {
  std::string s;
  if (!inputs.is_object()) return s;
  for (const auto& [name, src] : inputs.items()) {
    s += (s.empty() ? "" : ", ") + name + "<-";
    if (src.contains("input")) s += "input " + src["input"].dump();
    else if (src.contains("param")) s += src["param"].get<std::string>();
    if (src.value("transpose", false)) s += ".t()";
  }
  return s;
}

}  // namespace

void print_plan(std::ostream& os, const Manifest& m, const batch::SubmitPlan& p) {
  const json pj = plan_json(m, p);
  os << m.name << ": " << m.jobs.size() << " job(s): " << pj["served_by_template"].get<int>()
     << " served by templates, " << pj["need_llm"].get<int>() << " need the LLM";
  if (p.match_s > 0)
    os << " (references traced and matched in " << std::fixed << std::setprecision(1) << p.match_s
       << " s, peak memory +" << p.rss_growth_kib / 1024 << " MiB)";
  os << "\n";
  for (const json& j : pj["jobs"]) {
    os << "  [" << j["index"].get<size_t>() << "] " << j["name"].get<std::string>() << " " << j["dtype"].get<std::string>()
       << " " << j["target"].get<std::string>() << ": ";
    if (j["generator"] == "template") {
      os << "template " << j["op"].get<std::string>() << " " << shape_text(j["shape"]);
      if (!j["params"].empty()) os << " " << j["params"].dump();
      if (j.value("reference", false))
        os << ", score " << std::setprecision(2) << j.value("score", 0.0) << " (" << j.value("pattern", std::string())
           << "; " << binding_text(j.value("inputs", json())) << ")";
    } else {
      os << "llm";
      if (j.contains("reason")) os << ": " << j["reason"].get<std::string>();
    }
    os << "\n";
  }
}

}  // namespace kiln::cli
