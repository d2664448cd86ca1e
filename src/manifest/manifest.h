// The YAML batch manifest: parsing, validation with file:line:column errors, and
// expansion into jobs (operator x shape x dtype x target). See docs/manifest.md.
#pragma once
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/operators.h"
#include "knowledge/principles.h"
#include "knowledge/targets.h"

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
  std::string generator = "template";   // template | llm
  std::string strategy = "exhaustive";  // exhaustive | random
  int instances = 1;                    // independent exploration instances
  int max_candidates = 64;              // per job
  double timeout_s = 300;               // per candidate
  unsigned long long seed = 0;          // for random strategies
};

struct ValidationSettings {
  int seeds = 3;
  std::optional<double> atol, rtol;     // unset: by dtype
};

struct BenchmarkSettings {
  int warmup = 25;                      // untimed runs
  int runs = 100;                       // timed runs (the seed's regression test uses 1000)
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

  // The job as the worker sees it (op, shape, dtype, params, target document,
  // validation, benchmark, constraints, explore).
  nlohmann::json to_json(const Target& target) const;
};

struct Manifest {
  std::string name;                     // `name:` or the file stem
  std::filesystem::path path;
  std::string text;                     // the file's bytes
  std::vector<JobSpec> jobs;
};

struct Knowledge {
  TargetRegistry targets;
  OperatorRegistry operators;
  PrincipleRegistry principles;
  // Loads configs/targets, kernels/operators.yaml, configs/principles.yaml under home.
  static Knowledge load(const std::filesystem::path& home);
};

// Parses and validates; throws ManifestError on any user error.
Manifest load_manifest(const std::filesystem::path& path, const Knowledge& knowledge);
Manifest parse_manifest(const std::string& text, const std::string& filename,
                        const Knowledge& knowledge);

}  // namespace kiln
