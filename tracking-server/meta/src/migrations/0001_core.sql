-- Projects (MLflow: experiments) hold runs. Ids are small integers so they can name object paths.
CREATE TABLE projects (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    description TEXT    NOT NULL DEFAULT '',
    created_ms  INTEGER NOT NULL,
    deleted     INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE project_tags (
    project_id INTEGER NOT NULL REFERENCES projects(id),
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    PRIMARY KEY (project_id, key)
) WITHOUT ROWID;

CREATE TABLE runs (
    id         TEXT    PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    name       TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    start_ms   INTEGER NOT NULL,
    end_ms     INTEGER,
    user       TEXT    NOT NULL DEFAULT '',
    host       TEXT    NOT NULL DEFAULT '',
    group_name TEXT    NOT NULL DEFAULT '',
    parent_id  TEXT,
    notes      TEXT    NOT NULL DEFAULT '',
    deleted    INTEGER NOT NULL DEFAULT 0,
    updated_ms INTEGER NOT NULL
);
CREATE INDEX runs_by_project ON runs(project_id, start_ms);

-- Typed params: `type` is one of str, int, float, bool; `value` is the canonical text;
-- `num` is the numeric value (NULL for str) used by comparisons in run search.
CREATE TABLE params (
    run_id TEXT NOT NULL,
    key    TEXT NOT NULL,
    type   TEXT NOT NULL,
    value  TEXT NOT NULL,
    num    REAL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX params_by_key ON params(key, num);

CREATE TABLE tags (
    run_id TEXT NOT NULL,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

-- Per-key summary of a run's metric series. SQLite stores NaN as NULL: a NULL value in a row
-- that exists means NaN (min and max ignore NaN, so they are NULL only when every value is NaN).
CREATE TABLE metric_summaries (
    run_id    TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    last      REAL,
    last_step INTEGER NOT NULL,
    last_ms   INTEGER NOT NULL,
    min       REAL,
    max       REAL,
    count     INTEGER NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX metric_summaries_by_key ON metric_summaries(key, last);

-- Catalog of the metric points files in the object store. `ord` orders files of one run:
-- for the same (key, step), the row from the file with the higher `ord` wins.
CREATE TABLE metric_files (
    path       TEXT    PRIMARY KEY,
    run_id     TEXT    NOT NULL,
    ord        INTEGER NOT NULL,
    rows       INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    key_index  TEXT    NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX metric_files_by_run ON metric_files(run_id, ord);

-- Counters of the metrics store: the last write-ahead-log segment whose points are all in
-- metric files, and the next file number.
CREATE TABLE store_state (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
