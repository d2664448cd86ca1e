/* libkilnrt: loads Kiln packages (docs/package-format.md, kiln-package/2),
 * checks them, and launches their kernels by meaning (operator, shape, dtype).
 *
 * C API, callable from C, C++, Python ctypes, Rust. All handles are opaque.
 *
 * Errors: every function returns a kiln_status; on anything but KILN_OK the
 * reason is kept per thread and read with kiln_last_error() (valid until the
 * calling thread's next kiln_* call). Messages name the file, the kernel, or
 * both sides of a mismatch.
 *
 * Threading: a kiln_package is immutable once opened except for its module
 * cache, which is locked; it may be shared by threads. A kiln_kernel holds its
 * own hidden scratch buffers: launch one kiln_kernel from one thread at a time
 * (find one kernel per thread or stream for concurrent launches).
 *
 * GPU runtimes are loaded with dlopen at the first open that needs a device
 * (libamdhip64.so, then libcuda.so.1); nothing links against them. Where
 * neither loads, opening without a static target fails with KILN_E_NO_RUNTIME
 * ("no GPU runtime found: tried libamdhip64.so, libcuda.so.1"); where a runtime
 * loads but has no device, KILN_E_NO_DEVICE.
 */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_E_USAGE = 1,      /* a bad argument (NULL handle, wrong tensor count, ...) */
  KILN_E_IO = 2,         /* a file cannot be read */
  KILN_E_FORMAT = 3,     /* manifest/verify JSON or code object malformed, wrong format version */
  KILN_E_INTEGRITY = 4,  /* SHA256SUMS mismatch, truncated, unlisted file */
  KILN_E_SIGNATURE = 5,  /* key configured: unsigned or mis-signed package */
  KILN_E_COMPAT = 6,     /* code object does not fit the device/target (names both sides) */
  KILN_E_NO_RUNTIME = 7, /* neither libamdhip64.so nor libcuda.so.1 could be loaded */
  KILN_E_NO_DEVICE = 8,  /* a runtime loaded but reports no device */
  KILN_E_UNTUNED = 9,    /* kiln_kernel_find: no variant admits the shape */
  KILN_E_LAUNCH = 10,    /* the driver refused an allocation, load or launch; or an assume failed */
  KILN_E_NOT_FOUND = 11  /* no such operator / dtype in the package */
} kiln_status;

typedef struct kiln_package kiln_package;
typedef struct kiln_kernel kiln_kernel;

/* Options for kiln_package_open. Zero-initialise, then set struct_size. */
typedef struct kiln_open_options {
  uint32_t struct_size;    /* sizeof(kiln_open_options) */
  const char* pubkey_pem;  /* path of an Ed25519 public key (PEM); NULL: signature not required
                              (a present SHA256SUMS.sig is then not checked) */
  const char* target;      /* static mode: a target id ("gfx942:sramecc+:xnack-",
                              "amdgcn-amd-amdhsa--gfx942", "sm_90a") or a name from the
                              manifest's targets[] ("MI300X"); no GPU runtime is touched and
                              no launch is possible. NULL: use a device. */
  int device;              /* device ordinal when target is NULL (default 0) */
} kiln_open_options;

/* Thread-local message of the calling thread's last failure ("" if none). */
const char* kiln_last_error(void);

/* Opens and checks a package: format, SHA256SUMS (every listed file, no
 * unlisted file under objects/ or verify/), signature when a key is given,
 * every code object against its manifest entry, and every variant for the
 * device's (or static target's) architecture against that device's limits.
 * Nothing is launched. On success *out owns the package (kiln_package_close). */
kiln_status kiln_package_open(const char* path, const kiln_open_options* options,
                              kiln_package** out);
void kiln_package_close(kiln_package* pkg);

/* The bound device or target, e.g. "gfx942:sramecc+:xnack- (AMD Instinct MI300X)"
 * or "sm_90 (NVIDIA H200)". Owned by pkg. */
const char* kiln_package_target(const kiln_package* pkg);
/* 1 when the package is bound to a device (launches possible), 0 in static mode. */
int kiln_package_has_device(const kiln_package* pkg);

