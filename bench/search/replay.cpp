// kiln-replay: replays a search strategy offline against a job whose whole
// config space an exhaustive run has recorded in a catalog.
//
//   kiln-replay --catalog DB --job ID --strategy exhaustive|random|halving
//               [--seeds N] [--budget B] [--initial N] [--keep F] [--prune F] [--tiles F]
//               [--predict 1] [--hints FILE]
//               [--priors-from DB[,DB...]] [--priors N] [--prior-jobs J] [--budget-share F]
//
// The space is the job's recorded template candidates (candidate id order, as
// the exhaustive run evaluated them); each config's score is what the scheduler
// would hand the strategy: the measured median where it was benchmarked on a
// device of the job's target kind, else the static estimate; failed configs have
// none. The config model gets each config's grid and shared memory from the
// recorded code object (what the worker's `space` hints give). The strategy
// sees only what it asked for: src/search/strategy.h's next_round() is called
// round after round with the history of the configs it proposed, until a round
// proposes nothing new, as the scheduler does.
//
// --priors-from gives halving its priors (src/search/priors.h) as a live run
// takes them from its catalog, but from the catalogs named and leave-one-out:
// past jobs of the replayed job's own shape (and params, dtype) never count.
//
// Prints one JSON object: the job, the space size, the exhaustive best, and per
// seed the evaluations used, rounds, and the best found; with --predict 1 also
// the config model's prediction for every config.
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "catalog/evaluations.h"
#include "common/home.h"
#include "search/priors.h"
#include "search/strategy.h"
#include "manifest/manifest.h"

using nlohmann::json;

