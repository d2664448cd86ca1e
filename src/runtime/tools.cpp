#include "tools.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>

#include "error.h"
#include "dtype.h"
#include "integrity.h"
#include "verify_data.h"

namespace kiln::rt {

std::vector<std::string> static_problems(const Package& p) {
  std::vector<std::string> out;
  const Manifest& m = p.manifest();
  for (size_t k = 0; k < m.kernels.size(); ++k)
    for (size_t v = 0; v < m.kernels[k].variants.size(); ++v)
      for (const auto& why : p.object(k, v).problems)
        out.push_back(m.kernels[k].label() + " / " + m.kernels[k].variants[v].target + " rank " +
                      std::to_string(m.kernels[k].variants[v].rank) + ": " + why);
  return out;
}

namespace {

// Device buffers for one launch of a kernel, freed on scope exit.
struct Buffers {
  Backend* b;
  std::vector<void*> ptrs;
  std::vector<size_t> bytes;
  ~Buffers() {
    for (void* q : ptrs) b->free(q);
  }
};

Buffers make_buffers(Package& p, const Kernel& kern) {
  Buffers buf{p.backend(), {}, {}};
  const KernelSpec& ks = kern.spec();
  for (size_t t = 0; t < ks.tensors.size(); ++t) {
    int es = dtype_size(ks.tensors[t].dtype);
    if (!es) throw Error(KILN_E_FORMAT, ks.label() + ": tensor dtype " + ks.tensors[t].dtype + " is not supported");
    size_t n = static_cast<size_t>(kern.numel()[t]) * es;
    buf.bytes.push_back(n);
    buf.ptrs.push_back(p.backend()->alloc(n));
  }
  return buf;
}

}  // namespace

const std::vector<unsigned char>& InputCache::get(const std::string& verify, uint64_t seed, int tensor,
                                                   const InputDist& dist, const std::string& dtype, size_t numel,
                                                   size_t bytes) {
  if (verify != file_) {
    inputs_.clear();
    file_ = verify;
  }
  char key[192];
  std::snprintf(key, sizeof key, "%d:%llu:%c:%.17g:%.17g:%s:%zu:%zu", tensor, (unsigned long long)seed,
                dist.kind == InputDist::kNormal ? 'n' : 'u', dist.a, dist.b, dtype.c_str(), numel, bytes);
  auto [it, fresh] = inputs_.try_emplace(key);
  if (fresh) {
    it->second.resize(bytes);
    fill_dist(seed, tensor, dist, dtype, it->second.data(), numel);
  }
  return it->second;
}

namespace {

// Writes the verify file's inputs into the kernel's buffers: from each
// input's verification range, or (`timing`) from the distribution the
// confirmation timed it on where the file records one. Returns whether every
// input came from a recorded timing distribution.
bool load_inputs(Package& p, const KernelSpec& ks, const std::string& verify, const VerifySpec& vs, Kernel& kern,
                 Buffers& buf, InputCache* cache, bool timing = false) {
  InputCache local;
  InputCache& c = cache ? *cache : local;
  bool all_timing = !vs.inputs.empty();
  for (const auto& in : vs.inputs) {
    if (in.tensor < 0 || in.tensor >= int(ks.tensors.size()))
      throw Error(KILN_E_FORMAT, verify + ": input tensor index out of range");
    all_timing = all_timing && timing && in.timing.has_value();
    const auto& host = c.get(verify, vs.seed, in.tensor, input_dist(in, timing), ks.tensors[in.tensor].dtype,
                             kern.numel()[in.tensor], buf.bytes[in.tensor]);
    p.backend()->to_device(buf.ptrs[in.tensor], host.data(), host.size());
  }
  return all_timing;
}

}  // namespace

std::string verify_on_device(Package& p, size_t k, size_t v, InputCache* cache) {
  const KernelSpec& ks = p.manifest().kernels[k];
  const Variant& var = ks.variants[v];
  if (var.verify.empty()) throw Error(KILN_E_FORMAT, ks.label() + ": the variant has no verify data");
  VerifySpec vs = VerifySpec::parse(read_pkg_file(p.dir(), var.verify, "manifest.json verify"), var.verify);
  Kernel kern(p, k, v, vs.shape.empty() ? ks.shape : vs.shape);
  Buffers buf = make_buffers(p, kern);
  Backend* b = p.backend();
  for (size_t t = 0; t < ks.tensors.size(); ++t) b->fill(buf.ptrs[t], 0, buf.bytes[t]);
  load_inputs(p, ks, var.verify, vs, kern, buf, cache);
  for (const auto& out : vs.outputs) {
    if (out.tensor < 0 || out.tensor >= int(ks.tensors.size())) throw Error(KILN_E_FORMAT, var.verify + ": output tensor index out of range");
    b->fill(buf.ptrs[out.tensor], 0xFF, buf.bytes[out.tensor]);  // NaN in every float dtype
  }
  kern.launch(buf.ptrs.data(), static_cast<int>(buf.ptrs.size()), nullptr);
  b->synchronize();
  for (const auto& out : vs.outputs) {
    std::vector<unsigned char> host(buf.bytes[out.tensor]);
    b->to_host(host.data(), buf.ptrs[out.tensor], host.size());
    std::string why = check_output(out, host.data(), kern.numel()[out.tensor], ks.tensors[out.tensor].dtype);
    if (!why.empty()) return "output " + ks.tensors[out.tensor].name + ": " + why;
  }
  return {};
}

Timing time_on_device(Package& p, size_t k, size_t v, int reps, int warmup, InputCache* cache,
                      double preheat_s, double preheat_max_s, const ClockProbe* clock) {
  const KernelSpec& ks = p.manifest().kernels[k];
  Kernel kern(p, k, v, ks.shape);
  Buffers buf = make_buffers(p, kern);
  Backend* b = p.backend();
  for (size_t t = 0; t < ks.tensors.size(); ++t) b->fill(buf.ptrs[t], 0, buf.bytes[t]);
  const Variant& var = ks.variants[v];
  // Values of the kind the confirmation timed (a kernel's speed at the power
  // limit depends on its data), else the verification's, else zeros.
  const char* inputs = "zeros";
  if (!var.verify.empty()) {
    VerifySpec vs = VerifySpec::parse(read_pkg_file(p.dir(), var.verify, "manifest.json verify"), var.verify);
    inputs = load_inputs(p, ks, var.verify, vs, kern, buf, cache, /*timing=*/true) ? "timing" : "verify";
  }
  const size_t flush_bytes = bench_flush_bytes(var, p.device()->l2_bytes);
  Timing t = time_launches(*b, [&] { kern.launch(buf.ptrs.data(), static_cast<int>(buf.ptrs.size()), nullptr); },
                           flush_bytes, reps, warmup, preheat_s, preheat_max_s,
                           clock ? std::function<ClockSample()>([clock] { return clock->read(); }) : nullptr);
  t.inputs = inputs;
  return t;
}

size_t bench_flush_bytes(const Variant& v, int64_t l2_bytes) {
  if (v.confirmed_flush_bytes && *v.confirmed_flush_bytes > 0) return static_cast<size_t>(*v.confirmed_flush_bytes);
  const size_t lo = size_t(256) << 20, hi = size_t(1) << 30;
  return std::clamp<size_t>(2 * static_cast<size_t>(std::max<int64_t>(l2_bytes, 0)), lo, hi);
}

bool lead_in_settled(const std::vector<double>& chunk_ms, size_t window) {
  const size_t need = (kSettleLagWindows + 1) * window;
  if (window < 1 || chunk_ms.size() < need) return false;
  const auto sum = [&](size_t from) {
    double x = 0;
    for (size_t i = from; i < from + window; ++i) x += chunk_ms[i];
    return x;
  };
  const double last = sum(chunk_ms.size() - window), before = sum(chunk_ms.size() - need);
  return before > 0 && std::abs(last / before - 1) <= kSettleTol;
}

Timing time_launches(Backend& b, const std::function<void()>& launch, size_t flush_bytes, int reps, int warmup,
                     double preheat_s, double preheat_max_s, const std::function<ClockSample()>& read_clock) {
  void* flush = b.alloc(flush_bytes);
  // Events: [0, 3) for the lead-in, then a start and an end per timed launch.
  std::vector<void*> ev;
  auto release = [&] {
    for (void* e : ev) b.event_destroy(e);
    b.free(flush);
  };
  Timing t;
  t.flush_bytes = flush_bytes;
  try {
    for (int i = 0; i < 3 + 2 * reps; ++i) ev.push_back(b.event_create());
    auto flushed_launch = [&](int i) {
      b.fill_async(flush, static_cast<unsigned char>(i), flush_bytes, nullptr);
      launch();
    };
    for (int i = 0; i < warmup; ++i) launch();
    b.synchronize();
    if (preheat_s > 0) {
      // One flushed launch's time sizes chunks of ~20 ms. A chunk is always
      // queued behind the one whose end is waited for, so the device never
      // idles; the lead-in stops once preheat_s has passed and (adaptive) it
      // has settled or preheat_max_s has passed, and the timed launches queue
      // behind its last chunk.
      b.event_record(ev[0], nullptr);
      flushed_launch(0);
      b.event_record(ev[1], nullptr);
      const double one_ms = std::max(1e-3, static_cast<double>(b.event_elapsed_ms(ev[0], ev[1])));
      const long chunk = std::clamp(static_cast<long>(20.0 / one_ms) + 1, 1L, 10000L);
      void* done = ev[1];
      void* next = ev[2];
      b.event_record(ev[0], nullptr);
      for (long i = 0; i < chunk; ++i) flushed_launch(static_cast<int>(i));
      b.event_record(done, nullptr);
      t.preheat_launches = chunk;
      const bool adaptive = preheat_max_s > preheat_s;
      const size_t window =
          std::max<size_t>(1, static_cast<size_t>(std::lround(kSettleWindowMs / (static_cast<double>(chunk) * one_ms))));
      std::vector<double> chunk_ms;
      double done_ms = 0;
      for (;;) {
        for (long i = 0; i < chunk; ++i) flushed_launch(static_cast<int>(i));
        b.event_record(next, nullptr);
        t.preheat_launches += chunk;
        const double ms = b.event_elapsed_ms(ev[0], done);
        chunk_ms.push_back(ms - done_ms);
        done_ms = ms;
        const bool settled = adaptive && lead_in_settled(chunk_ms, window);
        if (t.preheat_launches >= 1000000 ||
            (ms >= preheat_s * 1e3 && (!adaptive || settled || ms >= preheat_max_s * 1e3))) {
          t.preheat_ms = ms;
          t.preheat_settled = adaptive ? settled : -1;
          break;
        }
        std::swap(done, next);
      }
    }
    // The clock as the timed launches start (behind the lead-in, still
    // running) and as they end, as the confirmation reads it around a round.
    if (read_clock) t.clock_start = read_clock();
    for (int i = 0; i < reps; ++i) {
      b.fill_async(flush, static_cast<unsigned char>(i), flush_bytes, nullptr);
      b.event_record(ev[3 + 2 * i], nullptr);
      launch();
      b.event_record(ev[4 + 2 * i], nullptr);
    }
    for (int i = 0; i < reps; ++i) t.samples_ms.push_back(b.event_elapsed_ms(ev[3 + 2 * i], ev[4 + 2 * i]));
    if (read_clock) t.clock_end = read_clock();
  } catch (...) {
    release();
    throw;
  }
  release();
  std::vector<double> s = t.samples_ms;
  std::sort(s.begin(), s.end());
  t.median_ms = s.empty() ? 0 : (s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]));
  return t;
}

