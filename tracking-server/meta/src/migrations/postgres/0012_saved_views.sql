-- Saved views of a project: a named state of the UI (filter, sort, columns, charts), kept as
-- JSON text the server does not read. `user` is who saved it last (NULL without --auth).
-- PostgreSQL version of ../0012_saved_views.sql: INTEGER -> BIGINT, `user` quoted, no WITHOUT ROWID.
CREATE TABLE saved_views (
    project_id BIGINT  NOT NULL REFERENCES projects(id),
    name       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    "user"     TEXT,
    updated_ms BIGINT  NOT NULL,
    PRIMARY KEY (project_id, name)
);
