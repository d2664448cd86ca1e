-- Kiln catalog, schema version 1.
-- Applied by the engine on open (PRAGMA user_version tracks the version).

CREATE TABLE batches (
  id              TEXT PRIMARY KEY,       -- content hash of the expanded jobs (short hex)
  name            TEXT NOT NULL,
  manifest_path   TEXT NOT NULL,
  manifest_sha256 TEXT NOT NULL,
  manifest_text   TEXT NOT NULL,
  created_at      REAL NOT NULL           -- unix seconds
);

-- One row per unique job key; a key is a content hash of everything that decides
-- the result, so a finished key is never run again, whichever batch asks for it.
CREATE TABLE jobs (
  id              INTEGER PRIMARY KEY,
  key             TEXT NOT NULL UNIQUE,
  op              TEXT NOT NULL,
  shape           TEXT NOT NULL,          -- JSON array
  dtype           TEXT NOT NULL,
  params          TEXT NOT NULL,          -- JSON object, defaults filled in
  target          TEXT NOT NULL,          -- target name, e.g. MI300X
  arch            TEXT NOT NULL,          -- gfx942, sm_90, ...
  spec            TEXT NOT NULL,          -- JSON: the whole job as the worker sees it
  state           TEXT NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('queued', 'running', 'done', 'failed')),
  lease_owner     TEXT,                   -- host:pid of the run holding it
  lease_expires   REAL,                   -- unix seconds
  attempts        INTEGER NOT NULL DEFAULT 0,
  message         TEXT,
  created_at      REAL NOT NULL,
  started_at      REAL,
  finished_at     REAL
);
CREATE INDEX jobs_state ON jobs(state);

CREATE TABLE batch_jobs (
  batch_id TEXT NOT NULL REFERENCES batches(id),
  job_id   INTEGER NOT NULL REFERENCES jobs(id),
  PRIMARY KEY (batch_id, job_id)
);

CREATE TABLE candidates (
  id          INTEGER PRIMARY KEY,
  job_id      INTEGER NOT NULL REFERENCES jobs(id),
  key         TEXT NOT NULL,              -- hash of generator + template + config + source
  generator   TEXT NOT NULL,              -- template | llm
  template    TEXT,                       -- kernels/ module for template candidates
  config      TEXT NOT NULL,              -- JSON object
  source      TEXT,                       -- generated code (llm), NULL for templates
  parent_id   INTEGER REFERENCES candidates(id),
  round       INTEGER NOT NULL DEFAULT 0,
  instance    INTEGER NOT NULL DEFAULT 0,
  created_at  REAL NOT NULL,
  UNIQUE (job_id, key)
);

-- At most one evaluation per candidate: a candidate is never evaluated twice.
CREATE TABLE evaluations (
  id            INTEGER PRIMARY KEY,
  candidate_id  INTEGER NOT NULL UNIQUE REFERENCES candidates(id),
  status        TEXT NOT NULL CHECK (status IN
                  ('ok', 'compile_error', 'resource_error', 'incorrect', 'timeout', 'crash')),
  message       TEXT,
  exec_device   TEXT,                     -- where correctness ran: 'cpu (Triton interpreter)', 'NVIDIA H200'
  seeds         INTEGER,
  max_abs_err   REAL,
  max_rel_err   REAL,
  bench_device  TEXT,                     -- device the latency was measured on, NULL if none
  runs          INTEGER,
  mean_ms       REAL,
  median_ms     REAL,
  p99_ms        REAL,
  min_ms        REAL,
  stddev_ms     REAL,
  estimate_ms   REAL,                     -- static model for the job's target
  registers     INTEGER,                  -- VGPRs (AMD) or registers per thread (NVIDIA)
  sgprs         INTEGER,
  spills        INTEGER,
  shared_bytes  INTEGER,                  -- LDS / shared memory per block
  scratch_bytes INTEGER,
  occupancy     REAL,                     -- waves per SIMD (AMD) or warps per SM (NVIDIA)
  compile_s     REAL,
  check_s       REAL,
  bench_s       REAL,
  worker        TEXT,                     -- host:pid of the evaluator
  result        TEXT NOT NULL,            -- the worker's whole JSON answer
  created_at    REAL NOT NULL
);

-- Code objects, stored once by content.
CREATE TABLE blobs (
  sha256 TEXT PRIMARY KEY,
  size   INTEGER NOT NULL,
  data   BLOB NOT NULL
);

CREATE TABLE artifacts (
  id            INTEGER PRIMARY KEY,
  candidate_id  INTEGER NOT NULL REFERENCES candidates(id),
  target        TEXT NOT NULL,
  arch          TEXT NOT NULL,
  kind          TEXT NOT NULL CHECK (kind IN ('hsaco', 'cubin')),
  sha256        TEXT NOT NULL REFERENCES blobs(sha256),
  kernel_name   TEXT NOT NULL,
  metadata      TEXT NOT NULL,            -- JSON: launch metadata (args, grid, block, shared, ...)
  UNIQUE (candidate_id, target)
);

-- The selected candidate per job, and on what basis it was ranked.
CREATE TABLE best (
  job_id        INTEGER PRIMARY KEY REFERENCES jobs(id),
  candidate_id  INTEGER NOT NULL REFERENCES candidates(id),
  basis         TEXT NOT NULL CHECK (basis IN ('measured', 'estimated')),
  value_ms      REAL NOT NULL,            -- median latency (measured) or estimate
  device        TEXT,                     -- the measuring device; NULL when estimated
  selected_at   REAL NOT NULL
);
