// libFuzzer target: `kiln package`'s code-object inspection
// (src/package/code_object.cpp): ELF header, e_flags, the AMDGPU note's target.
// Contract under test: inspect_code_object never throws and never reads out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "package/code_object.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)kiln::inspect_code_object(bytes).summary();
  return 0;
}
