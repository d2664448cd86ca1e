// Copies the live catalog to shared storage: the catalog's online copy
// (src/catalog/backup.h) under the names kiln-mpi's coordinator uses. The copy
// is written to PATH.tmp and renamed over PATH when complete, so a reader sees
// the previous checkpoint or the new one, never a torn file.
#pragma once
#include <filesystem>

#include "catalog/backup.h"

namespace kiln::mpi {

using CheckpointResult = kiln::BackupResult;
using CatalogCopy = kiln::CatalogBackup;

// The whole copy at once. Throws CatalogError (naming the path and SQLite's
// message) on failure; PATH is then untouched and PATH.tmp removed.
inline CheckpointResult checkpoint_catalog(const Catalog& source, const std::filesystem::path& path) {
  return backup_catalog(source, path);
}

}  // namespace kiln::mpi
