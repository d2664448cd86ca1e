// Which active job an idle evaluation slot takes its next candidate from.
//
// Every evaluator sets a job up once before its first candidate of that job:
// it draws the job's inputs for each seed and computes the reference output
// (its input cache keeps the last two jobs). Handing a slot the job it already
// holds saves that setup; with many slots and candidates spread over every
// slot, the setups of a job grow with the slot count, and a second GPU's
// slots would spend their time on them instead of on candidates.
#pragma once
#include <cstddef>
#include <deque>
#include <optional>
#include <vector>

namespace kiln {

struct JobLoad {
  long long id = 0;
  size_t pending = 0;    // candidates ready to hand out
  int in_flight = 0;     // candidates out with evaluators now
};

class SlotAffinity {
 public:
  // How many recent jobs a slot remembers (the worker's input cache holds two).
  static constexpr size_t kRecent = 2;

  // The job for `slot`: the most recent job the slot worked on that still has
  // candidates ready; otherwise the job with the most ready candidates per
  // evaluator already on it (pending / (in_flight + 1); ties: the first
  // listed), so slots spread over the jobs in proportion to the work left.
  // nullopt when no job has candidates ready.
  //
  // With `min_ready` > 0, a job the slot has not set up qualifies only while it
  // would keep at least min_ready ready candidates per evaluator once this slot
  // joins (pending / (in_flight + 1)): nullopt when none does, and the
  // scheduler claims another job instead (a fresh job's set-up is paid by
  // the slot either way, and it keeps the slot busy for longer). Without it,
  // a 32-candidate job is spread over every idle slot, one or two candidates
  // each, and every slot pays the job's set-up.
  std::optional<long long> pick(int slot, const std::vector<JobLoad>& jobs, double min_ready = 0) const;

  // Records that `slot` took a candidate of `job`.
  void took(int slot, long long job);

  // Forgets a finished job.
  void forget(long long job);

 private:
  struct Recent {
    int slot;
    std::deque<long long> jobs;  // most recent first
  };
  const Recent* find(int slot) const;
  std::vector<Recent> recent_;
};

}  // namespace kiln
