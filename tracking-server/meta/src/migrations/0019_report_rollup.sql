-- The report over many runs: finding the runs whose row of the report is out of date without
-- reading every row, finding the runs the report lists (the costliest, the idlest, the latest
-- infrastructure failures) by index, and each project's days added up in advance.

-- The revisions a run's row of the report was computed at (NULL: never); `usage_stale` holds
-- while they are behind the run's, and always while the run runs.
ALTER TABLE runs ADD COLUMN usage_revision INTEGER;
ALTER TABLE runs ADD COLUMN usage_summaries_revision INTEGER;
ALTER TABLE runs ADD COLUMN usage_stale INTEGER GENERATED ALWAYS AS (
    usage_revision IS NULL OR usage_revision <> revision OR usage_summaries_revision <> summaries_revision
    OR status = 'running') VIRTUAL;
UPDATE runs SET usage_revision = (SELECT u.revision FROM run_usage u WHERE u.run_id = runs.id),
    usage_summaries_revision = (SELECT u.summaries_revision FROM run_usage u WHERE u.run_id = runs.id);
CREATE INDEX runs_usage_stale ON runs (start_ms) WHERE usage_stale;

-- The runs of a period's partial first and last day, in every project at once (one project's
-- come from runs_by_project).
CREATE INDEX runs_by_start ON runs (start_ms);

-- A row's run's project and start when it was computed, so the report's lists read an index:
-- the installation's in order, or one project's in order.
ALTER TABLE run_usage ADD COLUMN project_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run_usage ADD COLUMN start_ms INTEGER NOT NULL DEFAULT 0;
UPDATE run_usage SET project_id = (SELECT r.project_id FROM runs r WHERE r.id = run_usage.run_id),
    start_ms = (SELECT r.start_ms FROM runs r WHERE r.id = run_usage.run_id);
CREATE INDEX run_usage_by_cost ON run_usage (cost_usd DESC, run_id, project_id, start_ms) WHERE priced = 1;
CREATE INDEX run_usage_by_idle ON run_usage ((gpu_hours - active_s_10 / 3600.0) DESC, run_id, project_id, start_ms)
    WHERE gpu_series > 0 AND gpu_hours > 0;
CREATE INDEX run_usage_infra ON run_usage (start_ms DESC, run_id, project_id) WHERE outcome = 'infra';
CREATE INDEX run_usage_project_by_cost ON run_usage (project_id, cost_usd DESC, run_id, start_ms) WHERE priced = 1;
CREATE INDEX run_usage_project_by_idle ON run_usage (project_id, (gpu_hours - active_s_10 / 3600.0) DESC, run_id, start_ms)
    WHERE gpu_series > 0 AND gpu_hours > 0;
CREATE INDEX run_usage_project_infra ON run_usage (project_id, start_ms DESC, run_id) WHERE outcome = 'infra';

