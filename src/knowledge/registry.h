// The entries of a registry file (kernels/operators.yaml, configs/principles.yaml)
// in file order, found by name. Immutable once loaded; safe to read from any
// thread.
#pragma once
#include <string>
#include <vector>

namespace kiln {

// T has a `std::string name`.
template <class T>
class NamedRegistry {
 public:
  // The entry called `name`; nullptr when there is none.
  const T* find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) out.push_back(e.name);
    return out;
  }

 protected:
  std::vector<T> entries_;
};

}  // namespace kiln
