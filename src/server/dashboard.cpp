#include "server/dashboard.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include "common/shape_text.h"
#include "common/utc_text.h"
#include "catalog/job_key.h"
#include "catalog/service_reads.h"
#include "server/svg.h"

namespace kiln::server {

using nlohmann::json;
using reports::BestKernel;

namespace {

std::string config_text(const json& config) {
  if (!config.is_object()) return config.is_null() ? "" : config.dump();
  std::string s;
  for (const auto& [k, v] : config.items()) s += (s.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

std::string kernel_label(const reports::JobOverview& j) {
  return j.op + " " + shape_text(j.shape) + " " + j.dtype + " " + j.target;
}

// A chart of latencies (log scale) against `x_label`.
Chart latency_chart(std::string id, std::string title, std::string x_label) {
  return Chart{.id = std::move(id),
               .title = std::move(title),
               .x = {.label = std::move(x_label)},
               .y = {.label = "latency (ms)", .log = true}};
}

std::string date_text(double unix_s) { return utc_text(unix_s, "%Y-%m-%d %H:%M"); }

std::string ms_text(double ms) { return short_number(ms) + " ms"; }

// The newest job of each kernel (op, shape, dtype, params, target), in the
// order best_kernels gives (newest first).
std::vector<BestKernel> latest_per_kernel(const std::vector<BestKernel>& all) {
  std::set<std::string> seen;
  std::vector<BestKernel> out;
  for (const auto& k : all) {
    const std::string id = k.job.op + "\n" + canonical_json(k.job.shape) + "\n" + k.job.dtype + "\n" +
                           canonical_json(k.job.params) + "\n" + k.job.target;
    if (seen.insert(id).second) out.push_back(k);
  }
  std::sort(out.begin(), out.end(), [](const BestKernel& a, const BestKernel& b) {
    return std::tie(a.job.target, a.job.op, a.job.dtype, a.job.id) < std::tie(b.job.target, b.job.op, b.job.dtype, b.job.id);
  });
  return out;
}

const char* kStyle = R"(body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px}.meta{color:#666;font-size:12px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.n{text-align:right;font-variant-numeric:tabular-nums}.note{color:#666;font-style:italic}
.charts{display:flex;flex-wrap:wrap;gap:12px}.bad{color:#b00}.good{color:#070}
details{margin:6px 0;padding:4px 8px;border:1px solid #eee}summary{cursor:pointer}code{font-size:12px})";

struct Page {
  std::ostringstream o;
  int charts = 0;
  void chart(const Chart& c) {
    o << render_svg(c);
    ++charts;
  }
};

void best_table(Page& p, const std::vector<BestKernel>& kernels, Facts& facts, reports::Reader& reader,
                const std::map<long long, Regression>& regressions, bool served) {
  p.o << "<table class=\"best\"><tr><th>job</th><th>op</th><th>shape</th><th>dtype</th><th>target</th>"
         "<th>best</th><th>basis</th><th>confirmed median [95% CI]</th><th>speedup [95% CI]</th>"
         "<th>vs previous</th><th>config</th><th>code object</th></tr>\n";
  for (const auto& k : kernels) {
    const auto c = facts.confirmed(reader.catalog(), k.best);
    std::string conf = "-", speed = "-";
    if (c)
      conf = short_number(c->median_ms) + " [" + short_number(c->ci.lo) + ", " + short_number(c->ci.hi) + "] ms" +
             (c->basis == "cpu" ? " (cpu)" : "");
    if (c && !c->baselines.empty()) {
      speed.clear();
      for (const auto& b : c->baselines)
        speed += (speed.empty() ? "" : "; ") + b.name + " " + short_number(b.speedup) + "x [" +
                 short_number(b.speedup_ci.lo) + ", " + short_number(b.speedup_ci.hi) + "]";
    }
    std::string reg = "-";
    if (auto it = regressions.find(k.job.id); it != regressions.end()) {
      reg = it->second.status;
      if (it->second.ratio) reg += " (" + short_number(*it->second.ratio) + "x)";
    }
    const std::string basis = k.best.basis == "measured" ? "measured on " + k.best.device : "estimated";
    std::string code = k.code_sha256.empty() ? "-" : k.code_kind + " " + k.code_sha256.substr(0, 12);
    p.o << "<tr><td class=\"n\">" << k.job.id << "</td><td>" << escape_xml(k.job.op) << "</td><td>"
        << escape_xml(shape_text(k.job.shape)) << "</td><td>" << escape_xml(k.job.dtype) << "</td><td>"
        << escape_xml(k.job.target) << "</td><td class=\"n\">" << ms_text(k.best.value_ms) << "</td><td>"
        << escape_xml(basis) << "</td><td class=\"n\">" << escape_xml(conf) << "</td><td>" << escape_xml(speed)
        << "</td><td" << (reg.rfind("regression", 0) == 0 ? " class=\"bad\"" : "") << ">" << escape_xml(reg)
        << "</td><td><code>" << escape_xml(config_text(k.config)) << "</code></td><td>";
    if (served && !k.code_sha256.empty())
      p.o << "<a href=\"/api/code-objects/" << escape_xml(k.code_sha256) << "\">" << escape_xml(code) << "</a>";
    else
      p.o << escape_xml(code);
    p.o << "</td></tr>\n";
  }
  p.o << "</table>\n";
}

void speedup_section(Page& p, const std::vector<BestKernel>& kernels, Facts& facts, reports::Reader& reader) {
  p.o << "<h2 id=\"speedup\">Speedup over baselines</h2>\n";
  Chart c{.id = "speedup",
          .title = "Speedup over baselines (baseline median / kernel median, bootstrap 95% CI)",
          .x = {.label = "kernel"},
          .y = {.label = "speedup (x)", .log = true}};
  std::map<std::string, Series> by_baseline;
  int x = 0;
  for (const auto& k : kernels) {
    const auto conf = facts.confirmed(reader.catalog(), k.best);
    if (!conf || conf->baselines.empty()) continue;
    for (const auto& b : conf->baselines) {
      Series& s = by_baseline[b.name];
      s.name = b.name;
      s.points.push_back({static_cast<double>(x), b.speedup, b.speedup_ci.lo, b.speedup_ci.hi,
                          kernel_label(k.job) + " vs " + b.name + ": " + short_number(b.speedup) + "x [" +
                              short_number(b.speedup_ci.lo) + ", " + short_number(b.speedup_ci.hi) + "]"});
    }
    c.x.categories.push_back(kernel_label(k.job));
    ++x;
  }
  if (c.x.categories.empty()) {
    p.o << "<p class=\"note\">No best kernel was confirmed against baselines (confirmation rounds time the "
           "finalists with the eager and compiled baselines on a device).</p>\n";
    return;
  }
  // level with the baseline: above the line the kernel is faster
  c.series.push_back({"1x (level)", Mark::kLine, {{-0.5, 1, {}, {}, ""}, {x - 0.5, 1, {}, {}, ""}}, "#999", true});
  for (auto& [name, s] : by_baseline) c.series.push_back(std::move(s));
  c.width = std::max(640, 60 * x + 370);
  c.height = 340;
  p.chart(c);
}

void roofline_section(Page& p, const std::vector<BestKernel>& kernels, const TargetRegistry& targets, Facts& facts,
                      reports::Reader& reader) {
  p.o << "<h2 id=\"roofline\">Roofline</h2>\n<div class=\"charts\">\n";
  std::map<std::string, std::vector<const BestKernel*>> by_target;
  for (const auto& k : kernels) by_target[k.job.target].push_back(&k);
  std::vector<std::string> unplaced;
  int drawn = 0;
  for (const auto& [target_name, ks] : by_target) {
    const Target* t = targets.find(target_name);
    if (!t || t->memory_bandwidth_gbs <= 0 || t->peak_tflops.empty()) {
      unplaced.push_back(target_name + ": no bandwidth / peak in configs/targets");
      continue;
    }
    Series measured{"measured kernels", Mark::kPoints, {}, "#d62728", false};
    Series estimated{"estimated kernels", Mark::kPoints, {}, "#9467bd", false};
    std::set<std::string> dtypes;
    double ai_lo = 1e300, ai_hi = 0;
    for (const BestKernel* k : ks) {
      if (!k->traffic_bytes || !k->traffic_flops || *k->traffic_bytes <= 0 || *k->traffic_flops <= 0) {
        unplaced.push_back(kernel_label(k->job) + ": no traffic model");
        continue;
      }
      const auto conf = facts.confirmed(reader.catalog(), k->best);
      const double ms = latency_ms(*k, conf.get());
      if (ms <= 0) continue;
      const double ai = *k->traffic_flops / *k->traffic_bytes;
      const double gflops = *k->traffic_flops / (ms * 1e-3) / 1e9;
      const double gbs = *k->traffic_bytes / (ms * 1e-3) / 1e9;
      ai_lo = std::min(ai_lo, ai);
      ai_hi = std::max(ai_hi, ai);
      dtypes.insert(k->job.dtype);
      Point pt{ai, gflops, std::nullopt, std::nullopt,
               kernel_label(k->job) + ": " + short_number(ms) + " ms, " + short_number(gflops) + " GFLOP/s, " +
                   short_number(gbs) + " GB/s (" + short_number(100 * gbs / t->memory_bandwidth_gbs) +
                   "% of bandwidth)"};
      (k->best.basis == "measured" ? measured : estimated).points.push_back(pt);
    }
    if (measured.points.empty() && estimated.points.empty()) continue;
    // ceilings: the bandwidth roof up to the highest compute peak of the
    // kernels' dtypes, and each dtype's peak (fp32 when the file has no entry for it)
    std::vector<std::pair<std::string, double>> peaks;  // names ("bf16/fp16"), GFLOP/s; one line per value
    for (const auto& d : dtypes) {
      auto it = t->peak_tflops.find(d);
      if (it == t->peak_tflops.end()) it = t->peak_tflops.find("fp32");
      if (it == t->peak_tflops.end()) continue;
      const double gflops = it->second * 1000;
      auto same = std::find_if(peaks.begin(), peaks.end(), [&](const auto& pk) { return pk.second == gflops; });
      if (same == peaks.end())
        peaks.push_back({it->first, gflops});
      else if (("/" + same->first + "/").find("/" + it->first + "/") == std::string::npos)
        same->first += "/" + it->first;
    }
    double top_peak = 0;
    for (const auto& pk : peaks) top_peak = std::max(top_peak, pk.second);
    const double bw = t->memory_bandwidth_gbs;
    const double ridge = top_peak > 0 ? top_peak / bw : ai_hi * 4;
    const double x0 = std::min(ai_lo, ridge) / 8, x1 = std::max(ai_hi, ridge) * 8;
    Chart c;
    c.id = "roofline-" + target_name;
    c.title = "Roofline on " + target_name + " (" + short_number(bw) + " GB/s)";
    c.x.label = "arithmetic intensity (FLOP/byte)";
    c.x.log = true;
    c.x.min = x0;
    c.x.max = x1;
    c.y.label = "GFLOP/s";
    c.y.log = true;
    c.series.push_back({"bandwidth " + short_number(bw) + " GB/s", Mark::kLine,
                        {{x0, bw * x0, {}, {}, ""}, {ridge, bw * ridge, {}, {}, ""}}, "#555", false});
    // ceilings in colours no kernel series uses
    const char* ceiling_colours[] = {"#2ca02c", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
    size_t ci = 0;
    for (const auto& [name, gflops] : peaks)
      c.series.push_back({name + " peak " + short_number(gflops / 1000) + " TFLOP/s", Mark::kLine,
                          {{gflops / bw, gflops, {}, {}, ""}, {x1, gflops, {}, {}, ""}},
                          ceiling_colours[ci++ % (sizeof ceiling_colours / sizeof *ceiling_colours)], true});
    if (!measured.points.empty()) c.series.push_back(std::move(measured));
    if (!estimated.points.empty()) c.series.push_back(std::move(estimated));
    c.height = 340;
    p.chart(c);
    ++drawn;
  }
  p.o << "</div>\n";
  if (!drawn) p.o << "<p class=\"note\">No best kernel with a traffic model to place.</p>\n";
  if (!unplaced.empty()) {
    p.o << "<p class=\"note\">Not placed: ";
    for (size_t i = 0; i < unplaced.size(); ++i) p.o << (i ? "; " : "") << escape_xml(unplaced[i]);
    p.o << "</p>\n";
  }
  p.o << "<p class=\"meta\">Each kernel at its traffic model's FLOP/byte and its latency (the confirmed median where "
         "there is one); ceilings from configs/targets (memory_bandwidth_gbs, peak_tflops). Estimated kernels sit "
         "where the static model put them, not where a device did.</p>\n";
}

struct Failure {
  int count = 0;
  std::map<std::string, int> messages;
};

void failures_section(Page& p, const std::map<std::string, Failure>& by_status,
                      const std::vector<reports::JobOverview>& failed_jobs) {
  p.o << "<h2 id=\"failures\">Failures by status</h2>\n";
  if (by_status.empty() && failed_jobs.empty()) {
    p.o << "<p class=\"note\">No failed evaluation and no failed job.</p>\n";
    return;
  }
  if (!by_status.empty()) {
    Chart c;
    c.id = "failures";
    c.title = "Candidates by failing status";
    c.x.label = "status";
    c.y.label = "candidates";
    c.y.min = 0;
    Series s{"candidates", Mark::kBars, {}, "#d62728", false};
    int x = 0;
    for (const auto& [status, f] : by_status) {
      c.x.categories.push_back(status);
      s.points.push_back({static_cast<double>(x++), static_cast<double>(f.count), {}, {}, status + ": " + std::to_string(f.count)});
    }
    c.series.push_back(std::move(s));
    c.width = std::max(420, 90 * x + 120);
    p.chart(c);
    p.o << "<table class=\"failures\"><tr><th>status</th><th>candidates</th><th>messages (count)</th></tr>\n";
    for (const auto& [status, f] : by_status) {
      std::vector<std::pair<int, std::string>> ms;
      for (const auto& [m, n] : f.messages) ms.push_back({n, m});
      std::sort(ms.rbegin(), ms.rend());
      p.o << "<tr><td>" << escape_xml(status) << "</td><td class=\"n\">" << f.count << "</td><td>";
      for (size_t i = 0; i < ms.size() && i < 5; ++i)
        p.o << (i ? "<br>" : "") << "<code>" << escape_xml(ms[i].second.substr(0, 300)) << "</code> (" << ms[i].first << ")";
      if (ms.size() > 5) p.o << "<br>... " << ms.size() - 5 << " more messages";
      p.o << "</td></tr>\n";
    }
    p.o << "</table>\n";
  }
  if (!failed_jobs.empty()) {
    p.o << "<h3>Failed jobs</h3><table class=\"failed-jobs\"><tr><th>job</th><th>kernel</th><th>message</th></tr>\n";
    for (const auto& j : failed_jobs)
      p.o << "<tr><td class=\"n\">" << j.id << "</td><td>" << escape_xml(kernel_label(j)) << "</td><td><code>"
          << escape_xml(j.message.substr(0, 500)) << "</code></td></tr>\n";
    p.o << "</table>\n";
  }
}

// Every kernel's runs, oldest first (reports::kernel_histories: one read for all kernels).
using Histories = std::map<reports::KernelKey, std::vector<BestKernel>>;

const std::vector<BestKernel>& history_of(const Histories& all, const BestKernel& k) {
  static const std::vector<BestKernel> none;
  const auto it = all.find({k.job.op, canonical_json(k.job.shape), k.job.dtype, canonical_json(k.job.params), k.job.target});
  return it == all.end() ? none : it->second;
}

void history_section(Page& p, const std::vector<BestKernel>& kernels, const Histories& histories,
                     reports::Reader& reader, Facts& facts) {
  p.o << "<h2 id=\"history\">History across nightly runs</h2>\n<div class=\"charts\">\n";
  int drawn = 0;
  for (const auto& k : kernels) {
    const auto& hist = history_of(histories, k);
    if (hist.size() < 2) continue;
    Chart c = latency_chart("history-" + std::to_string(k.job.id), "History: " + kernel_label(k.job),
                            "run (job created)");
    Series line{"best latency", Mark::kLine, {}, "#1f77b4", false};
    Series conf{"confirmed median, 95% CI", Mark::kPoints, {}, "#ff7f0e", false};
    for (size_t i = 0; i < hist.size(); ++i) {
      const auto& h = hist[i];
      const auto cf = facts.confirmed(reader.catalog(), h.best);
      const double ms = latency_ms(h, cf.get());
      c.x.categories.push_back(date_text(h.job.created_at));
      line.points.push_back({static_cast<double>(i), ms, {}, {},
                             "job " + std::to_string(h.job.id) + ": " + ms_text(ms) + " " + h.best.basis});
      if (cf) conf.points.push_back({static_cast<double>(i), cf->median_ms, cf->ci.lo, cf->ci.hi,
                                     "job " + std::to_string(h.job.id) + ": " + short_number(cf->median_ms) + " [" +
                                         short_number(cf->ci.lo) + ", " + short_number(cf->ci.hi) + "] ms"});
    }
    c.series.push_back(std::move(line));
    if (!conf.points.empty()) c.series.push_back(std::move(conf));
    p.chart(c);
    ++drawn;
  }
  p.o << "</div>\n";
  if (!drawn)
    p.o << "<p class=\"note\">No kernel has been tuned more than once (kiln nightly reruns a kernel when its "
           "template, Triton or target changes).</p>\n";
}

void job_section(Page& p, const reports::JobOverview& j, const std::vector<reports::CandidateResult>& cands, bool served) {
  p.o << "<details open id=\"job-" << j.id << "\"><summary><b>job " << j.id << "</b> " << escape_xml(kernel_label(j))
      << " &mdash; " << escape_xml(j.state) << ", " << j.evaluated << " evaluated, " << j.correct << " correct";
  if (j.best) p.o << ", best " << ms_text(j.best->value_ms) << " " << escape_xml(j.best->basis);
  p.o << "</summary>\n";
  if (served) p.o << "<p class=\"meta\"><a href=\"/api/jobs/" << j.id << "\">/api/jobs/" << j.id << "</a></p>\n";
  std::vector<const reports::CandidateResult*> evals;
  for (const auto& c : cands)
    if (c.evaluated) evals.push_back(&c);
  if (evals.empty()) {
    p.o << "<p class=\"note\">No evaluation yet.</p></details>\n";
    return;
  }
  auto latency = [](const reports::CandidateResult& c) -> std::optional<double> {
    if (c.status != "ok") return std::nullopt;
    if (!c.bench_device.empty() && c.median_ms) return c.median_ms;
    return c.estimate_ms;
  };
  Chart lat = latency_chart("job-" + std::to_string(j.id) + "-candidates",
                            "Latency of each candidate by config (evaluation order)", "config");
  Series ok{"correct", Mark::kPoints, {}, "#1f77b4", false};
  Series bad{"failed (at the floor)", Mark::kPoints, {}, "#d62728", false};
  double floor = 1e300;
  for (const auto* c : evals)
    if (auto v = latency(*c)) floor = std::min(floor, *v);
  if (floor == 1e300) floor = 1;
  for (size_t i = 0; i < evals.size(); ++i) {
    const auto& c = *evals[i];
    const std::string cfg = config_text(c.config);
    lat.x.categories.push_back(cfg.empty() ? "#" + std::to_string(c.id) : cfg);
    if (auto v = latency(c)) {
      ok.points.push_back({static_cast<double>(i), *v, {}, {},
                           "candidate " + std::to_string(c.id) + " " + cfg + ": " + ms_text(*v) +
                               (c.bench_device.empty() ? " estimated" : " on " + c.bench_device)});
    } else {
      bad.points.push_back({static_cast<double>(i), floor / 1.5, {}, {},
                            "candidate " + std::to_string(c.id) + " " + cfg + ": " + c.status +
                                (c.message.empty() ? "" : ": " + c.message.substr(0, 200))});
    }
  }
  lat.series.push_back(std::move(ok));
  if (!bad.points.empty()) lat.series.push_back(std::move(bad));
  lat.width = std::max(560, std::min(1300, 14 * static_cast<int>(evals.size()) + 300));
  lat.height = 320;

  Chart conv = latency_chart("job-" + std::to_string(j.id) + "-convergence", "Best so far against evaluations",
                             "evaluations");
  Series best{"best so far", Mark::kStep, {}, "#2ca02c", false};
  Series each{"each correct candidate", Mark::kPoints, {}, "#aaaaaa", false};
  double so_far = 1e300;
  for (size_t i = 0; i < evals.size(); ++i) {
    auto v = latency(*evals[i]);
    if (!v) continue;
    each.points.push_back({static_cast<double>(i + 1), *v, {}, {}, ""});
    if (*v < so_far) {
      so_far = *v;
      best.points.push_back({static_cast<double>(i + 1), so_far, {}, {},
                             "after " + std::to_string(i + 1) + " evaluations: " + ms_text(so_far)});
    }
  }
  if (!best.points.empty())  // the level held to the last evaluation
    best.points.push_back({static_cast<double>(evals.size()), so_far, {}, {}, ""});
  conv.series.push_back(std::move(best));
  conv.series.push_back(std::move(each));
  conv.x.min = 0;
  conv.x.max = static_cast<double>(evals.size()) + 1;
  p.o << "<div class=\"charts\">\n";
  p.chart(lat);
  p.chart(conv);
  p.o << "</div></details>\n";
}

}  // namespace

std::string render_dashboard(reports::Reader& reader, const TargetRegistry& targets, Facts& facts,
                             const DashboardOptions& opt) {
  Page p;
  const auto jobs = reports::jobs(reader, opt.batch_id);
  reports::BestFilter filter;
  filter.batch_id = opt.batch_id;
  const auto kernels = latest_per_kernel(reports::best_kernels(reader, filter));

  std::map<std::string, int> states;
  for (const auto& j : jobs) ++states[j.state];
  // each kernel's regression status against its previous run
  std::map<long long, Regression> regressions;
  const Histories histories = reports::kernel_histories(reader);
  for (const auto& k : kernels) {
    const auto& hist = history_of(histories, k);
    const BestKernel* prev = nullptr;
    for (size_t i = 0; i < hist.size(); ++i)
      if (hist[i].job.id == k.job.id && i > 0) prev = &hist[i - 1];
    regressions[k.job.id] = facts.regression(reader.catalog(), prev, k);
  }

  p.o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<link rel=\"icon\" href=\"data:,\"><title>Kiln dashboard</title><style>"
      << kStyle << "</style></head><body>\n";
  p.o << "<h1>Kiln dashboard</h1>\n<p class=\"meta\">catalog " << escape_xml(opt.source);
  if (opt.batch_id) p.o << ", batch " << escape_xml(*opt.batch_id);
  p.o << ", generated " << escape_xml(opt.generated_at) << ". Jobs:";
  for (const auto& [s, n] : states) p.o << " " << n << " " << escape_xml(s);
  if (states.empty()) p.o << " none";
  p.o << ".";
  if (opt.served)
    p.o << " API: <a href=\"/api/jobs\">/api/jobs</a>, <a href=\"/metrics\">/metrics</a>.";
  p.o << "</p>\n<p class=\"meta\"><a href=\"#best\">best kernels</a> &middot; <a href=\"#speedup\">speedup</a> &middot; "
         "<a href=\"#roofline\">roofline</a> &middot; <a href=\"#failures\">failures</a> &middot; "
         "<a href=\"#history\">history</a> &middot; <a href=\"#jobs\">jobs</a></p>\n";

  p.o << "<h2 id=\"best\">Best kernels</h2>\n";
  if (kernels.empty())
    p.o << "<p class=\"note\">No finished job with a best kernel yet.</p>\n";
  else
    best_table(p, kernels, facts, reader, regressions, opt.served);
  speedup_section(p, kernels, facts, reader);
  roofline_section(p, kernels, targets, facts, reader);

  // candidates of every job: failures and the per-job charts
  std::map<std::string, Failure> by_status;
  std::vector<reports::JobOverview> failed_jobs;
  std::vector<std::pair<const reports::JobOverview*, std::vector<reports::CandidateResult>>> per_job;
  for (const auto& j : jobs) {
    if (j.state == "failed") failed_jobs.push_back(j);
    auto cands = reports::candidates(reader, j.id);
    for (const auto& c : cands) {
      if (!c.evaluated || c.status == "ok") continue;
      Failure& f = by_status[c.status];
      ++f.count;
      ++f.messages[c.message.empty() ? "(no message)" : c.message.substr(0, 300)];
    }
    per_job.push_back({&j, std::move(cands)});
  }
  failures_section(p, by_status, failed_jobs);
  history_section(p, kernels, histories, reader, facts);

  p.o << "<h2 id=\"jobs\">Jobs</h2>\n";
  if (per_job.empty()) p.o << "<p class=\"note\">No job.</p>\n";
  const size_t first = per_job.size() > static_cast<size_t>(opt.max_job_sections)
                           ? per_job.size() - static_cast<size_t>(opt.max_job_sections)
                           : 0;
  if (first > 0)
    p.o << "<p class=\"note\">" << first << " older jobs are not drawn (the newest " << opt.max_job_sections
        << " are).</p>\n";
  for (size_t i = first; i < per_job.size(); ++i) job_section(p, *per_job[i].first, per_job[i].second, opt.served);
  p.o << "<p class=\"meta\">" << p.charts << " charts. Latencies: measured medians on a device of the target's kind "
         "where there is one, else the static model's estimates (docs/estimate.md).</p>\n</body></html>\n";
  return p.o.str();
}

std::string utc_now_text() { return utc_text(static_cast<double>(std::time(nullptr)), "%Y-%m-%d %H:%M:%S UTC"); }

}  // namespace kiln::server
