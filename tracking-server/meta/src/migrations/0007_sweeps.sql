-- Hyperparameter sweeps. A sweep keeps the file it was created from; each trial is a run of the
-- sweep's project, created when an agent claims the trial, and keeps its attempts (a preempted
-- trial is started again with the same run), where it ran, how it ended and its loss (the
-- sweep's metric, in the minimizing direction) for the search strategy.
CREATE TABLE sweeps (
    id           TEXT    PRIMARY KEY,
    project_id   INTEGER NOT NULL REFERENCES projects(id),
    name         TEXT    NOT NULL,
    config       TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    ended_reason TEXT    NOT NULL DEFAULT '',
    created_ms   INTEGER NOT NULL,
    updated_ms   INTEGER NOT NULL
);
CREATE INDEX sweeps_by_project ON sweeps(project_id, created_ms);

CREATE TABLE sweep_trials (
    sweep_id     TEXT    NOT NULL REFERENCES sweeps(id),
    trial_index  INTEGER NOT NULL,
    run_id       TEXT    NOT NULL UNIQUE,
    params       TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 1,
    agent        TEXT    NOT NULL DEFAULT '',
    slot         TEXT    NOT NULL DEFAULT '',
    gpus         REAL    NOT NULL DEFAULT 0,
    bracket      INTEGER,
    exit_code    INTEGER,
    output_tail  TEXT    NOT NULL DEFAULT '',
    loss         REAL,
    stop_reason  TEXT    NOT NULL DEFAULT '',
    created_ms   INTEGER NOT NULL,
    started_ms   INTEGER NOT NULL,
    ended_ms     INTEGER,
    heartbeat_ms INTEGER NOT NULL,
    run_ms       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sweep_id, trial_index)
) WITHOUT ROWID;
