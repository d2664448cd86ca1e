// The scheduling flags that kiln run, kiln nightly and kiln-mpi run share:
// --lease, --bench-cutoff and --ready-per-slot (SchedulingSettings,
// scheduling.h). Header-only: the three binaries link Boost.Program_options,
// the explore library does not.
#pragma once

#include <cstdlib>
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
      "ready candidates per slot on it; below that the next job is claimed first (0: any job with work)")(
      "confirm-rounds", po::value<int>()->default_value(def.confirm_rounds),
      "after a job's exploration, time its finalists and baselines again in this many interleaved rounds "
      "(0: no confirmation round)")(
      "confirm-reps", po::value<int>()->default_value(def.confirm_reps),
      "timed calls per finalist or baseline and confirmation round")(
      "throttle-threshold", po::value<double>()->default_value(def.confirm_throttle * 100),
      "a confirmation round whose SM clock, measured right after it, fell below this percentage of the "
      "device's maximum is timed again after --throttle-recovery-delay, at most 3 times (0: never)")(
      "throttle-recovery-delay", po::value<double>()->default_value(def.confirm_throttle_recovery_s),
      "seconds the GPU is left idle before a throttled confirmation round is timed again")(
      "confirm-preheat", po::value<double>()->default_value(def.confirm_preheat_s),
      "seconds of back-to-back calls of a job's best finalist before its confirmation rounds; where the "
      "SM clock then reads below 97% of the maximum the job is power-limited and each round starts "
      "with such a run, so it is timed in the steady state a deployment gets; calls the host keeps "
      "ahead of are timed back to back, with no spin (0: off)");
}

// What is wrong with the flags' values (the message of a usage error), if anything.
inline std::optional<std::string> scheduling_flags_error(const SchedulingFlags& f) {
  if (!(f.lease_s > 0)) return std::string("--lease must be positive");
  if (f.bench_cutoff != 0 && !(f.bench_cutoff >= 1))
    return std::string("--bench-cutoff must be 0 (off) or at least 1");
  if (!(f.min_ready_per_slot >= 0)) return std::string("--ready-per-slot must be 0 or more");
  if (f.confirm_rounds < 0 || f.confirm_rounds > 1000) return std::string("--confirm-rounds must be in [0, 1000]");
  if (f.confirm_reps < 1 || f.confirm_reps > 100000) return std::string("--confirm-reps must be in [1, 100000]");
  if (!(f.confirm_throttle >= 0 && f.confirm_throttle <= 1))
    return std::string("--throttle-threshold must be a percentage in [0, 100]");
  if (!(f.confirm_throttle_recovery_s >= 0 && f.confirm_throttle_recovery_s <= 60))
    return std::string("--throttle-recovery-delay must be in [0, 60] seconds");
  if (!(f.confirm_preheat_s >= 0 && f.confirm_preheat_s <= 60))
    return std::string("--confirm-preheat must be in [0, 60] seconds");
  return std::nullopt;
}

inline SchedulingFlags read_scheduling_flags(const boost::program_options::variables_map& vm) {
  SchedulingFlags f;
  f.lease_s = vm["lease"].as<double>();
  f.bench_cutoff = vm["bench-cutoff"].as<double>();
  f.min_ready_per_slot = vm["ready-per-slot"].as<double>();
  f.confirm_rounds = vm["confirm-rounds"].as<int>();
  f.confirm_reps = vm["confirm-reps"].as<int>();
  f.confirm_throttle = vm["throttle-threshold"].as<double>() / 100;
  f.confirm_throttle_recovery_s = vm["throttle-recovery-delay"].as<double>();
  f.confirm_preheat_s = vm["confirm-preheat"].as<double>();
  // The CPU test path of the confirmation round (scheduling.h).
  const char* cpu = std::getenv("KILN_CONFIRM_CPU");
  f.confirm_cpu = cpu && std::string(cpu) == "1";
  return f;
}

}  // namespace kiln