BenchVerdict bench_verdict(double measured_ms, double recorded_ms, double resolution_ms) {
  if (recorded_ms <= 0 || measured_ms <= recorded_ms * (1 + kBenchTolerance)) return BenchVerdict::kWithin;
  return measured_ms - recorded_ms > resolution_ms ? BenchVerdict::kSlower : BenchVerdict::kBelowResolution;
}

nlohmann::json bench_record(const KernelSpec& ks, const Variant& v, const Timing& t, double resolution_ms) {
  const double ref = v.confirmed_median_ms.value_or(v.value_ms);
  const BenchVerdict verdict = bench_verdict(t.median_ms, ref, resolution_ms);
  const char* verdict_name = verdict == BenchVerdict::kSlower            ? "slower"
                             : verdict == BenchVerdict::kBelowResolution ? "below_resolution"
                                                                         : "within";
  const char* lead = t.preheat_launches == 0 ? "none"
                     : t.preheat_settled == 1 ? "settled"
                     : t.preheat_settled == 0 ? "at max"
                                              : "fixed";
  nlohmann::json r = {{"kernel", ks.label()}, {"job_key", ks.job_key}, {"operator", ks.op}, {"shape", ks.shape},
                      {"dtype", ks.dtype}, {"target", v.target}, {"rank", v.rank},
                      {"candidate_id", v.candidate_id}, {"median_ms", t.median_ms},
                      {"recorded_ms", ref > 0 ? nlohmann::json(ref) : nlohmann::json(nullptr)},
                      {"ratio", ref > 0 ? nlohmann::json(t.median_ms / ref) : nlohmann::json(nullptr)},
                      {"verdict", verdict_name}, {"tolerance", kBenchTolerance}, {"resolution_ms", resolution_ms},
                      {"flush_bytes", t.flush_bytes}, {"lead_in", lead}, {"lead_in_ms", t.preheat_ms},
                      {"lead_in_launches", t.preheat_launches}, {"inputs", t.inputs},
                      {"samples_ms", t.samples_ms}};
  r["clock"] = t.clock_start.known() || t.clock_end.known()
                   ? nlohmann::json{{"start", t.clock_start.to_json()}, {"end", t.clock_end.to_json()}}
                   : nlohmann::json(nullptr);
  r["confirmed_sm_mhz"] = v.confirmed_sm_clock_mhz ? nlohmann::json(*v.confirmed_sm_clock_mhz) : nlohmann::json(nullptr);
  return r;
}

