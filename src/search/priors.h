// Priors: the configs that were fastest on similar jobs, where the halving
// strategy starts on a shape it has not seen -- GEAK's retrieval of a similar
// known-good kernel, applied to a template's configs rather than to source.
//
// The config model ranks configs of one job from first principles and is
// wrong by 2-3x on some shapes (docs/performance.md, "Search on held-out
// shapes"); a catalog that has measured the same template on nearby shapes of
// the same GPU knows better. The catalog gives each past job's fastest configs
// (Catalog::measured_configs: same operator, template, arch and benchmarking
// device); select_priors() orders them for a new job.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln {

// How many of each past job's fastest configs a search asks the catalog for.
constexpr int kPriorConfigsPerJob = 4;

struct Prior {
  nlohmann::json config;
  long long job_id = 0;   // the past job it was fastest (or nearly) on
  double distance = 0;    // job_distance() to that job
};

// How far apart two jobs of one operator are: Σ |log2(a / b)| over the shape's
// dims and the numeric params both have, plus 1 for every other param that
// differs and 0.5 when the dtypes differ. Infinite when the shapes have
// different ranks or a dim is not a positive number.
double job_distance(const nlohmann::json& shape_a, const nlohmann::json& params_a, const std::string& dtype_a,
                    const nlohmann::json& shape_b, const nlohmann::json& params_b, const std::string& dtype_b);

struct PriorSettings {
  int jobs = 3;                   // the nearest this many past jobs
  bool skip_same_shape = false;   // leave out past jobs at distance 0 (replays: leave-one-out)
};

// The configs of the `settings.jobs` past jobs nearest to (shape, params,
// dtype), interleaved: every job's fastest, nearest job first, then every
// job's second, and so on; a config seen before is dropped. Past jobs whose key
// is `own_key` are the job itself and never count.
std::vector<Prior> select_priors(const nlohmann::json& shape, const nlohmann::json& params,
                                 const std::string& dtype, const std::string& own_key,
                                 const std::vector<MeasuredJob>& past, const PriorSettings& settings = {});

}  // namespace kiln
