#include "explore/first_results.h"

#include <algorithm>
#include <cstdio>
#include <functional>

namespace kiln {

namespace {

using Phase = std::function<std::optional<double>(const Timings&)>;

// "0.03 (0.05)": the median and the largest of xs (not empty).
std::string median_max(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  const double median = n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f (%.2f)", median, xs.back());
  return buf;
}

double sum_of(const std::vector<std::optional<double>>& parts) {
  double s = 0;
  for (const auto& p : parts) s += p.value_or(0);
  return s;
}

}  // namespace

FirstResults::FirstResults(size_t slots) : slots_(slots) {}

void FirstResults::ready(size_t slot, double t) {
  if (slot < slots_.size() && !slots_[slot].ready) slots_[slot].ready = t;
}

void FirstResults::space(double sent, double answered) {
  if (space_sent_) return;
  space_sent_ = sent;
  space_answered_ = answered;
}

void FirstResults::sent(size_t slot, double t) {
  if (slot < slots_.size() && !slots_[slot].sent) slots_[slot].sent = t;
}

bool FirstResults::awaits_answer(size_t slot) const {
  return slot < slots_.size() && slots_[slot].sent && !slots_[slot].answered;
}

void FirstResults::answered(size_t slot, double t, const Timings* timings) {
  if (!awaits_answer(slot)) return;
  slots_[slot].answered = t;
  if (timings) slots_[slot].timings = *timings;
}

void FirstResults::dropped(size_t slot) {
  if (slot < slots_.size()) slots_[slot].dropped = true;
}

bool FirstResults::all_answered() const {
  bool any = false;
  for (const Slot& s : slots_) {
    if (s.answered) any = true;
    else if (!s.dropped) return false;
  }
  return any;
}

std::string FirstResults::line() const {
  std::vector<const Slot*> done;
  for (const Slot& s : slots_)
    if (s.answered) done.push_back(&s);
  if (done.empty()) return "";
  double first = *done.front()->answered, last = first;
  for (const Slot* s : done) {
    first = std::min(first, *s->answered);
    last = std::max(last, *s->answered);
  }
  char buf[160];
  std::string out;
  std::snprintf(buf, sizeof buf, "first results: the first after %.1f s, the last worker's first after %.1f s (%zu of %zu workers)",
                first, last, done.size(), slots_.size());
  out += buf;
  if (space_sent_) {
    std::snprintf(buf, sizeof buf, "; the first space answer at %.1f s (%.2f s)", *space_answered_,
                  *space_answered_ - *space_sent_);
    out += buf;
  }

  // One figure over the slots: the median (largest) of what `get` gives for
  // each; slots without a value count as 0, and a figure no slot has is left
  // out (returns false).
  auto figure = [&](const std::string& name, const std::function<std::optional<double>(const Slot&)>& get,
                    const char* unit = "") {
    std::vector<double> xs;
    bool any = false;
    for (const Slot* s : done) {
      const auto v = get(*s);
      any = any || v.has_value();
      xs.push_back(v.value_or(0));
    }
    if (!any) return std::string();
    return name + " " + median_max(std::move(xs)) + unit;
  };
  auto timed = [](const Phase& p) {
    return [p](const Slot& s) -> std::optional<double> { return s.timings ? p(*s.timings) : std::nullopt; };
  };
  auto join = [](const std::vector<std::string>& parts, const char* sep) {
    std::string s;
    for (const auto& p : parts)
      if (!p.empty()) s += (s.empty() ? "" : sep) + p;
    return s;
  };

  out += "; each worker's first evaluation, median (largest), seconds: ";
  out += join({figure("hello at", [](const Slot& s) { return s.ready; }),
               figure("sent at", [](const Slot& s) { return s.sent; }),
               figure("answered at", [](const Slot& s) { return s.answered; })},
              ", ");
  std::string check = figure("check", timed([](const Timings& t) { return t.check_s; }));
  if (const std::string w = figure("waiting for the set-up", timed([](const Timings& t) { return t.setup_wait_s; }));
      !check.empty() && !w.empty())
    check += " [" + w + "]";
  const std::string setup =
      join({figure("plan", timed([](const Timings& t) { return t.plan_s; })),
            figure("warm-up wait", timed([](const Timings& t) { return t.setup_warm_wait_s; })),
            figure("inputs", timed([](const Timings& t) { return t.inputs_s; })),
            figure("reference", timed([](const Timings& t) { return t.reference_s; })),
            figure("memory wait", timed([](const Timings& t) { return t.memory_wait_s; }))},
           ", ");
  // What the worker's phases on its main thread leave out of its whole time.
  auto rest = [](const Timings& t) -> std::optional<double> {
    if (!t.worker_s) return std::nullopt;
    const double warm = t.warm_up ? t.warm_up->wait_s.value_or(0) : 0;
    return *t.worker_s - warm - sum_of({t.module_s, t.compile_s, t.check_s, t.bench_s, t.util_s});
  };
  const std::string worker = join(
      {figure("module", timed([](const Timings& t) { return t.module_s; })),
       figure("compile", timed([](const Timings& t) { return t.compile_s; })),
       figure("warm-up wait", timed([](const Timings& t) {
                return t.warm_up ? t.warm_up->wait_s : std::nullopt;
              })),
       check, figure("bench", timed([](const Timings& t) { return t.bench_s; })),
       figure("utilisation read", timed([](const Timings& t) { return t.util_s; })), figure("rest", timed(rest))},
      ", ");
  const std::string in_worker = figure("in the worker", timed([](const Timings& t) { return t.worker_s; }));
  if (!in_worker.empty() || !worker.empty()) out += "; " + join({in_worker, worker}, ": ");
  if (!setup.empty()) out += "; the job's set-up (beside the compile, else in the check): " + setup;
  std::vector<std::string> locks;
  for (const char* kind : {"setup", "check", "bench"})
    locks.push_back(figure(kind, timed([kind](const Timings& t) -> std::optional<double> {
      auto it = t.lock_wait_s.find(kind);
      return it == t.lock_wait_s.end() ? std::nullopt : std::optional<double>(it->second);
    })));
  if (const std::string l = join(locks, ", "); !l.empty()) out += "; GPU lock waits " + l;
  const std::string warm =
      join({figure("context", timed([](const Timings& t) { return t.warm_up ? t.warm_up->context_s : std::nullopt; })),
            figure("compile", timed([](const Timings& t) { return t.warm_up ? t.warm_up->compile_s : std::nullopt; })),
            figure("of which waiting for another worker's",
                   timed([](const Timings& t) { return t.warm_up ? t.warm_up->compile_wait_s : std::nullopt; })),
            figure("kernels", timed([](const Timings& t) { return t.warm_up ? t.warm_up->kernels_s : std::nullopt; }))},
           ", ");
  if (!warm.empty()) out += "; GPU warm-up " + warm;
  const std::string import =
      join({figure("fake-tensor import",
                   timed([](const Timings& t) { return t.plan_import ? t.plan_import->import_s : std::nullopt; })),
            figure("its wait", timed([](const Timings& t) {
                     return t.plan_import ? t.plan_import->wait_s : std::nullopt;
                   }))},
           ", ");
  if (!import.empty()) out += "; " + import;
  return out;
}

}  // namespace kiln
