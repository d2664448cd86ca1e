// A GPU runtime loaded at run time with dlopen (never linked): HIP
// (libamdhip64.so) or the CUDA driver (libcuda.so.1). One Backend is bound to
// one device. Every call throws Error (KILN_E_LAUNCH unless stated) with the
// driver's own error name. Thread-safe as the underlying runtime is; the CUDA
// backend makes its primary context current on the calling thread per call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::rt {

struct DeviceProps {
  std::string backend;    // "hip" | "cuda"
  std::string name;       // "AMD Instinct MI300X", "NVIDIA H200"
  std::string arch;       // "gfx942", "sm_90"
  std::string target_id;  // "gfx942:sramecc+:xnack-" (HIP gcnArchName) | "sm_90"
  std::string driver, uuid;
  int ordinal = 0, warp_size = 0, compute_units = 0, cc_major = 0, cc_minor = 0;
  int64_t max_shared_per_block = 0;  // opt-in maximum (CUDA) / LDS per block (HIP)
  int64_t max_regs_per_block = 0, max_threads_per_block = 0, l2_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string library() const = 0;  // the dlopen'd file
  virtual int device_count() = 0;           // 0 when the runtime reports no device
  virtual DeviceProps props(int device) = 0;
  virtual void bind(int device) = 0;  // make `device` current for what follows
  virtual void* load_module(std::string_view image) = 0;
  virtual void unload_module(void* module) = 0;
  virtual void* get_function(void* module, const std::string& name) = 0;
  virtual void set_max_dynamic_shared(void* fn, int64_t bytes) = 0;
  virtual void launch(void* fn, const uint32_t grid[3], const uint32_t block[3], uint32_t shared,
                      void* stream, void** params) = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill(void* dst, unsigned char byte, size_t bytes) = 0;
  // `bytes` bytes at dst set to `byte`, queued on `stream` (null: the default
  // stream) ahead of what is launched on it next: cuMemsetD8Async / hipMemsetAsync.
  virtual void fill_async(void* dst, unsigned char byte, size_t bytes, void* stream) = 0;
  virtual void synchronize() = 0;
  virtual void* event_create() = 0;
  virtual void event_record(void* ev, void* stream) = 0;
  virtual float event_elapsed_ms(void* start, void* end) = 0;  // synchronises on end
  // The resolution its runtime states for event_elapsed_ms, in ms: about
  // 0.5 us for cuEventElapsedTime, about 1 us for hipEventElapsedTime.
  virtual double event_resolution_ms() const { return 1e-3; }
  virtual void event_destroy(void* ev) = 0;
  // cuTensorMapEncodeTiled (CUDA only; HIP throws): rank dims innermost first.
  virtual void encode_tma(void* out128, const std::string& elem, int rank, void* base,
                          const uint64_t* dims, const uint64_t* strides_bytes,
                          const uint32_t* box, int swizzle_bytes) = 0;
};

// dlopen one runtime. Returns null and sets *why when the library or a
// required symbol is missing or init fails.
std::unique_ptr<Backend> open_hip(std::string* why);
std::unique_ptr<Backend> open_cuda(std::string* why);

// HIP first, then CUDA: the first runtime with a device. Throws
// Error(KILN_E_NO_RUNTIME) "no GPU runtime found: tried libamdhip64.so,
// libcuda.so.1" when neither loads, Error(KILN_E_NO_DEVICE) when they load but
// report no device (the message says what each said).
std::unique_ptr<Backend> open_any_backend();

}  // namespace kiln::rt
