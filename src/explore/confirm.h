// The confirmation round: after a job's exploration, its finalists and its
// baselines are timed again together by one worker (method `confirm`,
// worker/kiln_worker/evaluation/confirm.py), and the best is chosen by the confirmed
// medians. The scheduler (scheduler.h) sends the request and records the
// answer through these functions, so every executor (kiln run, kiln-mpi) gets
// the stage. Pure functions over the catalog's rows and the worker's JSON.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "knowledge/targets.h"

namespace kiln {

struct ConfirmSettings {
  double margin = 0.05;          // finalists: score within this share of the best (exploration.confirm_margin)
  int min_finalists = 3;         // at least this many when the job has them
  int max_finalists = 8;         // at most (the round's length grows with each)
  int rounds = 5, reps = 20;     // the worker's rounds and timed calls per entry and round
  double throttle_threshold = 0.90;   // retime a round below this share of the max SM clock (0: off)
  double throttle_recovery_s = 0.05;  // the GPU's idle pause before the retime
  // Back-to-back calls of the best finalist before the rounds (device time);
  // where the SM clock then reads below the throttle threshold the job is
  // power-limited, each round starts with such a run of its first entry and
  // is judged against that sustained clock (0: off).
  double preheat_s = 0.3;
  std::vector<std::string> baselines = {"eager"};  // exploration.baselines (eager always)
};

// The job spec's settings (spec.explore.confirm_margin, .baselines) over the
// run's rounds and reps.
ConfirmSettings confirm_settings(const nlohmann::json& spec, int rounds, int reps);

struct Finalist {
  long long candidate_id = 0;
  nlohmann::json config;
  double score_ms = 0;           // the exploration's median (measured) or estimate
};

// The job's finalists, fastest first: its correct template candidates scored
// by the exploration's median on a device of the target's kind when
// `measured`, else by the static estimate (the CPU test path); the best and
// every one within settings.margin of it, topped up to min_finalists, at most
// max_finalists. Empty when no candidate has a score.
std::vector<Finalist> pick_finalists(const std::vector<EvaluatedCandidate>& evaluated, const Target& target,
                                     bool measured, const ConfirmSettings& settings);

// The worker request (without id): {"method": "confirm", job, entries, rounds,
// reps, throttle_threshold, throttle_recovery_s, preheat_s}.
nlohmann::json confirm_request(const nlohmann::json& job, const std::vector<Finalist>& finalists,
                               const ConfirmSettings& settings);

// The worker's answer as catalog rows of round `run_id`; each row's
// conditions are the round's, plus its own re-check ("check") for a
// candidate. Throws std::runtime_error when the answer is malformed (an entry
// without samples, an unknown candidate).
std::vector<ConfirmationRow> confirmation_rows(long long job_id, const std::string& run_id,
                                               const std::vector<Finalist>& finalists,
                                               const nlohmann::json& result);

// The best by confirmed median among the candidate rows whose outputs passed
// their re-check. On the device (basis "device"): basis measured, value = the
// confirmed median. On the CPU (basis "cpu", tests): the choice is by the CPU
// median, but the row keeps basis estimated and the candidate's estimate as
// its value (a CPU time is never a measurement of the target); confirmed_ms
// holds the CPU median. nullopt when no candidate passed (or, on the CPU,
// the chosen one has no estimate).
std::optional<BestRow> select_confirmed(const std::vector<ConfirmationRow>& rows,
                                        const std::vector<EvaluatedCandidate>& evaluated);

}  // namespace kiln
