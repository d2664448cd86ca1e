// The vocabulary a search shares with the generators, reflection and the
// scheduler: a proposed candidate and an evaluated one. A leaf header: it
// includes the catalog's row types and nothing above the search layer.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln {

// A candidate a generator proposes for its job.
struct Proposal {
  std::string generator = "template";
  std::string template_name;
  nlohmann::json config = nlohmann::json::object();
  std::optional<std::string> source;          // generated code (llm)
  std::optional<long long> parent_id;         // lineage
  int round = 0, instance = 0;
  std::optional<long long> llm_call_id;       // the llm_calls row that produced the code
};

// One evaluated candidate of the job, as the generator sees it.
struct Outcome {
  CandidateRow candidate;
  std::string status;                         // ok | compile_error | ... (see evaluations.status)
  std::string message;
  nlohmann::json result;                      // the worker's answer ({} for timeout/crash)
  std::optional<double> score_ms;             // measured median on the target's kind, else estimate
};

}  // namespace kiln
