// The YAML batch manifest: parsing, validation with file:line:column errors, and
// expansion into jobs (operator x shape x dtype x target). See docs/manifest.md.
#pragma once
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/knowledge.h"

namespace kiln {

// A user error in a manifest. what() is "file:line:column: message".
class ManifestError : public std::runtime_error {
 public:
  ManifestError(std::string file, int line, int column, const std::string& message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_, column_;
  std::string message_;
};

struct ExplorationSettings {
  std::string generator = "template";   // template | llm; "auto" for a reference entry that
                                        // names none, until submit plans it (serve_plan.h)
  std::string strategy = "exhaustive";  // exhaustive | random | halving
  int instances = 1;                    // independent exploration instances
  int max_candidates = 64;              // per job
  double timeout_s = 300;               // per candidate
  unsigned long long seed = 0;          // for random strategies
  nlohmann::json halving = nlohmann::json::object();  // halving's {initial, keep, prune, tiles, priors} given
  // The confirmation round after exploration (src/explore/confirm.h); in the
  // job's spec only when given, so other jobs keep their keys.
  std::optional<double> confirm_margin;               // finalists: within this share of the best (default 0.05)
  std::optional<std::vector<std::string>> baselines;  // eager [, compile]; eager is always timed
};

struct ValidationSettings {
  int seeds = 3;
  std::optional<double> atol, rtol;     // unset: by dtype
};

struct BenchmarkSettings {
  int warmup = 25;                      // untimed runs
  int runs = 100;                       // timed runs (the seed's regression test uses 1000)
};

// The `llm:` section (top level, defaults, entry; merged key by key). Only
// jobs with exploration.generator: llm carry it. At run time the environment
// overrides three of them: KILN_LLM_BASE_URL, KILN_LLM_MODEL, KILN_LLM_API_KEY
// (the key itself; api_key_env names a variable holding it). docs/llm.md.
struct LlmSettings {
  std::string base_url = "http://localhost:8000/v1";  // OpenAI-compatible, ends before /chat/completions
  std::string model;                    // "" = must come from KILN_LLM_MODEL
  std::string api_key_env;              // env var holding the API key; "" = none
  double temperature = 0.2;             // instance i uses temperature + 0.1 * i
  int max_tokens = 4096;
  double timeout_s = 120;               // per HTTP request
  int max_retries = 3;                  // on connection errors, timeouts, 429 and 5xx
  int max_concurrent = 4;               // requests in flight across the run
  double retrieval_threshold = 0.8;     // similarity for the 1-shot example / template serving
  int rounds = 3;                       // generation rounds per instance (round 0 + repairs)
  double instance_timeout_s = 300;      // wall time per instance

  nlohmann::json to_json() const;
};

// One expanded job: a single operator, shape, dtype and target.
struct JobSpec {
  std::string op;
  std::vector<long long> shape;
  std::string dtype;                    // fp32 | fp16 | bf16
  nlohmann::json params;                // object, defaults filled in
  std::string target;                   // canonical target name
  std::vector<std::string> constraints; // knowledge_constraints
  ExplorationSettings explore;
  ValidationSettings validate;
  BenchmarkSettings bench;
  std::string where;                    // "file:line" of the operator entry
  std::string description;              // the entry's `description:` (prompts; not in the key)
  // `reference: path.py` entries (op = the entry's name): {"path": absolute,
  // "source": the file's text, "sha256": of the text}; null otherwise.
  nlohmann::json reference;
  LlmSettings llm;                      // carried only when explore.generator == "llm"
  // A reference entry a template serves (manifest/serve_plan.h): the module,
  // the binding of its inputs and parameters to the template's, the score and
  // pattern; the worker checks the template against the module with it
  // (worker/kiln_worker/structural/oracle.py). Null otherwise.
  nlohmann::json oracle;

  // The job as the worker sees it (op, shape, dtype, params, target document,
  // validation, benchmark, constraints, explore; plus "reference" for
  // reference entries, "llm" for llm jobs, "description" when given).
  nlohmann::json to_json(const Target& target) const;
};

struct Manifest {
  std::string name;                     // `name:` or the file stem
  std::filesystem::path path;
  std::string text;                     // the file's bytes
  std::vector<JobSpec> jobs;
};

// Parses and validates; throws ManifestError on any user error.
Manifest load_manifest(const std::filesystem::path& path, const Knowledge& knowledge);
Manifest parse_manifest(const std::string& text, const std::string& filename,
                        const Knowledge& knowledge);

}  // namespace kiln
