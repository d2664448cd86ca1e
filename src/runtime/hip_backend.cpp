// The HIP backend: libamdhip64.so through dlopen/dlsym, declared by Debian's
// HIP headers (libamdhip64-dev). Device properties come from the plain
// hipGetDeviceProperties symbol, whose struct layout (the pre-ROCm-6 one these
// headers declare) ROCm 6 keeps exporting under that name for old binaries; the
// buffer handed to it is over-allocated all the same.
#ifndef KILNRT_NO_HIP
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#endif
#include <dlfcn.h>

#include <cstring>

#include <cstdio>
#include <vector>

#include "backend.h"
#include "error.h"

namespace kiln::rt {

#ifndef KILNRT_NO_HIP
namespace {

class HipBackend final : public Backend {
 public:
  HipBackend(void* lib, std::string file) : lib_(lib), file_(std::move(file)) {}

  bool init(std::string* why) {
#define KILN_SYM(name)                                              \
  name##_ = reinterpret_cast<decltype(name##_)>(dlsym(lib_, #name)); \
  if (!name##_) {                                                   \
    *why = file_ + " lacks " #name;                                 \
    return false;                                                   \
  }
    KILN_SYM(hipInit);
    KILN_SYM(hipGetDeviceCount);
#if HIP_VERSION_MAJOR >= 6
    // ROCm 6+ headers declare the R0600 struct layout under this name (a macro)
    hipGetDeviceProperties_ = reinterpret_cast<decltype(hipGetDeviceProperties_)>(dlsym(lib_, "hipGetDevicePropertiesR0600"));
    if (!hipGetDeviceProperties_)
      hipGetDeviceProperties_ = reinterpret_cast<decltype(hipGetDeviceProperties_)>(dlsym(lib_, "hipGetDeviceProperties"));
    if (!hipGetDeviceProperties_) {
      *why = file_ + " lacks hipGetDevicePropertiesR0600";
      return false;
    }
#else
    KILN_SYM(hipGetDeviceProperties);
#endif
    KILN_SYM(hipDeviceGetAttribute);
    KILN_SYM(hipDriverGetVersion);
    KILN_SYM(hipSetDevice);
    KILN_SYM(hipModuleLoadData);
    KILN_SYM(hipModuleUnload);
    KILN_SYM(hipModuleGetFunction);
    KILN_SYM(hipModuleLaunchKernel);
    KILN_SYM(hipFuncSetAttribute);
    KILN_SYM(hipMalloc);
    KILN_SYM(hipFree);
    KILN_SYM(hipMemcpy);
    KILN_SYM(hipMemset);
    KILN_SYM(hipMemsetAsync);
    KILN_SYM(hipDeviceSynchronize);
    KILN_SYM(hipEventCreate);
    KILN_SYM(hipEventRecord);
    KILN_SYM(hipEventSynchronize);
    KILN_SYM(hipEventElapsedTime);
    KILN_SYM(hipEventDestroy);
    KILN_SYM(hipGetErrorName);
#undef KILN_SYM
    init_rc_ = hipInit_(0);
    return true;
  }

  std::string library() const override { return file_; }
  std::string init_error() const {
    return init_rc_ == hipSuccess ? "" : std::string("hipInit: ") + hipGetErrorName_(init_rc_);
  }

  int device_count() override {
    int n = 0;
    hipError_t r = hipGetDeviceCount_(&n);
    if (r != hipSuccess) {
      last_count_error_ = std::string("hipGetDeviceCount: ") + hipGetErrorName_(r);
      return 0;
    }
    return n;
  }
  std::string count_error() const { return last_count_error_; }

