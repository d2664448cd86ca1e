// `kiln package`: the selected code objects of one or more targets as a
// kiln-package/2 directory (docs/package-format.md): objects/, verify/,
// manifest.json, SHA256SUMS and optionally SHA256SUMS.sig. Built in a fresh
// temporary sibling of `out` and renamed into place (out_dir.h); nothing is
// left behind on failure. Single-threaded; the launch of each variant comes
// from the caller's `info` function (an evaluator's package_info method).
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "knowledge/targets.h"

namespace kiln {

struct PackageOptions {
  std::filesystem::path out;
  bool force = false;                        // replace an existing Kiln package at out
  bool bundle = false;                       // AMD code objects in clang offload bundles (.co)
  std::optional<std::filesystem::path> sign_key;  // Ed25519 private key (PEM): SHA256SUMS.sig
  bool neighbours = true;                    // ask package_info to verify neighbouring shapes
  int shortlist_max = 8;                     // variants per kernel for an estimated target
  std::vector<std::filesystem::path> protected_dirs;  // never replaced (the catalog's directory)
  std::optional<std::vector<long long>> only_jobs;  // package only these job ids (kiln nightly); unset: all
  nlohmann::json toolchain = nlohmann::json::object();  // {"kiln", "triton", "torch"}
};

struct PackageResult {
  std::filesystem::path dir;
  int kernels = 0;                           // kernel instances (operator, shape, dtype, params)
  int variants = 0;                          // code objects over every target and rank
  int bundles = 0;
  bool signed_ = false;
  std::vector<std::string> files;            // relative paths, sorted
  std::vector<std::string> warnings;         // shortlist alternatives left out, and why
};

// The package_info request for one variant (method set) -> its result object.
// Throws to abort the package (a rank-0 failure) -- see write_package.
using PackageInfoFn = std::function<nlohmann::json(const nlohmann::json& request)>;

// Writes the package. Throws std::invalid_argument for a refused --out (never
// touched then), std::runtime_error when no target has a finished job, when
// package_info fails for a selected (rank 0) variant, or when the bundler or
// the key fails. A shortlist alternative whose package_info fails is left out
// with a warning.
PackageResult write_package(const Catalog& catalog, const std::vector<const Target*>& targets,
                            const PackageOptions& options, const PackageInfoFn& info);

// Throws std::invalid_argument when options.out may not be written (out_dir.h's
// rules) or holds something that would not be replaced (not a Kiln package, or
// one without force). write_package checks it too; call it first to refuse
// before any work.
void check_package_out(const PackageOptions& options);

// The ELF code object version of an AMD code object (ELFABIVERSION_AMDGPU_HSA:
// 2 -> 4, 3 -> 5, 4 -> 6); 0 when not an AMDHSA code object.
int amd_code_object_version(std::string_view bytes);

}  // namespace kiln
