// kiln-rt's timing loop (time_launches) on a fake backend: a device clock
// that the queued work advances, a log of what was queued and waited for.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "error.h"
#include "tools.h"

using namespace kiln::rt;

namespace {

// Work runs as it is queued (the clock advances by its duration); an event
// takes the clock when recorded; reading one logs a "wait".
class FakeBackend final : public Backend {
 public:
  double flush_ms = 0.05, launch_ms = 2.0, clock = 0;
  // A kernel that slows as the clock falls: ramp_extra ms more per launch
  // after ramp_ms of device time, linearly (none by default).
  double ramp_ms = 0, ramp_extra = 0;
  std::vector<std::string> log;
  int live_events = 0, live_allocs = 0;

  void kernel() {
    clock += launch_ms + (ramp_ms > 0 ? ramp_extra * std::min(clock, ramp_ms) / ramp_ms : 0);
    log.push_back("launch");
  }
  std::string library() const override { return "fake"; }
  int device_count() override { return 1; }
  DeviceProps props(int) override { return {}; }
  void bind(int) override {}
  void* load_module(std::string_view) override { return nullptr; }
  void unload_module(void*) override {}
  void* get_function(void*, const std::string&) override { return nullptr; }
  void set_max_dynamic_shared(void*, int64_t) override {}
  void launch(void*, const uint32_t*, const uint32_t*, uint32_t, void*, void**) override {}
  void* alloc(size_t bytes) override {
    ++live_allocs;
    (void)bytes;
    return new char[1];
  }
  void free(void* p) override {
    --live_allocs;
    delete[] static_cast<char*>(p);
  }
  void to_device(void*, const void*, size_t) override {}
  void to_host(void*, const void*, size_t) override {}
  void fill(void*, unsigned char, size_t) override { clock += flush_ms; }
  void fill_async(void*, unsigned char, size_t, void*) override {
    clock += flush_ms;
    log.push_back("flush");
  }
  void synchronize() override { log.push_back("sync"); }
  void* event_create() override {
    ++live_events;
    return new double(0);
  }
  void event_record(void* ev, void*) override { *static_cast<double*>(ev) = clock; }
  float event_elapsed_ms(void* a, void* b) override {
    log.push_back("wait");
    return static_cast<float>(*static_cast<double*>(b) - *static_cast<double*>(a));
  }
  void event_destroy(void* ev) override {
    --live_events;
    delete static_cast<double*>(ev);
  }
  void encode_tma(void*, const std::string&, int, void*, const uint64_t*, const uint64_t*, const uint32_t*,
                  int) override {}
};

// A free flush and a launch that slows from 1.0 to 1.1 ms over ramp_ms of device time.
void slowing(FakeBackend& b, double ramp_ms) {
  b.flush_ms = 0;
  b.launch_ms = 1.0;
  b.ramp_ms = ramp_ms;
  b.ramp_extra = 0.1;
}

std::vector<size_t> where(const std::vector<std::string>& log, const std::string& what) {
  std::vector<size_t> at;
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i] == what) at.push_back(i);
  return at;
}

}  // namespace

TEST(RuntimeTiming, TimedLaunchesExcludeTheFlushAndAreReadAfterAllAreQueued) {
  FakeBackend b;
  const Timing t = time_launches(b, [&] { b.kernel(); }, 64 << 20, 5, 2, 0.0);
  EXPECT_EQ(t.preheat_launches, 0);
  ASSERT_EQ(t.samples_ms.size(), 5u);
  for (double x : t.samples_ms) EXPECT_NEAR(x, 2.0, 1e-9);  // the launch alone, not its flush
  EXPECT_NEAR(t.median_ms, 2.0, 1e-9);
  EXPECT_EQ(t.flush_bytes, size_t(64) << 20);  // what bench --out records
  // 2 warm-up launches, the sync, then 5 x (flush, launch) before the first read
  const auto waits = where(b.log, "wait");
  ASSERT_EQ(waits.size(), 5u);
  EXPECT_EQ(b.log[2], "sync");
  EXPECT_EQ(where(b.log, "launch").size(), 7u);
  EXPECT_GT(waits.front(), where(b.log, "launch").back());
  EXPECT_EQ(b.live_events, 0);
  EXPECT_EQ(b.live_allocs, 0);
}

