// The template generator: configs of a kernels/ template, chosen by the job's
// strategy (src/search/strategy.h) after the principles' rules.
#pragma once
#include <optional>
#include <vector>

#include "generate/generator.h"

namespace kiln {

class TemplateGenerator : public Generator {
 public:
  std::string name() const override { return "template"; }
  void propose(const JobContext& job, const std::vector<Outcome>& history, Done done) override;

 private:
  // Halving's priors (src/search/priors.h), read from the catalog at this
  // generator's first round (when the run takes up the job) and kept, so that
  // later rounds plan from the same ones while other jobs of the run finish.
  std::optional<std::vector<nlohmann::json>> priors_;
};

}  // namespace kiln
