-- Files stored with a run (checkpoints, models, plots): the bytes live in the object store at
-- projects/{project_id}/artifacts/{run_id}/{path}; this table records what is there.
CREATE TABLE artifacts (
    run_id     TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, path)
) WITHOUT ROWID;
