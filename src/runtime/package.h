// An opened package: verified files, parsed manifest, every code object read
// and checked statically, a bound device (via a dlopen'd backend) or a static
// target, and a per-device module cache. Immutable after open except the
// module cache (mutex). The C API (api.cpp) and kiln-rt sit on this.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "code_object.h"
#include "compat.h"
#include "manifest.h"

namespace kiln::rt {

// The largest byte count a manifest may declare (a code object's size, or a
// tensor at the kernel's shape): 1 TiB, above any device's memory. Larger is a
// static problem that `kiln-rt verify` reports.
inline constexpr int64_t kMaxDeclaredBytes = int64_t(1) << 40;

struct OpenOptions {
  std::string pubkey;  // PEM path, "" = no signature required
  std::string target;  // static target id or manifest target name, "" = device
  int device = 0;
  bool integrity_only = false;  // stop after integrity + manifest (no code object checks)
  bool no_bind = false;         // read and check every code object, bind no device or target
};

struct LoadedObject {
  std::string image;     // the code object bytes (a bundle's selected entry)
  std::string bundle_id; // the entry used, for bundles
  CodeObject co;
  std::vector<std::string> problems;  // static problems (wrong arch, declared sizes, ...)
};

class Package {
 public:
  // Throws Error. With options.target empty, opens a backend and binds the device.
  static std::unique_ptr<Package> open(const std::filesystem::path& dir, const OpenOptions& o);
  ~Package();

  const Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& dir() const { return dir_; }
  const TargetLimits& bound() const { return bound_; }
  Backend* backend() const { return backend_.get(); }
  const DeviceProps* device() const { return backend_ ? &device_ : nullptr; }
  const LoadedObject& object(size_t k, size_t v) const { return objects_[k][v]; }
  // Whether variant v of kernel k is for the bound architecture.
  bool runs_here(size_t k, size_t v) const;
  // The loaded function (module cached per device). Throws without a device.
  void* function(size_t k, size_t v);

 private:
  Package() = default;
  std::filesystem::path dir_;
  Manifest manifest_;
  std::vector<std::vector<LoadedObject>> objects_;
  std::unique_ptr<Backend> backend_;
  DeviceProps device_;
  TargetLimits bound_;
  std::mutex mu_;
  std::map<std::pair<size_t, size_t>, std::pair<void*, void*>> modules_;  // (k,v) -> (module, function)
};

// One launchable kernel: a variant of a package kernel at a shape, with its
// grid, scalar arguments and hidden scratch worked out. Launch from one thread
// at a time (it owns its scratch buffers).
class Kernel {
 public:
  // Throws Error(KILN_E_LAUNCH) when an assume fails for the shape.
  Kernel(Package& pkg, size_t k, size_t v, std::vector<int64_t> shape);
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // Queues, on `stream`: a memset to zero of each zero_before_launch tensor
  // (its numel x dtype bytes), then the kernel.
  void launch(void* const* tensors, int ntensors, void* stream);
  const KernelSpec& spec() const { return pkg_.manifest().kernels[k_]; }
  const Variant& variant() const { return spec().variants[v_]; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& numel() const { return numel_; }
  const std::string& describe() const { return desc_; }
  Package& package() const { return pkg_; }
  // The resolved launch as JSON, read back from the parameter buffer the
  // driver receives: {"kernel", "grid", "block", "shared", "args": [{"name",
  // "type", and "tensor": i | "value": v | "scratch": "global"|"profile" with
  // "bytes" | "tma": {"tensor", "dims", "strides_bytes"}}], "zero_before_launch":
  // [{"tensor": i, "bytes": n}]} (the tensors launch() clears first; [] for
  // most kernels). Tensor pointers are named by index (they are set at
  // launch). Built on the first call.
  const std::string& plan() const;

 private:
  Package& pkg_;
  size_t k_, v_;
  std::vector<int64_t> shape_, numel_;
  uint32_t grid_[3], block_[3], shared_ = 0;
  void* fn_ = nullptr;
  struct Slot {
    size_t offset;
    int kind;  // 0 pointer, 1 TMA descriptor
    int tensor;
    const TmaSpec* tma;
    void* encoded_for = nullptr;  // TMA: the base the descriptor holds (re-encoded when it changes)
  };
  std::vector<Slot> patches_;
  std::vector<std::pair<int, size_t>> zero_;  // (tensor, bytes) cleared before each launch
  std::vector<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>> tma_dims_;  // per tma patch
  unsigned char* storage_ = nullptr;  // 64-byte aligned inside storage_buf_
  std::vector<unsigned char> storage_buf_;
  std::vector<void*> params_;
  void* scratch_[2] = {nullptr, nullptr};
  int64_t scratch_bytes_[2] = {0, 0};
  std::string desc_;
  mutable std::string plan_;
};

// Whether a kernel's params hold every key of `wanted` (a JSON object) with
// an equal value (numbers compared by value: 2 == 2.0). An empty `wanted` matches.
bool params_match(const nlohmann::json& have, const nlohmann::json& wanted);

// The shape-level admission rule of kiln_kernel_find (exact, else range+assumes).
bool variant_admits(const KernelSpec& ks, const Variant& v, const std::vector<int64_t>& shape, bool* exact);

// Appends {"op","shape","dtype","target","time"} to $KILN_MISS_LOG when set.
void log_miss(const std::string& op, const std::vector<int64_t>& shape, const std::string& dtype,
              const std::string& target);

}  // namespace kiln::rt
