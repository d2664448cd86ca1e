#include "package.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "error.h"
#include "dtype.h"
#include "integrity.h"
#include "verify_data.h"

namespace fs = std::filesystem;

namespace kiln::rt {

namespace {

struct SizeCtx {
  const Manifest* m;
};

long long manifest_size(const void* ctx, const std::string& rel) {
  const auto* c = static_cast<const SizeCtx*>(ctx);
  if (!c->m) return -1;
  for (const auto& k : c->m->kernels)
    for (const auto& v : k.variants)
      if (v.file == rel && v.bundle_entry.empty()) return v.size;
  return -1;
}

size_t dtype_bytes(const std::string& t) {
  const int n = dtype_size(t);
  return n > 0 ? static_cast<size_t>(n) : 1;  // 1: a lower bound for an unknown dtype
}

// Declared sizes against sane bounds: the variant's code-object size must be
// the image's, and every tensor of the kernel's own shape must fit in
// kMaxTensorBytes without its element count overflowing.
std::vector<std::string> size_problems(const KernelSpec& ks, const Variant& v, size_t image_bytes,
                                       const std::string& what) {
  std::vector<std::string> out;
  if (v.size > kMaxDeclaredBytes)
    out.push_back(what + ": declared size " + std::to_string(v.size) + " bytes is above the bound of " +
                  std::to_string(kMaxDeclaredBytes));
  else if (v.size >= 0 && static_cast<uint64_t>(v.size) != image_bytes)
    out.push_back(what + ": declared size " + std::to_string(v.size) + " bytes, the code object has " +
                  std::to_string(image_bytes));
  for (const auto& t : ks.tensors) {
    int64_t n = 1;
    std::string why;
    try {
      for (const auto& d : t.shape) {
        int64_t x = d.eval(ks.shape);
        if (x < 0) {
          why = "a negative dimension " + d.text() + " = " + std::to_string(x);
          break;
        }
        if (__builtin_mul_overflow(n, x, &n)) {
          why = "an element count that overflows int64";
          break;
        }
      }
      int64_t bytes = 0;
      if (why.empty() && (__builtin_mul_overflow(n, static_cast<int64_t>(dtype_bytes(t.dtype)), &bytes) ||
                          bytes > kMaxDeclaredBytes))
        why = std::to_string(n) + " elements of " + t.dtype + ", above the bound of " +
              std::to_string(kMaxDeclaredBytes) + " bytes";
    } catch (const ExprError& e) {
      why = e.what();
    }
    if (!why.empty())
      out.push_back(what + ": tensor " + t.name + " at shape " + shape_str(ks.shape) + " has " + why);
  }
  return out;
}

}  // namespace

std::unique_ptr<Package> Package::open(const fs::path& dir, const OpenOptions& o) {
  std::unique_ptr<Package> p(new Package());
  p->dir_ = dir;
  if (!fs::is_directory(dir)) throw Error(KILN_E_IO, dir.string() + " is not a package directory");
  // 1. signature over SHA256SUMS, then the manifest's own hash, then the rest
  if (!o.pubkey.empty()) check_signature(dir, o.pubkey);
  auto sums = parse_sums(dir);
  check_one(dir, sums, "manifest.json");
  p->manifest_ = Manifest::parse(read_pkg_file(dir, "manifest.json", "manifest.json"), (dir / "manifest.json").string());
  // every file the manifest names is a checked path inside the package, listed in SHA256SUMS
  for (const auto& ks : p->manifest_.kernels)
    for (const auto& v : ks.variants)
      for (const auto* f : {&v.file, &v.verify}) {
        if (f == &v.verify && v.verify.empty()) continue;
        std::string what = "manifest.json " + ks.label() + " / " + v.target + " rank " + std::to_string(v.rank) +
                           (f == &v.file ? " file" : " verify");
        check_relpath(*f, what);
        if (!sums.count(*f))
          throw Error(KILN_E_INTEGRITY, what + ": " + *f + " is not listed in SHA256SUMS: refused");
      }
  SizeCtx ctx{&p->manifest_};
  check_sums(dir, &manifest_size, &ctx);
  if (o.integrity_only) return p;

  // 2. every code object, statically, against its manifest entry
  const Manifest& m = p->manifest_;
  std::map<std::string, std::string> cache;
  for (const auto& ks : m.kernels) {
    std::vector<LoadedObject> row;
    for (const auto& v : ks.variants) {
      LoadedObject lo;
      if (!cache.count(v.file)) cache[v.file] = read_pkg_file(dir, v.file, "manifest.json variant file");
      const std::string& bytes = cache[v.file];
      std::string what = v.file;
      if (is_offload_bundle(bytes)) {
        auto entries = read_offload_bundle(bytes, v.file);
        const BundleEntry* e = nullptr;
        if (!v.bundle_entry.empty()) {
          for (const auto& x : entries)
            if (x.id == v.bundle_entry) e = &x;
          if (!e) throw Error(KILN_E_FORMAT, v.file + ": no bundle entry " + v.bundle_entry);
        } else {
          const TargetSpec* t = m.target(v.target);
          int i = select_bundle_entry(entries, TargetId::parse(t->target_id.empty() ? t->arch : t->target_id));
          if (i < 0) throw Error(KILN_E_FORMAT, v.file + ": no bundle entry for " + t->name + " (" + t->arch + ")");
          e = &entries[i];
        }
        lo.image = bytes.substr(e->offset, e->size);
        lo.bundle_id = e->id;
        what = v.file + "[" + e->id + "]";
      } else {
        lo.image = bytes;
      }
      if (!v.sha256.empty() && sha256_hex(lo.image) != v.sha256)
        throw Error(KILN_E_INTEGRITY, what + ": SHA-256 of the code object differs from the manifest's sha256");
      lo.co = parse_code_object(lo.image, what);
      lo.problems = check_static(v, *m.target(v.target), lo.co, what);
      for (auto& why : size_problems(ks, v, lo.image.size(), what)) lo.problems.push_back(std::move(why));
      row.push_back(std::move(lo));
    }
    p->objects_.push_back(std::move(row));
  }

  // 3. bind a device or a static target
  if (o.no_bind) return p;
  if (!o.target.empty()) {
    if (const TargetSpec* t = m.target(o.target)) p->bound_ = limits_from_target(*t);
    else p->bound_ = limits_from_id(o.target);
  } else {
    p->backend_ = open_any_backend();
    int n = p->backend_->device_count();
    if (o.device < 0 || o.device >= n)
      throw Error(KILN_E_NO_DEVICE, "device " + std::to_string(o.device) + " requested, " +
                                        p->backend_->library() + " reports " + std::to_string(n));
    p->device_ = p->backend_->props(o.device);
    p->backend_->bind(o.device);
    p->bound_ = limits_from_device(p->device_);
  }

  // 4. compatibility of everything for the bound architecture, before any launch
  bool any = false;
  std::string have;
  for (const auto& t : m.targets) have += (have.empty() ? "" : ", ") + t.name + " " + t.arch;
  for (size_t k = 0; k < m.kernels.size(); ++k) {
    for (size_t v = 0; v < m.kernels[k].variants.size(); ++v) {
      if (!p->runs_here(k, v)) continue;
      any = true;
      const auto& lo = p->objects_[k][v];
      if (!lo.problems.empty()) throw Error(KILN_E_COMPAT, lo.problems.front());
      std::string why = check_against(m.kernels[k].variants[v], lo.co, p->bound_,
                                      m.kernels[k].variants[v].file);
      if (!why.empty()) throw Error(KILN_E_COMPAT, why);
    }
  }
  if (!any && !m.kernels.empty())
    throw Error(KILN_E_COMPAT, "the package has no code objects for " + p->bound_.label +
                                   " (its targets: " + have + ")");
  return p;
}

Package::~Package() {
  if (backend_)
    for (auto& [key, mf] : modules_) backend_->unload_module(mf.first);
}

bool Package::runs_here(size_t k, size_t v) const {
  const Variant& var = manifest_.kernels[k].variants[v];
  const TargetSpec* t = manifest_.target(var.target);
  return t && same_arch(*t, bound_);
}

void* Package::function(size_t k, size_t v) {
  if (!backend_)
    throw Error(KILN_E_NO_DEVICE, "the package is open for the static target " + bound_.label + ": no device to launch on");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find({k, v});
  if (it != modules_.end()) return it->second.second;
  // objects are shared between variants with the same file and entry
  for (auto& [key, mf] : modules_) {
    const Variant& a = manifest_.kernels[key.first].variants[key.second];
    const Variant& b = manifest_.kernels[k].variants[v];
    if (a.file == b.file && objects_[key.first][key.second].bundle_id == objects_[k][v].bundle_id) {
      void* fn = backend_->get_function(mf.first, b.kernel_name);
      modules_[{k, v}] = {mf.first, fn};
      return fn;
    }
  }
  void* mod = backend_->load_module(objects_[k][v].image);
  void* fn = backend_->get_function(mod, manifest_.kernels[k].variants[v].kernel_name);
  backend_->set_max_dynamic_shared(fn, manifest_.kernels[k].variants[v].shared_bytes);
  modules_[{k, v}] = {mod, fn};
  return fn;
}

bool variant_admits(const KernelSpec& ks, const Variant& v, const std::vector<int64_t>& shape, bool* exact) {
  *exact = shape == ks.shape;
  if (*exact) return true;
  if (v.range_exact || v.dims.size() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const DimRange& d = v.dims[i];
    if (shape[i] < d.min || shape[i] > d.max || shape[i] % d.multiple_of != 0) return false;
  }
  try {
    for (const auto& a : v.assumes)
      if (floor_mod(a.expr.eval(shape), a.multiple_of) != 0) return false;
  } catch (const ExprError&) {
    return false;
  }
  return true;
}

bool params_match(const nlohmann::json& have, const nlohmann::json& wanted) {
  for (auto it = wanted.begin(); it != wanted.end(); ++it) {
    if (!have.contains(it.key())) return false;
    const auto& h = have.at(it.key());
    const auto& w = it.value();
    if (h.is_number() && w.is_number() && !h.is_boolean() && !w.is_boolean()) {
      if (h.get<double>() != w.get<double>()) return false;
    } else if (h != w) {
      return false;
    }
  }
  return true;
}

void log_miss(const std::string& op, const std::vector<int64_t>& shape, const std::string& dtype,
              const std::string& target) {
  const char* path = std::getenv("KILN_MISS_LOG");
  if (!path || !*path) return;
  nlohmann::json j = {{"op", op}, {"shape", shape}, {"dtype", dtype}, {"target", target},
                      {"time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
  std::string line = j.dump() + "\n";
  int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;  // the miss log is best effort: the caller gets the untuned error regardless
  ssize_t w = ::write(fd, line.data(), line.size());  // one write: lines from several processes do not interleave
  (void)w;
  ::close(fd);
}

namespace {

size_t type_size(const std::string& t) { return static_cast<size_t>(arg_size(t)); }

void store_scalar(unsigned char* dst, const std::string& t, double fv, int64_t iv, bool is_int, const std::string& name) {
  auto range = [&](int64_t lo, int64_t hi) {
    if (iv < lo || iv > hi)
      throw Error(KILN_E_LAUNCH, "argument " + name + " = " + std::to_string(iv) + " does not fit " + t);
  };
  if (t == "i32") { range(INT32_MIN, INT32_MAX); int32_t x = static_cast<int32_t>(is_int ? iv : std::llround(fv)); std::memcpy(dst, &x, 4); }
  else if (t == "u32") { range(0, UINT32_MAX); uint32_t x = static_cast<uint32_t>(iv); std::memcpy(dst, &x, 4); }
  else if (t == "i64" || t == "u64") { int64_t x = is_int ? iv : std::llround(fv); std::memcpy(dst, &x, 8); }
  else if (t == "i16") { range(INT16_MIN, INT16_MAX); int16_t x = static_cast<int16_t>(iv); std::memcpy(dst, &x, 2); }
  else if (t == "i8") { range(INT8_MIN, INT8_MAX); int8_t x = static_cast<int8_t>(iv); std::memcpy(dst, &x, 1); }
  else if (t == "u8" || t == "i1") { uint8_t x = static_cast<uint8_t>(iv); std::memcpy(dst, &x, 1); }
  else if (t == "fp32" || t == "f32") { float x = static_cast<float>(is_int ? double(iv) : fv); std::memcpy(dst, &x, 4); }
  else if (t == "fp64") { double x = is_int ? double(iv) : fv; std::memcpy(dst, &x, 8); }
  else if (t == "fp16") { _Float16 x = static_cast<_Float16>(is_int ? double(iv) : fv); std::memcpy(dst, &x, 2); }
  else throw Error(KILN_E_LAUNCH, "argument " + name + ": unsupported scalar type " + t);
}

}  // namespace

Kernel::Kernel(Package& pkg, size_t k, size_t v, std::vector<int64_t> shape)
    : pkg_(pkg), k_(k), v_(v), shape_(std::move(shape)) {
  const KernelSpec& ks = spec();
  const Variant& var = variant();
  std::string label = ks.op + " " + shape_str(shape_) + " " + ks.dtype;
  try {
    for (const auto& a : var.assumes) {
      int64_t x = a.expr.eval(shape_);
      if (floor_mod(x, a.multiple_of) != 0)
        throw Error(KILN_E_LAUNCH, label + ": the code object assumes " + a.expr.text() + " is a multiple of " +
                                       std::to_string(a.multiple_of) + ", here it is " + std::to_string(x));
    }
    for (const auto& t : ks.tensors) {
      int64_t n = 1;
      for (const auto& d : t.shape) n *= d.eval(shape_);
      numel_.push_back(n);
    }
    int64_t programs = 1;
    for (int i = 0; i < 3; ++i) {
      int64_t g = var.grid[i].eval(shape_);
      if (g < 1 || g > INT32_MAX) throw Error(KILN_E_LAUNCH, label + ": grid[" + std::to_string(i) + "] = " + var.grid[i].text() + " = " + std::to_string(g));
      grid_[i] = static_cast<uint32_t>(g);
      block_[i] = static_cast<uint32_t>(var.block[i]);
      programs *= g;
    }
    shared_ = static_cast<uint32_t>(var.shared_bytes);
    for (int t : var.zero_tensors) {
      const int64_t bytes = numel_[t] * dtype_size(ks.tensors[t].dtype);
      if (bytes < 0 || dtype_size(ks.tensors[t].dtype) == 0)
        throw Error(KILN_E_LAUNCH, label + ": tensor " + ks.tensors[t].name + " to clear before the launch has dtype " +
                                       ks.tensors[t].dtype + " of unknown size");
      zero_.emplace_back(t, static_cast<size_t>(bytes));
    }
    // parameter storage: every argument at an offset aligned to its size (TMA to 64)
    size_t off = 0;
    std::vector<size_t> offsets;
    for (const auto& a : var.args) {
      size_t sz = type_size(a.type);
      if (!sz) throw Error(KILN_E_FORMAT, label + ": argument " + a.name + " has unsupported type " + a.type);
      size_t al = a.type == "nvTmaDesc" ? 64 : sz;
      off = (off + al - 1) / al * al;
      offsets.push_back(off);
      off += sz;
    }
    storage_buf_.assign(off + 64, 0);
    storage_ = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(storage_buf_.data()) + 63) & ~uintptr_t(63));
    for (size_t i = 0; i < var.args.size(); ++i) {
      const ArgSpec& a = var.args[i];
      unsigned char* dst = storage_ + offsets[i];
      params_.push_back(dst);
      switch (a.bind.kind) {
        case Bind::Tensor: patches_.push_back({offsets[i], 0, a.bind.tensor, nullptr}); break;
        case Bind::Scalar: store_scalar(dst, a.type, 0, a.bind.expr->eval(shape_), true, a.name); break;
        case Bind::Value: {
          double val = a.bind.value;
          bool is_int = a.type[0] == 'i' || a.type[0] == 'u';
          store_scalar(dst, a.type, val, static_cast<int64_t>(val), is_int, a.name);
          break;
        }
        case Bind::Scratch: {
          int64_t size = a.bind.global_scratch ? var.global_scratch_size : var.profile_scratch_size;
          int64_t align = a.bind.global_scratch ? var.global_scratch_align : var.profile_scratch_align;
          void* ptr = nullptr;
          // device allocations are at least 256-byte aligned; larger alignments are padded
          size_t bytes = size > 0 ? static_cast<size_t>(size * programs + (align > 256 ? align : 0)) : 0;
          scratch_bytes_[a.bind.global_scratch ? 0 : 1] = static_cast<int64_t>(bytes);
          if (size > 0 && pkg_.backend()) {
            void*& slot = scratch_[a.bind.global_scratch ? 0 : 1];
            slot = pkg_.backend()->alloc(bytes);
            uintptr_t p = reinterpret_cast<uintptr_t>(slot);
            ptr = reinterpret_cast<void*>((p + align - 1) / align * align);
          }
          std::memcpy(dst, &ptr, 8);
          break;
        }
        case Bind::Tma: {
          const TmaSpec& t = a.bind.tma;
          std::vector<uint64_t> dims, strides;
          // the manifest lists dims outermost first; the driver wants innermost first
          for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) dims.push_back(static_cast<uint64_t>(it->eval(shape_)));
          for (auto it = t.strides_bytes.rbegin(); it != t.strides_bytes.rend(); ++it)
            strides.push_back(static_cast<uint64_t>(it->eval(shape_)));
          for (auto s : strides)
            if (s % 16) throw Error(KILN_E_LAUNCH, label + ": TMA argument " + a.name + " has a stride of " + std::to_string(s) + " bytes, not a multiple of 16");
          tma_dims_.emplace_back(std::move(dims), std::move(strides));
          patches_.push_back({offsets[i], 1, t.tensor, &t});
          break;
        }
      }
    }
    if (pkg_.backend()) fn_ = pkg_.function(k_, v_);
  } catch (const ExprError& e) {
    throw Error(KILN_E_LAUNCH, label + ": " + e.what());
  } catch (...) {
    for (void* s : scratch_)
      if (s && pkg_.backend()) pkg_.backend()->free(s);
    throw;
  }
  desc_ = var.file + " " + var.kernel_name + " grid=[" + std::to_string(grid_[0]) + "," + std::to_string(grid_[1]) +
          "," + std::to_string(grid_[2]) + "] block=[" + std::to_string(block_[0]) + "," + std::to_string(block_[1]) +
          "," + std::to_string(block_[2]) + "] shared=" + std::to_string(shared_);
}

