-- Kiln catalog, schema version 4: compiles first in the claim order.
--  * jobs.compile_est_s: an estimate of the CPU seconds the job's candidates
--    take to compile (candidates x seconds per candidate: the catalog's mean
--    for the operator on the target where it has 20 or more evaluations, else
--    the operator's compile_s in kernels/operators.yaml), set at submit. Runs
--    claim the job with the most compiling first, then by priority: the
--    compile-bound jobs run while the GPU-bound ones keep the GPUs busy, and a
--    run ends on GPU work instead of compiles that leave its GPUs idle
--    (docs/performance.md, "Compiles first"). 0 = unknown (a reference
--    module's job, rows from before this version): by priority alone.

ALTER TABLE jobs ADD COLUMN compile_est_s REAL NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS jobs_claim;
CREATE INDEX jobs_claim ON jobs(state, compile_est_s DESC, priority DESC, id);
