// Job keys: content hashes of everything that decides a job's result.
// docs/catalog.md ("Job keys") says what counts and what does not.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

// Inputs of the key. `spec` is JobSpec::to_json(target); template_version is the
// sha256 of the kernels/ module that serves the operator; triton_version as
// the worker's Python reports it.
//
// key = sha256_hex(canonical_json({"spec": key_spec(spec),
//                                  "template_version": template_version,
//                                  "triton_version": triton_version}))
std::string job_key(const nlohmann::json& spec, const std::string& template_version,
                    const std::string& triton_version);

// The part of a spec that counts for the key: a copy of `spec` without the
// volatile fields (provenance and documentation that cannot change a result):
//   top level: "where", "name", "batch", "manifest", "comment", "description"
//   target:    "aliases", "description", "notes", "comment", "references"
//   reference: "path" (its "sha256" and "source" count)
//   llm:       "base_url", "api_key_env", "timeout_s", "max_retries", "max_concurrent"
// and with "constraints" (a set) sorted and de-duplicated.
nlohmann::json key_spec(const nlohmann::json& spec);

// Canonical JSON text: keys sorted, no spaces, numbers as nlohmann dumps them.
// nlohmann::json objects are std::map<std::string, json> (sorted by byte value,
// checked by a static_assert in job_key.cpp); dump() without indent writes no
// whitespace; any other basic_json (e.g. ordered_json) converts into that map.
std::string canonical_json(const nlohmann::json& j);

// The default key of a candidate: sha256 over canonical_json({"generator",
// "template", "config", "source"}) (template/source null when absent).
std::string candidate_key(const std::string& generator, const std::string& template_name,
                          const nlohmann::json& config, const std::optional<std::string>& source);

}  // namespace kiln
