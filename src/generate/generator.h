// Generators propose candidates for a job, round after round, from what has
// been evaluated so far. The `template` generator instantiates a kernels/
// template over its config space (strategies in src/search/strategy.h); the
// `llm` generator asks a chat-completions endpoint for code. The scheduler asks
// again whenever every proposal of the job has been evaluated; an empty answer
// ends the job's exploration.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "search/candidate.h"
#include "search/estimate.h"
#include "manifest/manifest.h"
#include "metrics/run_metrics.h"

namespace kiln {

// What a generator knows about its job.
struct JobContext {
  JobRow row;
  const Target* target = nullptr;
  const Knowledge* knowledge = nullptr;
  std::string module;                         // kernels/<module>.py serving the operator ("" if none)
  std::vector<nlohmann::json> space;          // the template's config space (worker `space`)
  std::vector<nlohmann::json> space_hints;    // per config {grid, shared_bytes} (worker `space`, optional)
  Traffic traffic;                            // minimum bytes / flops
  std::vector<const Principle*> principles;   // from knowledge_constraints
  std::string device_name;                    // the executing device ("NVIDIA H200", "cpu (...)")
  bool measured = false;                      // latencies here are of the target's kind
  // Reference jobs (manifest `reference:`): the worker's `reference_info`
  // answer (input shapes/dtypes, forward source, eager latency); null otherwise.
  nlohmann::json reference_info;
  Catalog* catalog = nullptr;                 // for generators that record (llm_calls); may be null
  metrics::RunMetrics* metrics = nullptr;     // LLM calls, tokens, latency are published here; may be null

  const nlohmann::json& explore() const;      // spec["explore"]
  bool is_reference() const;                  // spec has "reference"
};

class Generator {
 public:
  using Done = std::function<void(std::vector<Proposal> proposals, std::vector<std::string> notes)>;
  virtual ~Generator() = default;
  virtual std::string name() const = 0;
  // Calls done exactly once, possibly later on the io_context. Throwing (or
  // calling done after an error note with no proposals) ends the job's search.
  // Notes are log lines; with no proposals, a note starting "error: " is the
  // job's failure message (unless a correct candidate exists), and one starting
  // "fatal: " also stops the run (an LLM endpoint that cannot be reached).
  virtual void propose(const JobContext& job, const std::vector<Outcome>& history, Done done) = 0;
};

// The generator a job asks for (spec.explore.generator). Throws
// std::invalid_argument for one Kiln does not have.
std::unique_ptr<Generator> make_generator(const JobContext& job, boost::asio::io_context& io);

}  // namespace kiln
