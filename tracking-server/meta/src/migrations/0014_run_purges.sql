-- Runs deleted for good. The row outlives the run's other rows: its id is never given to a new
-- run, and a write-ahead log replayed after a crash drops the run's points. `objects_left` stays
-- 1 until the run's metric files and artifacts are gone from the object store.
CREATE TABLE purged_runs (
    run_id       TEXT    PRIMARY KEY,
    project_id   INTEGER NOT NULL,
    purged_ms    INTEGER NOT NULL,
    objects_left INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;
CREATE INDEX purged_runs_left ON purged_runs(objects_left);
