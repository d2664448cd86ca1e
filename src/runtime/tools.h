// What kiln-rt does with an open package, as functions: the static report, the
// on-device verification of docs/package-format.md "verify", and timing with
// an L2 flush. Each uses the package's backend from the calling thread.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clock_probe.h"
#include "package.h"
#include "verify_data.h"

namespace kiln::rt {

// Every variant's static problems, as "kernel label / target rank N: problem".
std::vector<std::string> static_problems(const Package& p);

// Host copies of one verify file's inputs (SplitMix64 at full size is the
// slow part of verifying and timing a large kernel), kept for the next call
// with the same file: the variants of a shortlist share their verify file,
// and a variant is verified, then timed. Holds one file's inputs at a time.
// Not thread-safe: one per thread.
class InputCache {
 public:
  // The bytes of input `tensor` of verify file `verify` (seed, distribution
  // and dtype as given; fill_dist), `numel` elements in `bytes` bytes.
  const std::vector<unsigned char>& get(const std::string& verify, uint64_t seed, int tensor, const InputDist& dist,
                                        const std::string& dtype, size_t numel, size_t bytes);

 private:
  std::string file_;
  std::map<std::string, std::vector<unsigned char>> inputs_;  // by tensor, seed, range, dtype, size
};

// Launches variant v of kernel k at its own shape on the verify data's inputs
// (SplitMix64, outputs NaN-poisoned) and checks the outputs. "" when it passes.
// Throws Error when the package carries no verify data for it or a launch fails.
// `cache` (optional, not owned) keeps the inputs for the next call.
std::string verify_on_device(Package& p, size_t k, size_t v, InputCache* cache = nullptr);

struct Timing {
  double median_ms = 0;
  std::vector<double> samples_ms;
  long preheat_launches = 0;  // the back-to-back lead-in's launches
  double preheat_ms = 0;      // its device time up to the last chunk waited for
  int preheat_settled = -1;   // 1 settled, 0 stopped at its maximum, -1 a fixed length (or none)
  size_t flush_bytes = 0;     // written before each launch (the lead-in's and the timed ones)
  // The GPU's clock as the timed launches were queued (behind the lead-in,
  // still running) and once the last of them was read: unknown without a
  // clock reader (time_launches' read_clock) or where it could not read.
  ClockSample clock_start, clock_end;
  // What the kernel's inputs held (time_on_device): "timing" (drawn from the
  // distributions the confirmation timed on, verify inputs' "timing"),
  // "verify" (the verification ranges: a package without them), "zeros"
  // (no verify data), "" (time_launches alone).
  std::string inputs;
};

// The lead-in's settling rule (the same as the confirmation round's,
// worker/kiln_worker/evaluation/confirm.py `settled`): chunk_ms are the device
// times of equal chunks of back-to-back launches, in order; settled when the
// last `window` chunks took within kSettleTol of the `window` chunks
// kSettleLagWindows windows before them.
constexpr double kSettleWindowMs = 100, kSettleTol = 0.01;
constexpr size_t kSettleLagWindows = 3;
bool lead_in_settled(const std::vector<double>& chunk_ms, size_t window);

// Device-event timing of `reps` launches, each after writing a buffer larger
// than the L2 cache (so every run starts cold), after `warmup` launches and a
// lead-in of back-to-back launches (flush + kernel, as timed) lasting at least
// `preheat_s` of device time and then, while preheat_max_s is above it, until
// lead_in_settled over windows of kSettleWindowMs or preheat_max_s have
// passed. The lead-in and the timed launches are enqueued with no wait between
// them and read after one synchronisation: a GPU at its power limit (a large
// GEMM on an H200 settles near 1500 of 1980 MHz, still falling after 300 ms)
// is timed in that steady state, as a deployment runs it and as Kiln's
// confirmation round times a power-limited job, not in a burst after an idle
// moment. preheat_s 0: no lead-in. `clock` (optional, not owned) reads the
// GPU's clock at the start and the end of the timed launches (Timing::clock_start, clock_end).
// The inputs: drawn from the distributions the confirmation timed on where
// the verify file records them, else from its verification ranges
// (Timing::inputs says which).
Timing time_on_device(Package& p, size_t k, size_t v, int reps, int warmup = 3, InputCache* cache = nullptr,
                      double preheat_s = 0.3, double preheat_max_s = 2.0, const ClockProbe* clock = nullptr);

// The bytes time_on_device writes before each launch: what the kernel's
// confirmation wrote (Variant::confirmed_flush_bytes), else the rule Kiln's
// worker follows (worker/kiln_worker/evaluation/timing.py flush_bytes: twice
// the L2, at least 256 MiB, at most 1 GiB; do_bench writes 256 MB). The
// flush is also the kernel's rest between calls, which moves the clock of a
// kernel at the GPU's power limit: the number is reproduced under the
// conditions it was taken in.
size_t bench_flush_bytes(const Variant& v, int64_t l2_bytes);

// The timing loop of time_on_device on any backend (a fake one in the tests):
// `warmup` launches, a wait, the lead-in, then `reps` launches each after
// writing `flush_bytes` (a buffer it allocates and frees) between two events,
// all queued before the first is read. `read_clock` (optional) is called
// twice: right before the first timed launch is queued (Timing::clock_start)
// and after the last one's end event was waited for (Timing::clock_end), as
// the confirmation reads NVML at the start and the end of a round. Throws what
// the backend, launch or read_clock throws.
Timing time_launches(Backend& b, const std::function<void()>& launch, size_t flush_bytes, int reps, int warmup,
                     double preheat_s, double preheat_max_s = 0,
                     const std::function<ClockSample()>& read_clock = nullptr);

// kiln-rt bench's verdict on a kernel timed at `measured_ms` against the
// `recorded_ms` its package carries (the catalog's confirmed median): slower
// when more than kBenchTolerance above it and by more than `resolution_ms`,
// the backend's event timer resolution (Backend::event_resolution_ms). A gap
// the timer cannot resolve is no finding: 3% of a 5 us kernel is 0.15 us,
// and on an H200 the same harness read such kernels up to 0.7 us apart from
// one run to the next. kBelowResolution: above the tolerance, within the
// resolution. recorded_ms <= 0: kWithin (nothing to compare with).
enum class BenchVerdict { kWithin, kSlower, kBelowResolution };
constexpr double kBenchTolerance = 0.03;
BenchVerdict bench_verdict(double measured_ms, double recorded_ms, double resolution_ms);

// One kernel's record in `kiln-rt bench --out FILE` (format kiln-bench/1,
// docs/runtime.md): what the table shows -- median, the recorded median
// (confirmed, else value_ms; 0 where the package has none), their ratio, the
// verdict ("within", "slower", "below_resolution") -- and how it was taken:
// the flush, the lead-in, the timer's resolution, every sample, and the
// GPU's clock: `clock` {start, end: ClockSample::to_json()} (null when neither
// reading has an SM clock) and `confirmed_sm_mhz`, the clock the confirmation
// ran at (Variant::confirmed_sm_clock_mhz; null where the package does not say).
nlohmann::json bench_record(const KernelSpec& ks, const Variant& v, const Timing& t, double resolution_ms);

// The SM clock of a bench record's run (MHz): the mean of its start and end
// readings, or the one known; nullopt when neither is.
std::optional<double> bench_clock_mhz(const nlohmann::json& record);

// kiln-rt bench's clock column for a record: "1455/1420 MHz" (the run's
// clock, bench_clock_mhz / the confirmation's), "1455/- MHz" where the
// package does not say the confirmation's, "-" where the run's is unknown.
std::string bench_clock_text(const nlohmann::json& record);

// Two SM clocks closer than this (relative) are the same clock to bench_note.
inline constexpr double kClockAgreement = 0.01;

// kiln-rt bench's note for a record ("" when none): "SLOWER >3%" for a slower
// kernel; the gap and the timer's resolution where the ratio is more than
// kBenchTolerance from 1 (either way) by less than the resolution; and, where
// the ratio is beyond the tolerance and both clocks are known, "ran at 1530
// MHz, confirmed at 1450 MHz (+5.5%)", or "at the confirmation's clock (1980
// MHz)" when they agree within kClockAgreement (the clock is not the cause).
// The note explains a ratio and never changes the verdict: a slower kernel is
// still SLOWER.
std::string bench_note(const nlohmann::json& record);

}  // namespace kiln::rt
