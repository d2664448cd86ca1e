#include "explore/dispatch.h"

#include <algorithm>

namespace kiln {

const SlotAffinity::Recent* SlotAffinity::find(int slot) const {
  for (const auto& r : recent_)
    if (r.slot == slot) return &r;
  return nullptr;
}

std::optional<long long> SlotAffinity::pick(int slot, const std::vector<JobLoad>& jobs, double min_ready) const {
  if (const Recent* r = find(slot)) {
    for (long long id : r->jobs)
      for (const auto& j : jobs)
        if (j.id == id && j.pending > 0) return id;
  }
  std::optional<long long> best;
  double best_need = -1;
  for (const auto& j : jobs) {
    if (j.pending == 0) continue;
    const double need = static_cast<double>(j.pending) / (std::max(0, j.in_flight) + 1);
    if (need > best_need) {
      best_need = need;
      best = j.id;
    }
  }
  if (min_ready > 0 && best_need < min_ready) return std::nullopt;
  return best;
}

void SlotAffinity::took(int slot, long long job) {
  auto it = std::find_if(recent_.begin(), recent_.end(), [slot](const Recent& r) { return r.slot == slot; });
  if (it == recent_.end()) {
    recent_.push_back({slot, {}});
    it = recent_.end() - 1;
  }
  auto& q = it->jobs;
  q.erase(std::remove(q.begin(), q.end(), job), q.end());
  q.push_front(job);
  while (q.size() > kRecent) q.pop_back();
}

void SlotAffinity::forget(long long job) {
  for (auto& r : recent_) r.jobs.erase(std::remove(r.jobs.begin(), r.jobs.end(), job), r.jobs.end());
}

}  // namespace kiln
