// The llm generator: N independent instances per job (exploration.instances),
// each asking an OpenAI-compatible chat-completions endpoint for a Triton
// module, then repairing it round after round (llm.rounds) from the
// evaluator's diagnosis (src/reflect), within llm.instance_timeout_s.
//
// First, retrieval (src/generate/retrieval.h) over kernels/*.py and the
// catalog's best kernels of earlier jobs: the best match at or above
// llm.retrieval_threshold goes into the prompt as a 1-shot example; when it is
// the library template that serves the job's own operator, the template
// generator serves the job and no LLM is asked. Every request is recorded in
// llm_calls with its full prompt. docs/llm.md.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "generate/generator.h"
#include "generate/prompt.h"
#include "generate/retrieval.h"

namespace kiln {

// spec["llm"] (manifest settings) with the environment's overrides:
// KILN_LLM_BASE_URL, KILN_LLM_MODEL; the API key is KILN_LLM_API_KEY, else the
// variable llm.api_key_env names, else none.
LlmSettings resolve_llm_settings(const nlohmann::json& spec_llm, std::string* api_key);

// The retrieval corpus: every kernels/*.py module that serves operators (its
// problem text: docstring + reference(); its example: the whole module), then
// the best kernels of the catalog's other jobs (problem: the job's reference
// module, else its operator's module problem; example: the llm source, or the
// template module with its config). exclude_job: the job being served.
std::vector<retrieval::Document> build_corpus(const std::filesystem::path& kernels_dir,
                                              const OperatorRegistry& operators, Catalog* catalog,
                                              long long exclude_job);

// The query for a job: its reference module and description (reference jobs),
// else its operator's module problem text, name and description.
std::string retrieval_query(const JobContext& job, const std::filesystem::path& kernels_dir);

class TemplateGenerator;

class LlmGenerator : public Generator {
 public:
  LlmGenerator(const JobContext& job, boost::asio::io_context& io);
  ~LlmGenerator() override;
  std::string name() const override { return "llm"; }
  void propose(const JobContext& job, const std::vector<Outcome>& history, Done done) override;

 private:
  struct State;
  void retrieve(const JobContext& job, std::vector<std::string>& notes);
  std::shared_ptr<State> state_;
  std::unique_ptr<TemplateGenerator> template_;  // set when a library template serves the job
  bool retrieved_ = false;
};

}  // namespace kiln
