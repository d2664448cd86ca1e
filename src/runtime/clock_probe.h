// The GPU's SM clock, power draw and temperature now, read through NVML
// (libnvidia-ml.so.1, loaded with dlopen, never linked): what kiln-rt bench
// prints beside a kernel's time, since a kernel at the GPU's power limit runs
// as fast as the clock the limit leaves it, and that clock differs from one
// run to the next. Optional: without NVML (no library, a HIP device, a device
// NVML does not know, any NVML error) every reading is unknown, never a
// failure.
//
// A ClockProbe is owned by its caller; it holds no global state of its own
// (NVML counts its nvmlInit_v2 / nvmlShutdown pairs, so probes may coexist).
// read() may be called from any thread (NVML is thread-safe); construction and
// destruction must not overlap a read of the same probe.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend.h"

namespace kiln::rt {

// One reading; a field NVML did not give is nullopt.
struct ClockSample {
  std::optional<double> sm_mhz, power_w, temperature_c;
  bool known() const { return sm_mhz.has_value(); }
  // {"sm_mhz", "power_w", "temperature_c"}, null for what is unknown.
  nlohmann::json to_json() const;
};

class ClockProbe {
 public:
  static constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

  // Opens `library`, initialises NVML and finds `device` by its UUID (a CUDA
  // device's DeviceProps::uuid, "GPU-..."). Never throws for a missing or
  // failing NVML: available() is then false and why() says what failed.
  explicit ClockProbe(const DeviceProps& device, const std::string& library = kDefaultLibrary);
  ~ClockProbe();  // nvmlShutdown, then the library is closed
  ClockProbe(const ClockProbe&) = delete;
  ClockProbe& operator=(const ClockProbe&) = delete;

  bool available() const { return api_ != nullptr; }
  const std::string& why() const { return why_; }  // "" when available

  // SM clock (MHz), power (W) and GPU temperature (C) now; each field that
  // NVML does not give is unknown. All unknown when !available().
  ClockSample read() const;

 private:
  struct Api;                  // the library, its entry points and the device handle
  std::unique_ptr<Api> api_;   // null when unavailable
  std::string why_;
};

}  // namespace kiln::rt
