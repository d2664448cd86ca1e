-- Kiln catalog, schema version 2: the llm generator.
--  * evaluations.status gains 'rejected' (the evaluator's screening refused the
--    candidate's code before running it: a cheating or unsafe kernel). SQLite
--    cannot alter a CHECK constraint, so the table is recreated and its rows
--    copied (ids kept); nothing references evaluations, so no foreign key breaks.
--  * llm_calls: one row per chat-completions request of the llm generator, with
--    the full prompt and reply, token usage and latency, linked to the candidate
--    its code became (NULL when the call failed or its code was a duplicate).

CREATE TABLE evaluations_v2 (
  id            INTEGER PRIMARY KEY,
  candidate_id  INTEGER NOT NULL UNIQUE REFERENCES candidates(id),
  status        TEXT NOT NULL CHECK (status IN
                  ('ok', 'compile_error', 'resource_error', 'incorrect', 'timeout', 'crash',
                   'rejected')),
  message       TEXT,
  exec_device   TEXT,
  seeds         INTEGER,
  max_abs_err   REAL,
  max_rel_err   REAL,
  bench_device  TEXT,
  runs          INTEGER,
  mean_ms       REAL,
  median_ms     REAL,
  p99_ms        REAL,
  min_ms        REAL,
  stddev_ms     REAL,
  estimate_ms   REAL,
  registers     INTEGER,
  sgprs         INTEGER,
  spills        INTEGER,
  shared_bytes  INTEGER,
  scratch_bytes INTEGER,
  occupancy     REAL,
  compile_s     REAL,
  check_s       REAL,
  bench_s       REAL,
  worker        TEXT,
  result        TEXT NOT NULL,
  created_at    REAL NOT NULL
);
INSERT INTO evaluations_v2 (id, candidate_id, status, message, exec_device, seeds, max_abs_err,
                            max_rel_err, bench_device, runs, mean_ms, median_ms, p99_ms, min_ms,
                            stddev_ms, estimate_ms, registers, sgprs, spills, shared_bytes,
                            scratch_bytes, occupancy, compile_s, check_s, bench_s, worker, result,
                            created_at)
  SELECT id, candidate_id, status, message, exec_device, seeds, max_abs_err, max_rel_err,
         bench_device, runs, mean_ms, median_ms, p99_ms, min_ms, stddev_ms, estimate_ms,
         registers, sgprs, spills, shared_bytes, scratch_bytes, occupancy, compile_s, check_s,
         bench_s, worker, result, created_at
  FROM evaluations;
DROP TABLE evaluations;
ALTER TABLE evaluations_v2 RENAME TO evaluations;

CREATE TABLE llm_calls (
  id                INTEGER PRIMARY KEY,
  candidate_id      INTEGER REFERENCES candidates(id),  -- the candidate its code became, if any
  job_id            INTEGER NOT NULL REFERENCES jobs(id),
  instance          INTEGER NOT NULL DEFAULT 0,          -- exploration instance
  round             INTEGER NOT NULL DEFAULT 0,          -- reflection round (0 = first proposal)
  parent_id         INTEGER REFERENCES candidates(id),   -- the candidate the prompt repairs
  model             TEXT,
  url               TEXT,                                -- the endpoint (no credentials)
  temperature       REAL,
  seed              INTEGER,
  prompt            TEXT NOT NULL,                       -- JSON array of chat messages
  response          TEXT,                                -- the reply's message content
  prompt_tokens     INTEGER,                             -- usage.prompt_tokens
  completion_tokens INTEGER,                             -- usage.completion_tokens
  latency_s         REAL,                                -- wall time of the call, retries included
  attempts          INTEGER NOT NULL DEFAULT 1,          -- HTTP requests made (1 + retries)
  status            TEXT NOT NULL CHECK (status IN ('ok', 'error', 'skipped')),
  error             TEXT,                                -- why it failed (or why it was skipped)
  retrieval         TEXT,                                -- JSON: the retrieved example and its score
  created_at        REAL NOT NULL
);
CREATE INDEX llm_calls_job ON llm_calls(job_id);
CREATE INDEX llm_calls_candidate ON llm_calls(candidate_id);
