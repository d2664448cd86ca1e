// `kiln submit`'s planning step (also `kiln nightly`'s): one evaluator on the
// CPU answers hello (versions, template hashes), `match` (each reference
// entry traced under fake tensors and matched against the template families:
// worker/kiln_worker/structural) and `traffic` (each job's minimum traffic and
// config-space size, for the claim order); the matches are applied to the
// manifest's jobs (manifest/serve_plan.h). Nothing runs at full size.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "manifest/serve_plan.h"

namespace kiln::cli {

struct SubmitPlan {
  nlohmann::json hello;            // as worker_hello's, job_traffic / job_space for the planned jobs
  std::vector<PlanEntry> entries;  // one per job of the manifest, in order
  double match_s = 0;              // the worker's tracing and matching seconds
  long long rss_growth_kib = 0;    // the worker's peak RSS growth while matching
};

// Plans m in place. Throws std::runtime_error when the evaluator cannot start
// or answer hello (the caller exits 3), ManifestError for a `generator:
// template` reference entry no template serves.
inline SubmitPlan plan_manifest(Manifest& m, const Knowledge& knowledge) {
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
  std::vector<json> replies = call_worker(evaluator_options("cpu", {}, false), reqs, std::chrono::seconds(900));
  if (!replies[0].value("ok", false))
    throw std::runtime_error("worker hello failed: " + replies[0].value("error", ""));
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

// The plan as JSON (`kiln submit --dry-run --json`).
inline json plan_json(const Manifest& m, const SubmitPlan& p) {
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

inline std::string binding_text(const json& inputs) {
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

// The plan for people (`kiln submit --dry-run`).
inline void print_plan(std::ostream& os, const Manifest& m, const SubmitPlan& p) {
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
