-- MLflow 3's logged models: a model a run logged (its files are the run's artifacts under
-- models/{id}/), with its own name, status, params and tags.
-- PostgreSQL version of ../0010_logged_models.sql: INTEGER -> BIGINT.
CREATE TABLE logged_models (
    id          TEXT    PRIMARY KEY,
    project_id  BIGINT  NOT NULL REFERENCES projects(id),
    run_id      TEXT    NOT NULL REFERENCES runs(id),
    name        TEXT    NOT NULL,
    model_type  TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL,
    params      TEXT    NOT NULL DEFAULT '{}',
    tags        TEXT    NOT NULL DEFAULT '{}',
    created_ms  BIGINT  NOT NULL,
    updated_ms  BIGINT  NOT NULL
);
CREATE INDEX logged_models_by_run ON logged_models(run_id);
CREATE INDEX logged_models_by_project ON logged_models(project_id, created_ms);