TEST(RuntimeTiming, TheLeadInLastsPreheatAndNeverLeavesTheDeviceWithoutQueuedWork) {
  FakeBackend b;  // a flushed launch: 2.05 ms; chunks of 20 / 2.05 + 1 = 10 launches
  const Timing t = time_launches(b, [&] { b.kernel(); }, 64 << 20, 4, 1, 0.1);
  // 1 sizing launch, then chunks until the waited-for chunks reach 100 ms:
  // 5 chunks (102.5 ms) waited for, with a 6th queued behind the last of them.
  EXPECT_EQ(t.preheat_launches, 60);
  const auto launches = where(b.log, "launch");
  EXPECT_EQ(launches.size(), 1u + 1u + 60u + 4u);  // warm-up, sizing, lead-in, timed
  const auto waits = where(b.log, "wait");
  ASSERT_EQ(waits.size(), 1u + 5u + 4u);  // the sizing launch, 5 chunks, 4 samples
  // Every wait of the lead-in comes with a whole chunk queued after the one waited for.
  for (size_t w = 2; w <= 5; ++w) {
    const auto queued = std::count_if(launches.begin(), launches.end(),
                                      [&](size_t i) { return i > waits[w - 1] && i < waits[w]; });
    EXPECT_EQ(queued, 10) << "wait " << w;
  }
  // After the lead-in's last wait: all 4 timed launches queued, then the 4 reads in a row.
  const auto timed = std::count_if(launches.begin(), launches.end(),
                                   [&](size_t i) { return i > waits[5] && i < waits[6]; });
  EXPECT_EQ(timed, 4);
  EXPECT_GT(waits[6], launches.back());
  EXPECT_EQ(waits[9], waits[6] + 3);
  for (double x : t.samples_ms) EXPECT_NEAR(x, 2.0, 1e-9);
  EXPECT_EQ(b.live_events, 0);
  EXPECT_EQ(b.live_allocs, 0);
}

TEST(RuntimeTiming, LeadInSettledComparesTheLastWindowWithTheOneThreeWindowsBefore) {
  const std::vector<double> flat(8, 20.0);
  EXPECT_TRUE(lead_in_settled(flat, 2));
  EXPECT_FALSE(lead_in_settled({flat.begin(), flat.end() - 1}, 2));  // needs (3 + 1) windows of 2 chunks
  // 20 -> 20.3 over the lag: 1.5% apart, not settled; 0.8% apart, settled
  EXPECT_FALSE(lead_in_settled({20, 20, 20.1, 20.1, 20.1, 20.1, 20.3, 20.3}, 2));
  EXPECT_TRUE(lead_in_settled({20, 20, 20.1, 20.1, 20.1, 20.1, 20.16, 20.16}, 2));
  // only the two windows count, not what lies between them
  EXPECT_TRUE(lead_in_settled({20, 20, 30, 5, 50, 1, 20.1, 20.1}, 2));
  EXPECT_FALSE(lead_in_settled({}, 1));
  EXPECT_FALSE(lead_in_settled(flat, 0));
}

