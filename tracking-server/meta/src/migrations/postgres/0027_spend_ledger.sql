-- The spend ledger: a run deleted for good keeps its row of `run_usage` (what it cost, its
-- GPU-hours) and, here, what the report groups it by, so the money it spent stays in the report,
-- the budgets and `/metrics`. `trainlog ledger forget` removes a run's row for good.
ALTER TABLE purged_runs ADD COLUMN start_ms BIGINT;
ALTER TABLE purged_runs ADD COLUMN "user" TEXT;
ALTER TABLE purged_runs ADD COLUMN group_name TEXT;
