-- PostgreSQL version of ../0019_report_rollup.sql: BIGINT and DOUBLE PRECISION, `usage_stale` a
-- stored BOOLEAN, INCLUDE columns in the lists' indexes, and the marks made by PL/pgSQL functions.
--
-- The report over many runs: finding the runs whose row of the report is out of date without
-- reading every row, finding the runs the report lists (the costliest, the idlest, the latest
-- infrastructure failures) by index, and each project's days added up in advance.

-- The revisions a run's row of the report was computed at (NULL: never); `usage_stale` holds
-- while they are behind the run's, and always while the run runs.
ALTER TABLE runs ADD COLUMN usage_revision BIGINT, ADD COLUMN usage_summaries_revision BIGINT;
UPDATE runs SET usage_revision = u.revision, usage_summaries_revision = u.summaries_revision
FROM run_usage u WHERE u.run_id = runs.id;
ALTER TABLE runs ADD COLUMN usage_stale BOOLEAN GENERATED ALWAYS AS (
    usage_revision IS NULL OR usage_revision <> revision OR usage_summaries_revision <> summaries_revision
    OR status = 'running') STORED;
CREATE INDEX runs_usage_stale ON runs (start_ms) WHERE usage_stale;

-- The runs of a period's partial first and last day, in every project at once (one project's
-- come from runs_by_project).
CREATE INDEX runs_by_start ON runs (start_ms);

-- A row's run's project and start when it was computed, so the report's lists read an index:
-- the installation's in order, or one project's in order.
ALTER TABLE run_usage ADD COLUMN project_id BIGINT NOT NULL DEFAULT 0, ADD COLUMN start_ms BIGINT NOT NULL DEFAULT 0;
UPDATE run_usage SET project_id = r.project_id, start_ms = r.start_ms FROM runs r WHERE r.id = run_usage.run_id;
CREATE INDEX run_usage_by_cost ON run_usage (cost_usd DESC, run_id) INCLUDE (project_id, start_ms) WHERE priced = 1;
CREATE INDEX run_usage_by_idle ON run_usage ((gpu_hours - active_s_10 / 3600.0) DESC, run_id) INCLUDE (project_id, start_ms)
    WHERE gpu_series > 0 AND gpu_hours > 0;
CREATE INDEX run_usage_infra ON run_usage (start_ms DESC, run_id) INCLUDE (project_id) WHERE outcome = 'infra';
CREATE INDEX run_usage_project_by_cost ON run_usage (project_id, cost_usd DESC, run_id) INCLUDE (start_ms)
    WHERE priced = 1;
CREATE INDEX run_usage_project_by_idle ON run_usage (project_id, (gpu_hours - active_s_10 / 3600.0) DESC, run_id)
    INCLUDE (start_ms) WHERE gpu_series > 0 AND gpu_hours > 0;
CREATE INDEX run_usage_project_infra ON run_usage (project_id, start_ms DESC, run_id) WHERE outcome = 'infra';

