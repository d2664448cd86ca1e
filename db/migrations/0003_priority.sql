-- Kiln catalog, schema version 3: the claim order.
--  * jobs.priority: an estimate of the job's cost, the roofline time of the
--    operator on its target in ms (minimum traffic / bandwidth, flops / peak;
--    src/evaluate/estimate.h), set at submit. Runs claim the most expensive
--    queued job first (longest-processing-time-first), so a batch does not
--    end with one big job running alone while the other slots and GPUs idle.
--    0 = unknown (a reference module's job, a catalog from before this
--    version): claimed after the sized ones, in id order.

ALTER TABLE jobs ADD COLUMN priority REAL NOT NULL DEFAULT 0;
CREATE INDEX jobs_claim ON jobs(state, priority DESC, id);
