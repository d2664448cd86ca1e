// Compatibility of a code object with a target, checked before any launch:
// AMD target id with features, code object version, wavefront size, LDS and
// registers against the target's limits, CU count a config assumed; for
// cubins the sm version (sm_90a needs exactly 9.0) and shared memory. Every
// message names both sides. Pure functions; thread-safe.
#pragma once
#include <string>
#include <vector>

#include "backend.h"
#include "code_object.h"
#include "manifest.h"
#include "target_id.h"

namespace kiln::rt {

struct TargetLimits {
  std::string backend;  // "hip" | "cuda"
  std::string label;    // "gfx942:sramecc+:xnack- (AMD Instinct MI300X)"
  TargetId amd;         // hip
  int cc_major = 0, cc_minor = 0;  // cuda
  int warp_size = 0, compute_units = 0;
  int64_t max_shared_per_block = 0, max_regs_per_block = 0;
  std::string arch() const;  // "gfx942" | "sm_90"
};

// From a device, from a manifest target entry, or from an explicit target id
// ("gfx942:sramecc+", "amdgcn-amd-amdhsa--gfx942", "sm_90a"); unknown
// limits take the architecture's documented values.
TargetLimits limits_from_device(const DeviceProps& d);
TargetLimits limits_from_target(const TargetSpec& t);
TargetLimits limits_from_id(const std::string& id);

// Static checks of one variant's code object against its manifest entry and
// its manifest target (wrong-arch objects, missing kernel, version, wave size,
// resources against the labelled target). Returns the problems, empty if none.
std::vector<std::string> check_static(const Variant& v, const TargetSpec& t, const CodeObject& co,
                                      const std::string& file);

// The object against a concrete target (device or explicit id). "" if compatible.
std::string check_against(const Variant& v, const CodeObject& co, const TargetLimits& l,
                          const std::string& file);

// Whether a manifest target is the same architecture as `l` (gfx processor or sm).
bool same_arch(const TargetSpec& t, const TargetLimits& l);

}  // namespace kiln::rt
