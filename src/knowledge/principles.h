// Optimisation principles: configs/principles.yaml. The manifest's
// knowledge_constraints name them; the explorer applies their config-space rules.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/registry.h"

namespace kiln {

struct Principle {
  std::string name;         // avoid_global_memory, maximize_register_reuse, avoid_atomics, ...
  std::string description;
  double weight = 1.0;
  std::string prompt;       // text added to an LLM prompt
  std::vector<std::string> backends;  // "hip" / "cuda" it applies to; empty = every target
  // Config-space effect, always normalised to all three lists (vocabulary at the
  // top of configs/principles.yaml):
  //   {"prune": [COND...], "bound": [COND...], "order": [ORDER...]}
  //   COND  = {"key": Q, "op": "==|!=|<|<=|>|>=|in", "value": V [, "per": Q]}
  //   ORDER = {"key": Q, "dir": "asc|desc" [, "per": Q]}
  //   Q     = a config key, or a '*' glob meaning the product of matching keys.
  nlohmann::json rules;
};

// The quantity Q of a rule item for one config (an object of config values):
// the key's value, or the product of every key matching a '*' glob, divided by
// `per` when given. nullopt when the config has no matching key (the rule item
// is then skipped for that config). Booleans count as 0/1.
std::optional<double> rule_quantity(const nlohmann::json& item, const nlohmann::json& config);

// Whether a COND holds for a config; nullopt when its key is absent (skip it).
std::optional<bool> rule_condition_holds(const nlohmann::json& cond, const nlohmann::json& config);

// Applies principles to a template's config space, as the explorer does.
// Principles whose `backends` exclude `backend` (when given) are skipped. It
// drops configs that any principle's prune matches or any bound rejects, then
// stable-sorts by the order items of the principles by descending weight (ties
// keep the given order). When pruning would leave nothing, the whole space is
// kept (relaxed = true) and only ordered.
struct RuleResult {
  std::vector<nlohmann::json> configs;
  size_t removed = 0;
  bool relaxed = false;
};
RuleResult apply_principles(std::vector<nlohmann::json> configs,
                            const std::vector<const Principle*>& principles,
                            const std::string& backend = "");

class PrincipleRegistry : public NamedRegistry<Principle> {
 public:
  static PrincipleRegistry load(const std::filesystem::path& yaml_file);
};

}  // namespace kiln
