// Job keys: content hashes of everything that decides a job's result.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

// Inputs of the key. `spec` is JobSpec::to_json(target); template_version is the
// sha256 of the kernels/ module that serves the operator; triton_version as
// the worker's Python reports it.
std::string job_key(const nlohmann::json& spec, const std::string& template_version,
                    const std::string& triton_version);

// Canonical JSON text: keys sorted, no spaces, numbers as nlohmann dumps them.
std::string canonical_json(const nlohmann::json& j);

}  // namespace kiln
