// kiln-rt: info, verify, bench and tune for a kiln-package/2 directory.
// Exit codes (docs/runtime.md): 0 ok; 1 a check failed (integrity, signature,
// compatibility, wrong output, slower than recorded); 2 usage; 3 verified
// statically only, because no GPU device (or runtime) is present or --target was given.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "clock_probe.h"
#include "error.h"
#include "package.h"
#include "tools.h"

using namespace kiln::rt;

namespace {

constexpr int kOk = 0, kFail = 1, kUsage = 2, kStaticOnly = 3;
// The most timed runs per kernel: `kiln import-measurements` refuses more
// samples than this per kernel (src/batch/measurements_file.cpp).
constexpr long kMaxReps = 100000;

const char* kUsageText =
    "usage: kiln-rt info   PKG [--target ID] [--device N]\n"
    "       kiln-rt verify PKG [--pubkey PEM] [--target ID] [--device N]\n"
    "       kiln-rt bench  PKG [--out bench.json] [--reps N] [--preheat S] [--preheat-max S] [--device N]\n"
    "       kiln-rt tune   PKG --out measurements.json [--reps N] [--preheat S] [--preheat-max S] [--device N]\n"
    "--preheat S: at least S seconds of back-to-back launches before each kernel's timed ones (default 0.3;\n"
    "  0: none), then until their time per launch settles, at most --preheat-max seconds (default 2;\n"
    "  at or below --preheat: exactly --preheat)\n"
    "exit: 0 ok, 1 a check failed, 2 usage, 3 verified statically only (no device, or --target)\n";

struct Args {
  std::string cmd, pkg, target, pubkey, out;
  int device = 0, reps = 50;
  double preheat_s = 0.3, preheat_max_s = 2.0;  // time_on_device's lead-in
};

bool parse(int argc, char** argv, Args& a) {
  if (argc < 3) return false;
  a.cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](std::string& dst) {
      if (i + 1 >= argc) return false;
      dst = argv[++i];
      return true;
    };
    std::string v;
    if (s == "--target") { if (!value(a.target)) return false; }
    else if (s == "--pubkey") { if (!value(a.pubkey)) return false; }
    else if (s == "--out") { if (!value(a.out)) return false; }
    else if (s == "--device") { if (!value(v)) return false; a.device = std::atoi(v.c_str()); }
    else if (s == "--reps") {
      if (!value(v)) return false;
      char* end = nullptr;
      errno = 0;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || errno || n < 1 || n > kMaxReps) {
        std::fprintf(stderr, "kiln-rt: --reps %s: must be an integer from 1 to %ld (kiln import-measurements "
                             "takes at most that many samples per kernel)\n",
                     v.substr(0, 32).c_str(), kMaxReps);
        return false;
      }
      a.reps = (int)n;
    }
    else if (s == "--preheat" || s == "--preheat-max") {
      if (!value(v)) return false;
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end || !(x >= 0 && x <= 60)) {
        std::fprintf(stderr, "kiln-rt: %s %s: must be a number of seconds from 0 to 60\n", s.c_str(),
                     v.substr(0, 32).c_str());
        return false;
      }
      (s == "--preheat" ? a.preheat_s : a.preheat_max_s) = x;
    }
    else if (!s.empty() && s[0] == '-') return false;
    else if (a.pkg.empty()) a.pkg = s;
    else return false;
  }
  return !a.pkg.empty() && (a.cmd == "info" || a.cmd == "verify" || a.cmd == "bench" || a.cmd == "tune");
}

// Opens bound to --target, else to a device; with no device (and allow_static)
// opens unbound and says why in *no_device.
std::unique_ptr<Package> open_pkg(const Args& a, bool allow_static, std::string* no_device) {
  OpenOptions o;
  o.pubkey = a.pubkey;
  o.target = a.target;
  o.device = a.device;
  try {
    return Package::open(a.pkg, o);
  } catch (const Error& e) {
    if (!allow_static || !a.target.empty() || (e.status != KILN_E_NO_RUNTIME && e.status != KILN_E_NO_DEVICE)) throw;
    *no_device = e.what();
    o.no_bind = true;
    return Package::open(a.pkg, o);
  }
}