  DeviceProps props(int device) override {
    std::vector<unsigned char> buf(sizeof(hipDeviceProp_t) + 4096, 0);
    auto* p = reinterpret_cast<hipDeviceProp_t*>(buf.data());
    check(hipGetDeviceProperties_(p, device), "hipGetDeviceProperties");
    DeviceProps d;
    d.backend = "hip";
    d.ordinal = device;
    d.name = std::string(p->name, strnlen(p->name, sizeof p->name));
    d.target_id = std::string(p->gcnArchName, strnlen(p->gcnArchName, sizeof p->gcnArchName));
    d.arch = d.target_id.substr(0, d.target_id.find(':'));
    auto attr = [&](hipDeviceAttribute_t a, int fallback) {
      int v = 0;
      return hipDeviceGetAttribute_(&v, a, device) == hipSuccess ? v : fallback;
    };
    d.warp_size = attr(hipDeviceAttributeWarpSize, p->warpSize);
    d.compute_units = attr(hipDeviceAttributeMultiprocessorCount, p->multiProcessorCount);
    d.max_shared_per_block = static_cast<int64_t>(p->sharedMemPerBlock);
    d.max_regs_per_block = p->regsPerBlock;
    d.max_threads_per_block = p->maxThreadsPerBlock;
    d.l2_bytes = p->l2CacheSize;
    int ver = 0;
    (void)hipDriverGetVersion_(&ver);
    d.driver = "HIP " + std::to_string(ver);
    if (auto uuid_fn = reinterpret_cast<decltype(&::hipDeviceGetUuid)>(dlsym(lib_, "hipDeviceGetUuid"))) {
      hipUUID u;
      if (uuid_fn(&u, device) == hipSuccess) d.uuid = std::string(u.bytes, strnlen(u.bytes, sizeof u.bytes));
    }
    return d;
  }

