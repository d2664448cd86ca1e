// The C API of include/kiln/runtime.h over Package and Kernel: exceptions become
// a status and a thread-local message.
#include <cstring>
#include <string>

#include "error.h"
#include "dtype.h"
#include "kiln/runtime.h"
#include "package.h"
#include "verify_data.h"

using namespace kiln::rt;

struct kiln_package {
  std::unique_ptr<Package> pkg;
  std::string target;
};

struct kiln_kernel {
  std::unique_ptr<Kernel> k;
};

namespace {

thread_local std::string g_last_error;  // per thread: the C API's error channel

kiln_status fail(kiln_status s, const std::string& msg) {
  g_last_error = msg;
  return s;
}

template <class F>
kiln_status guarded(F&& f) {
  try {
    g_last_error.clear();
    return f();
  } catch (const Error& e) {
    return fail(e.status, e.what());
  } catch (const std::bad_alloc&) {
    return fail(KILN_E_LAUNCH, "out of host memory");
  } catch (const std::exception& e) {
    return fail(KILN_E_FORMAT, e.what());
  }
}

}  // namespace

extern "C" {

const char* kiln_last_error(void) { return g_last_error.c_str(); }

kiln_status kiln_package_open(const char* path, const kiln_open_options* options, kiln_package** out) {
  return guarded([&] {
    if (!path || !out) return fail(KILN_E_USAGE, "kiln_package_open: path and out are required");
    *out = nullptr;
    OpenOptions o;
    if (options) {
      if (options->struct_size < offsetof(kiln_open_options, device) + sizeof(int))
        return fail(KILN_E_USAGE, "kiln_open_options.struct_size must be sizeof(kiln_open_options)");
      if (options->pubkey_pem) o.pubkey = options->pubkey_pem;
      if (options->target) o.target = options->target;
      o.device = options->device;
    }
    auto p = std::make_unique<kiln_package>();
    p->pkg = Package::open(path, o);
    p->target = p->pkg->bound().label;
    *out = p.release();
    return KILN_OK;
  });
}

void kiln_package_close(kiln_package* pkg) { delete pkg; }

const char* kiln_package_target(const kiln_package* pkg) { return pkg ? pkg->target.c_str() : ""; }

int kiln_package_has_device(const kiln_package* pkg) { return pkg && pkg->pkg->backend() ? 1 : 0; }

static kiln_status find_kernel(kiln_package* pkg, const char* op, const char* params_json, const int64_t* shape,
                               int ndim, const char* dtype, kiln_kernel** out) {
  return guarded([&] {
    if (!pkg || !op || !dtype || !out || ndim < 0 || (ndim > 0 && !shape))
      return fail(KILN_E_USAGE, "kiln_kernel_find: pkg, op, shape, dtype and out are required");
    *out = nullptr;
    nlohmann::json wanted = nlohmann::json::object();
    if (params_json && *params_json) {
      try {
        wanted = nlohmann::json::parse(params_json);
      } catch (const std::exception& e) {
        return fail(KILN_E_USAGE, std::string("kiln_kernel_find_params: params are not JSON: ") + e.what());
      }
      if (!wanted.is_object())
        return fail(KILN_E_USAGE, "kiln_kernel_find_params: params must be a JSON object, e.g. {\"kind\": \"argmax\"}");
    }
    std::vector<int64_t> s(shape, shape + ndim);
    Package& p = *pkg->pkg;
    const Manifest& m = p.manifest();
    bool op_known = false, params_known = false;
    int best_k = -1, best_v = -1;
    bool best_exact = false;
    std::vector<size_t> admitting;  // kernels with a variant that admits the shape
    for (size_t k = 0; k < m.kernels.size(); ++k) {
      const KernelSpec& ks = m.kernels[k];
      if (ks.op != op) continue;
      op_known = true;
      if (!params_match(ks.params, wanted)) continue;
      params_known = true;
      if (ks.dtype != dtype || ks.shape.size() != s.size()) continue;
      for (size_t v = 0; v < ks.variants.size(); ++v) {
        if (ks.variants[v].rank != 0 || !p.runs_here(k, v)) continue;
        bool exact = false;
        if (!variant_admits(ks, ks.variants[v], s, &exact)) continue;
        if (admitting.empty() || admitting.back() != k) admitting.push_back(k);
        if (best_k < 0 || (exact && !best_exact)) {
          best_k = static_cast<int>(k);
          best_v = static_cast<int>(v);
          best_exact = exact;
        }
      }
    }
    if (best_k < 0) {
      if (!op_known) return fail(KILN_E_NOT_FOUND, std::string("no operator ") + op + " in package " + p.dir().string());
      if (!params_known)
        return fail(KILN_E_NOT_FOUND, std::string("no operator ") + op + " with params " + wanted.dump() +
                                          " in package " + p.dir().string());
      log_miss(op, s, dtype, p.bound().label);
      return fail(KILN_E_UNTUNED, std::string("untuned shape ") + op + " " + shape_str(s) + " " + dtype + " for " +
                                      p.bound().label + ": no variant was tuned or verified for it" +
                                      (std::getenv("KILN_MISS_LOG") ? " (logged to $KILN_MISS_LOG)" : ""));
    }
    // kernels of one operator that compute different things (reduce_dim's
    // kind, pool2d's window, pointwise's expr): the caller must say which
    for (size_t k : admitting) {
      if (m.kernels[k].params == m.kernels[best_k].params) continue;
      std::string choices;
      for (size_t j : admitting) choices += (choices.empty() ? "" : ", ") + m.kernels[j].params.dump();
      return fail(KILN_E_USAGE, std::string(op) + " " + shape_str(s) + " " + dtype +
                                    " is packaged with different params (" + choices +
                                    "): say which with kiln_kernel_find_params");
    }
    auto k = std::make_unique<kiln_kernel>();
    k->k = std::make_unique<Kernel>(p, best_k, best_v, std::move(s));
    *out = k.release();
    return KILN_OK;
  });
}

kiln_status kiln_kernel_find(kiln_package* pkg, const char* op, const int64_t* shape, int ndim, const char* dtype,
                             kiln_kernel** out) {
  return find_kernel(pkg, op, nullptr, shape, ndim, dtype, out);
}

kiln_status kiln_kernel_find_params(kiln_package* pkg, const char* op, const char* params_json, const int64_t* shape,
                                    int ndim, const char* dtype, kiln_kernel** out) {
  return find_kernel(pkg, op, params_json, shape, ndim, dtype, out);
}

const char* kiln_kernel_plan(const kiln_kernel* kernel) {
  if (!kernel) return "";
  try {
    return kernel->k->plan().c_str();
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return "";
  }
}

void kiln_kernel_free(kiln_kernel* kernel) { delete kernel; }

int kiln_kernel_num_tensors(const kiln_kernel* kernel) {
  return kernel ? static_cast<int>(kernel->k->spec().tensors.size()) : 0;
}

int64_t kiln_kernel_tensor_numel(const kiln_kernel* kernel, int index) {
  if (!kernel || index < 0 || index >= static_cast<int>(kernel->k->numel().size())) return -1;
  return kernel->k->numel()[index];
}

int64_t kiln_kernel_tensor_bytes(const kiln_kernel* kernel, int index) {
  int64_t n = kiln_kernel_tensor_numel(kernel, index);
  if (n < 0) return -1;
  return n * dtype_size(kernel->k->spec().tensors[index].dtype);
}

const char* kiln_kernel_describe(const kiln_kernel* kernel) { return kernel ? kernel->k->describe().c_str() : ""; }

kiln_status kiln_launch(kiln_kernel* kernel, void* const* tensors, int ntensors, void* stream) {
  try {
    if (!kernel || (ntensors > 0 && !tensors)) return fail(KILN_E_USAGE, "kiln_launch: kernel and tensors are required");
    kernel->k->launch(tensors, ntensors, stream);
    return KILN_OK;
  } catch (const Error& e) {
    return fail(e.status, e.what());
  } catch (const std::exception& e) {
    return fail(KILN_E_LAUNCH, e.what());
  }
}

static Backend* device_of(kiln_package* pkg) {
  if (!pkg) throw Error(KILN_E_USAGE, "package handle is NULL");
  if (!pkg->pkg->backend())
    throw Error(KILN_E_NO_DEVICE, "the package is open for the static target " + pkg->target + ": no device");
  return pkg->pkg->backend();
}

kiln_status kiln_device_alloc(kiln_package* pkg, size_t bytes, void** out) {
  return guarded([&] {
    if (!out) return fail(KILN_E_USAGE, "kiln_device_alloc: out is NULL");
    *out = device_of(pkg)->alloc(bytes);
    return KILN_OK;
  });
}

kiln_status kiln_device_free(kiln_package* pkg, void* ptr) {
  return guarded([&] {
    device_of(pkg)->free(ptr);
    return KILN_OK;
  });
}

kiln_status kiln_copy_to_device(kiln_package* pkg, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    device_of(pkg)->to_device(dst, src, bytes);
    return KILN_OK;
  });
}

kiln_status kiln_copy_to_host(kiln_package* pkg, void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    device_of(pkg)->to_host(dst, src, bytes);
    return KILN_OK;
  });
}

kiln_status kiln_synchronize(kiln_package* pkg) {
  return guarded([&] {
    device_of(pkg)->synchronize();
    return KILN_OK;
  });
}

void kiln_splitmix_fill(uint64_t seed, int tensor, double lo, double hi, double* out, int64_t n) {
  SplitMix64 g(seed, static_cast<uint64_t>(tensor));
  for (int64_t k = 0; k < n; ++k) out[k] = lo + (hi - lo) * g.uniform();
}

}  // extern "C"
