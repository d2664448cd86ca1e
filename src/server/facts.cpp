#include "server/facts.h"

#include "stats/regression.h"

namespace kiln::server {

namespace {

constexpr size_t kMaxEntries = 8192;  // past this the cache starts again (entries are cheap to recompute)

// The value of `key` in `cache`, computed by `compute` once: the first thread
// to ask computes it outside the lock; the others wait for its result (or its
// exception, after which the entry is gone and a later call computes again).
template <class K, class V, class F>
V computed_once(std::mutex& mu, std::map<K, std::shared_future<V>>& cache, const K& key, F compute) {
  std::promise<V> mine;
  std::unique_lock<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) {
    const std::shared_future<V> theirs = it->second;
    lock.unlock();
    return theirs.get();
  }
  if (cache.size() >= kMaxEntries) cache.clear();  // waiters keep their futures
  cache.emplace(key, mine.get_future().share());
  lock.unlock();
  try {
    V v = compute();
    mine.set_value(v);
    return v;
  } catch (...) {
    mine.set_exception(std::current_exception());
    lock.lock();
    cache.erase(key);
    throw;
  }
}

}  // namespace

std::shared_ptr<const Confirmed> Facts::confirmed(const Catalog& catalog, const BestRow& best) {
  if (!best.confirmed_run) return nullptr;
  const Key key{best.job_id, *best.confirmed_run, best.candidate_id};
  return computed_once(mu_, confirmed_, key, [&]() -> std::shared_ptr<const Confirmed> {
    const std::vector<ConfirmationRow> rows = catalog.confirmations(best.job_id, *best.confirmed_run);
    const ConfirmationRow* mine = nullptr;
    for (const auto& r : rows)
      if (r.candidate_id && *r.candidate_id == best.candidate_id && !r.samples_ms.empty()) mine = &r;
    std::shared_ptr<Confirmed> c;
    if (mine) {
      c = std::make_shared<Confirmed>();
      c->run_id = mine->run_id;
      c->basis = mine->basis;
      c->device = mine->device;
      c->median_ms = mine->median_ms;
      c->samples_ms = mine->samples_ms;
      c->ci = stats::bootstrap_median_ci_rounds(mine->samples_ms, mine->rounds());
      for (const auto& r : rows) {
        if (!r.baseline || r.samples_ms.empty()) continue;
        c->baselines.push_back({*r.baseline, r.median_ms, mine->median_ms > 0 ? r.median_ms / mine->median_ms : 0.0,
                                stats::bootstrap_ratio_ci_rounds(r.samples_ms, mine->samples_ms, mine->rounds())});
      }
    }
    return c;
  });
}

Regression Facts::regression(const Catalog& catalog, const reports::BestKernel* previous,
                             const reports::BestKernel& now) {
  if (!previous) return {"new", false, std::nullopt, "", std::nullopt};
  const RegressionKey key{previous->job.id, previous->best.candidate_id, now.job.id, now.best.candidate_id};
  return computed_once(mu_, regressions_, key, [&] {
    Regression r;
    if (previous->best.basis != now.best.basis || previous->best.value_ms <= 0) {
      r.status = "not comparable";
    } else {
      const auto a = confirmed(catalog, previous->best), b = confirmed(catalog, now.best);
      if (a && b && a->basis == b->basis) {
        const stats::RegressionDecision d =
            stats::decide_regression(a->samples_ms, b->samples_ms, {kAlpha, kMinEffect});
        r.ratio = d.ratio;
        r.p = d.p;
        r.decided_by = "mann-whitney";
        r.status = d.verdict == "regressed" ? "regression" : d.verdict == "improved" ? "improved" : "same";
      } else {
        r.ratio = now.best.value_ms / previous->best.value_ms;
        r.decided_by = "ratio";
        r.status = *r.ratio > 1 + kThreshold ? "regression" : *r.ratio < 1 - kThreshold ? "improved" : "same";
      }
      r.regressed = r.status == "regression";
    }
    return r;
  });
}

double latency_ms(const reports::BestKernel& k, const Confirmed* confirmed) {
  return confirmed ? confirmed->median_ms : k.best.value_ms;
}

}  // namespace kiln::server
