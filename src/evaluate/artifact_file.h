// Taking the code object a worker says it wrote, trusting nothing it says.
//
// The worker names a file (the evaluate result's artifact.path) and its
// sha256. The engine reads and deletes that file only if it lies inside the
// artifact directory the engine gave that evaluation -- resolved, so no
// symlink (in the name or a parent) leads out -- is a regular file of at
// most kMaxArtifactBytes, and its bytes hash to the claimed sha256.
// Otherwise ArtifactRejected says why and no file is read past the checks
// or deleted: the candidate is an infrastructure fault, not `ok`.
//
// Threading: no state. Failure: ArtifactRejected (std::runtime_error).
#pragma once
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "evaluate/reply.h"

namespace kiln {

class ArtifactRejected : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr size_t kMaxArtifactBytes = size_t{256} << 20;  // 256 MiB: far above any code object

// Checks, reads and deletes claim.path (see above); returns its bytes.
// Throws ArtifactRejected.
std::string take_artifact(const std::filesystem::path& artifact_dir, const ArtifactClaim& claim,
                          size_t max_bytes = kMaxArtifactBytes);

// The bytes' sha256 equals claim.sha256 and their size is within max_bytes
// (for bytes that came another way, e.g. over MPI). Throws ArtifactRejected.
void check_artifact_bytes(const std::string& bytes, const ArtifactClaim& claim,
                          size_t max_bytes = kMaxArtifactBytes);

}  // namespace kiln
