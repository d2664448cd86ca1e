// The measurements file `kiln-rt tune` writes on a deployment node
// (kiln-measurements/1: {format, device, driver, uuid, target, versions,
// kernels: [{job_key, candidate_id, median_ms, samples, target?}]}), read and
// validated completely before any catalog is opened; the catalog imports it
// (catalog/packaging.h: import_measurements).
//
// Failure: InputError (batch/errors.h) naming the file and the field for
// anything wrong with it. Pure apart from reading the file.
#pragma once
#include <filesystem>

#include "catalog/packaging.h"
#include "knowledge/knowledge.h"

namespace kiln::batch {

MeasurementsIn read_measurements(const std::filesystem::path& file, const Knowledge& knowledge);

}  // namespace kiln::batch
