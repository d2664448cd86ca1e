#include "catalog/job_key.h"

#include <algorithm>
#include <map>
#include <type_traits>

#include "common/hash.h"

namespace kiln {

// canonical_json relies on objects being sorted maps: verify it at compile time.
static_assert(std::is_same_v<nlohmann::json::object_t,
                             std::map<std::string, nlohmann::json, std::less<>>> ||
                  std::is_same_v<nlohmann::json::object_t,
                                 std::map<std::string, nlohmann::json>>,
              "nlohmann::json objects must be std::map for canonical_json");

namespace {

const char* const kVolatileTop[] = {"where", "name", "batch", "manifest", "comment",
                                    "description"};
const char* const kVolatileTarget[] = {"aliases", "description", "notes", "comment",
                                       "references"};
// A reference's path is provenance (its sha256 and source stay); the llm
// section's transport settings (where the endpoint is, how it is reached)
// cannot change what a model answers.
const char* const kVolatileReference[] = {"path"};
const char* const kVolatileLlm[] = {"base_url", "api_key_env", "timeout_s", "max_retries",
                                    "max_concurrent"};

}  // namespace

nlohmann::json key_spec(const nlohmann::json& spec) {
  nlohmann::json s = spec;
  if (!s.is_object()) return s;
  for (const char* k : kVolatileTop) s.erase(k);
  if (auto it = s.find("target"); it != s.end() && it->is_object())
    for (const char* k : kVolatileTarget) it->erase(k);
  if (auto it = s.find("reference"); it != s.end() && it->is_object())
    for (const char* k : kVolatileReference) it->erase(k);
  if (auto it = s.find("llm"); it != s.end() && it->is_object())
    for (const char* k : kVolatileLlm) it->erase(k);
  if (auto it = s.find("constraints"); it != s.end() && it->is_array()) {
    std::vector<nlohmann::json> v(it->begin(), it->end());
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    *it = nlohmann::json(v);
  }
  return s;
}

std::string canonical_json(const nlohmann::json& j) {
  // dump(-1): no indentation and no spaces after ',' or ':'; ensure_ascii off
  // (UTF-8 as is); strict on invalid UTF-8 (throws type_error 316).
  return j.dump();
}

std::string job_key(const nlohmann::json& spec, const std::string& template_version,
                    const std::string& triton_version) {
  nlohmann::json doc = {{"spec", key_spec(spec)},
                        {"template_version", template_version},
                        {"triton_version", triton_version}};
  return sha256_hex(canonical_json(doc));
}

std::string candidate_key(const std::string& generator, const std::string& template_name,
                          const nlohmann::json& config, const std::optional<std::string>& source) {
  nlohmann::json doc = {{"generator", generator},
                        {"template", template_name.empty() ? nlohmann::json() : nlohmann::json(template_name)},
                        {"config", config},
                        {"source", source ? nlohmann::json(*source) : nlohmann::json()}};
  return sha256_hex(canonical_json(doc));
}

}  // namespace kiln
