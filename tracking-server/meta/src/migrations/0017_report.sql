-- The training report: what each run contributes to it, the restores of checkpoints, when a
-- job was submitted, and the projects' monthly budgets.

-- One row per run, computed from its job (attempts, nodes, prices), its GPU utilization series
-- and its sweep trial; recomputed when the run's `revision` or `summaries_revision` moves past
-- the ones recorded here, and always while it runs.
--   outcome: running, finished, code (it failed on its own), infra (preempted, lost, or killed
--            by a signal nobody sent it), killed (stopped by its user).
--   pricing: spot, on_demand, mixed, or '' when no attempt said.
--   active_s_T: GPU-seconds whose utilization sample was above T percent (T = 0, 5, …, 95).
CREATE TABLE run_usage (
    run_id             TEXT    PRIMARY KEY,
    revision           INTEGER NOT NULL,
    summaries_revision INTEGER NOT NULL,
    computed_ms        INTEGER NOT NULL,
    outcome            TEXT    NOT NULL,
    failure            TEXT,
    gpus               INTEGER NOT NULL,
    gpu_model          TEXT    NOT NULL,
    provider           TEXT    NOT NULL,
    pricing            TEXT    NOT NULL,
    gpu_hours          REAL    NOT NULL,
    spot_gpu_hours     REAL    NOT NULL,
    priced             INTEGER NOT NULL,
    cost_usd           REAL    NOT NULL,
    gpu_series         INTEGER NOT NULL,
    queue_wait_ms      INTEGER,
    queue_source       TEXT,
    active_s_0  REAL NOT NULL DEFAULT 0,
    active_s_5  REAL NOT NULL DEFAULT 0,
    active_s_10 REAL NOT NULL DEFAULT 0,
    active_s_15 REAL NOT NULL DEFAULT 0,
    active_s_20 REAL NOT NULL DEFAULT 0,
    active_s_25 REAL NOT NULL DEFAULT 0,
    active_s_30 REAL NOT NULL DEFAULT 0,
    active_s_35 REAL NOT NULL DEFAULT 0,
    active_s_40 REAL NOT NULL DEFAULT 0,
    active_s_45 REAL NOT NULL DEFAULT 0,
    active_s_50 REAL NOT NULL DEFAULT 0,
    active_s_55 REAL NOT NULL DEFAULT 0,
    active_s_60 REAL NOT NULL DEFAULT 0,
    active_s_65 REAL NOT NULL DEFAULT 0,
    active_s_70 REAL NOT NULL DEFAULT 0,
    active_s_75 REAL NOT NULL DEFAULT 0,
    active_s_80 REAL NOT NULL DEFAULT 0,
    active_s_85 REAL NOT NULL DEFAULT 0,
    active_s_90 REAL NOT NULL DEFAULT 0,
    active_s_95 REAL NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Each time a run's checkpoint was restored, or failed to restore (`ok` 0, with why).
CREATE TABLE checkpoint_restores (
    run_id      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    at_ms       INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    ok          INTEGER NOT NULL,
    error       TEXT,
    restored_by TEXT,
    PRIMARY KEY (run_id, name, at_ms, seq)
) WITHOUT ROWID;

-- When the launcher says the job was submitted (a Slurm job's submit time): the first attempt's
-- queue wait is from then to its start.
ALTER TABLE run_attempts ADD COLUMN submitted_ms INTEGER;

-- A project's budget per calendar month (UTC), USD; NULL when it has none.
ALTER TABLE projects ADD COLUMN monthly_budget_usd REAL;
