#include "generate/template_generator.h"

#include <set>

#include "catalog/job_key.h"
#include "search/priors.h"
#include "search/prune.h"
#include "search/strategy.h"

namespace kiln {

void TemplateGenerator::propose(const JobContext& job, const std::vector<Outcome>& history,
                                Done done) {
  // The strategy is a pure function of (space, principles, settings, history)
  // (src/search/strategy.h). Exhaustive and random return their whole plan
  // every time: candidates evaluated earlier (this run's first round, or an
  // interrupted run) have the same keys, so the scheduler skips them, and a
  // round with nothing new ends the search. Halving returns only new configs,
  // round after round, until its budget is spent or it has converged.
  // Reflection first: resource errors prune the configs that cannot fit either
  // (src/search/prune.h).
  const PruneResult pruned = prune_space(job.space, history);
  SearchSpace space;
  space.configs = pruned.configs;
  if (job.space_hints.size() == job.space.size())
    for (size_t i : pruned.kept) space.hints.push_back(job.space_hints[i]);
  space.target = job.target;
  space.dtype = job.row.dtype;
  space.traffic = job.traffic;
  const SearchSettings settings = SearchSettings::from_explore(job.explore());
  std::vector<std::string> notes;
  if (!priors_) {
    priors_.emplace();
    // Only where this run measures (the priors are medians on this device
    // kind) and a catalog is at hand.
    if (settings.strategy == "halving" && settings.priors > 0 && job.catalog && job.measured) {
      try {
        const auto past = job.catalog->measured_configs(job.row.op, job.row.arch, job.module,
                                                        job.device_name, kPriorConfigsPerJob);
        for (const Prior& p : select_priors(job.row.shape, job.row.params, job.row.dtype, job.row.key, past))
          priors_->push_back(p.config);
      } catch (const std::exception& e) {
        // A catalog that cannot answer costs the search its head start, no more.
        notes.push_back(std::string("halving: no priors from the catalog: ") + e.what());
      }
    }
  }
  space.priors = *priors_;
  std::vector<Evaluated> seen;
  for (const Outcome& o : history) {
    if (o.candidate.generator != "template") continue;
    Evaluated e;
    e.config = o.candidate.config;
    e.round = o.candidate.round;
    if (o.status == "ok") e.score_ms = o.score_ms;
    seen.push_back(std::move(e));
  }
  Plan plan = next_round(space, job.principles, job.target->backend, settings, seen);
  plan.notes.insert(plan.notes.begin(), notes.begin(), notes.end());
  if (pruned.removed > 0 && settings.strategy != "halving") {
    // A pruned space changes a one-round plan: configs beyond the first plan
    // may come in, in place of the pruned ones, within max_candidates overall.
    std::set<std::string> tried;
    for (const Evaluated& e : seen) tried.insert(canonical_json(e.config));
    int budget = settings.max_candidates - static_cast<int>(tried.size());
    std::vector<nlohmann::json> kept;
    for (auto& cfg : plan.configs) {
      if (tried.count(canonical_json(cfg))) kept.push_back(std::move(cfg));
      else if (budget-- > 0) kept.push_back(std::move(cfg));
    }
    plan.configs = std::move(kept);
    plan.notes.insert(plan.notes.end(), pruned.notes.begin(), pruned.notes.end());
  }
  std::vector<Proposal> out;
  for (const auto& cfg : plan.configs) {
    Proposal p;
    p.generator = "template";
    p.template_name = job.module;
    p.config = cfg;
    p.round = plan.round;
    out.push_back(std::move(p));
  }
  done(std::move(out), plan.notes);
}

// make_generator: src/generate/generator.cpp.

}  // namespace kiln
