// How a run hands out work and keeps its jobs: the settings that kiln run,
// kiln nightly and kiln-mpi run share (their flags: scheduling_flags.h). One
// struct, carried whole from the command line to the scheduler.
#pragma once

namespace kiln {

struct SchedulingSettings {
  // Job lease in seconds, renewed every lease_s / 3; a run that stops renewing
  // (killed) loses its jobs to the next run after this long.
  double lease_s = 120;
  // > 0: a candidate's benchmark may stop after its first timed runs when
  // their median is above this factor times the job's best measured median so
  // far (the worker's `cutoff_ms`; it records the runs it made and
  // `stopped_early`). A candidate that slow cannot be the job's best, and its
  // remaining runs only keep the GPU from the next candidate. 0: every
  // candidate gets every run.
  double bench_cutoff = 1.5;
  // > 0: an idle slot joins a job it has not set up (the worker's inputs and
  // reference for it) only while that job keeps at least this many ready
  // candidates per evaluator; otherwise the next job is claimed first (when
  // none is being planned and the queue has one), and only then does the slot
  // join whatever has work (dispatch.h). 0: join the job with the most work
  // per evaluator.
  double min_ready_per_slot = 4;
  // The confirmation round after each job's exploration (confirm.h): its
  // finalists and baselines timed again by one worker, `confirm_rounds`
  // rounds of `confirm_reps` timed calls per entry, interleaved. Runs where
  // the job's latencies are measured (a device of the target's kind); 0
  // rounds: no confirmation.
  int confirm_rounds = 5, confirm_reps = 20;
  // A round that ran with the SM clock below this share of the device's
  // maximum is timed again after the recovery delay (NVBench's
  // --throttle-threshold / --throttle-recovery-delay; 0: off). The worker
  // measures the clock; confirm.h.
  double confirm_throttle = 0.90, confirm_throttle_recovery_s = 0.05;
  // Seconds of back-to-back calls that find out whether a job is
  // power-limited and, where it is, start each of its rounds (0: off); confirm.h.
  double confirm_preheat_s = 0.3;
  // Also on runs that only estimate, timing on the CPU (basis "cpu"): the test
  // path of the stage (KILN_CONFIRM_CPU=1). Never a measurement of the target.
  bool confirm_cpu = false;
};

}  // namespace kiln
