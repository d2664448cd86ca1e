// libFuzzer target: the runtime's code-object reader (src/runtime/code_object.cpp):
// ELF headers, AMDGPU metadata notes (MessagePack), cubin flags, clang offload
// bundles. Contract under test: only kiln::rt::Error escapes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "code_object.h"
#include "error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (kiln::rt::is_offload_bundle(bytes)) {
      for (const auto& e : kiln::rt::read_offload_bundle(bytes, "fuzz.bundle")) {
        if (e.offset > bytes.size() || e.size > bytes.size() - e.offset) continue;
        try {
          (void)kiln::rt::parse_code_object(bytes.substr(e.offset, e.size), "fuzz.bundle:" + e.id).summary();
        } catch (const kiln::rt::Error&) {
        }
      }
      return 0;
    }
    const kiln::rt::CodeObject co = kiln::rt::parse_code_object(bytes, "fuzz.hsaco");
    (void)co.summary();
    (void)co.sm_name();
    for (const auto& k : co.kernels) (void)co.find(k.name);
  } catch (const kiln::rt::Error&) {
  }
  return 0;
}
