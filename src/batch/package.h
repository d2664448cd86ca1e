// kiln package's workflow (also kiln nightly's and kiln serve's): starts one
// evaluator (its hello gives the toolchain versions; it answers package_info:
// neighbouring shapes, verification data), writes the kiln-package/2 directory
// with it (package/package.h), stops it.
//
// Threading: the calling thread; one worker process for the call's duration.
// Ownership: the catalog is borrowed, read only.
// Failure: std::runtime_error "cannot start the Python evaluator: ..." when
// the evaluator cannot start; std::invalid_argument for options the user got
// wrong (an --out that is not a package: check_package_out); otherwise as
// write_package, which leaves nothing half-written at options.out.
#pragma once
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "knowledge/targets.h"
#include "package/package.h"

namespace kiln::batch {

// options.toolchain is set here (this build's version, the evaluator's Triton
// and torch). device: where the evaluator runs (cpu, gpu, auto).
PackageResult package(const Catalog& catalog, const std::vector<const Target*>& targets, PackageOptions options,
                      const std::string& device = "cpu");

// The version of Kiln that built this library (the toolchain's "kiln").
const char* kiln_version();

}  // namespace kiln::batch
