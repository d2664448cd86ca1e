-- Kiln catalog, schema version 5: reserved for the confirmation round's
-- migration, which is developed on another branch. This placeholder keeps the
-- numbering without gaps (find_migrations requires 1..N) until that branch is
-- merged; delete this file then.
SELECT 1;
