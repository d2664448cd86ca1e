#include "server/rate_limit.h"

#include <algorithm>

namespace kiln::server {

bool RateLimiter::allow(const std::string& client, std::chrono::steady_clock::time_point now) {
  if (rate_ <= 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(client);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxClients) {
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        const double t = b->second.tokens + std::chrono::duration<double>(now - b->second.last).count() * rate_;
        b = t >= rate_ ? buckets_.erase(b) : std::next(b);
      }
    }
    it = buckets_.emplace(client, Bucket{rate_, now}).first;
  }
  Bucket& b = it->second;
  b.tokens = std::min(rate_, b.tokens + std::chrono::duration<double>(now - b.last).count() * rate_);
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

}  // namespace kiln::server
