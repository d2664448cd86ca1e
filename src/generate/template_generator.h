// The template generator: configs of a kernels/ template, chosen by the job's
// strategy (src/explore/strategy.h) after the principles' rules.
#pragma once
#include "generate/generator.h"

namespace kiln {

class TemplateGenerator : public Generator {
 public:
  std::string name() const override { return "template"; }
  void propose(const JobContext& job, const std::vector<Outcome>& history, Done done) override;
};

}  // namespace kiln