  void bind(int device) override {
    check(hipSetDevice_(device), "hipSetDevice");
    device_ = device;
  }
  void current() {
    // HIP's current device is per thread: set it for the caller's thread.
    (void)hipSetDevice_(device_);
  }
  void* load_module(std::string_view image) override {
    current();
    hipModule_t m;
    check(hipModuleLoadData_(&m, image.data()), "hipModuleLoadData");
    return m;
  }
  void unload_module(void* m) override { (void)hipModuleUnload_(static_cast<hipModule_t>(m)); }
  void* get_function(void* m, const std::string& n) override {
    hipFunction_t f;
    check(hipModuleGetFunction_(&f, static_cast<hipModule_t>(m), n.c_str()), "hipModuleGetFunction(" + n + ")");
    return f;
  }
  void set_max_dynamic_shared(void* fn, int64_t bytes) override {
    if (bytes <= 64 * 1024) return;  // within the default LDS allocation limit
    // Best effort: HIP documents this attribute for runtime-API kernels; module
    // kernels (and Triton's own HIP launcher, which never sets it) get their
    // LDS from the launch. A real shortfall fails the launch with HIP's error.
    (void)hipFuncSetAttribute_(fn, hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  }
  void launch(void* fn, const uint32_t g[3], const uint32_t b[3], uint32_t shared, void* stream,
              void** params) override {
    check(hipModuleLaunchKernel_(static_cast<hipFunction_t>(fn), g[0], g[1], g[2], b[0], b[1], b[2], shared,
                                 static_cast<hipStream_t>(stream), params, nullptr),
          "hipModuleLaunchKernel");
  }
  void* alloc(size_t n) override {
    current();
    void* p = nullptr;
    check(hipMalloc_(&p, n ? n : 1), "hipMalloc(" + std::to_string(n) + " bytes)");
    return p;
  }
  void free(void* p) override {
    if (p) (void)hipFree_(p);
  }
  void to_device(void* d, const void* h, size_t n) override {
    check(hipMemcpy_(d, h, n, hipMemcpyHostToDevice), "hipMemcpy(host to device)");
  }
  void to_host(void* h, const void* d, size_t n) override {
    check(hipMemcpy_(h, d, n, hipMemcpyDeviceToHost), "hipMemcpy(device to host)");
  }
  void fill(void* d, unsigned char v, size_t n) override { check(hipMemset_(d, v, n), "hipMemset"); }
  void fill_async(void* d, unsigned char v, size_t n, void* stream) override {
    check(hipMemsetAsync_(d, v, n, static_cast<hipStream_t>(stream)), "hipMemsetAsync");
  }
  void synchronize() override { check(hipDeviceSynchronize_(), "hipDeviceSynchronize (a kernel faulted?)"); }
  void* event_create() override {
    hipEvent_t e;
    check(hipEventCreate_(&e), "hipEventCreate");
    return e;
  }
  void event_record(void* e, void* s) override {
    check(hipEventRecord_(static_cast<hipEvent_t>(e), static_cast<hipStream_t>(s)), "hipEventRecord");
  }
  // "with a resolution of approximately 1 us" (HIP runtime API, hipEventElapsedTime)
  double event_resolution_ms() const override { return 1e-3; }
  float event_elapsed_ms(void* a, void* b) override {
    check(hipEventSynchronize_(static_cast<hipEvent_t>(b)), "hipEventSynchronize");
    float ms = 0;
    check(hipEventElapsedTime_(&ms, static_cast<hipEvent_t>(a), static_cast<hipEvent_t>(b)), "hipEventElapsedTime");
    return ms;
  }
  void event_destroy(void* e) override { (void)hipEventDestroy_(static_cast<hipEvent_t>(e)); }
  void encode_tma(void*, const std::string&, int, void*, const uint64_t*, const uint64_t*, const uint32_t*,
                  int) override {
    throw Error(KILN_E_LAUNCH, "TMA descriptors are a CUDA feature; a HIP code object cannot bind one");
  }

 private:
  void check(hipError_t r, const std::string& what) const {
    if (r != hipSuccess) throw Error(KILN_E_LAUNCH, what + " failed: " + hipGetErrorName_(r));
  }
  void* lib_;
  std::string file_;
  int device_ = 0;
  hipError_t init_rc_ = hipSuccess;
  std::string last_count_error_;
  decltype(&::hipInit) hipInit_ = nullptr;
  decltype(&::hipGetDeviceCount) hipGetDeviceCount_ = nullptr;
  decltype(&::hipGetDeviceProperties) hipGetDeviceProperties_ = nullptr;
  decltype(&::hipDeviceGetAttribute) hipDeviceGetAttribute_ = nullptr;
  decltype(&::hipDriverGetVersion) hipDriverGetVersion_ = nullptr;
  decltype(&::hipSetDevice) hipSetDevice_ = nullptr;
  decltype(&::hipModuleLoadData) hipModuleLoadData_ = nullptr;
  decltype(&::hipModuleUnload) hipModuleUnload_ = nullptr;
  decltype(&::hipModuleGetFunction) hipModuleGetFunction_ = nullptr;
  decltype(&::hipModuleLaunchKernel) hipModuleLaunchKernel_ = nullptr;
  decltype(&::hipFuncSetAttribute) hipFuncSetAttribute_ = nullptr;
  hipError_t (*hipMalloc_)(void**, size_t) = nullptr;  // overloaded in C++ (templates)
  decltype(&::hipFree) hipFree_ = nullptr;
  decltype(&::hipMemcpy) hipMemcpy_ = nullptr;
  decltype(&::hipMemset) hipMemset_ = nullptr;
  decltype(&::hipMemsetAsync) hipMemsetAsync_ = nullptr;
  decltype(&::hipDeviceSynchronize) hipDeviceSynchronize_ = nullptr;
  hipError_t (*hipEventCreate_)(hipEvent_t*) = nullptr;
  hipError_t (*hipEventRecord_)(hipEvent_t, hipStream_t) = nullptr;  // overloaded in C++
  decltype(&::hipEventSynchronize) hipEventSynchronize_ = nullptr;
  decltype(&::hipEventElapsedTime) hipEventElapsedTime_ = nullptr;
  decltype(&::hipEventDestroy) hipEventDestroy_ = nullptr;
  decltype(&::hipGetErrorName) hipGetErrorName_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> open_hip(std::string* why) {
  void* lib = nullptr;
  std::string file;
  for (const char* name : {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
      file = name;
      break;
    }
  }
  if (!lib) {
    *why = "libamdhip64.so not found";
    return nullptr;
  }
  auto b = std::make_unique<HipBackend>(lib, file);
  if (!b->init(why)) return nullptr;
  if (b->device_count() == 0) {
    std::string e = b->init_error();
    if (e.empty()) e = b->count_error();
    *why = file + " loaded, no device" + (e.empty() ? std::string() : " (" + e + ")");
  }
  return b;
}

#else
std::unique_ptr<Backend> open_hip(std::string* why) {
  *why = "libkilnrt was built without HIP headers (KILNRT_NO_HIP): libamdhip64.so not tried";
  return nullptr;
}
#endif

std::unique_ptr<Backend> open_any_backend() {
  std::string hip_why, cuda_why;
  bool any_loaded = false;
  if (auto b = open_hip(&hip_why)) {
    any_loaded = true;
    if (b->device_count() > 0) return b;
  }
  if (auto b = open_cuda(&cuda_why)) {
    any_loaded = true;
    if (b->device_count() > 0) return b;
  }
  if (!any_loaded)
    throw Error(KILN_E_NO_RUNTIME, "no GPU runtime found: tried libamdhip64.so, libcuda.so.1 (" + hip_why +
                                       "; " + cuda_why + ")");
  throw Error(KILN_E_NO_DEVICE, "no GPU device present: " + hip_why + "; " + cuda_why);
}

}  // namespace kiln::rt
