// The scheduling flags that kiln run, kiln nightly and kiln-mpi run share:
// --lease, --bench-cutoff and --ready-per-slot (SchedulingSettings,
// scheduling.h). Header-only: the three binaries link Boost.Program_options,
// the explore library does not.
#pragma once

#include <optional>
#include <string>

#include <boost/program_options.hpp>

#include "explore/scheduling.h"

namespace kiln {

using SchedulingFlags = SchedulingSettings;

inline void add_scheduling_flags(boost::program_options::options_description& d) {
  namespace po = boost::program_options;
  const SchedulingFlags def;
  d.add_options()("lease", po::value<double>()->default_value(def.lease_s), "job lease in seconds")(
      "bench-cutoff", po::value<double>()->default_value(def.bench_cutoff),
      "stop a candidate's benchmark after 20 runs when their median is above this factor times the "
      "job's best so far (0: run every candidate's every run)")(
      "ready-per-slot", po::value<double>()->default_value(def.min_ready_per_slot),
      "a slot takes up a job it has not set up (inputs, reference) only while the job keeps this many "
      "ready candidates per slot on it; below that the next job is claimed first (0: any job with work)");
}

// What is wrong with the flags' values (the message of a usage error), if anything.
inline std::optional<std::string> scheduling_flags_error(const SchedulingFlags& f) {
  if (!(f.lease_s > 0)) return std::string("--lease must be positive");
  if (f.bench_cutoff != 0 && !(f.bench_cutoff >= 1))
    return std::string("--bench-cutoff must be 0 (off) or at least 1");
  if (!(f.min_ready_per_slot >= 0)) return std::string("--ready-per-slot must be 0 or more");
  return std::nullopt;
}

inline SchedulingFlags read_scheduling_flags(const boost::program_options::variables_map& vm) {
  SchedulingFlags f;
  f.lease_s = vm["lease"].as<double>();
  f.bench_cutoff = vm["bench-cutoff"].as<double>();
  f.min_ready_per_slot = vm["ready-per-slot"].as<double>();
  return f;
}

}  // namespace kiln
