-- A checkpoint: a set of a run's artifacts (under checkpoints/{name}/) saved at a step, with
-- their checksums. `metric_value` is the value of the retention metric at that step, if any.
-- PostgreSQL version of ../0004_checkpoints.sql: INTEGER -> BIGINT, REAL -> DOUBLE PRECISION,
-- no WITHOUT ROWID.
CREATE TABLE checkpoints (
    run_id       TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    step         BIGINT  NOT NULL,
    files        TEXT    NOT NULL,
    metadata     TEXT    NOT NULL,
    metric_key   TEXT,
    metric_value DOUBLE PRECISION,
    created_ms   BIGINT  NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX checkpoints_by_step ON checkpoints(run_id, step);
