// Optimisation principles: configs/principles.yaml. The manifest's
// knowledge_constraints name them; the explorer applies their config-space rules.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

struct Principle {
  std::string name;         // avoid_global_memory, maximize_register_reuse, avoid_atomics, ...
  std::string description;
  double weight = 1.0;
  std::string prompt;       // text added to an LLM prompt
  nlohmann::json rules;     // config-space effect: {"prune": [...], "order": [...], "bound": {...}}
};

class PrincipleRegistry {
 public:
  static PrincipleRegistry load(const std::filesystem::path& yaml_file);
  const Principle* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<Principle> principles_;
};

}  // namespace kiln
