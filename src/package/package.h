// `kiln package`: the best code object per job for one target, with launch
// metadata (manifest.json) and checksums (SHA256SUMS), written atomically.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "knowledge/targets.h"

namespace kiln {

struct PackageResult {
  std::filesystem::path dir;
  int kernels = 0;
  std::vector<std::string> files;
};

// Writes the bundle to `out` (created; must not exist unless `force`, which
// replaces it). Throws std::runtime_error when the target has no selected
// kernels or the directory cannot be written.
PackageResult package_target(const Catalog& catalog, const Target& target,
                             const std::filesystem::path& out, bool force);

}  // namespace kiln