namespace {

struct Recorded {
  json config;
  std::optional<double> score;  // nullopt: failed
  json hint;                    // {"grid": [...], "shared_bytes": n}
};

struct Job {
  long long id = 0;
  std::string op, dtype, target, arch;
  std::string template_name, device;  // of the recorded candidates; the measuring device
  json shape, params, spec;
  kiln::Traffic traffic;
  std::vector<Recorded> space;
};

Job load_job(const std::string& path, long long id, const kiln::Knowledge& knowledge) {
  const kiln::Catalog catalog = kiln::Catalog::open(path, /*read_only=*/true);
  const std::optional<kiln::JobRow> row = catalog.job(id);
  if (!row) throw std::runtime_error("no job " + std::to_string(id) + " in " + path);
  Job job;
  job.id = id;
  job.op = row->op;
  job.shape = row->shape;
  job.dtype = row->dtype;
  job.target = row->target;
  job.spec = row->spec;
  job.params = row->params;
  job.arch = row->arch;
  const kiln::Target* target = knowledge.targets.find(job.target);
  if (!target) throw std::runtime_error("unknown target " + job.target);

  for (const kiln::JobEvaluation& e : kiln::evaluations(catalog, id)) {
    if (e.candidate.generator != "template") continue;
    Recorded r;
    r.config = e.candidate.config;
    const std::string device = e.bench_device.value_or("");
    const json& result = e.result;
    if (e.status == "ok") {
      if (!device.empty() && kiln::TargetRegistry::matches_device(*target, device) && e.median_ms) {
        r.score = *e.median_ms;
        job.device = device;
      } else if (e.estimate_ms) {
        r.score = *e.estimate_ms;
      }
    }
    if (job.template_name.empty()) job.template_name = e.candidate.template_name;
    r.hint = json::object();
    if (result.is_object()) {
      const kiln::EvaluationResult res = kiln::read_evaluation_result(result);  // typed: evaluate/protocol.h
      if (job.traffic.bytes <= 0 && res.traffic) job.traffic = *res.traffic;
      if (res.artifact) {
        if (!res.artifact->grid.empty()) r.hint["grid"] = res.artifact->grid;
        if (res.artifact->shared_bytes) r.hint["shared_bytes"] = *res.artifact->shared_bytes;
      }
    }
    job.space.push_back(std::move(r));
  }
  if (job.space.empty()) throw std::runtime_error("job " + std::to_string(id) + " has no evaluated candidates");
  return job;
}

int usage(int rc) {
  (rc ? std::cerr : std::cout)
      << "usage: kiln-replay --catalog DB --job ID --strategy exhaustive|random|halving\n"
         "                   [--seeds N] [--budget B] [--initial N] [--keep F] [--prune F] [--tiles F]\n"
         "                   [--predict 1]   (also print the config model's prediction per config)\n"
         "                   [--hints FILE]  ({config: hint} from the worker's space method)\n"
         "                   [--priors-from DB[,DB...]] [--priors N] [--prior-jobs J] [--budget-share F]\n"
         "                                   (halving's priors from those catalogs, leave-one-out)\n";
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(0);
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) return usage(2);
    opt[a.substr(2)] = argv[++i];
  }
  for (const char* k : {"catalog", "job", "strategy"})
    if (!opt.count(k)) return usage(2);
  try {
    const kiln::Knowledge knowledge = kiln::Knowledge::load(kiln::kiln_home());
    const Job job = load_job(opt["catalog"], std::stoll(opt["job"]), knowledge);
    const kiln::Target* target = knowledge.targets.find(job.target);

    // --hints FILE: {config JSON (sorted keys, compact): hint} as the worker's
    // `space` method gives them in a live run (grid, shared memory estimate and
    // the template's own hints, e.g. conv2d's registers); they replace the
    // hints read from the recorded code objects.
    json template_hints = json::object();
    if (opt.count("hints")) {
      std::ifstream in(opt["hints"]);
      if (!in) throw std::runtime_error("cannot read " + opt["hints"]);
      template_hints = json::parse(in);
    }
    kiln::SearchSpace space;
    for (const auto& r : job.space) {
      space.configs.push_back(r.config);
      auto h = template_hints.find(r.config.dump());
      space.hints.push_back(h != template_hints.end() && h->is_object() ? *h : r.hint);
    }
    space.target = target;
    space.dtype = job.dtype;
    space.traffic = job.traffic;
    // Priors, leave-one-out: the measured jobs of the catalogs named, as the
    // live run's catalog would hold them, less the replayed job's own problem.
    if (opt.count("priors-from") && !job.device.empty()) {
      std::vector<kiln::MeasuredJob> past;
      std::stringstream list(opt["priors-from"]);
      for (std::string path; std::getline(list, path, ',');) {
        const kiln::Catalog other = kiln::Catalog::open(path, /*read_only=*/true);
        for (auto& m : other.measured_configs(job.op, job.arch, job.template_name, job.device,
                                                  kiln::kPriorConfigsPerJob)) {
          m.key = path + "#" + m.key;  // keys are per catalog
          past.push_back(std::move(m));
        }
      }
      kiln::PriorSettings ps;
      ps.skip_same_shape = true;
      if (opt.count("prior-jobs")) ps.jobs = std::stoi(opt["prior-jobs"]);
      for (const auto& p : kiln::select_priors(job.shape, job.params, job.dtype, "", past, ps))
        space.priors.push_back(p.config);
    }
    std::vector<const kiln::Principle*> principles;
    for (const auto& c : job.spec.value("constraints", json::array()))
      if (const kiln::Principle* p = knowledge.principles.find(c.get<std::string>())) principles.push_back(p);

    kiln::SearchSettings base = kiln::SearchSettings::from_explore(job.spec.value("explore", json::object()));
    base.strategy = opt["strategy"];
    // The recorded space is the whole space: exhaustive/random take all of it
    // unless a budget says otherwise.
    if (base.strategy != "halving") base.max_candidates = static_cast<int>(space.configs.size());
    if (opt.count("budget")) base.max_candidates = std::stoi(opt["budget"]);
    if (opt.count("initial")) base.initial = std::stoi(opt["initial"]);
    if (opt.count("keep")) base.keep = std::stod(opt["keep"]);
    if (opt.count("prune")) base.prune = std::stod(opt["prune"]);
    if (opt.count("tiles")) base.tiles = std::stod(opt["tiles"]);
    if (opt.count("priors")) base.priors = std::stoi(opt["priors"]);
    if (opt.count("budget-share")) base.budget_share = std::stod(opt["budget-share"]);
    const int seeds = opt.count("seeds") ? std::stoi(opt["seeds"]) : 1;

    std::map<std::string, const Recorded*> recorded;
    std::optional<double> best_all;
    for (const auto& r : job.space) {
      recorded[r.config.dump()] = &r;
      if (r.score && (!best_all || *r.score < *best_all)) best_all = r.score;
    }

    json runs = json::array();
    for (int seed = 0; seed < seeds; ++seed) {
      kiln::SearchSettings s = base;
      s.seed = static_cast<unsigned long long>(seed);
      std::vector<kiln::Evaluated> history;
      std::set<std::string> seen;
      int rounds = 0;
      json trace = json::array();
      for (; rounds < 10000; ++rounds) {
        kiln::Plan plan = kiln::next_round(space, principles, target->backend, s, history);
        int fresh = 0;
        json round_trace = json::array();
        for (const auto& cfg : plan.configs) {
          const std::string key = cfg.dump();
          if (!seen.insert(key).second) continue;
          ++fresh;
          kiln::Evaluated e;
          e.config = cfg;
          e.round = plan.round;
          auto it = recorded.find(key);
          if (it == recorded.end()) throw std::runtime_error("strategy proposed an unrecorded config " + key);
          e.score_ms = it->second->score;
          round_trace.push_back(e.score_ms ? json(*e.score_ms) : json(nullptr));
          history.push_back(std::move(e));
        }
        if (fresh == 0) break;
        trace.push_back(round_trace);
      }
      std::optional<double> best;
      json best_config;
      for (const auto& e : history)
        if (e.score_ms && (!best || *e.score_ms < *best)) {
          best = e.score_ms;
          best_config = e.config;
        }
      runs.push_back({{"seed", seed},
                      {"evaluations", history.size()},
                      {"rounds", rounds},
                      {"best_ms", best ? json(*best) : json(nullptr)},
                      {"ratio", best && best_all ? json(*best / *best_all) : json(nullptr)},
                      {"best_config", best_config},
                      {"scores_by_round", trace}});
    }
    json out = {{"job", job.id},          {"op", job.op},
                {"shape", job.shape},     {"dtype", job.dtype},
                {"target", job.target},   {"strategy", base.strategy},
                {"budget", base.max_candidates},
                {"space", job.space.size()},
                {"priors", space.priors},
                {"exhaustive_best_ms", best_all ? json(*best_all) : json(nullptr)},
                {"runs", runs}};
    if (opt.count("predict") && opt["predict"] != "0") {
      // The config model's view of the space, beside the recorded scores.
      json preds = json::array();
      for (size_t i = 0; i < job.space.size(); ++i) {
        const Recorded& r = job.space[i];
        auto p = kiln::predict_config(*target, job.dtype, job.traffic, r.config, space.hints[i]);
        preds.push_back({{"config", r.config},
                         {"score_ms", r.score ? json(*r.score) : json(nullptr)},
                         {"predicted_ms", p ? json(p->ms) : json(nullptr)},
                         {"registers", p ? json(p->registers) : json(nullptr)},
                         {"spills", p ? json(p->spills) : json(nullptr)},
                         {"blocks_per_cu", p ? json(p->blocks_per_cu) : json(nullptr)},
                         {"utilisation", p ? json(p->utilisation) : json(nullptr)},
                         {"operand_ms", p ? json(p->operand_ms) : json(nullptr)},
                         {"issue_ms", p ? json(p->issue_ms) : json(nullptr)},
                         {"memory_efficiency", p ? json(p->memory_efficiency) : json(nullptr)}});
      }
      out["predictions"] = preds;
    }
    std::cout << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "kiln-replay: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
