-- Kiln catalog, schema version 5: the confirmation round.
--  * confirmations: after a job's exploration its finalists (the best and every
--    candidate within exploration.confirm_margin of it, at least 3) and its
--    baselines (the PyTorch eager reference; torch.compile max-autotune where
--    the manifest asks) are timed again in one fresh round, interleaved in
--    rotating order (worker method `confirm`). One row per entry of that round
--    (run_id), a candidate's or a baseline's: its raw per-call samples and the
--    conditions they were taken under, so that every published statistic
--    (median, intervals, speedups, regression tests) is recomputable.
--  * best.confirmed_run / confirmed_ms: the confirmation round that chose the
--    job's best and the best's confirmed median there (NULL: not confirmed; the
--    best then stands on the exploration's single median or the estimate).

CREATE TABLE confirmations (
  id            INTEGER PRIMARY KEY,
  job_id        INTEGER NOT NULL REFERENCES jobs(id),
  candidate_id  INTEGER REFERENCES candidates(id),   -- NULL for a baseline
  baseline      TEXT CHECK (baseline IN ('eager', 'compile')),  -- NULL for a candidate
  run_id        TEXT NOT NULL,          -- one confirmation round of the job (all its entries)
  basis         TEXT NOT NULL CHECK (basis IN ('device', 'cpu')),  -- device events, or perf_counter on the CPU (tests)
  device        TEXT NOT NULL,          -- the timing device's name
  samples       BLOB NOT NULL,          -- float32 little-endian, one per timed call, ms, in call order
  n             INTEGER NOT NULL,       -- number of samples
  median_ms     REAL NOT NULL,
  conditions    TEXT NOT NULL,          -- JSON: device identity, versions, per-round clocks/temperature/power, clock_drop
  created_at    REAL NOT NULL,
  CHECK ((candidate_id IS NULL) <> (baseline IS NULL))
);
CREATE INDEX confirmations_job ON confirmations(job_id, created_at);

ALTER TABLE best ADD COLUMN confirmed_run TEXT;
ALTER TABLE best ADD COLUMN confirmed_ms REAL;