/* Finds the rank-0 variant for the bound target that may launch `shape`:
 * the exact shape first, else a variant whose `range` admits the shape (every
 * dimension in range, every assume holds). Else KILN_E_UNTUNED ("untuned shape
 * ...") and, when $KILN_MISS_LOG is set, one JSON line
 * {"op","shape","dtype","target","time"} appended to that file. Where
 * kernels of the operator with different params admit the shape:
 * KILN_E_USAGE (name them with kiln_kernel_find_params).
 * With a device, the code object is loaded (cached per device) and the grid,
 * scalars and hidden scratch sizes computed. *out is owned by the caller
 * (kiln_kernel_free) and must not outlive pkg. */
kiln_status kiln_kernel_find(kiln_package* pkg, const char* op, const int64_t* shape, int ndim,
                             const char* dtype, kiln_kernel** out);
/* kiln_kernel_find among the kernels whose params hold every key of
 * params_json (a JSON object, e.g. "{\"kind\": \"argmax\"}"; numbers compared
 * by value; NULL or "" matches any). An operator packaged with different
 * params (reduce_dim's kind, pool2d's window, pointwise's expr) computes
 * different things: where kernels of more than one params set admit the
 * shape, both functions refuse with KILN_E_USAGE, listing them. No kernel
 * with such params: KILN_E_NOT_FOUND. */
kiln_status kiln_kernel_find_params(kiln_package* pkg, const char* op, const char* params_json,
                                    const int64_t* shape, int ndim, const char* dtype, kiln_kernel** out);
void kiln_kernel_free(kiln_kernel* kernel);

/* Number of tensors kiln_launch expects and their element counts. */
int kiln_kernel_num_tensors(const kiln_kernel* kernel);
int64_t kiln_kernel_tensor_numel(const kiln_kernel* kernel, int index);
/* Bytes of tensor `index` (numel x element size of its dtype); -1 if out of range. */
int64_t kiln_kernel_tensor_bytes(const kiln_kernel* kernel, int index);
/* "<file> <kernel_name> grid=[x,y,z] block=[x,y,z] shared=N", owned by kernel. */
const char* kiln_kernel_describe(const kiln_kernel* kernel);

/* The resolved launch as JSON, read back from the parameter buffer the
 * driver will receive (works in static mode, without a device):
 * {"kernel", "file", "grid": [x,y,z], "block": [x,y,z], "shared", "numel": [...],
 *  "args": [{"name", "type", then "tensor": i | "value": v | "scratch":
 *  "global"|"profile" with "bytes" | "tma": {"tensor","dims","strides_bytes"}}],
 *  "zero_before_launch": [{"tensor": i, "bytes": n}] (cleared before each launch)}.
 * Owned by kernel; "" on failure (kiln_last_error). */
const char* kiln_kernel_plan(const kiln_kernel* kernel);

/* Launches on `stream` (hipStream_t / CUstream; NULL: the default stream).
 * tensors: device pointers in the manifest's tensor order, each 16-byte
 * aligned. Encodes TMA descriptors, passes hidden scratch, sets the dynamic
 * shared memory attribute. A variant with "zero_before_launch" (a split-K
 * kernel adding into its output) has those tensors cleared first, by a
 * memset queued on the same stream. Asynchronous: returns once queued. */
kiln_status kiln_launch(kiln_kernel* kernel, void* const* tensors, int ntensors, void* stream);

/* Device memory on the package's device, for callers with no other GPU
 * library at hand (the C and ctypes examples in docs/runtime.md). Pointers
 * are at least 256-byte aligned. Copies and kiln_synchronize block. */
kiln_status kiln_device_alloc(kiln_package* pkg, size_t bytes, void** out);
kiln_status kiln_device_free(kiln_package* pkg, void* ptr);
kiln_status kiln_copy_to_device(kiln_package* pkg, void* dst, const void* src, size_t bytes);
kiln_status kiln_copy_to_host(kiln_package* pkg, void* dst, const void* src, size_t bytes);
kiln_status kiln_synchronize(kiln_package* pkg);

/* The SplitMix64 verification input generator of docs/package-format.md:
 * writes n doubles lo + (hi-lo)*u (before dtype rounding) for tensor index t. */
void kiln_splitmix_fill(uint64_t seed, int tensor, double lo, double hi, double* out, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_H */
