// The run's start as its first results tell it. `kiln run` prints line() once
// every slot has the answer to its first evaluation (or at the end of the run,
// with the slots that have one): when the first result came, and where each
// slot's first evaluation went -- when its worker answered hello, when the
// evaluation was sent to it, and the phases the worker reported in its
// timings (evaluate/protocol.h Timings: the template module, the memory plan
// and its fake-tensor import, the compile, the warm-up, the job's set-up with
// its inputs and references, the check, the benchmark, the read of the
// driver's utilisation samples, the GPU lock waits, and the rest of the
// worker's time), each as the median and the largest
// over the slots. A worker's first evaluation pays for what its start left
// undone, so this line says where a run's idle start goes.
//
// Times are seconds since the run's start, as the caller counts them.
// Threading: not thread-safe (the explorer's io_context thread).
// Failure: none; a slot without a first answer is left out of the figures.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "evaluate/protocol.h"

namespace kiln {

class FirstResults {
 public:
  explicit FirstResults(size_t slots);

  // The slot's first worker answered hello at t.
  void ready(size_t slot, double t);
  // The run's first space (or reference_info) request, sent and answered;
  // later calls are ignored.
  void space(double sent, double answered);
  // An evaluate request went to the slot at t; only the slot's first counts.
  void sent(size_t slot, double t);
  // The answer to the slot's first evaluate request came at t, with the
  // worker's timings (null: none, a timeout or a crash). Later calls for the
  // slot are ignored.
  void answered(size_t slot, double t, const Timings* timings);
  // Whether answered() would still record the slot's answer (its first
  // evaluation sent, not yet answered).
  bool awaits_answer(size_t slot) const;
  // The slot will answer nothing more (dropped by the pool).
  void dropped(size_t slot);

  // Every slot that was not dropped has the answer to its first evaluation.
  bool all_answered() const;
  // The summary (no time stamp, no newline); "" while no slot has its first answer.
  std::string line() const;

 private:
  struct Slot {
    std::optional<double> ready, sent, answered;
    std::optional<Timings> timings;
    bool dropped = false;
  };
  std::vector<Slot> slots_;
  std::optional<double> space_sent_, space_answered_;
};

}  // namespace kiln
