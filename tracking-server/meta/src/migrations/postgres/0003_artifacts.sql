-- Files stored with a run (checkpoints, models, plots): the bytes live in the object store at
-- projects/{project_id}/artifacts/{run_id}/{path}; this table records what is there.
-- PostgreSQL version of ../0003_artifacts.sql: INTEGER -> BIGINT, no WITHOUT ROWID.
CREATE TABLE artifacts (
    run_id     TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    size       BIGINT  NOT NULL,
    sha256     TEXT    NOT NULL,
    created_ms BIGINT  NOT NULL,
    PRIMARY KEY (run_id, path)
);
