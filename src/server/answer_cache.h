// Answers of `kiln serve` kept while the catalog has not changed: a burst of
// the same request (GET /api/best from every replica of a deployment) costs
// one computation, not one per request.
//
// The catalog's version is reports::data_version on the cache's own read-only
// connection: it changes with every commit of any writer (`kiln run`). An
// answer is stored with the version read *before* it was computed, and served
// only while the version read for the request is still that one -- so a
// commit between the two always makes the next request compute afresh, and a
// new best is answered by the first request after its commit.
//
// Threading: any thread (a mutex guards the entries, another the
// connection; version() is one PRAGMA, no page read).
// Failure: version() throws CatalogError as the catalog reads do.
// Bounded: at most kMaxEntries answers (keys come from requests); past that
// it starts again.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "catalog/service_reads.h"
#include "server/api.h"

namespace kiln::server {

class AnswerCache {
 public:
  static constexpr std::size_t kMaxEntries = 1024;

  // Opens its own read-only connection to `catalog` (CatalogError as Catalog::open).
  explicit AnswerCache(const std::filesystem::path& catalog);

  // The catalog's version now.
  long long version();
  // The answer stored for `key` at `version`, if it is still current.
  std::optional<Reply> find(const std::string& key, long long version);
  // Stores `reply` as the answer to `key` computed at `version` (read by
  // version() before computing). An older version than the newest stored is
  // dropped; a newer one drops every entry of older versions.
  void put(const std::string& key, long long version, const Reply& reply);

 private:
  std::mutex reader_mu_;
  std::unique_ptr<reports::Reader> reader_;
  std::mutex mu_;
  long long version_ = -1;  // of every entry
  std::map<std::string, Reply> entries_;
};

}  // namespace kiln::server