TEST(RuntimeTiming, AnAdaptiveLeadInRunsUntilTheLaunchTimeStopsChanging) {
  // 1.0 -> 1.1 ms a launch over the first 600 ms, then steady: past the
  // 0.1 s minimum until the last 100 ms match the 100 ms 300 ms before.
  FakeBackend ramp;
  slowing(ramp, 600);
  const Timing t = time_launches(ramp, [&] { ramp.kernel(); }, 1 << 20, 4, 1, 0.1, 2.0);
  EXPECT_EQ(t.preheat_settled, 1);
  EXPECT_GT(t.preheat_ms, 700);
  EXPECT_LT(t.preheat_ms, 1100);
  for (double x : t.samples_ms) EXPECT_NEAR(x, 1.1, 1e-6);  // timed in the steady state (float events)
  // Still 1.5% slower every 300 ms at its 0.5 s maximum: stops there, not settled.
  FakeBackend slow;
  slowing(slow, 2000);
  const Timing u = time_launches(slow, [&] { slow.kernel(); }, 1 << 20, 4, 1, 0.1, 0.5);
  EXPECT_EQ(u.preheat_settled, 0);
  EXPECT_GE(u.preheat_ms, 500);
  EXPECT_LT(u.preheat_ms, 530);
  // A fixed lead-in (the maximum at or below the minimum) says so.
  FakeBackend fixed;
  EXPECT_EQ(time_launches(fixed, [&] { fixed.kernel(); }, 1 << 20, 2, 1, 0.1, 0.1).preheat_settled, -1);
  EXPECT_EQ(fixed.live_events, 0);
}

TEST(RuntimeTiming, AFailingLaunchReleasesTheEventsAndTheFlushBuffer) {
  FakeBackend b;
  int n = 0;
  EXPECT_THROW(time_launches(b, [&] { if (++n == 4) throw Error(KILN_E_LAUNCH, "boom"); b.kernel(); }, 1 << 20, 3,
                             1, 0.0),
               Error);
  EXPECT_EQ(b.live_events, 0);
  EXPECT_EQ(b.live_allocs, 0);
}

TEST(RuntimeTiming, BenchFlagsASlowerKernelOnlyBeyondTheToleranceAndTheTimersResolution) {
  const double cuda_res = 5e-4;  // CUDA's stated event resolution, 0.5 us
  // a 0.4 ms GEMM 3.5% slower: 14 us, far beyond the resolution
  EXPECT_EQ(bench_verdict(0.414, 0.4, cuda_res), BenchVerdict::kSlower);
  // within 3%: never flagged, however large
  EXPECT_EQ(bench_verdict(0.411, 0.4, cuda_res), BenchVerdict::kWithin);
  EXPECT_EQ(bench_verdict(0.38, 0.4, cuda_res), BenchVerdict::kWithin);  // faster
  // a 4.9 us kernel read at 5.1 us: 4% slower, 0.2 us, below 0.5 us
  EXPECT_EQ(bench_verdict(0.0051, 0.0049, cuda_res), BenchVerdict::kBelowResolution);
  // the same kernel 0.7 us slower is a finding
  EXPECT_EQ(bench_verdict(0.0056, 0.0049, cuda_res), BenchVerdict::kSlower);
  // HIP's events resolve about 1 us: 0.7 us is below it
  EXPECT_EQ(bench_verdict(0.0056, 0.0049, 1e-3), BenchVerdict::kBelowResolution);
  // nothing recorded: nothing to compare
  EXPECT_EQ(bench_verdict(0.5, 0.0, cuda_res), BenchVerdict::kWithin);
  EXPECT_DOUBLE_EQ(kBenchTolerance, 0.03);
}

TEST(RuntimeTiming, ABackendWithoutAStatedResolutionAssumesOneMicrosecond) {
  FakeBackend b;
  EXPECT_DOUBLE_EQ(b.event_resolution_ms(), 1e-3);
}

TEST(RuntimeTiming, BenchFlushesAsMuchAsTheConfirmationDid) {
  Variant v;
  const int64_t h200_l2 = 60 << 20;
  // no record: Kiln's worker rule, twice the L2 within [256 MiB, 1 GiB]
  EXPECT_EQ(bench_flush_bytes(v, h200_l2), size_t(256) << 20);
  EXPECT_EQ(bench_flush_bytes(v, int64_t(300) << 20), size_t(600) << 20);
  EXPECT_EQ(bench_flush_bytes(v, int64_t(4) << 30), size_t(1) << 30);
  EXPECT_EQ(bench_flush_bytes(v, 0), size_t(256) << 20);  // L2 unknown
  // the confirmation's own flush wins
  v.confirmed_flush_bytes = int64_t(512) << 20;
  EXPECT_EQ(bench_flush_bytes(v, h200_l2), size_t(512) << 20);
}