void print_kernels(const Package& p) {
  const Manifest& m = p.manifest();
  for (size_t k = 0; k < m.kernels.size(); ++k) {
    const KernelSpec& ks = m.kernels[k];
    std::printf("%s\n", ks.label().c_str());
    for (size_t v = 0; v < ks.variants.size(); ++v) {
      const Variant& var = ks.variants[v];
      const LoadedObject& lo = p.object(k, v);
      std::string here;
      if (!p.bound().backend.empty()) here = p.runs_here(k, v) ? "  [fits " + p.bound().arch() + "]" : "";
      std::string zero;  // what every launch clears first
      for (const auto& name : var.zero_before_launch) zero += (zero.empty() ? "  zeroes " : ",") + name;
      std::printf("  %-8s rank %d  %-44s %s  %s %.4f ms%s%s%s\n", var.target.c_str(), var.rank,
                  (var.file + (lo.bundle_id.empty() ? "" : "[" + lo.bundle_id + "]")).c_str(), lo.co.summary().c_str(),
                  var.basis.c_str(), var.confirmed_median_ms.value_or(var.value_ms), zero.c_str(), here.c_str(),
                  lo.problems.empty() ? "" : ("  PROBLEM: " + lo.problems.front()).c_str());
    }
  }
}

int cmd_info(const Args& a) {
  std::string no_device;
  auto p = open_pkg(a, true, &no_device);
  const Manifest& m = p->manifest();
  std::printf("package %s (%s, triton %s)\n", a.pkg.c_str(), m.format.c_str(),
              m.toolchain.is_object() ? m.toolchain.value("triton", "?").c_str() : "?");
  for (const auto& t : m.targets) {
    std::string note;
    if (!p->bound().backend.empty() && same_arch(t, p->bound())) note = "  <- " + p->bound().label;
    std::printf("target %-8s %-8s %s%s\n", t.name.c_str(), t.arch.c_str(), t.target_id.c_str(), note.c_str());
  }
  if (!no_device.empty()) std::printf("no device: %s\n", no_device.c_str());
  else std::printf("bound to %s: every variant for it checked compatible\n", p->bound().label.c_str());
  print_kernels(*p);
  return kOk;
}

int cmd_verify(const Args& a) {
  std::string no_device;
  auto p = open_pkg(a, true, &no_device);
  InputCache inputs;  // the variants of a kernel share their verify inputs
  const Manifest& m = p->manifest();
  std::printf("integrity: SHA256SUMS ok%s\n", a.pubkey.empty() ? "" : ", signature ok");
  auto problems = static_problems(*p);
  size_t objects = 0;
  for (const auto& ks : m.kernels) objects += ks.variants.size();
  for (const auto& pr : problems) std::printf("FAIL static: %s\n", pr.c_str());
  std::printf("static: %zu code objects, %zu problems\n", objects, problems.size());
  if (!problems.empty()) return kFail;
  if (!a.target.empty()) {
    std::printf("compatible with %s; no launch (static target)\n", p->bound().label.c_str());
    return kStaticOnly;
  }
  if (!p->backend()) {
    std::printf("statically verified; no device present, nothing launched (%s)\n", no_device.c_str());
    return kStaticOnly;
  }
  int fails = 0, runs = 0;
  for (size_t k = 0; k < m.kernels.size(); ++k) {
    for (size_t v = 0; v < m.kernels[k].variants.size(); ++v) {
      if (!p->runs_here(k, v)) continue;
      ++runs;
      std::string why;
      try {
        why = verify_on_device(*p, k, v, &inputs);
      } catch (const Error& e) {
        why = e.what();
      }
      std::printf("%s %s rank %d %s%s\n", why.empty() ? "PASS" : "FAIL", m.kernels[k].label().c_str(),
                  m.kernels[k].variants[v].rank, m.kernels[k].variants[v].target.c_str(),
                  why.empty() ? "" : (": " + why).c_str());
      fails += !why.empty();
    }
  }
  std::printf("verified %d kernels on %s: %d failed\n", runs, p->bound().label.c_str(), fails);
  return fails ? kFail : kOk;
}

// `out` written to `path` whole or not at all (a temporary file, renamed).
void write_json_atomically(const std::string& path, const nlohmann::json& out) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << out.dump(1) << "\n";
    if (!f) throw Error(KILN_E_IO, "cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(KILN_E_IO, "cannot write " + path);
}

