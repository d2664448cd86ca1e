// GPU code objects read with no device: AMD HSA code objects (ELF e_machine
// 224, gfx target and sramecc/xnack in e_flags, NT_AMDGPU_METADATA MessagePack
// note), NVIDIA cubins (ELF e_machine 190, sm in e_flags), and clang offload
// bundles (__CLANG_OFFLOAD_BUNDLE__). Pure functions; thread-safe.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt {

struct AmdKernelMeta {
  std::string name;
  int64_t kernarg_segment_size = 0;
  int64_t group_segment_fixed_size = 0;    // static LDS bytes
  int64_t private_segment_fixed_size = 0;  // scratch bytes per work-item
  int64_t sgpr_count = 0, vgpr_count = 0, agpr_count = 0;
  int64_t sgpr_spill_count = 0, vgpr_spill_count = 0;
  int64_t wavefront_size = 0;
  int64_t max_flat_workgroup_size = 0;
  struct Arg { int64_t offset = 0, size = 0; std::string value_kind; };
  std::vector<Arg> args;  // .args: explicit kernel arguments (hidden_* ones excluded)
};

struct CodeObject {
  enum Kind { Amd, Cuda } kind = Amd;
  // AMD
  std::string gfx;            // from e_flags, "gfx942"
  std::string sramecc, xnack; // "+", "-", "" (any) or "unsupported"
  std::string target_id;      // "amdgcn-amd-amdhsa--gfx942[:sramecc+][:xnack-]" from e_flags
  std::string note_target;    // amdhsa.target from the metadata note
  int code_object_version = 0;  // from amdhsa.version (1.1 -> 4, 1.2 -> 5, 1.3 -> 6)
  std::vector<AmdKernelMeta> kernels;
  bool metadata_unread = false;  // libkilnrt built without msgpack-c (KILNRT_NO_MSGPACK)
  // CUDA
  int sm = 0;                 // 90
  bool sm_arch_specific = false;  // sm_90a
  std::string sm_name() const;    // "sm_90a"
  const AmdKernelMeta* find(std::string_view name) const;
  std::string summary() const;
};

// Throws Error(KILN_E_FORMAT) naming `what` (the file) for anything malformed.
CodeObject parse_code_object(std::string_view bytes, const std::string& what);

// gfx processor name for an e_flags machine byte, "" if unknown.
std::string gfx_name(unsigned mach);

struct BundleEntry {
  std::string id;  // "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+"
  uint64_t offset = 0, size = 0;
};
bool is_offload_bundle(std::string_view bytes);
std::vector<BundleEntry> read_offload_bundle(std::string_view bytes, const std::string& what);

}  // namespace kiln::rt
