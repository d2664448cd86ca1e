// The read model behind `kiln lineage`: a job's candidates with their parents
// (which candidate repairs which), evaluations and the llm calls that wrote
// them. Same threading rule as Catalog: one Catalog per thread; every SQLite
// failure throws CatalogError.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln {

struct LineageCandidate {
  long long id = 0;
  std::optional<long long> parent_id;
  int round = 0, instance = 0;
  std::string generator;
  std::optional<std::string> template_name;
  nlohmann::json config;                          // discarded when not JSON
  // Its evaluation; status unset when it has none.
  std::optional<std::string> status, message;
  std::optional<double> median_ms, estimate_ms, max_abs_err;
};

struct LineageLlmCall {
  long long id = 0, candidate_id = 0;
  std::optional<std::string> model;
  std::optional<long long> prompt_tokens, completion_tokens;
  std::optional<double> latency_s;
  long long attempts = 0;
  std::string status;
};

struct Lineage {
  long long job_id = 0;
  std::string op, dtype, target, state;
  nlohmann::json shape;                           // discarded when not JSON
  std::optional<std::string> message;
  std::optional<long long> best_candidate_id;     // the job's best, when selected
  std::optional<std::string> best_basis;
  std::optional<double> best_ms;
  std::vector<LineageCandidate> candidates;       // by id
  std::vector<LineageLlmCall> llm_calls;          // those that became a candidate, by id (none before 0002_llm)
};

// The job a candidate belongs to; nullopt when there is no such candidate.
std::optional<long long> job_of_candidate(const Catalog& catalog, long long candidate_id);

// The job's lineage; nullopt when there is no such job.
std::optional<Lineage> lineage(const Catalog& catalog, long long job_id);

}  // namespace kiln
