// What a best kernel's raw samples say: its confirmed median and 95% interval,
// its speedup over the baselines timed with it, and its regression status
// against the kernel's previous best (the decision `kiln nightly` makes).
// Computed from the catalog's confirmation rounds (stats/), cached: a round's
// rows never change once written, so an entry is keyed by (job, round,
// candidate) and stays valid.
//
// Threading: Facts is shared by the service's threads; every method may be
// called from any thread (one mutex guards the cache; the bootstrap runs
// outside it). An entry is computed once: a thread that asks for one another
// thread is computing waits for that computation (a burst of requests for a
// new best pays its bootstrap once, not once per handler thread). The
// Catalog passed in belongs to the calling thread.
#pragma once
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "catalog/service_reads.h"
#include "stats/stats.h"

namespace kiln::server {

struct BaselineSpeedup {
  std::string name;           // eager | compile
  double median_ms = 0;
  double speedup = 0;         // baseline median / kernel median
  stats::Interval speedup_ci; // bootstrap 95%
};

struct Confirmed {
  std::string run_id, basis, device;  // basis: device | cpu
  double median_ms = 0;
  stats::Interval ci;                 // bootstrap 95% of the median
  std::vector<double> samples_ms;
  std::vector<BaselineSpeedup> baselines;
};

struct Regression {
  std::string status;         // new | same | improved | regression | not comparable
  bool regressed = false;
  std::optional<double> ratio;  // now / previous
  std::string decided_by;     // mann-whitney | ratio | ""
  std::optional<double> p;
};

class Facts {
 public:
  // Same settings as kiln nightly's defaults.
  static constexpr double kThreshold = 0.05, kMinEffect = 0.03, kAlpha = 0.01;

  // The round that chose `best` (best.confirmed_run); nullptr when it was not confirmed.
  std::shared_ptr<const Confirmed> confirmed(const Catalog& catalog, const BestRow& best);

  // `now` against `previous` (nullptr: "new"), as kiln nightly decides: on raw
  // samples (Mann-Whitney, alpha 0.01, min effect 3%) when both were confirmed
  // on the same basis, else the ratio of best values (5%); measured against
  // estimated is "not comparable".
  Regression regression(const Catalog& catalog, const reports::BestKernel* previous, const reports::BestKernel& now);

 private:
  using Key = std::tuple<long long, std::string, long long>;
  using RegressionKey = std::tuple<long long, long long, long long, long long>;
  std::mutex mu_;
  // an entry is set when its computation starts; get() waits for it
  std::map<Key, std::shared_future<std::shared_ptr<const Confirmed>>> confirmed_;
  std::map<RegressionKey, std::shared_future<Regression>> regressions_;
};

// The best kernel's latency as a deployment reads it: the confirmed median
// when there is one, else the best's value (measured or estimated).
double latency_ms(const reports::BestKernel& k, const Confirmed* confirmed);

}  // namespace kiln::server
