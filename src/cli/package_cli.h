// kiln package's writer with its package_info evaluator (cli/cmd_package.cpp),
// shared with kiln nightly.
#pragma once
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "package/package.h"

namespace kiln {

// Starts a CPU evaluator (its hello gives the toolchain versions), writes the
// package with it answering package_info, stops it. Throws as write_package.
PackageResult package_with_worker(const Catalog& catalog, const std::vector<const Target*>& targets,
                                  PackageOptions options, const std::string& kiln_version,
                                  const std::string& device = "cpu");

}  // namespace kiln
