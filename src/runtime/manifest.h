// manifest.json of a kiln-package/2 (docs/package-format.md), parsed once at
// open into immutable structures with every expression pre-parsed. Any field
// of the wrong type or expression outside the grammar is an Error(KILN_E_FORMAT)
// naming its JSON path.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "expr.h"

namespace kiln::rt {

inline constexpr const char* kPackageFormat = "kiln-package/2";

struct TargetSpec {
  std::string name, arch, backend, vendor, target_id;
  int warp_size = 0, compute_units = 0;
  int64_t max_shared_per_block = 0;
  nlohmann::json measured_on;
};

struct TensorSpec {
  std::string name, role, dtype;
  std::vector<Expr> shape;
};

struct TmaSpec {
  int tensor = 0;
  std::vector<Expr> dims, strides_bytes;
  std::vector<int64_t> box;
  std::string elem;
  int swizzle_bytes = 0;
};

struct Bind {
  enum Kind { Tensor, Scalar, Value, Scratch, Tma } kind = Value;
  int tensor = -1;
  std::optional<Expr> expr;
  double value = 0;
  bool global_scratch = true;  // Scratch: "global" or "profile"
  TmaSpec tma;
};

struct ArgSpec {
  std::string name, type;  // "*bf16", "i32", "i64", "fp32", "fp64", "nvTmaDesc", ...
  bool hidden = false;
  Bind bind;
};

struct Assume {
  Expr expr;
  int64_t multiple_of = 1;
};

struct DimRange {
  int64_t min = 1, max = INT64_MAX, multiple_of = 1;
};

struct Variant {
  std::string target, file, bundle_entry, sha256, kernel_name, verify, basis, device, driver;
  int rank = 0, code_object_version = 0, num_warps = 0, num_stages = 0, warp_size = 0;
  int64_t size = -1, shared_bytes = 0, registers = 0, sgprs = 0, spills = 0, scratch_bytes = 0;
  int64_t global_scratch_size = 0, global_scratch_align = 1, profile_scratch_size = 0,
          profile_scratch_align = 1;
  std::array<int64_t, 3> block{1, 1, 1};
  std::vector<Expr> grid;  // 3
  std::vector<ArgSpec> args;
  // "zero_before_launch": tensors that must hold zeros when the kernel starts
  // (a split-K kernel adds into its output), as the tensor indices of the
  // pointer arguments the manifest names; every launch clears them first.
  std::vector<std::string> zero_before_launch;
  std::vector<int> zero_tensors;
  std::vector<Assume> assumes;
  bool range_exact = true;
  std::vector<DimRange> dims;
  std::vector<std::vector<int64_t>> verified_shapes;
  int64_t candidate_id = -1;
  double value_ms = 0;
  std::optional<double> confirmed_median_ms;
  // The L2 flush the confirmation wrote before each timed call (bytes), where
  // the manifest says (confirmed.flush_bytes).
  std::optional<int64_t> confirmed_flush_bytes;
  // The SM clock the confirmation ran at (MHz, the median of its rounds'
  // readings) and whether it found the kernel at the GPU's power limit, where
  // the manifest says (confirmed.sm_clock_mhz, confirmed.power_limited).
  std::optional<double> confirmed_sm_clock_mhz;
  std::optional<bool> confirmed_power_limited;
  nlohmann::json config;
};

struct KernelSpec {
  std::string op, dtype, job_key;
  std::vector<int64_t> shape;
  nlohmann::json params = nlohmann::json::object();  // the operator's params (kind, expr, stride, ...)
  std::vector<TensorSpec> tensors;
  std::vector<Variant> variants;
  std::string label() const;  // "softmax 16384x4096 bf16"
};

struct Manifest {
  std::string format;
  nlohmann::json toolchain;
  std::vector<TargetSpec> targets;
  std::vector<KernelSpec> kernels;
  const TargetSpec* target(const std::string& name) const;
  // Throws Error(KILN_E_FORMAT); a wrong "format" gets its own message.
  static Manifest parse(const std::string& text, const std::string& what);
};

std::string shape_str(const std::vector<int64_t>& s);  // "16384x4096"

}  // namespace kiln::rt
