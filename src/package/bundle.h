// Clang offload bundles (`kiln package --bundle`): several AMD code objects of
// one kernel in one file, the format hipModuleLoadData accepts, written and
// checked with clang-offload-bundler (Debian's clang-tools-15). Runs the tool
// as a child process; no global state.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// The bundle entry ID of a code object whose metadata note names `target_id`
// ("amdgcn-amd-amdhsa--gfx942:sramecc+"): "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+".
// Throws std::invalid_argument for a target ID that is not amdgcn-amd-amdhsa--gfx*.
std::string bundle_entry_id(const std::string& target_id);

// The bundler to run: $KILN_OFFLOAD_BUNDLER if set, else clang-offload-bundler-15,
// else clang-offload-bundler, searched in PATH. Throws std::runtime_error
// saying how to install it (apt-get install clang-tools-15) when none is found.
std::filesystem::path find_offload_bundler();

// The empty host entry every bundle starts with, as hipcc writes them (the
// bundler needs one when its inputs are ELF code objects).
inline constexpr const char* kBundleHostEntry = "host-x86_64-unknown-linux";

// Writes `output` holding the empty host entry and `entries` (entry ID,
// code-object file). Throws
// std::runtime_error with the tool's output when it fails.
void write_offload_bundle(const std::filesystem::path& tool,
                          const std::vector<std::pair<std::string, std::filesystem::path>>& entries,
                          const std::filesystem::path& output);

// The entry IDs `bundle` holds (`--list`), sorted, the host entry included;
// none for a file that is not a bundle. Throws std::runtime_error when the
// tool fails.
std::vector<std::string> list_offload_bundle(const std::filesystem::path& tool, const std::filesystem::path& bundle);

}  // namespace kiln
