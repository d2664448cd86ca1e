// Answers of `kiln serve` (GET /api/best) kept with bounded staleness: a burst
// of the same request (from every replica of a deployment) costs one
// computation, and while `kiln run` commits to the catalog many times a second
// requests are still answered without reading it.
//
// The catalog's version is reports::data_version on the cache's own read-only
// connection: it changes with every commit of any writer. An answer is stored
// with the version and the time (`as_of`) read *before* it was computed, so it
// reflects every commit made before `as_of`; a later check that finds the
// version unchanged moves `as_of` forward.
//
// The contract (max_staleness S): an answer served reflects every commit made
// at least S before it is served.
//   - recent(): without any catalog read, the stored answer while
//     now - as_of < S. Past S/2 the first such caller is asked to refresh the
//     entry (once until that refresh is done), so under steady traffic entries
//     are revalidated about every S/2 and requests do not wait for the catalog.
//   - answer(): reads the version; the stored answer when it is of that version,
//     else compute() (its result stored). Always current as of the call.
// S = 0: recent() never answers; every request checks the version (any commit
// makes the next request compute afresh).
//
// Threading: any thread (a mutex guards the entries, another the connection;
// compute() runs outside both, so concurrent misses of one key may each compute).
// Failure: answer()/refresh() throw CatalogError as the catalog reads do, and
// whatever compute() throws; nothing is stored then.
// Bounded: at most kMaxEntries answers (keys come from requests); a new key past
// that starts again.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
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
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMaxEntries = 1024;

  struct Answer {
    Reply reply;
    Clock::time_point as_of;  // the reply reflects every commit made before this
    bool refresh = false;     // recent() only: the caller should run refresh(key, ...) off the network thread
  };

  // Opens its own read-only connection to `catalog` (CatalogError as Catalog::open).
  AnswerCache(const std::filesystem::path& catalog, Clock::duration max_staleness);

  Clock::duration max_staleness() const { return max_staleness_; }

  // The stored answer to `key` if its as_of is less than max_staleness before
  // `now`; reads nothing from the catalog (fit for the network thread).
  std::optional<Answer> recent(const std::string& key, Clock::time_point now);

  // The answer to `key` as of this call: the stored one while the catalog's
  // version is unchanged, else compute()'s (stored).
  Answer answer(const std::string& key, const std::function<Reply()>& compute);

  // answer() for an entry recent() asked to refresh; then the entry may be
  // asked for again (also when this throws).
  void refresh(const std::string& key, const std::function<Reply()>& compute);

  // The catalog's version now (one PRAGMA, no page read).
  long long version();

 private:
  struct Entry {
    Reply reply;
    long long version = 0;
    Clock::time_point as_of;
    bool refreshing = false;
  };
  void store(const std::string& key, long long version, Clock::time_point as_of, const Reply& reply);

  const Clock::duration max_staleness_;
  std::mutex reader_mu_;
  std::unique_ptr<reports::Reader> reader_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace kiln::server
