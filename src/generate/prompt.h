// Prompts of the llm generator: the task (the reference to implement), the
// knowledge (target specs, weighted principles), the retrieved 1-shot example
// and, in repair rounds, the previous attempt with its diagnosis and the
// constraints added so far. Pure functions; docs/llm.md shows the layout.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/principles.h"
#include "knowledge/targets.h"
#include "reflect/reflect.h"

namespace kiln::prompt {

struct Example {
  std::string id;          // kernels/softmax.py, catalog:...
  double score = 0;        // similarity
  std::string code;
  std::string note;        // e.g. "config: {...}" for a template best
};

struct Attempt {
  int round = 0;
  std::string code;
  reflect::Diagnosis diagnosis;
};

struct Inputs {
  std::string op;                 // the job's op (the reference's name)
  std::string description;        // the manifest entry's description
  bool is_reference = true;       // a reference module; else a library operator
  std::string reference_source;   // the module (reference) or the operator's reference code
  std::string reference_path;
  nlohmann::json shape = nlohmann::json::array();
  std::string dtype;
  nlohmann::json params = nlohmann::json::object();
  nlohmann::json reference_info;  // the worker's reference_info result (null if none)
  const Target* target = nullptr;
  std::vector<std::pair<const Principle*, bool>> principles;  // (principle, asked for by the job)
  std::optional<Example> example;
  std::optional<Attempt> previous;
  std::vector<std::string> constraints;  // every constraint added so far, oldest first
  std::optional<double> best_so_far_ms;
  int round = 0, instance = 0;
};

// The principles for a job: its knowledge_constraints first (by weight, heavier
// first), then every other principle with weight >= weight_cut; principles
// whose backends exclude `backend` are left out.
std::vector<std::pair<const Principle*, bool>> select_principles(const PrincipleRegistry& registry,
                                                                 const std::vector<std::string>& asked,
                                                                 const std::string& backend,
                                                                 double weight_cut = 0.75);

// Markdown sections, each starting with "## ".
std::string render_target(const Target& t);
std::string render_principles(const std::vector<std::pair<const Principle*, bool>>& principles);

// The system prompt (fixed) and the chat messages for one request:
// [{"role": "system", ...}, {"role": "user", ...}].
std::string system_prompt();
std::string render_user(const Inputs& in);
nlohmann::json render_messages(const Inputs& in);

// The code of a reply: the first ```python (or ```py) block, else the first
// fenced block, else the whole text; an unterminated fence runs to the end.
std::string extract_code(const std::string& reply);

}  // namespace kiln::prompt
