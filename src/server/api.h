// The JSON answers of `kiln serve`'s /api (docs/operations.md): the
// deployment's best-kernel lookup, the jobs, one job with its candidates and
// evaluations, and a code object's bytes. Each takes already-decoded query
// parameters and binds them as values: no SQL ever comes from a request.
//
// Threading: as render_dashboard (reads with the caller's Catalog).
// Failure: a bad request is an answer (400 with a message naming the
// parameter), never an exception; CatalogError propagates (the server answers 500).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "catalog/service_reads.h"
#include "knowledge/targets.h"
#include "server/facts.h"

namespace kiln::server {

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

using Params = std::map<std::string, std::string>;

// A JSON reply: the body is `j` dumped, status as given.
Reply json_reply(int status, const nlohmann::json& j);
// {"error": message} with `status`.
Reply error_reply(int status, const std::string& message);

// "64", "4x32", "4,32" or "[4, 32]" -> [4, 32]; nullopt when it is not a list
// of 1 to 8 non-negative integers.
std::optional<nlohmann::json> parse_shape(const std::string& text);

// A 404 reply when the query names a `batch` the catalog lacks (the jobs
// list and the dashboard answer it, rather than an empty page); nullopt when
// it names none or one that exists.
std::optional<Reply> unknown_batch(reports::Reader& reader, const Params& q);

// GET /api/best?op=&target=&shape=&dtype=: the newest done job of that
// kernel: its latency (basis, confirmed median and 95% interval), speedups,
// config, code object (sha256 and a download link) and the package link.
// 404 for a shape not in the catalog, naming the nearest tuned shapes.
Reply api_best(reports::Reader& reader, const TargetRegistry& targets, Facts& facts, const Params& q);
// What api_best's answer depends on in `q` (op, target, shape, dtype; each
// absent or its exact text): requests with equal keys get equal answers from
// one catalog state, so an answer may be cached under it (answer_cache.h).
std::string api_best_key(const Params& q);
// GET /api/jobs[?batch=ID][&state=S]: the jobs with their best.
Reply api_jobs(reports::Reader& reader, const Params& q);
// GET /api/jobs/{id}: the job, its candidates with their evaluations, its best
// with the confirmation summary.
Reply api_job(reports::Reader& reader, Facts& facts, const std::string& id);
// GET /api/code-objects/{sha256}: the bytes (application/octet-stream).
Reply api_code_object(reports::Reader& reader, const std::string& sha256);

}  // namespace kiln::server
