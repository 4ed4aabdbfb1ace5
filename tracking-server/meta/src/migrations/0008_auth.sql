-- Users and their API keys, for a server started with --auth. A key is shown once; only its
-- SHA-256 is kept. `auth_generation` counts changes that can take access away (a key revoked, a
-- user removed), so a running server drops what it cached about keys when another process,
-- such as `trainlog keys revoke`, made one.
CREATE TABLE users (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    is_admin   INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id           TEXT    PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    sha256       BLOB    NOT NULL,
    created_ms   INTEGER NOT NULL,
    last_used_ms INTEGER,
    revoked_ms   INTEGER
);
CREATE INDEX api_keys_by_user ON api_keys(user_id);

CREATE TABLE project_members (
    project_id INTEGER NOT NULL REFERENCES projects(id),
    user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role       TEXT    NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    PRIMARY KEY (project_id, user_id)
);

CREATE TABLE auth_state (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
INSERT INTO auth_state (id, generation) VALUES (1, 0);
