#include "target_id.h"

#include "code_object.h"
#include "error.h"

namespace kiln::rt {

TargetId TargetId::parse(std::string_view s) {
  TargetId t;
  // strip an offload kind ("hipv4-", "hip-", "openmp-") and the triple
  auto dd = s.find("--");
  if (dd != std::string_view::npos) s = s.substr(dd + 2);
  size_t colon = s.find(':');
  t.processor = std::string(s.substr(0, colon));
  while (colon != std::string_view::npos) {
    size_t next = s.find(':', colon + 1);
    std::string_view f = s.substr(colon + 1, next == std::string_view::npos ? std::string_view::npos : next - colon - 1);
    if (f.size() < 2 || (f.back() != '+' && f.back() != '-'))
      throw Error(KILN_E_USAGE, "target id '" + std::string(s) + "': feature '" + std::string(f) +
                                    "' must end in + or -");
    t.features[std::string(f.substr(0, f.size() - 1))] = f.back();
    colon = next;
  }
  if (t.processor.empty()) throw Error(KILN_E_USAGE, "empty target id");
  return t;
}

std::string TargetId::str() const {
  std::string s = processor;
  for (const auto& [k, v] : features) s += ":" + k + v;
  return s;
}

std::string amd_mismatch(const TargetId& code, const TargetId& device) {
  if (code.processor != device.processor)
    return "code object is for " + code.str() + ", device is " + device.str();
  for (const auto& [f, v] : code.features) {
    auto it = device.features.find(f);
    if (it == device.features.end()) continue;  // the device does not say: treat as any
    if (it->second != v)
      return "code object requires " + f + v + " (" + code.str() + "), device has " + f +
             it->second + " (" + device.str() + ")";
  }
  return {};
}

int select_bundle_entry(const std::vector<BundleEntry>& entries, const TargetId& device) {
  int best = -1;
  size_t best_features = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& id = entries[i].id;
    if (id.find("amdgcn-amd-amdhsa") == std::string::npos) continue;  // host or other triples
    TargetId t;
    try {
      t = TargetId::parse(id);
    } catch (const Error&) {
      continue;
    }
    if (!amd_mismatch(t, device).empty()) continue;
    if (best < 0 || t.features.size() > best_features) {
      best = static_cast<int>(i);
      best_features = t.features.size();
    }
  }
  return best;
}

}  // namespace kiln::rt
