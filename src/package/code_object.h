// Inspection of GPU code objects (ELF): what machine a binary is for, and for an
// HSA code object (.hsaco) the gfx target its header flags and its
// NT_AMDGPU_METADATA note name.
#pragma once
#include <string>
#include <string_view>

namespace kiln {

struct CodeObjectInfo {
  bool is_elf = false;
  int e_machine = 0;            // 224 AMDGPU, 190 CUDA
  std::string machine;          // "AMDGPU" | "CUDA" | "other"
  std::string flags_gfx;        // from e_flags' low byte (AMDGPU), e.g. "gfx942"
  std::string note_target;      // from the metadata note, e.g. "amdgcn-amd-amdhsa--gfx942"
  std::string sm;               // CUDA: "sm_90", or "sm_90a" for arch-specific code, from e_flags
  // One line: "ELF AMDGPU gfx942, note amdgcn-amd-amdhsa--gfx942"
  std::string summary() const;
};

CodeObjectInfo inspect_code_object(std::string_view bytes);

}  // namespace kiln
