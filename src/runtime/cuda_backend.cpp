// The CUDA driver backend: libcuda.so.1 through dlopen/dlsym, the primary
// context of one device.
#include <dlfcn.h>

#include <cstdio>

#include "backend.h"
#include "cuda_abi.h"
#include "error.h"

#if __has_include(<cuda.h>)
#include <cuda.h>
// Where the real header exists, it checks the private declarations.
static_assert(::CU_DEVICE_ATTRIBUTE_WARP_SIZE == kiln::rt::cu::CU_DEVICE_ATTRIBUTE_WARP_SIZE);
static_assert(::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == kiln::rt::cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE == kiln::rt::cu::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
static_assert(::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == kiln::rt::cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN == kiln::rt::cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK == kiln::rt::cu::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
static_assert(::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES == kiln::rt::cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 == static_cast<int>(kiln::rt::cu::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16));
static_assert(::CU_TENSOR_MAP_SWIZZLE_128B == static_cast<int>(kiln::rt::cu::CU_TENSOR_MAP_SWIZZLE_128B));
static_assert(sizeof(::CUtensorMap) == sizeof(kiln::rt::cu::CUtensorMap));
#endif

namespace kiln::rt {

using namespace cu;

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(void* lib) : lib_(lib) {}
  ~CudaBackend() override = default;  // the library stays loaded: the driver does not support unloading

  bool init(std::string* why) {
#define KILN_SYM(var, name)                                                  \
  var = reinterpret_cast<decltype(var)>(dlsym(lib_, name));                  \
  if (!var) {                                                                \
    *why = "libcuda.so.1 lacks " name;                                       \
    return false;                                                            \
  }
    KILN_SYM(cuInit, "cuInit");
    KILN_SYM(cuDriverGetVersion, "cuDriverGetVersion");
    KILN_SYM(cuDeviceGetCount, "cuDeviceGetCount");
    KILN_SYM(cuDeviceGet, "cuDeviceGet");
    KILN_SYM(cuDeviceGetName, "cuDeviceGetName");
    KILN_SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute");
    KILN_SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    KILN_SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
    KILN_SYM(cuCtxGetCurrent, "cuCtxGetCurrent");
    KILN_SYM(cuCtxSynchronize, "cuCtxSynchronize");
    KILN_SYM(cuModuleLoadData, "cuModuleLoadData");
    KILN_SYM(cuModuleUnload, "cuModuleUnload");
    KILN_SYM(cuModuleGetFunction, "cuModuleGetFunction");
    KILN_SYM(cuFuncSetAttribute, "cuFuncSetAttribute");
    KILN_SYM(cuLaunchKernel, "cuLaunchKernel");
    KILN_SYM(cuMemAlloc, "cuMemAlloc_v2");
    KILN_SYM(cuMemFree, "cuMemFree_v2");
    KILN_SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    KILN_SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    KILN_SYM(cuMemsetD8, "cuMemsetD8_v2");
    KILN_SYM(cuMemsetD8Async, "cuMemsetD8Async");
    KILN_SYM(cuEventCreate, "cuEventCreate");
    KILN_SYM(cuEventRecord, "cuEventRecord");
    KILN_SYM(cuEventSynchronize, "cuEventSynchronize");
    KILN_SYM(cuEventElapsedTime, "cuEventElapsedTime");
    KILN_SYM(cuEventDestroy, "cuEventDestroy_v2");
    KILN_SYM(cuGetErrorName, "cuGetErrorName");
#undef KILN_SYM
    cuDeviceGetUuid = reinterpret_cast<PFN_cuDeviceGetUuid>(dlsym(lib_, "cuDeviceGetUuid_v2"));
    if (!cuDeviceGetUuid) cuDeviceGetUuid = reinterpret_cast<PFN_cuDeviceGetUuid>(dlsym(lib_, "cuDeviceGetUuid"));
    cuTensorMapEncodeTiled = reinterpret_cast<PFN_cuTensorMapEncodeTiled>(dlsym(lib_, "cuTensorMapEncodeTiled"));
    init_rc_ = cuInit(0);
    return true;
  }

  std::string library() const override { return "libcuda.so.1"; }

  int device_count() override {
    if (init_rc_ != CUDA_SUCCESS) return 0;
    int n = 0;
    if (cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
    return n;
  }
  std::string init_error() const { return init_rc_ == CUDA_SUCCESS ? "" : "cuInit: " + name(init_rc_); }

  DeviceProps props(int ordinal) override {
    CUdevice d;
    check(cuDeviceGet(&d, ordinal), "cuDeviceGet");
    DeviceProps p;
    p.backend = "cuda";
    p.ordinal = ordinal;
    char buf[256] = {};
    check(cuDeviceGetName(buf, sizeof buf - 1, d), "cuDeviceGetName");
    p.name = buf;
    auto attr = [&](int a) {
      int v = 0;
      check(cuDeviceGetAttribute(&v, a, d), "cuDeviceGetAttribute");
      return v;
    };
    p.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    p.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    p.arch = "sm_" + std::to_string(p.cc_major * 10 + p.cc_minor);
    p.target_id = p.arch;
    p.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    p.compute_units = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    p.max_shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    p.max_regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    p.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    p.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    int ver = 0;
    cuDriverGetVersion(&ver);
    p.driver = "CUDA driver " + std::to_string(ver / 1000) + "." + std::to_string(ver % 1000 / 10);
    if (cuDeviceGetUuid) {
      CUuuid u;
      if (cuDeviceGetUuid(&u, d) == CUDA_SUCCESS) {
        char s[64];
        const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
        snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        p.uuid = s;
      }
    }
    return p;
  }

  void bind(int ordinal) override {
    CUdevice d;
    check(cuDeviceGet(&d, ordinal), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx_, d), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  }
  void current() {
    CUcontext c = nullptr;
    if (cuCtxGetCurrent(&c) != CUDA_SUCCESS || c != ctx_) check(cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  }
  void* load_module(std::string_view image) override {
    current();
    CUmodule m;
    check(cuModuleLoadData(&m, image.data()), "cuModuleLoadData");
    return m;
  }
  void unload_module(void* m) override {
    current();
    cuModuleUnload(static_cast<CUmodule>(m));
  }
  void* get_function(void* m, const std::string& n) override {
    CUfunction f;
    check(cuModuleGetFunction(&f, static_cast<CUmodule>(m), n.c_str()), "cuModuleGetFunction(" + n + ")");
    return f;
  }
  void set_max_dynamic_shared(void* fn, int64_t bytes) override {
    if (bytes <= 48 * 1024) return;  // above 48 KiB a kernel must opt in
    check(cuFuncSetAttribute(static_cast<CUfunction>(fn), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             static_cast<int>(bytes)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  void launch(void* fn, const uint32_t g[3], const uint32_t b[3], uint32_t shared, void* stream,
              void** params) override {
    current();
    check(cuLaunchKernel(static_cast<CUfunction>(fn), g[0], g[1], g[2], b[0], b[1], b[2], shared,
                         static_cast<CUstream>(stream), params, nullptr),
          "cuLaunchKernel");
  }
  void* alloc(size_t n) override {
    current();
    CUdeviceptr p = 0;
    check(cuMemAlloc(&p, n ? n : 1), "cuMemAlloc(" + std::to_string(n) + " bytes)");
    return reinterpret_cast<void*>(p);
  }
  void free(void* p) override {
    if (!p) return;
    current();
    cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  }
  void to_device(void* d, const void* h, size_t n) override {
    current();
    check(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(d), h, n), "cuMemcpyHtoD");
  }
  void to_host(void* h, const void* d, size_t n) override {
    current();
    check(cuMemcpyDtoH(h, reinterpret_cast<CUdeviceptr>(d), n), "cuMemcpyDtoH");
  }
  void fill(void* d, unsigned char v, size_t n) override {
    current();
    check(cuMemsetD8(reinterpret_cast<CUdeviceptr>(d), v, n), "cuMemsetD8");
  }
  void fill_async(void* d, unsigned char v, size_t n, void* stream) override {
    current();
    check(cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(d), v, n, static_cast<CUstream>(stream)),
          "cuMemsetD8Async");
  }
  void synchronize() override {
    current();
    check(cuCtxSynchronize(), "cuCtxSynchronize (a kernel faulted?)");
  }
  void* event_create() override {
    current();
    CUevent e;
    check(cuEventCreate(&e, 0), "cuEventCreate");
    return e;
  }
  void event_record(void* e, void* s) override {
    check(cuEventRecord(static_cast<CUevent>(e), static_cast<CUstream>(s)), "cuEventRecord");
  }
  // "with a resolution of around 0.5 microseconds" (CUDA driver API, cuEventElapsedTime)
  double event_resolution_ms() const override { return 5e-4; }
  float event_elapsed_ms(void* a, void* b) override {
    check(cuEventSynchronize(static_cast<CUevent>(b)), "cuEventSynchronize");
    float ms = 0;
    check(cuEventElapsedTime(&ms, static_cast<CUevent>(a), static_cast<CUevent>(b)), "cuEventElapsedTime");
    return ms;
  }
  void event_destroy(void* e) override { cuEventDestroy(static_cast<CUevent>(e)); }

  void encode_tma(void* out, const std::string& elem, int rank, void* base, const uint64_t* dims,
                  const uint64_t* strides, const uint32_t* box, int swizzle) override {
    if (!cuTensorMapEncodeTiled)
      throw Error(KILN_E_LAUNCH, "this CUDA driver has no cuTensorMapEncodeTiled (needs CUDA 12+)");
    CUtensorMapDataType t;
    if (elem == "bf16") t = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    else if (elem == "fp16") t = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    else if (elem == "fp32") t = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    else if (elem == "fp64") t = CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    else if (elem == "i32") t = CU_TENSOR_MAP_DATA_TYPE_INT32;
    else if (elem == "i64") t = CU_TENSOR_MAP_DATA_TYPE_INT64;
    else if (elem == "i8" || elem == "u8" || elem.rfind("fp8", 0) == 0) t = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    else if (elem == "i16") t = CU_TENSOR_MAP_DATA_TYPE_UINT16;
    else throw Error(KILN_E_LAUNCH, "TMA element type " + elem + " is not supported");
    CUtensorMapSwizzle sw = swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                            : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                            : swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                            : CU_TENSOR_MAP_SWIZZLE_NONE;
    uint32_t elem_strides[5] = {1, 1, 1, 1, 1};
    // as Triton's own launcher (backends/nvidia/driver.c fill_tma_descriptor)
    check(cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(out), t, static_cast<uint32_t>(rank), base, dims,
                                 strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled");
  }

 private:
  std::string name(CUresult r) const {
    const char* s = nullptr;
    if (cuGetErrorName && cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUresult " + std::to_string(r);
  }
  void check(CUresult r, const std::string& what) const {
    if (r != CUDA_SUCCESS) throw Error(KILN_E_LAUNCH, what + " failed: " + name(r));
  }

  void* lib_;
  CUcontext ctx_ = nullptr;
  CUresult init_rc_ = 0;
  PFN_cuInit cuInit = nullptr;
  PFN_cuDriverGetVersion cuDriverGetVersion = nullptr;
  PFN_cuDeviceGetCount cuDeviceGetCount = nullptr;
  PFN_cuDeviceGet cuDeviceGet = nullptr;
  PFN_cuDeviceGetName cuDeviceGetName = nullptr;
  PFN_cuDeviceGetUuid cuDeviceGetUuid = nullptr;
  PFN_cuDeviceGetAttribute cuDeviceGetAttribute = nullptr;
  PFN_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuCtxSetCurrent cuCtxSetCurrent = nullptr;
  PFN_cuCtxGetCurrent cuCtxGetCurrent = nullptr;
  PFN_cuCtxSynchronize cuCtxSynchronize = nullptr;
  PFN_cuModuleLoadData cuModuleLoadData = nullptr;
  PFN_cuModuleUnload cuModuleUnload = nullptr;
  PFN_cuModuleGetFunction cuModuleGetFunction = nullptr;
  PFN_cuFuncSetAttribute cuFuncSetAttribute = nullptr;
  PFN_cuLaunchKernel cuLaunchKernel = nullptr;
  PFN_cuMemAlloc cuMemAlloc = nullptr;
  PFN_cuMemFree cuMemFree = nullptr;
  PFN_cuMemcpyHtoD cuMemcpyHtoD = nullptr;
  PFN_cuMemcpyDtoH cuMemcpyDtoH = nullptr;
  PFN_cuMemsetD8 cuMemsetD8 = nullptr;
  PFN_cuMemsetD8Async cuMemsetD8Async = nullptr;
  PFN_cuEventCreate cuEventCreate = nullptr;
  PFN_cuEventRecord cuEventRecord = nullptr;
  PFN_cuEventSynchronize cuEventSynchronize = nullptr;
  PFN_cuEventElapsedTime cuEventElapsedTime = nullptr;
  PFN_cuEventDestroy cuEventDestroy = nullptr;
  PFN_cuGetErrorName cuGetErrorName = nullptr;
  PFN_cuTensorMapEncodeTiled cuTensorMapEncodeTiled = nullptr;
};

}  // namespace

std::unique_ptr<Backend> open_cuda(std::string* why) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = "libcuda.so.1 not found";
    return nullptr;
  }
  auto b = std::make_unique<CudaBackend>(lib);
  if (!b->init(why)) return nullptr;
  if (b->device_count() == 0) {
    std::string e = b->init_error();
    *why = "libcuda.so.1 loaded, no device" + (e.empty() ? std::string() : " (" + e + ")");
  }
  return b;
}

}  // namespace kiln::rt