-- Each project's runs that started on one day (UTC, days since 1970-01-01), added up per user,
-- group, GPU model, provider and pricing: the sums of their rows of the report (and of their
-- checkpoints' restores), at every threshold of `active_s_T`: the GPU-seconds above T percent
-- of the runs with a GPU series (`sampled_`), of those also priced (`priced_`), and those
-- priced (`priced_active_usd_T`: cost × active share). Only runs not deleted, with a row of the
-- report, count. A day is added up again from `run_usage` once marked in `usage_rollup_dirty`.
CREATE TABLE usage_rollup (
    project_id     BIGINT NOT NULL,
    day            BIGINT NOT NULL,
    "user"         TEXT NOT NULL,
    group_name     TEXT NOT NULL,
    gpu_model      TEXT NOT NULL,
    provider       TEXT NOT NULL,
    pricing        TEXT NOT NULL,
    runs BIGINT NOT NULL,
    first_start_ms BIGINT,
    last_start_ms BIGINT,
    finished BIGINT NOT NULL,
    code_failures BIGINT NOT NULL,
    infra_failures BIGINT NOT NULL,
    killed BIGINT NOT NULL,
    running BIGINT NOT NULL,
    gpu_hours DOUBLE PRECISION NOT NULL,
    spot_gpu_hours DOUBLE PRECISION NOT NULL,
    gpu_runs BIGINT NOT NULL,
    sampled_runs BIGINT NOT NULL,
    sampled_gpu_hours DOUBLE PRECISION NOT NULL,
    priced_runs BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    priced_sampled_runs BIGINT NOT NULL,
    priced_sampled_cost_usd DOUBLE PRECISION NOT NULL,
    queued_runs BIGINT NOT NULL,
    queue_wait_ms_sum BIGINT NOT NULL,
    queue_wait_ms_max BIGINT,
    restores BIGINT NOT NULL,
    restores_ok BIGINT NOT NULL,
    sampled_active_s_0 DOUBLE PRECISION NOT NULL,
    sampled_active_s_5 DOUBLE PRECISION NOT NULL,
    sampled_active_s_10 DOUBLE PRECISION NOT NULL,
    sampled_active_s_15 DOUBLE PRECISION NOT NULL,
    sampled_active_s_20 DOUBLE PRECISION NOT NULL,
    sampled_active_s_25 DOUBLE PRECISION NOT NULL,
    sampled_active_s_30 DOUBLE PRECISION NOT NULL,
    sampled_active_s_35 DOUBLE PRECISION NOT NULL,
    sampled_active_s_40 DOUBLE PRECISION NOT NULL,
    sampled_active_s_45 DOUBLE PRECISION NOT NULL,
    sampled_active_s_50 DOUBLE PRECISION NOT NULL,
    sampled_active_s_55 DOUBLE PRECISION NOT NULL,
    sampled_active_s_60 DOUBLE PRECISION NOT NULL,
    sampled_active_s_65 DOUBLE PRECISION NOT NULL,
    sampled_active_s_70 DOUBLE PRECISION NOT NULL,
    sampled_active_s_75 DOUBLE PRECISION NOT NULL,
    sampled_active_s_80 DOUBLE PRECISION NOT NULL,
    sampled_active_s_85 DOUBLE PRECISION NOT NULL,
    sampled_active_s_90 DOUBLE PRECISION NOT NULL,
    sampled_active_s_95 DOUBLE PRECISION NOT NULL,
    priced_active_s_0 DOUBLE PRECISION NOT NULL,
    priced_active_s_5 DOUBLE PRECISION NOT NULL,
    priced_active_s_10 DOUBLE PRECISION NOT NULL,
    priced_active_s_15 DOUBLE PRECISION NOT NULL,
    priced_active_s_20 DOUBLE PRECISION NOT NULL,
    priced_active_s_25 DOUBLE PRECISION NOT NULL,
    priced_active_s_30 DOUBLE PRECISION NOT NULL,
    priced_active_s_35 DOUBLE PRECISION NOT NULL,
    priced_active_s_40 DOUBLE PRECISION NOT NULL,
    priced_active_s_45 DOUBLE PRECISION NOT NULL,
    priced_active_s_50 DOUBLE PRECISION NOT NULL,
    priced_active_s_55 DOUBLE PRECISION NOT NULL,
    priced_active_s_60 DOUBLE PRECISION NOT NULL,
    priced_active_s_65 DOUBLE PRECISION NOT NULL,
    priced_active_s_70 DOUBLE PRECISION NOT NULL,
    priced_active_s_75 DOUBLE PRECISION NOT NULL,
    priced_active_s_80 DOUBLE PRECISION NOT NULL,
    priced_active_s_85 DOUBLE PRECISION NOT NULL,
    priced_active_s_90 DOUBLE PRECISION NOT NULL,
    priced_active_s_95 DOUBLE PRECISION NOT NULL,
    priced_active_usd_0 DOUBLE PRECISION NOT NULL,
    priced_active_usd_5 DOUBLE PRECISION NOT NULL,
    priced_active_usd_10 DOUBLE PRECISION NOT NULL,
    priced_active_usd_15 DOUBLE PRECISION NOT NULL,
    priced_active_usd_20 DOUBLE PRECISION NOT NULL,
    priced_active_usd_25 DOUBLE PRECISION NOT NULL,
    priced_active_usd_30 DOUBLE PRECISION NOT NULL,
    priced_active_usd_35 DOUBLE PRECISION NOT NULL,
    priced_active_usd_40 DOUBLE PRECISION NOT NULL,
    priced_active_usd_45 DOUBLE PRECISION NOT NULL,
    priced_active_usd_50 DOUBLE PRECISION NOT NULL,
    priced_active_usd_55 DOUBLE PRECISION NOT NULL,
    priced_active_usd_60 DOUBLE PRECISION NOT NULL,
    priced_active_usd_65 DOUBLE PRECISION NOT NULL,
    priced_active_usd_70 DOUBLE PRECISION NOT NULL,
    priced_active_usd_75 DOUBLE PRECISION NOT NULL,
    priced_active_usd_80 DOUBLE PRECISION NOT NULL,
    priced_active_usd_85 DOUBLE PRECISION NOT NULL,
    priced_active_usd_90 DOUBLE PRECISION NOT NULL,
    priced_active_usd_95 DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (project_id, day, "user", group_name, gpu_model, provider, pricing)
);

-- The days whose sums are out of date: marked (generation moved) by every change to a row of
-- the report, to a restore, or to a run's project, start, user, group or deletion, in the same
-- transaction; unmarked by adding the day up again, only when no mark came in the meantime.
CREATE TABLE usage_rollup_dirty (
    project_id BIGINT NOT NULL,
    day        BIGINT NOT NULL,
    generation BIGINT NOT NULL,
    PRIMARY KEY (project_id, day)
);

CREATE FUNCTION usage_day(ms BIGINT) RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT (ms - (((ms % 86400000) + 86400000) % 86400000)) / 86400000
$$;

CREATE FUNCTION mark_usage_day(project BIGINT, start BIGINT) RETURNS void LANGUAGE sql AS $$
    INSERT INTO usage_rollup_dirty (project_id, day, generation) VALUES (project, usage_day(start), 1)
    ON CONFLICT (project_id, day) DO UPDATE SET generation = usage_rollup_dirty.generation + 1
$$;

-- For run_usage and checkpoint_restores: the day of the run the row belongs to.
CREATE FUNCTION mark_usage_day_of_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        run := OLD.run_id;
    ELSE
        run := NEW.run_id;
    END IF;
    PERFORM mark_usage_day(r.project_id, r.start_ms) FROM runs r WHERE r.id = run;
    RETURN NULL;
END;
$$;

CREATE TRIGGER run_usage_rollup AFTER INSERT OR DELETE ON run_usage
FOR EACH ROW EXECUTE FUNCTION mark_usage_day_of_run();
CREATE TRIGGER restores_rollup AFTER INSERT OR DELETE ON checkpoint_restores
FOR EACH ROW EXECUTE FUNCTION mark_usage_day_of_run();

-- For runs: the day it was in and the day it is in.
CREATE FUNCTION mark_usage_days_of_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM mark_usage_day(OLD.project_id, OLD.start_ms);
    IF TG_OP = 'UPDATE' THEN
        PERFORM mark_usage_day(NEW.project_id, NEW.start_ms);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_update_rollup AFTER UPDATE OF project_id, start_ms, "user", group_name, deleted ON runs
FOR EACH ROW WHEN (OLD.project_id IS DISTINCT FROM NEW.project_id OR OLD.start_ms IS DISTINCT FROM NEW.start_ms
    OR OLD."user" IS DISTINCT FROM NEW."user" OR OLD.group_name IS DISTINCT FROM NEW.group_name
    OR OLD.deleted IS DISTINCT FROM NEW.deleted)
EXECUTE FUNCTION mark_usage_days_of_runs();
CREATE TRIGGER runs_delete_rollup AFTER DELETE ON runs
FOR EACH ROW EXECUTE FUNCTION mark_usage_days_of_runs();

-- Every day with rows of the report is added up by the first report or the background refresh.
INSERT INTO usage_rollup_dirty (project_id, day, generation)
SELECT DISTINCT r.project_id, usage_day(r.start_ms), 1 FROM runs r JOIN run_usage u ON u.run_id = r.id;