namespace {

nlohmann::json stored_scalar(const unsigned char* p, const std::string& t) {
  if (t == "i32") { int32_t x; std::memcpy(&x, p, 4); return x; }
  if (t == "u32") { uint32_t x; std::memcpy(&x, p, 4); return x; }
  if (t == "i64" || t == "u64") { int64_t x; std::memcpy(&x, p, 8); return x; }
  if (t == "i16") { int16_t x; std::memcpy(&x, p, 2); return x; }
  if (t == "i8") { int8_t x; std::memcpy(&x, p, 1); return x; }
  if (t == "u8" || t == "i1") return p[0];
  if (t == "fp32" || t == "f32") { float x; std::memcpy(&x, p, 4); return x; }
  if (t == "fp64") { double x; std::memcpy(&x, p, 8); return x; }
  if (t == "fp16") { _Float16 x; std::memcpy(&x, p, 2); return static_cast<double>(x); }
  return nullptr;
}

}  // namespace

const std::string& Kernel::plan() const {
  if (!plan_.empty()) return plan_;
  const Variant& var = variant();
  nlohmann::json args = nlohmann::json::array();
  size_t tma_i = 0;
  for (size_t i = 0; i < var.args.size(); ++i) {
    const ArgSpec& a = var.args[i];
    nlohmann::json j = {{"name", a.name}, {"type", a.type}};
    const auto* p = static_cast<const unsigned char*>(params_[i]);
    switch (a.bind.kind) {
      case Bind::Tensor: j["tensor"] = a.bind.tensor; break;
      case Bind::Scalar:
      case Bind::Value: j["value"] = stored_scalar(p, a.type); break;
      case Bind::Scratch:
        j["scratch"] = a.bind.global_scratch ? "global" : "profile";
        j["bytes"] = scratch_bytes_[a.bind.global_scratch ? 0 : 1];
        break;
      case Bind::Tma: {
        const auto& [dims, strides] = tma_dims_[tma_i++];
        // back to the manifest's order, outermost first
        j["tma"] = {{"tensor", a.bind.tma.tensor},
                    {"dims", std::vector<uint64_t>(dims.rbegin(), dims.rend())},
                    {"strides_bytes", std::vector<uint64_t>(strides.rbegin(), strides.rend())}};
        break;
      }
    }
    args.push_back(std::move(j));
  }
  nlohmann::json zero = nlohmann::json::array();
  for (const auto& [t, bytes] : zero_) zero.push_back({{"tensor", t}, {"bytes", bytes}});
  nlohmann::json out = {{"kernel", var.kernel_name}, {"file", var.file},
                        {"grid", {grid_[0], grid_[1], grid_[2]}},
                        {"block", {block_[0], block_[1], block_[2]}},
                        {"shared", shared_}, {"numel", numel_}, {"args", std::move(args)},
                        {"zero_before_launch", std::move(zero)}};
  plan_ = out.dump();
  return plan_;
}

