-- Kiln catalog, schema version 7: what `kiln retry` did.
--  * retries: one row per failed job requeued by `kiln retry`
--    (Catalog::retry_failed): the job's failure message and attempts as they
--    were, and the evaluations forgotten with it (those that are no verdict:
--    timeout, crash), so the history survives the next run overwriting the
--    job's message. `forgotten` names candidates by key (stable across
--    `kiln merge`), not by id.

CREATE TABLE retries (
  id          INTEGER PRIMARY KEY,
  job_id      INTEGER NOT NULL REFERENCES jobs(id),
  retried_at  REAL NOT NULL,              -- unix seconds
  attempts    INTEGER NOT NULL,           -- the job's claims before the retry
  message     TEXT,                       -- the job's failure message before the retry
  forgotten   TEXT NOT NULL               -- JSON array of {candidate_key, status, message, worker, exec_device, evaluated_at}
);
CREATE INDEX retries_job ON retries(job_id);
