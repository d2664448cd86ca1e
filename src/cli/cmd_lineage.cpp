// kiln lineage: the family tree of a job's candidates — which candidate
// repairs which (parent_id), in which round and instance, with each one's
// evaluation and the LLM call that wrote it (llm_calls).
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

#include "cli/cli_util.h"

namespace kiln {

using namespace kiln::cli;

namespace {

std::string first_line(const std::string& s, size_t max = 90) {
  std::string l = s.substr(0, s.find('\n'));
  if (l.size() > max) l = l.substr(0, max - 3) + "...";
  return l;
}

std::string ms_text(const json& v) {
  if (!v.is_number()) return "";
  std::ostringstream os;
  os << std::setprecision(4) << v.get<double>() << " ms";
  return os.str();
}

}  // namespace

int cmd_lineage(const Args& args) {
  return guarded("lineage", [&] {
    po::options_description d("kiln lineage options");
    add_common(d, true);
    d.add_options()("job", po::value<long long>(), "every candidate of this job id")(
        "candidate", po::value<long long>(), "this candidate's ancestors and descendants");
    auto vm = parse(args, d, nullptr,
                    "usage: kiln lineage --job ID | --candidate ID [--json]\n"
                    "Shows which candidate repairs which (parent, round, instance), each one's evaluation\n"
                    "and the LLM call that wrote it.");
    if (!vm) return 0;
    const bool by_job = vm->count("job") > 0, by_cand = vm->count("candidate") > 0;
    if (by_job == by_cand) throw UsageError("give exactly one of --job ID and --candidate ID");
    Catalog catalog = open_catalog(*vm, true);
    sqlite3* db = catalog.handle();
    const bool has_llm_calls = [&] {
      Stmt st(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'llm_calls'");
      return st.step();
    }();

    long long job_id = 0;
    if (by_job) {
      job_id = (*vm)["job"].as<long long>();
    } else {
      Stmt st(db, "SELECT job_id FROM candidates WHERE id = ?1");
      sqlite3_bind_int64(st.s, 1, (*vm)["candidate"].as<long long>());
      if (!st.step()) throw std::runtime_error("no candidate " + std::to_string((*vm)["candidate"].as<long long>()));
      job_id = st.col(0).get<long long>();
    }
    json job;
    {
      Stmt st(db, "SELECT j.id, j.op, j.shape, j.dtype, j.target, j.state, j.message, b.candidate_id, b.basis, "
                  "b.value_ms FROM jobs j LEFT JOIN best b ON b.job_id = j.id WHERE j.id = ?1");
      sqlite3_bind_int64(st.s, 1, job_id);
      if (!st.step()) throw std::runtime_error("no job " + std::to_string(job_id));
      job = {{"id", st.col(0)}, {"op", st.col(1)}, {"shape", json::parse(st.col(2).get<std::string>(), nullptr, false)},
             {"dtype", st.col(3)}, {"target", st.col(4)}, {"state", st.col(5)}, {"message", st.col(6)},
             {"best_candidate_id", st.col(7)}, {"best_basis", st.col(8)}, {"best_ms", st.col(9)}};
    }

    std::map<long long, json> cands;  // by id
    {
      Stmt st(db, "SELECT c.id, c.parent_id, c.round, c.instance, c.generator, c.template, c.config, "
                  "e.status, e.message, e.median_ms, e.estimate_ms, e.max_abs_err, c.created_at "
                  "FROM candidates c LEFT JOIN evaluations e ON e.candidate_id = c.id WHERE c.job_id = ?1 "
                  "ORDER BY c.id");
      sqlite3_bind_int64(st.s, 1, job_id);
      while (st.step()) {
        json c = {{"id", st.col(0)}, {"parent_id", st.col(1)}, {"round", st.col(2)}, {"instance", st.col(3)},
                  {"generator", st.col(4)}, {"template", st.col(5)},
                  {"config", json::parse(st.col(6).get<std::string>(), nullptr, false)}, {"status", st.col(7)},
                  {"message", st.col(8)}, {"median_ms", st.col(9)}, {"estimate_ms", st.col(10)},
                  {"max_abs_err", st.col(11)}, {"llm_call", nullptr}};
        cands[c["id"].get<long long>()] = c;
      }
    }
    if (has_llm_calls) {
      Stmt st(db, "SELECT id, candidate_id, model, prompt_tokens, completion_tokens, latency_s, attempts, status "
                  "FROM llm_calls WHERE job_id = ?1 AND candidate_id IS NOT NULL ORDER BY id");
      sqlite3_bind_int64(st.s, 1, job_id);
      while (st.step()) {
        auto it = cands.find(st.col(1).get<long long>());
        if (it == cands.end()) continue;
        it->second["llm_call"] = {{"id", st.col(0)}, {"model", st.col(2)}, {"prompt_tokens", st.col(3)},
                                  {"completion_tokens", st.col(4)}, {"latency_s", st.col(5)},
                                  {"attempts", st.col(6)}, {"status", st.col(7)}};
      }
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

    std::cout << "job " << job["id"] << ": " << job["op"].get<std::string>() << " " << shape_text(job["shape"])
              << " " << job["dtype"].get<std::string>() << " " << job["target"].get<std::string>() << " ("
              << job["state"].get<std::string>() << ")";
    if (job["best_candidate_id"].is_number())
      std::cout << ", best candidate " << job["best_candidate_id"] << " " << ms_text(job["best_ms"]) << " ("
                << job["best_basis"].get<std::string>() << ")";
    std::cout << "\n";
    if (job["message"].is_string() && !job["message"].get<std::string>().empty())
      std::cout << "  " << first_line(job["message"].get<std::string>(), 200) << "\n";
    if (cands.empty()) {
      std::cout << "  no candidates\n";
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
    std::function<void(long long, const std::string&, bool, bool)> show = [&](long long cid, const std::string& indent,
                                                                              bool last, bool root) {
      const json& c = cands.at(cid);
      std::cout << indent << (root ? "" : (last ? "`- " : "|- ")) << "#" << cid << " round " << c["round"]
                << " instance " << c["instance"] << " " << c["generator"].get<std::string>();
      if (c["template"].is_string()) std::cout << " " << c["template"].get<std::string>() << " " << config_text(c["config"]);
      std::cout << ": " << (c["status"].is_string() ? c["status"].get<std::string>() : "not evaluated");
      if (c["status"] == "ok") {
        const std::string m = ms_text(c["median_ms"]);
        std::cout << " " << (m.empty() ? ms_text(c["estimate_ms"]) + " (estimated)" : m);
      } else if (c["message"].is_string() && !c["message"].get<std::string>().empty()) {
        std::cout << " — " << first_line(c["message"].get<std::string>());
      }
      if (c["llm_call"].is_object()) {
        const json& l = c["llm_call"];
        std::cout << " [llm call " << l["id"] << ": " << cell_text(l["prompt_tokens"]) << "+"
                  << cell_text(l["completion_tokens"]) << " tokens, " << cell_text(l["latency_s"]) << " s]";
      }
      if (best.is_number() && best.get<long long>() == cid) std::cout << "  * best";
      std::cout << "\n";
      const auto& kids = children[cid];
      for (size_t k = 0; k < kids.size(); ++k)
        show(kids[k], indent + (root ? "  " : (last ? "   " : "|  ")), k + 1 == kids.size(), false);
    };
    for (long long r : roots) show(r, "  ", true, true);
    return 0;
  });
}

}  // namespace kiln