namespace {

// A number of a bench record, or nullopt where it is null or absent.
std::optional<double> record_number(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_number()) return std::nullopt;
  return j.at(key).get<double>();
}

}  // namespace

std::optional<double> bench_clock_mhz(const nlohmann::json& record) {
  if (!record.contains("clock") || !record.at("clock").is_object()) return std::nullopt;
  const nlohmann::json& c = record.at("clock");
  std::optional<double> a = record_number(c.value("start", nlohmann::json()), "sm_mhz");
  std::optional<double> b = record_number(c.value("end", nlohmann::json()), "sm_mhz");
  if (a && b) return 0.5 * (*a + *b);
  return a ? a : b;
}

std::string bench_clock_text(const nlohmann::json& record) {
  const std::optional<double> ran = bench_clock_mhz(record);
  if (!ran) return "-";
  const std::optional<double> confirmed = record_number(record, "confirmed_sm_mhz");
  char s[64];
  if (confirmed)
    std::snprintf(s, sizeof s, "%.0f/%.0f MHz", *ran, *confirmed);
  else
    std::snprintf(s, sizeof s, "%.0f/- MHz", *ran);
  return s;
}

std::string bench_note(const nlohmann::json& record) {
  const std::string verdict = record.value("verdict", "");
  const std::optional<double> ratio = record_number(record, "ratio");
  const bool beyond = ratio && std::abs(*ratio - 1) > kBenchTolerance;
  const double gap_ms = record_number(record, "median_ms").value_or(0) - record_number(record, "recorded_ms").value_or(0);
  const double resolution_ms = record_number(record, "resolution_ms").value_or(0);
  std::string note;
  char s[128];
  if (verdict == "slower") {
    std::snprintf(s, sizeof s, "SLOWER >%.0f%%", kBenchTolerance * 100);
    note = s;
  } else if (verdict == "below_resolution" || (beyond && std::abs(gap_ms) <= resolution_ms)) {
    // slower, or faster, by more than the tolerance but by less than the timer can tell
    std::snprintf(s, sizeof s, "%+.2f us, within the timer's %.1f us resolution", gap_ms * 1e3, resolution_ms * 1e3);
    note = s;
  }
  const std::optional<double> ran = bench_clock_mhz(record);
  const std::optional<double> confirmed = record_number(record, "confirmed_sm_mhz");
  if (beyond && ran && confirmed && *confirmed > 0) {
    const double off = *ran / *confirmed - 1;
    if (std::abs(off) < kClockAgreement)
      std::snprintf(s, sizeof s, "at the confirmation's clock (%.0f MHz)", *confirmed);
    else
      std::snprintf(s, sizeof s, "ran at %.0f MHz, confirmed at %.0f MHz (%+.1f%%)", *ran, *confirmed, off * 100);
    note += (note.empty() ? "" : "; ") + std::string(s);
  }
  return note;
}

}  // namespace kiln::rt
