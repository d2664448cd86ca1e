-- Kiln catalog, schema version 6: measurements brought back from a deployment.
--  * imported_measurements: one row per (candidate, device) timed by
--    `kiln-rt tune` on a node with a GPU of the job's kind and brought in by
--    `kiln import-measurements FILE`. The job's best is then re-selected over
--    these: a measured best (basis 'measured', device = the tuning device)
--    replaces an estimated one, and the next `kiln package` ships it.
--    Importing the same file again replaces its rows (same candidate, device).

CREATE TABLE imported_measurements (
  id            INTEGER PRIMARY KEY,
  job_id        INTEGER NOT NULL REFERENCES jobs(id),
  candidate_id  INTEGER NOT NULL REFERENCES candidates(id),
  target        TEXT NOT NULL,
  device        TEXT NOT NULL,            -- the device name as the runtime reports it
  driver        TEXT,                     -- driver version
  uuid          TEXT,                     -- the device's UUID
  versions      TEXT NOT NULL,            -- JSON: the runtime's versions (kiln-rt, HIP/CUDA)
  median_ms     REAL NOT NULL,
  samples       TEXT NOT NULL,            -- JSON array of per-run ms
  source        TEXT NOT NULL,            -- the imported file's path
  imported_at   REAL NOT NULL,            -- unix seconds
  UNIQUE (candidate_id, device)
);
CREATE INDEX imported_measurements_job ON imported_measurements(job_id);