TEST(RuntimeTiming, ABenchRecordSaysWhatTheTableSaysAndHowItWasTaken) {
  KernelSpec ks;
  ks.op = "matmul";
  ks.dtype = "bf16";
  ks.shape = {4096, 4096, 4096};
  ks.job_key = "k1";
  Variant v;
  v.target = "H200";
  v.candidate_id = 185;
  v.value_ms = 0.25;
  v.confirmed_median_ms = 0.1962;
  Timing t;
  t.median_ms = 0.2025;
  t.samples_ms = {0.2020, 0.2025, 0.2030};
  t.preheat_launches = 2000;
  t.preheat_ms = 470;
  t.preheat_settled = 1;
  t.flush_bytes = size_t(256) << 20;
  nlohmann::json r = bench_record(ks, v, t, 5e-4);
  EXPECT_EQ(r["kernel"], ks.label());
  EXPECT_EQ(r["recorded_ms"], 0.1962);  // the confirmed median, not value_ms
  EXPECT_NEAR(r["ratio"].get<double>(), 0.2025 / 0.1962, 1e-12);
  EXPECT_EQ(r["verdict"], "slower");
  EXPECT_EQ(r["flush_bytes"], size_t(256) << 20);
  EXPECT_EQ(r["lead_in"], "settled");
  EXPECT_EQ(r["samples_ms"].size(), 3u);
  // a 5 us kernel 0.2 us slower: below CUDA's resolution
  v.confirmed_median_ms = 0.0049;
  t.median_ms = 0.0051;
  t.preheat_launches = 0;
  r = bench_record(ks, v, t, 5e-4);
  EXPECT_EQ(r["verdict"], "below_resolution");
  EXPECT_EQ(r["lead_in"], "none");
  // nothing recorded: no ratio, nothing to be slower than
  v.confirmed_median_ms.reset();
  v.value_ms = 0;
  r = bench_record(ks, v, t, 5e-4);
  EXPECT_TRUE(r["recorded_ms"].is_null() && r["ratio"].is_null());
  EXPECT_EQ(r["verdict"], "within");
}

TEST(RuntimeTiming, TheClockIsReadAsTheTimedLaunchesStartAndAfterTheLastIsWaitedFor) {
  FakeBackend b;
  int reads = 0;
  auto read_clock = [&] {
    b.log.push_back("clock");
    ClockSample s;
    s.sm_mhz = ++reads == 1 ? 1500.0 : 1440.0;
    s.power_w = 690.5;
    s.temperature_c = 61;
    return s;
  };
  const Timing t = time_launches(b, [&] { b.kernel(); }, 64 << 20, 4, 2, 0.1, 0, read_clock);
  const auto clocks = where(b.log, "clock");
  ASSERT_EQ(clocks.size(), 2u);
  const auto launches = where(b.log, "launch");
  const size_t timed_from = launches.size() - 4;  // the last 4 launches are the timed ones
  ASSERT_GT(t.preheat_launches, 0);
  // start: after the lead-in's launches are queued, before the first timed
  // launch (and its flush), with no wait in between (the lead-in still runs)
  EXPECT_GT(clocks[0], launches[timed_from - 1]);
  EXPECT_LT(clocks[0], launches[timed_from]);
  EXPECT_EQ(b.log[clocks[0] + 1], "flush");
  // end: after the last timed launch's events were read
  EXPECT_GT(clocks[1], where(b.log, "wait").back());
  EXPECT_EQ(clocks[1], b.log.size() - 1);
  EXPECT_EQ(t.clock_start.sm_mhz, 1500.0);
  EXPECT_EQ(t.clock_end.sm_mhz, 1440.0);
  EXPECT_EQ(t.clock_end.power_w, 690.5);
  EXPECT_EQ(t.clock_end.temperature_c, 61.0);
  // no reader: nothing read, nothing known
  b.log.clear();
  const Timing none = time_launches(b, [&] { b.kernel(); }, 64 << 20, 4, 2, 0.0);
  EXPECT_TRUE(where(b.log, "clock").empty());
  EXPECT_FALSE(none.clock_start.known() || none.clock_end.known());
}

