// Runtime miss logs (`kiln submit --misses FILE`): JSON lines
// {"op", "shape", "dtype", "target", "params"?, ...} that libkilnrt appends to
// $KILN_MISS_LOG when asked for a shape its package does not cover. Each
// distinct miss becomes a manifest entry, so it is validated, expanded and
// keyed exactly as a manifest's entry is.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "manifest/manifest.h"

namespace kiln {

struct MissManifest {
  Manifest manifest;       // name "misses:<file name>", path = the log, text = the generated YAML
  int lines = 0;           // misses read
  int distinct = 0;        // distinct (op, shape, dtype, params, target)
};

// The targets a miss's `target` names: what resolve_targets accepts (a name,
// an architecture: every target of it, a target ID), or the runtime's label
// "ID (DEVICE NAME)" (the targets whose device_match the name matches, else
// the ID's) or "TARGET (ID)". Throws std::invalid_argument.
std::vector<const Target*> miss_targets(const TargetRegistry& registry, const std::string& text);

// Reads and validates the log. `target` may be a target name, an architecture
// (gfx942, sm_90, sm_90a: every target of it) or a code-object target ID.
// Throws ManifestError "FILE:LINE:1: ..." for a line that is not a miss (bad
// JSON, a missing or wrongly typed field, an unknown operator, target or
// dtype), and for an empty log.
MissManifest load_misses(const std::filesystem::path& file, const Knowledge& knowledge);

}  // namespace kiln
