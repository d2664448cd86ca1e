// kiln submit's workflow after planning: the planned manifest's jobs
// (batch/expand.h) stored as one batch. Idempotent: a job whose key the
// catalog holds already is not added again (new_jobs counts the others).
//
// Threading: the calling thread. Ownership: the catalog is borrowed.
// Failure: CatalogError from the catalog; the submission is one transaction,
// so nothing of it is stored when it throws.
#pragma once
#include <string>
#include <vector>

#include "batch/plan.h"
#include "catalog/catalog.h"
#include "knowledge/knowledge.h"
#include "manifest/manifest.h"

namespace kiln::batch {

struct SubmitReport {
  std::string batch_id;
  std::string name;        // the manifest's
  std::string triton;      // the evaluator's Triton version (part of every key)
  int total_jobs = 0;      // the manifest's distinct jobs
  int new_jobs = 0;        // of those, keys the catalog did not hold
  std::vector<NewJob> jobs;
};

// m: validated and planned (plan_manifest) with plan.
SubmitReport submit_manifest(Catalog& catalog, const Manifest& m, const Knowledge& knowledge, const SubmitPlan& plan);

}  // namespace kiln::batch
