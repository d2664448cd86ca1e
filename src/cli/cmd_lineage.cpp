// kiln lineage: the family tree of a job's candidates — which candidate
// repairs which (parent_id), in which round and instance, with each one's
// evaluation and the LLM call that wrote it (llm_calls).
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

#include "catalog/lineage.h"
#include "cli/cli_util.h"

namespace kiln {

using namespace kiln::cli;

namespace {

std::string ms_text(const json& v) {
  if (!v.is_number()) return "";
  std::ostringstream os;
  os << std::setprecision(4) << v.get<double>() << " ms";
  return os.str();
}

}  // namespace

int cmd_lineage(const Args& args) {
  return catalog_command("lineage", true, [&](po::options_description& d) {
    d.add_options()("job", po::value<long long>(), "every candidate of this job id")(
        "candidate", po::value<long long>(), "this candidate's ancestors and descendants");
    auto vm = parse(args, d,
                    "usage: kiln lineage --job ID | --candidate ID [--json]\n"
                    "Shows which candidate repairs which (parent, round, instance), each one's evaluation\n"
                    "and the LLM call that wrote it.");
    if (!vm) return 0;
    const bool by_job = vm->count("job") > 0, by_cand = vm->count("candidate") > 0;
    if (by_job == by_cand) throw UsageError("give exactly one of --job ID and --candidate ID");
    Catalog catalog = open_catalog(*vm, true);
    long long job_id = 0;
    if (by_job) {
      job_id = (*vm)["job"].as<long long>();
    } else {
      const auto of = job_of_candidate(catalog, (*vm)["candidate"].as<long long>());
      if (!of) throw std::runtime_error("no candidate " + std::to_string((*vm)["candidate"].as<long long>()));
      job_id = *of;
    }
    const std::optional<Lineage> lin = lineage(catalog, job_id);
    if (!lin) throw std::runtime_error("no job " + std::to_string(job_id));
    const json job = {{"id", lin->job_id}, {"op", lin->op}, {"shape", lin->shape}, {"dtype", lin->dtype},
                      {"target", lin->target}, {"state", lin->state}, {"message", or_null(lin->message)},
                      {"best_candidate_id", or_null(lin->best_candidate_id)},
                      {"best_basis", or_null(lin->best_basis)}, {"best_ms", or_null(lin->best_ms)}};

    std::map<long long, json> cands;  // by id
    for (const LineageCandidate& c : lin->candidates)
      cands[c.id] = {{"id", c.id}, {"parent_id", or_null(c.parent_id)}, {"round", c.round},
                     {"instance", c.instance}, {"generator", c.generator}, {"template", or_null(c.template_name)},
                     {"config", c.config}, {"status", or_null(c.status)}, {"message", or_null(c.message)},
                     {"median_ms", or_null(c.median_ms)}, {"estimate_ms", or_null(c.estimate_ms)},
                     {"max_abs_err", or_null(c.max_abs_err)}, {"llm_call", nullptr}};
    for (const LineageLlmCall& l : lin->llm_calls) {
      auto it = cands.find(l.candidate_id);
      if (it == cands.end()) continue;
      it->second["llm_call"] = {{"id", l.id}, {"model", or_null(l.model)}, {"prompt_tokens", or_null(l.prompt_tokens)},
                                {"completion_tokens", or_null(l.completion_tokens)},
                                {"latency_s", or_null(l.latency_s)}, {"attempts", l.attempts}, {"status", l.status}};
    }

    // --candidate: keep its ancestors (the chain) and its descendants.
    std::vector<long long> chain;
    if (by_cand) {
      const long long id = (*vm)["candidate"].as<long long>();
      for (long long cur = id;;) {
        chain.insert(chain.begin(), cur);
        const json& p = cands.at(cur)["parent_id"];
        if (!p.is_number() || !cands.count(p.get<long long>())) break;
        cur = p.get<long long>();
        if (chain.size() > cands.size()) break;  // a cycle cannot happen; be safe
      }
      std::set<long long> keep(chain.begin(), chain.end());
      std::vector<long long> todo = {id};
      while (!todo.empty()) {
        const long long p = todo.back();
        todo.pop_back();
        for (const auto& [cid, c] : cands)
          if (c["parent_id"].is_number() && c["parent_id"].get<long long>() == p && keep.insert(cid).second)
            todo.push_back(cid);
      }
      for (auto it = cands.begin(); it != cands.end();) it = keep.count(it->first) ? std::next(it) : cands.erase(it);
    }

    json list = json::array();
    for (const auto& [cid, c] : cands) list.push_back(c);
    if (vm->count("json")) {
      json out = {{"job", job}, {"candidates", list}};
      if (by_cand) out["chain"] = chain;
      std::cout << out.dump(2) << "\n";
      return 0;
    }

    // Catalog text (ops, messages) may hold control characters: escaped on output.
    std::ostringstream out;
    out << "job " << job["id"] << ": " << job["op"].get<std::string>() << " " << shape_text(job["shape"])
              << " " << job["dtype"].get<std::string>() << " " << job["target"].get<std::string>() << " ("
              << job["state"].get<std::string>() << ")";
    if (job["best_candidate_id"].is_number())
      out << ", best candidate " << job["best_candidate_id"] << " " << ms_text(job["best_ms"]) << " ("
                << job["best_basis"].get<std::string>() << ")";
    out << "\n";
    if (job["message"].is_string() && !job["message"].get<std::string>().empty())
      out << "  " << first_line(job["message"].get<std::string>(), 200) << "\n";
    if (cands.empty()) {
      out << "  no candidates\n";
      std::cout << terminal_safe(out.str(), true);
      return 0;
    }
    std::map<long long, std::vector<long long>> children;
    std::vector<long long> roots;
    for (const auto& [cid, c] : cands) {
      const json& p = c["parent_id"];
      if (p.is_number() && cands.count(p.get<long long>())) children[p.get<long long>()].push_back(cid);
      else roots.push_back(cid);
    }
    const json best = job["best_candidate_id"];
    std::set<long long> shown;
    std::function<void(long long, const std::string&, bool, bool)> show = [&](long long cid, const std::string& indent,
                                                                              bool last, bool root) {
      // A merged catalog may carry a parent cycle: each candidate once.
      if (!shown.insert(cid).second) return void(out << indent << "#" << cid << " (a parent cycle)\n");
      const json& c = cands.at(cid);
      out << indent << (root ? "" : (last ? "`- " : "|- ")) << "#" << cid << " round " << c["round"]
                << " instance " << c["instance"] << " " << c["generator"].get<std::string>();
      if (c["template"].is_string()) out << " " << c["template"].get<std::string>() << " " << config_text(c["config"]);
      out << ": " << (c["status"].is_string() ? c["status"].get<std::string>() : "not evaluated");
      if (c["status"] == "ok") {
        const std::string m = ms_text(c["median_ms"]);
        out << " " << (m.empty() ? ms_text(c["estimate_ms"]) + " (estimated)" : m);
      } else if (c["message"].is_string() && !c["message"].get<std::string>().empty()) {
        out << " — " << first_line(c["message"].get<std::string>(), 90);
      }
      if (c["llm_call"].is_object()) {
        const json& l = c["llm_call"];
        out << " [llm call " << l["id"] << ": " << cell_text(l["prompt_tokens"]) << "+"
                  << cell_text(l["completion_tokens"]) << " tokens, " << cell_text(l["latency_s"]) << " s]";
      }
      if (best.is_number() && best.get<long long>() == cid) out << "  * best";
      out << "\n";
      const auto& kids = children[cid];
      for (size_t k = 0; k < kids.size(); ++k)
        show(kids[k], indent + (root ? "  " : (last ? "   " : "|  ")), k + 1 == kids.size(), false);
    };
    for (long long r : roots) show(r, "  ", true, true);
    for (const auto& [cid, c] : cands)  // in a parent cycle: no root reaches them
      if (!shown.count(cid)) show(cid, "  ", true, true);
    std::cout << terminal_safe(out.str(), true);
    return 0;
  });
}

}  // namespace kiln
