#include "generate/template_generator.h"

#include "explore/strategy.h"

namespace kiln {

const nlohmann::json& JobContext::explore() const {
  static const nlohmann::json empty = nlohmann::json::object();
  auto it = row.spec.find("explore");
  return it == row.spec.end() ? empty : *it;
}

void TemplateGenerator::propose(const JobContext& job, const std::vector<Outcome>& history,
                                Done done) {
  // The plan, every time: it depends only on the job. Candidates evaluated
  // earlier (this run's first round, or an interrupted run) have the same keys,
  // so the scheduler skips them, and a round with nothing new ends the search.
  const auto& ex = job.explore();
  Plan plan = plan_candidates(job.space, job.principles, job.target->backend,
                              ex.value("strategy", "exhaustive"), ex.value("max_candidates", 64),
                              ex.value("seed", 0ULL));
  std::vector<Proposal> out;
  for (const auto& cfg : plan.configs) {
    Proposal p;
    p.generator = "template";
    p.template_name = job.module;
    p.config = cfg;
    out.push_back(std::move(p));
  }
  done(std::move(out), plan.notes);
}

std::unique_ptr<Generator> make_generator(const JobContext& job, boost::asio::io_context&) {
  const std::string g = job.explore().value("generator", "template");
  if (g == "template") return std::make_unique<TemplateGenerator>();
  throw std::invalid_argument("generator '" + g + "' is not available in this build");
}

}  // namespace kiln
