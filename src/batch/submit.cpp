#include "batch/submit.h"

#include <filesystem>

#include "batch/expand.h"

namespace kiln::batch {

SubmitReport submit_manifest(Catalog& catalog, const Manifest& m, const Knowledge& knowledge, const SubmitPlan& plan) {
  SubmitReport r;
  r.name = m.name;
  r.triton = plan.hello.value("triton", "");
  r.jobs = expand_jobs(m, knowledge, plan.hello, catalog.compile_seconds());
  const SubmitResult s = catalog.submit(m.name, std::filesystem::absolute(m.path).string(), m.text, r.jobs);
  r.batch_id = s.batch_id;
  r.total_jobs = s.total_jobs;
  r.new_jobs = s.new_jobs;
  return r;
}

}  // namespace kiln::batch