namespace {

// A power-limited GEMM's bench record: 0.961 of its confirmed median.
nlohmann::json gemm_record(double median_ms, std::optional<double> start_mhz, std::optional<double> end_mhz,
                           std::optional<double> confirmed_mhz) {
  KernelSpec ks;
  ks.op = "matmul";
  ks.dtype = "bf16";
  ks.shape = {8192, 8192, 8192};
  Variant v;
  v.target = "H200";
  v.confirmed_median_ms = 1.6;
  v.confirmed_sm_clock_mhz = confirmed_mhz;
  Timing t;
  t.median_ms = median_ms;
  t.clock_start.sm_mhz = start_mhz;
  t.clock_end.sm_mhz = end_mhz;
  if (start_mhz) t.clock_start.power_w = 699.0;
  return bench_record(ks, v, t, 5e-4);
}

}  // namespace

TEST(RuntimeTiming, ABenchRecordCarriesTheClockItRanAtAndTheConfirmations) {
  nlohmann::json r = gemm_record(1.5376, 1530.0, 1530.0, 1450.0);
  ASSERT_TRUE(r["clock"].is_object());
  EXPECT_EQ(r["clock"]["start"]["sm_mhz"], 1530.0);
  EXPECT_EQ(r["clock"]["start"]["power_w"], 699.0);
  EXPECT_TRUE(r["clock"]["start"]["temperature_c"].is_null());
  EXPECT_TRUE(r["clock"]["end"]["power_w"].is_null());
  EXPECT_EQ(r["confirmed_sm_mhz"], 1450.0);
  // nothing read, nothing confirmed: both null
  r = gemm_record(1.5376, std::nullopt, std::nullopt, std::nullopt);
  EXPECT_TRUE(r.contains("clock") && r["clock"].is_null());
  EXPECT_TRUE(r.contains("confirmed_sm_mhz") && r["confirmed_sm_mhz"].is_null());
}

TEST(RuntimeTiming, TheClockColumnShowsTheRunsMeanClockAndTheConfirmations) {
  EXPECT_EQ(bench_clock_text(gemm_record(1.6, 1490.0, 1420.0, 1420.0)), "1455/1420 MHz");
  EXPECT_EQ(bench_clock_text(gemm_record(1.6, std::nullopt, 1420.0, 1450.0)), "1420/1450 MHz");  // one reading
  EXPECT_EQ(bench_clock_text(gemm_record(1.6, 1455.0, 1455.0, std::nullopt)), "1455/- MHz");
  EXPECT_EQ(bench_clock_text(gemm_record(1.6, std::nullopt, std::nullopt, 1450.0)), "-");
  EXPECT_EQ(bench_clock_mhz(gemm_record(1.6, 1490.0, 1420.0, 1420.0)), 1455.0);
  EXPECT_EQ(bench_clock_mhz(gemm_record(1.6, std::nullopt, std::nullopt, 1450.0)), std::nullopt);
}

