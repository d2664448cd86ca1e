// kiln nightly's report in its two forms: JSON (`--json`, FILE.json; the
// fields docs/cluster.md describes) and Markdown (stdout, FILE.md).
// Pure functions of the report.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "batch/nightly.h"

namespace kiln::batch {

nlohmann::json to_json(const NightlyReport& report);
std::string markdown(const NightlyReport& report);

}  // namespace kiln::batch