-- Each project's runs that started on one day (UTC, days since 1970-01-01), added up per user,
-- group, GPU model, provider and pricing: the sums of their rows of the report (and of their
-- checkpoints' restores), at every threshold of `active_s_T`: the GPU-seconds above T percent
-- of the runs with a GPU series (`sampled_`), of those also priced (`priced_`), and those
-- priced (`priced_active_usd_T`: cost × active share). Only runs not deleted, with a row of the
-- report, count. A day is added up again from `run_usage` once marked in `usage_rollup_dirty`.
CREATE TABLE usage_rollup (
    project_id     INTEGER NOT NULL,
    day            INTEGER NOT NULL,
    "user"         TEXT NOT NULL,
    group_name     TEXT NOT NULL,
    gpu_model      TEXT NOT NULL,
    provider       TEXT NOT NULL,
    pricing        TEXT NOT NULL,
    runs INTEGER NOT NULL,
    first_start_ms INTEGER,
    last_start_ms INTEGER,
    finished INTEGER NOT NULL,
    code_failures INTEGER NOT NULL,
    infra_failures INTEGER NOT NULL,
    killed INTEGER NOT NULL,
    running INTEGER NOT NULL,
    gpu_hours REAL NOT NULL,
    spot_gpu_hours REAL NOT NULL,
    gpu_runs INTEGER NOT NULL,
    sampled_runs INTEGER NOT NULL,
    sampled_gpu_hours REAL NOT NULL,
    priced_runs INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    priced_sampled_runs INTEGER NOT NULL,
    priced_sampled_cost_usd REAL NOT NULL,
    queued_runs INTEGER NOT NULL,
    queue_wait_ms_sum INTEGER NOT NULL,
    queue_wait_ms_max INTEGER,
    restores INTEGER NOT NULL,
    restores_ok INTEGER NOT NULL,
    sampled_active_s_0 REAL NOT NULL,
    sampled_active_s_5 REAL NOT NULL,
    sampled_active_s_10 REAL NOT NULL,
    sampled_active_s_15 REAL NOT NULL,
    sampled_active_s_20 REAL NOT NULL,
    sampled_active_s_25 REAL NOT NULL,
    sampled_active_s_30 REAL NOT NULL,
    sampled_active_s_35 REAL NOT NULL,
    sampled_active_s_40 REAL NOT NULL,
    sampled_active_s_45 REAL NOT NULL,
    sampled_active_s_50 REAL NOT NULL,
    sampled_active_s_55 REAL NOT NULL,
    sampled_active_s_60 REAL NOT NULL,
    sampled_active_s_65 REAL NOT NULL,
    sampled_active_s_70 REAL NOT NULL,
    sampled_active_s_75 REAL NOT NULL,
    sampled_active_s_80 REAL NOT NULL,
    sampled_active_s_85 REAL NOT NULL,
    sampled_active_s_90 REAL NOT NULL,
    sampled_active_s_95 REAL NOT NULL,
    priced_active_s_0 REAL NOT NULL,
    priced_active_s_5 REAL NOT NULL,
    priced_active_s_10 REAL NOT NULL,
    priced_active_s_15 REAL NOT NULL,
    priced_active_s_20 REAL NOT NULL,
    priced_active_s_25 REAL NOT NULL,
    priced_active_s_30 REAL NOT NULL,
    priced_active_s_35 REAL NOT NULL,
    priced_active_s_40 REAL NOT NULL,
    priced_active_s_45 REAL NOT NULL,
    priced_active_s_50 REAL NOT NULL,
    priced_active_s_55 REAL NOT NULL,
    priced_active_s_60 REAL NOT NULL,
    priced_active_s_65 REAL NOT NULL,
    priced_active_s_70 REAL NOT NULL,
    priced_active_s_75 REAL NOT NULL,
    priced_active_s_80 REAL NOT NULL,
    priced_active_s_85 REAL NOT NULL,
    priced_active_s_90 REAL NOT NULL,
    priced_active_s_95 REAL NOT NULL,
    priced_active_usd_0 REAL NOT NULL,
    priced_active_usd_5 REAL NOT NULL,
    priced_active_usd_10 REAL NOT NULL,
    priced_active_usd_15 REAL NOT NULL,
    priced_active_usd_20 REAL NOT NULL,
    priced_active_usd_25 REAL NOT NULL,
    priced_active_usd_30 REAL NOT NULL,
    priced_active_usd_35 REAL NOT NULL,
    priced_active_usd_40 REAL NOT NULL,
    priced_active_usd_45 REAL NOT NULL,
    priced_active_usd_50 REAL NOT NULL,
    priced_active_usd_55 REAL NOT NULL,
    priced_active_usd_60 REAL NOT NULL,
    priced_active_usd_65 REAL NOT NULL,
    priced_active_usd_70 REAL NOT NULL,
    priced_active_usd_75 REAL NOT NULL,
    priced_active_usd_80 REAL NOT NULL,
    priced_active_usd_85 REAL NOT NULL,
    priced_active_usd_90 REAL NOT NULL,
    priced_active_usd_95 REAL NOT NULL,
    PRIMARY KEY (project_id, day, "user", group_name, gpu_model, provider, pricing)
) WITHOUT ROWID;

-- The days whose sums are out of date: marked (generation moved) by every change to a row of
-- the report, to a restore, or to a run's project, start, user, group or deletion, in the same
-- transaction; unmarked by adding the day up again, only when no mark came in the meantime.
CREATE TABLE usage_rollup_dirty (
    project_id INTEGER NOT NULL,
    day        INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    PRIMARY KEY (project_id, day)
) WITHOUT ROWID;

CREATE TRIGGER run_usage_insert_rollup AFTER INSERT ON run_usage BEGIN
    INSERT INTO usage_rollup_dirty (project_id, day, generation)
    SELECT project_id, (start_ms - (((start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 FROM runs WHERE id = NEW.run_id
    ON CONFLICT (project_id, day) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER run_usage_delete_rollup AFTER DELETE ON run_usage BEGIN
    INSERT INTO usage_rollup_dirty (project_id, day, generation)
    SELECT project_id, (start_ms - (((start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 FROM runs WHERE id = OLD.run_id
    ON CONFLICT (project_id, day) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER restores_insert_rollup AFTER INSERT ON checkpoint_restores BEGIN
    INSERT INTO usage_rollup_dirty (project_id, day, generation)
    SELECT project_id, (start_ms - (((start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 FROM runs WHERE id = NEW.run_id
    ON CONFLICT (project_id, day) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER restores_delete_rollup AFTER DELETE ON checkpoint_restores BEGIN
    INSERT INTO usage_rollup_dirty (project_id, day, generation)
    SELECT project_id, (start_ms - (((start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 FROM runs WHERE id = OLD.run_id
    ON CONFLICT (project_id, day) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER runs_update_rollup AFTER UPDATE OF project_id, start_ms, user, group_name, deleted ON runs
WHEN OLD.project_id IS NOT NEW.project_id OR OLD.start_ms IS NOT NEW.start_ms OR OLD.user IS NOT NEW.user
    OR OLD.group_name IS NOT NEW.group_name OR OLD.deleted IS NOT NEW.deleted
BEGIN
    INSERT INTO usage_rollup_dirty (project_id, day, generation)
    SELECT OLD.project_id, (OLD.start_ms - (((OLD.start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 WHERE true
    ON CONFLICT (project_id, day) DO UPDATE SET generation = generation + 1;
    INSERT INTO usage_rollup_dirty (project_id, day, generation)
    SELECT NEW.project_id, (NEW.start_ms - (((NEW.start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 WHERE true
    ON CONFLICT (project_id, day) DO UPDATE SET generation = generation + 1;
END;
CREATE TRIGGER runs_delete_rollup AFTER DELETE ON runs BEGIN
    INSERT INTO usage_rollup_dirty (project_id, day, generation)
    SELECT OLD.project_id, (OLD.start_ms - (((OLD.start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 WHERE true
    ON CONFLICT (project_id, day) DO UPDATE SET generation = generation + 1;
END;

-- Every day with rows of the report is added up by the first report or the background refresh.
INSERT INTO usage_rollup_dirty (project_id, day, generation)
SELECT DISTINCT r.project_id, (r.start_ms - (((r.start_ms % 86400000) + 86400000) % 86400000)) / 86400000, 1 FROM runs r JOIN run_usage u ON u.run_id = r.id;