Kernel::~Kernel() {
  for (void* s : scratch_)
    if (s && pkg_.backend()) pkg_.backend()->free(s);
}

void Kernel::launch(void* const* tensors, int ntensors, void* stream) {
  const KernelSpec& ks = spec();
  if (ntensors != static_cast<int>(ks.tensors.size()))
    throw Error(KILN_E_USAGE, ks.op + " takes " + std::to_string(ks.tensors.size()) + " tensors, got " + std::to_string(ntensors));
  if (!fn_)
    throw Error(KILN_E_NO_DEVICE, "the package is open for the static target " + pkg_.bound().label + ": no device to launch on");
  for (int i = 0; i < ntensors; ++i)
    if (reinterpret_cast<uintptr_t>(tensors[i]) % 16)
      throw Error(KILN_E_LAUNCH, ks.op + ": tensor " + std::to_string(i) + " (" + ks.tensors[i].name +
                                     ") is not 16-byte aligned; the code object assumes it is");
  size_t tma_i = 0;
  for (Slot& s : patches_) {
    if (s.kind == 0) {
      std::memcpy(storage_ + s.offset, &tensors[s.tensor], 8);
    } else {
      const auto& [dims, strides] = tma_dims_[tma_i++];
      if (s.encoded_for == tensors[s.tensor]) continue;  // same tensor as the last launch
      s.encoded_for = nullptr;
      uint32_t box[5];
      int rank = static_cast<int>(s.tma->box.size());
      for (int r = 0; r < rank; ++r) box[r] = static_cast<uint32_t>(s.tma->box[rank - 1 - r]);
      pkg_.backend()->encode_tma(storage_ + s.offset, s.tma->elem, rank, tensors[s.tensor], dims.data(),
                                 strides.data(), box, s.tma->swizzle_bytes);
      s.encoded_for = tensors[s.tensor];
    }
  }
  // a split-K kernel adds into its output: zeros first, on the same stream
  for (const auto& [t, bytes] : zero_)
    if (bytes) pkg_.backend()->fill_async(tensors[t], 0, bytes, stream);
  pkg_.backend()->launch(fn_, grid_, block_, shared_, stream, params_.data());
}

}  // namespace kiln::rt