TEST(RuntimeTiming, TheNoteExplainsARatioBeyondTheToleranceByTheClockWithoutChangingTheVerdict) {
  // faster by 3.9% at a higher clock: within, and the note says why
  nlohmann::json r = gemm_record(1.5376, 1530.0, 1530.0, 1450.0);
  EXPECT_EQ(r["verdict"], "within");
  EXPECT_EQ(bench_note(r), "ran at 1530 MHz, confirmed at 1450 MHz (+5.5%)");
  // slower by 5% at a lower clock: still SLOWER, the clock beside it
  r = gemm_record(1.68, 1380.0, 1380.0, 1450.0);
  EXPECT_EQ(r["verdict"], "slower");
  EXPECT_EQ(bench_note(r), "SLOWER >3%; ran at 1380 MHz, confirmed at 1450 MHz (-4.8%)");
  // without either clock: the verdict alone
  EXPECT_EQ(bench_note(gemm_record(1.68, std::nullopt, std::nullopt, 1450.0)), "SLOWER >3%");
  EXPECT_EQ(bench_note(gemm_record(1.68, 1380.0, 1380.0, std::nullopt)), "SLOWER >3%");
  EXPECT_EQ(bench_note(gemm_record(1.5376, std::nullopt, std::nullopt, 1450.0)), "");
  // within 3%: no note, whatever the clocks
  EXPECT_EQ(bench_note(gemm_record(1.62, 1530.0, 1530.0, 1450.0)), "");
  // a 5 us kernel 0.2 us slower: the resolution note, unchanged
  nlohmann::json small = gemm_record(0.0051, std::nullopt, std::nullopt, std::nullopt);
  small["recorded_ms"] = 0.0049;
  small["ratio"] = 0.0051 / 0.0049;
  small["verdict"] = "below_resolution";
  EXPECT_EQ(bench_note(small), "+0.20 us, within the timer's 0.5 us resolution");
  // and 0.4 us faster (verdict within): the resolution note too
  small["median_ms"] = 0.0045;
  small["ratio"] = 0.0045 / 0.0049;
  small["verdict"] = "within";
  EXPECT_EQ(bench_note(small), "-0.40 us, within the timer's 0.5 us resolution");
  // a faster reading beyond the resolution: no resolution note
  small["median_ms"] = 0.0040;
  small["ratio"] = 0.0040 / 0.0049;
  EXPECT_EQ(bench_note(small), "");
}

TEST(RuntimeTiming, TheNoteSaysWhenTheClockIsTheConfirmations) {
  // 3.9% faster at the confirmation's clock (within 1%): the clock is not the cause
  EXPECT_EQ(bench_note(gemm_record(1.5376, 1455.0, 1445.0, 1450.0)), "at the confirmation's clock (1450 MHz)");
  // 1.2% apart: a different clock
  EXPECT_EQ(bench_note(gemm_record(1.5376, 1468.0, 1468.0, 1450.0)), "ran at 1468 MHz, confirmed at 1450 MHz (+1.2%)");
}

TEST(RuntimeClockProbe, WithoutNvmlEveryReadingIsUnknown) {
  DeviceProps cuda;
  cuda.backend = "cuda";
  cuda.uuid = "GPU-00000000-0000-0000-0000-000000000000";
  // the same code path as libnvidia-ml.so.1, with a library that is nowhere
  const ClockProbe missing(cuda, "libkiln-test-no-such-nvml.so.1");
  EXPECT_FALSE(missing.available());
  EXPECT_NE(missing.why().find("libkiln-test-no-such-nvml.so.1"), std::string::npos) << missing.why();
  const ClockSample s = missing.read();
  EXPECT_FALSE(s.known());
  EXPECT_FALSE(s.power_w || s.temperature_c);
  EXPECT_EQ(s.to_json(), (nlohmann::json{{"sm_mhz", nullptr}, {"power_w", nullptr}, {"temperature_c", nullptr}}));
  // a HIP device: NVML is not asked
  DeviceProps hip;
  hip.backend = "hip";
  const ClockProbe on_hip(hip);
  EXPECT_FALSE(on_hip.available());
  EXPECT_FALSE(on_hip.read().known());
  EXPECT_NE(on_hip.why().find("CUDA"), std::string::npos) << on_hip.why();
  // a library that loads but is not NVML
  const ClockProbe not_nvml(cuda, "libc.so.6");
  EXPECT_FALSE(not_nvml.available());
  EXPECT_FALSE(not_nvml.read().known());
}
