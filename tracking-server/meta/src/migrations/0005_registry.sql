-- The model registry. A version points at files of a run (a checkpoint, or an artifact prefix)
-- and keeps `lineage`: a snapshot of the run at registration (params, key metrics, code
-- version, environment), so the version stays explained even if the run changes later.
CREATE TABLE registered_models (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    description TEXT    NOT NULL DEFAULT '',
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL
);

CREATE TABLE model_tags (
    model_id INTEGER NOT NULL REFERENCES registered_models(id) ON DELETE CASCADE,
    key      TEXT    NOT NULL,
    value    TEXT    NOT NULL,
    PRIMARY KEY (model_id, key)
) WITHOUT ROWID;

CREATE TABLE model_versions (
    model_id    INTEGER NOT NULL REFERENCES registered_models(id) ON DELETE CASCADE,
    version     INTEGER NOT NULL,
    run_id      TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    files       TEXT    NOT NULL,
    description TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL DEFAULT 'ready',
    lineage     TEXT    NOT NULL,
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (model_id, version)
) WITHOUT ROWID;
CREATE INDEX model_versions_by_run ON model_versions(run_id);

CREATE TABLE model_version_tags (
    model_id INTEGER NOT NULL,
    version  INTEGER NOT NULL,
    key      TEXT    NOT NULL,
    value    TEXT    NOT NULL,
    PRIMARY KEY (model_id, version, key),
    FOREIGN KEY (model_id, version) REFERENCES model_versions(model_id, version) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE model_aliases (
    model_id INTEGER NOT NULL,
    alias    TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    PRIMARY KEY (model_id, alias),
    FOREIGN KEY (model_id, version) REFERENCES model_versions(model_id, version) ON DELETE CASCADE
) WITHOUT ROWID;
