// What a run has done so far: the counts a run's summary reports
// (explorer.h RunSummary, mpi's CoordinatorSummary) and its progress lines;
// kept by the scheduler (scheduler.h). A plain value type.
#pragma once

namespace kiln {

struct RunCounts {
  int jobs_done = 0, jobs_failed = 0;
  int jobs_confirmed = 0, confirm_failures = 0;   // confirmation rounds recorded / lost (best then from the exploration)
  int candidates = 0, candidate_failures = 0;
  // Jobs failed because their generator needs an LLM that is not configured or
  // not reachable (a generator's "llm-unavailable: " note); the run goes on.
  int jobs_need_llm = 0;
};

}  // namespace kiln
