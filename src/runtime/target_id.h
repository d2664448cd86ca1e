// AMD target ids ("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942:xnack-")
// and their compatibility rule (the HIP/clang one): same processor, and each
// feature the code object states ("+" or "-") must equal the device's; a
// feature the code object leaves unstated ("any") matches either.
#pragma once
#include <map>
#include <vector>
#include <string>
#include <string_view>

namespace kiln::rt {

struct TargetId {
  std::string processor;                     // "gfx942"
  std::map<std::string, char> features;      // "sramecc" -> '+', "xnack" -> '-'
  static TargetId parse(std::string_view s);  // accepts a triple prefix and a "hipv4-" bundle prefix
  std::string str() const;                   // "gfx942:sramecc+:xnack-"
};

// Empty when `code` may run on `device`, else the reason naming both.
std::string amd_mismatch(const TargetId& code, const TargetId& device);

// Bundle entry selection: the entry whose id matches the device, preferring
// the one that states the most features. Returns the index or -1.
struct BundleEntry;
int select_bundle_entry(const std::vector<BundleEntry>& entries, const TargetId& device);

}  // namespace kiln::rt
