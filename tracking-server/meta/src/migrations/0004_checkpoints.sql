-- A checkpoint: a set of a run's artifacts (under checkpoints/{name}/) saved at a step, with
-- their checksums. `metric_value` is the value of the retention metric at that step, if any.
CREATE TABLE checkpoints (
    run_id       TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    step         INTEGER NOT NULL,
    files        TEXT    NOT NULL,
    metadata     TEXT    NOT NULL,
    metric_key   TEXT,
    metric_value REAL,
    created_ms   INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE INDEX checkpoints_by_step ON checkpoints(run_id, step);