int cmd_bench(const Args& a) {
  std::string dummy;
  auto p = open_pkg(a, false, &dummy);
  InputCache inputs;
  const Manifest& m = p->manifest();
  const DeviceProps* d = p->device();
  nlohmann::json out = {{"format", "kiln-bench/1"}, {"device", d->name}, {"driver", d->driver},
                        {"uuid", d->uuid}, {"target", p->bound().label}, {"kernels", nlohmann::json::array()}};
  int slow = 0;
  const double res_ms = p->backend()->event_resolution_ms();
  // The GPU's clock around each kernel's timed launches, where NVML reads it
  // (a kernel at the power limit runs as fast as its clock): printed beside
  // the ratio, never a part of the verdict.
  const ClockProbe clock(*d);
  out["clock_source"] = clock.available() ? nlohmann::json("nvml") : nlohmann::json(nullptr);
  if (!clock.available()) std::printf("clock: unknown (%s)\n", clock.why().c_str());
  std::printf("%-40s %-8s %10s %10s %8s  %-14s %-14s\n", "kernel", "target", "median_ms", "recorded", "ratio", "clock",
              "lead-in");
  for (size_t k = 0; k < m.kernels.size(); ++k) {
    for (size_t v = 0; v < m.kernels[k].variants.size(); ++v) {
      const Variant& var = m.kernels[k].variants[v];
      if (!p->runs_here(k, v) || var.rank != 0) continue;
      Timing t = time_on_device(*p, k, v, a.reps, 3, &inputs, a.preheat_s, a.preheat_max_s, &clock);
      // the table is printed from the record --out writes
      const nlohmann::json r = bench_record(m.kernels[k], var, t, res_ms);
      const double ref = r["recorded_ms"].is_null() ? 0.0 : r["recorded_ms"].get<double>();
      const double ratio = r["ratio"].is_null() ? 0.0 : r["ratio"].get<double>();
      const std::string verdict = r["verdict"], how = r["lead_in"];
      slow += verdict == "slower";
      char lead[48] = "none";
      if (how != "none") std::snprintf(lead, sizeof lead, "%.2fs %s", t.preheat_ms / 1e3, how.c_str());
      const std::string note = bench_note(r);
      std::printf("%-40s %-8s %10.4f %10.4f %8.3f  %-14s %-14s%s%s\n", m.kernels[k].label().c_str(),
                  var.target.c_str(), t.median_ms, ref, ratio, bench_clock_text(r).c_str(), lead,
                  note.empty() ? "" : "  ", note.c_str());
      out["kernels"].push_back(r);
    }
  }
  if (!a.out.empty()) {
    write_json_atomically(a.out, out);
    std::printf("wrote %s (%zu kernels)\n", a.out.c_str(), out["kernels"].size());
  }
  return slow ? kFail : kOk;
}

int cmd_tune(const Args& a) {
  if (a.out.empty()) return kUsage;
  std::string dummy;
  auto p = open_pkg(a, false, &dummy);
  InputCache inputs;
  const Manifest& m = p->manifest();
  const DeviceProps* d = p->device();
  nlohmann::json out = {{"format", "kiln-measurements/1"}, {"device", d->name}, {"driver", d->driver},
                        {"uuid", d->uuid}, {"target", p->bound().label}, {"kernels", nlohmann::json::array()}};
  for (size_t k = 0; k < m.kernels.size(); ++k) {
    const KernelSpec& ks = m.kernels[k];
    nlohmann::json best;
    for (size_t v = 0; v < ks.variants.size(); ++v) {
      if (!p->runs_here(k, v)) continue;
      const Variant& var = ks.variants[v];
      Timing t;
      std::string why;
      try {
        why = verify_on_device(*p, k, v, &inputs);
        if (why.empty()) t = time_on_device(*p, k, v, a.reps, 3, &inputs, a.preheat_s, a.preheat_max_s);
      } catch (const Error& e) {
        why = e.what();
      }
      std::printf("%-40s rank %d candidate %lld: %s\n", ks.label().c_str(), var.rank, (long long)var.candidate_id,
                  why.empty() ? (std::to_string(t.median_ms) + " ms").c_str() : ("skipped: " + why).c_str());
      if (!why.empty()) continue;
      nlohmann::json row = {{"job_key", ks.job_key}, {"operator", ks.op}, {"shape", ks.shape}, {"dtype", ks.dtype},
                            {"candidate_id", var.candidate_id}, {"rank", var.rank}, {"median_ms", t.median_ms},
                            {"samples", t.samples_ms}};
      if (best.is_null() || t.median_ms < best["median_ms"].get<double>()) best = row;
    }
    if (!best.is_null()) out["kernels"].push_back(best);
  }
  write_json_atomically(a.out, out);
  std::printf("wrote %s (%zu kernels)\n", a.out.c_str(), out["kernels"].size());
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fputs(kUsageText, stderr);
    return kUsage;
  }
  try {
    if (a.cmd == "info") return cmd_info(a);
    if (a.cmd == "verify") return cmd_verify(a);
    if (a.cmd == "bench") return cmd_bench(a);
    int rc = cmd_tune(a);
    if (rc == kUsage) std::fputs(kUsageText, stderr);
    return rc;
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln-rt %s: %s\n", a.cmd.c_str(), e.what());
    return e.status == KILN_E_USAGE ? kUsage : kFail;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-rt %s: %s\n", a.cmd.c_str(), e.what());
    return kFail;
  }
}
