-- Roles on projects and registered models: `read`, `write`, `admin`, or `none` to keep a user out
-- of something everyone else may read. A user without a row gets the server's default role.
-- PostgreSQL version of ../0009_roles.sql: INTEGER -> BIGINT.
DROP TABLE project_members;

CREATE TABLE project_members (
    project_id BIGINT  NOT NULL REFERENCES projects(id),
    user_id    BIGINT  NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role       TEXT    NOT NULL CHECK (role IN ('none', 'read', 'write', 'admin')),
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX project_members_by_user ON project_members(user_id);

CREATE TABLE model_members (
    model_id BIGINT  NOT NULL REFERENCES registered_models(id) ON DELETE CASCADE,
    user_id  BIGINT  NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role     TEXT    NOT NULL CHECK (role IN ('none', 'read', 'write', 'admin')),
    PRIMARY KEY (model_id, user_id)
);
CREATE INDEX model_members_by_user ON model_members(user_id);
