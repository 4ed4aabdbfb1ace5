-- Hyperparameter sweeps. A sweep keeps the file it was created from; each trial is a run of the
-- sweep's project, created when an agent claims the trial, and keeps its attempts (a preempted
-- trial is started again with the same run), where it ran, how it ended and its loss (the
-- sweep's metric, in the minimizing direction) for the search strategy.
-- PostgreSQL version of ../0007_sweeps.sql: INTEGER -> BIGINT, REAL -> DOUBLE PRECISION,
-- no WITHOUT ROWID.
CREATE TABLE sweeps (
    id           TEXT    PRIMARY KEY,
    project_id   BIGINT  NOT NULL REFERENCES projects(id),
    name         TEXT    NOT NULL,
    config       TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    ended_reason TEXT    NOT NULL DEFAULT '',
    created_ms   BIGINT  NOT NULL,
    updated_ms   BIGINT  NOT NULL
);
CREATE INDEX sweeps_by_project ON sweeps(project_id, created_ms);

CREATE TABLE sweep_trials (
    sweep_id     TEXT    NOT NULL REFERENCES sweeps(id),
    trial_index  BIGINT  NOT NULL,
    run_id       TEXT    NOT NULL UNIQUE,
    params       TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    attempts     BIGINT  NOT NULL DEFAULT 1,
    agent        TEXT    NOT NULL DEFAULT '',
    slot         TEXT    NOT NULL DEFAULT '',
    gpus         DOUBLE PRECISION NOT NULL DEFAULT 0,
    bracket      BIGINT,
    exit_code    BIGINT,
    output_tail  TEXT    NOT NULL DEFAULT '',
    loss         DOUBLE PRECISION,
    stop_reason  TEXT    NOT NULL DEFAULT '',
    created_ms   BIGINT  NOT NULL,
    started_ms   BIGINT  NOT NULL,
    ended_ms     BIGINT,
    heartbeat_ms BIGINT  NOT NULL,
    run_ms       BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (sweep_id, trial_index)
);
