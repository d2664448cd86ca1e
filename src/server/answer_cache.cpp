#include "server/answer_cache.h"

namespace kiln::server {

AnswerCache::AnswerCache(const std::filesystem::path& catalog, Clock::duration max_staleness)
    : max_staleness_(max_staleness < Clock::duration::zero() ? Clock::duration::zero() : max_staleness),
      reader_(std::make_unique<reports::Reader>(Catalog::open(catalog, true))) {}

long long AnswerCache::version() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  return reports::data_version(*reader_);
}

std::optional<AnswerCache::Answer> AnswerCache::recent(const std::string& key, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  Entry& e = it->second;
  const Clock::duration age = now - e.as_of;
  if (age >= max_staleness_) return std::nullopt;
  Answer a{e.reply, e.as_of, false};
  if (!e.refreshing && age >= max_staleness_ / 2) a.refresh = e.refreshing = true;
  return a;
}

AnswerCache::Answer AnswerCache::answer(const std::string& key, const std::function<Reply()>& compute) {
  const Clock::time_point t0 = Clock::now();  // before the version: commits before t0 are in it
  const long long v = version();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(key);
    if (it != entries_.end() && it->second.version == v) {
      if (it->second.as_of < t0) it->second.as_of = t0;
      return {it->second.reply, t0, false};
    }
  }
  Reply r = compute();
  store(key, v, t0, r);
  return {std::move(r), t0, false};
}

void AnswerCache::refresh(const std::string& key, const std::function<Reply()>& compute) {
  struct Done {
    AnswerCache& c;
    const std::string& key;
    ~Done() {
      std::lock_guard<std::mutex> lock(c.mu_);
      if (const auto it = c.entries_.find(key); it != c.entries_.end()) it->second.refreshing = false;
    }
  } done{*this, key};
  answer(key, compute);
}

void AnswerCache::store(const std::string& key, long long version, Clock::time_point as_of, const Reply& reply) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_.emplace(key, Entry{reply, version, as_of, false});
    return;
  }
  Entry& e = it->second;
  if (version < e.version) return;  // a newer answer is already there
  if (version > e.version || as_of > e.as_of) e.as_of = as_of;
  e.version = version;
  e.reply = reply;
}

}  // namespace kiln::server
