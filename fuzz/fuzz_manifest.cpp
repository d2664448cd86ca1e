// libFuzzer target: the manifest parser (src/manifest) on arbitrary bytes.
// Contract under test: parse_manifest either returns a Manifest or throws
// ManifestError; any other exception, a crash, a leak or UB is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "manifest/manifest.h"

namespace {
const kiln::Knowledge& knowledge() {
  static const kiln::Knowledge k = kiln::Knowledge::load(KILN_FUZZ_HOME);
  return k;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    kiln::Manifest m = kiln::parse_manifest(text, "fuzz.yaml", knowledge());
    // What the engine does next with a parsed job: its worker document.
    for (const auto& j : m.jobs)
      if (const kiln::Target* t = knowledge().targets.find(j.target)) (void)j.to_json(*t).dump();
  } catch (const kiln::ManifestError&) {
  }
  return 0;
}
