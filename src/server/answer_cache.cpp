#include "server/answer_cache.h"

namespace kiln::server {

AnswerCache::AnswerCache(const std::filesystem::path& catalog)
    : reader_(std::make_unique<reports::Reader>(Catalog::open(catalog, true))) {}

long long AnswerCache::version() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  return reports::data_version(*reader_);
}

std::optional<Reply> AnswerCache::find(const std::string& key, long long version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (version != version_) return std::nullopt;
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void AnswerCache::put(const std::string& key, long long version, const Reply& reply) {
  std::lock_guard<std::mutex> lock(mu_);
  if (version < version_) return;
  if (version > version_ || entries_.size() >= kMaxEntries) {
    entries_.clear();
    version_ = version;
  }
  entries_[key] = reply;
}

}  // namespace kiln::server
