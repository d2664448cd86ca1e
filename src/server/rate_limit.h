// Requests per second per client address: a token bucket each (capacity =
// the rate, refilled continuously). What keeps one client from monopolising
// `kiln serve`.
//
// Threading: allow() may be called from any thread (one mutex).
#pragma once
#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace kiln::server {

class RateLimiter {
 public:
  // rate_per_s <= 0: unlimited.
  explicit RateLimiter(double rate_per_s) : rate_(rate_per_s) {}
  // Takes one token of `client`'s bucket; false when it is empty.
  bool allow(const std::string& client, std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  static constexpr size_t kMaxClients = 10000;  // past this, full buckets are forgotten
  double rate_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace kiln::server
