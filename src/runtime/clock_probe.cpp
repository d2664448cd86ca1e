// NVML through dlopen/dlsym. The few declarations it calls, from the NVML API
// reference (docs.nvidia.com/deploy/nvml-api: "Initialization and Cleanup",
// "Device Queries", "Device Enums"); NVML keeps them stable across releases.
#include "clock_probe.h"

#include <dlfcn.h>

namespace kiln::rt {

namespace nvml {

using nvmlReturn_t = int;  // enum nvmlReturn_enum
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlClockType_t = int;           // enum nvmlClockType_enum
using nvmlTemperatureSensors_t = int;  // enum nvmlTemperatureSensors_enum

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
constexpr nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0;

extern "C" {
using PFN_nvmlInit_v2 = nvmlReturn_t (*)();
using PFN_nvmlShutdown = nvmlReturn_t (*)();
using PFN_nvmlErrorString = const char* (*)(nvmlReturn_t);
using PFN_nvmlDeviceGetHandleByUUID = nvmlReturn_t (*)(const char* uuid, nvmlDevice_t* device);
using PFN_nvmlDeviceGetClockInfo = nvmlReturn_t (*)(nvmlDevice_t device, nvmlClockType_t type, unsigned* clock_mhz);
using PFN_nvmlDeviceGetPowerUsage = nvmlReturn_t (*)(nvmlDevice_t device, unsigned* milliwatts);
using PFN_nvmlDeviceGetTemperature = nvmlReturn_t (*)(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                      unsigned* celsius);
}

}  // namespace nvml

}  // namespace kiln::rt

#if __has_include(<nvml.h>)
#include <nvml.h>
// Where the real header exists, it checks the private declarations.
static_assert(::NVML_SUCCESS == kiln::rt::nvml::NVML_SUCCESS);
static_assert(::NVML_CLOCK_SM == kiln::rt::nvml::NVML_CLOCK_SM);
static_assert(::NVML_TEMPERATURE_GPU == kiln::rt::nvml::NVML_TEMPERATURE_GPU);
#endif

namespace kiln::rt {

struct ClockProbe::Api {
  void* lib = nullptr;
  nvml::nvmlDevice_t device = nullptr;
  nvml::PFN_nvmlShutdown shutdown = nullptr;
  nvml::PFN_nvmlDeviceGetClockInfo clock = nullptr;
  nvml::PFN_nvmlDeviceGetPowerUsage power = nullptr;
  nvml::PFN_nvmlDeviceGetTemperature temperature = nullptr;
};

nlohmann::json ClockSample::to_json() const {
  auto or_null = [](const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
  return {{"sm_mhz", or_null(sm_mhz)}, {"power_w", or_null(power_w)}, {"temperature_c", or_null(temperature_c)}};
}

ClockProbe::ClockProbe(const DeviceProps& device, const std::string& library) {
  if (device.backend != "cuda") {
    why_ = "not a CUDA device (NVML reads NVIDIA GPUs only)";
    return;
  }
  if (device.uuid.empty()) {
    why_ = "the device's UUID is unknown";
    return;
  }
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why_ = library + " not loaded";
    return;
  }
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<nvml::PFN_nvmlInit_v2>(sym("nvmlInit_v2"));
  auto error_string = reinterpret_cast<nvml::PFN_nvmlErrorString>(sym("nvmlErrorString"));
  auto by_uuid = reinterpret_cast<nvml::PFN_nvmlDeviceGetHandleByUUID>(sym("nvmlDeviceGetHandleByUUID"));
  auto a = std::make_unique<Api>();
  a->lib = lib;
  a->shutdown = reinterpret_cast<nvml::PFN_nvmlShutdown>(sym("nvmlShutdown"));
  a->clock = reinterpret_cast<nvml::PFN_nvmlDeviceGetClockInfo>(sym("nvmlDeviceGetClockInfo"));
  a->power = reinterpret_cast<nvml::PFN_nvmlDeviceGetPowerUsage>(sym("nvmlDeviceGetPowerUsage"));
  a->temperature = reinterpret_cast<nvml::PFN_nvmlDeviceGetTemperature>(sym("nvmlDeviceGetTemperature"));
  if (!init || !by_uuid || !a->shutdown || !a->clock || !a->power || !a->temperature) {
    why_ = library + " lacks an NVML entry point (nvmlInit_v2, nvmlDeviceGetHandleByUUID, ...)";
    dlclose(lib);
    return;
  }
  auto text = [&](nvml::nvmlReturn_t rc) {
    const char* s = error_string ? error_string(rc) : nullptr;
    return s ? std::string(s) : "NVML error " + std::to_string(rc);
  };
  if (const nvml::nvmlReturn_t rc = init(); rc != nvml::NVML_SUCCESS) {
    why_ = "nvmlInit_v2: " + text(rc);
    dlclose(lib);
    return;
  }
  if (const nvml::nvmlReturn_t rc = by_uuid(device.uuid.c_str(), &a->device); rc != nvml::NVML_SUCCESS) {
    why_ = "nvmlDeviceGetHandleByUUID(" + device.uuid + "): " + text(rc);
    a->shutdown();
    dlclose(lib);
    return;
  }
  api_ = std::move(a);
}

ClockProbe::~ClockProbe() {
  if (!api_) return;
  api_->shutdown();
  dlclose(api_->lib);
}

ClockSample ClockProbe::read() const {
  ClockSample s;
  if (!api_) return s;
  unsigned x = 0;
  if (api_->clock(api_->device, nvml::NVML_CLOCK_SM, &x) == nvml::NVML_SUCCESS && x > 0) s.sm_mhz = x;
  if (api_->power(api_->device, &x) == nvml::NVML_SUCCESS) s.power_w = x / 1000.0;
  if (api_->temperature(api_->device, nvml::NVML_TEMPERATURE_GPU, &x) == nvml::NVML_SUCCESS) s.temperature_c = x;
  return s;
}

}  // namespace kiln::rt
