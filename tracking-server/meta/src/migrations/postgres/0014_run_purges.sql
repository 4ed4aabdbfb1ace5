-- Runs deleted for good. The row outlives the run's other rows: its id is never given to a new
-- run, and a write-ahead log replayed after a crash drops the run's points. `objects_left` stays
-- 1 until the run's metric files and artifacts are gone from the object store.
-- PostgreSQL version of ../0014_run_purges.sql: INTEGER -> BIGINT, no WITHOUT ROWID.
CREATE TABLE purged_runs (
    run_id       TEXT    PRIMARY KEY,
    project_id   BIGINT  NOT NULL,
    purged_ms    BIGINT  NOT NULL,
    objects_left BIGINT  NOT NULL DEFAULT 1
);
CREATE INDEX purged_runs_left ON purged_runs(objects_left);
