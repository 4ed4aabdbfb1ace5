-- Alert rules a server admin gives every project: each project's runs are checked against them
-- as against its own rules, and their alerts go to the project's channels.
CREATE TABLE installation_rules (
    id         INTEGER PRIMARY KEY,
    text       TEXT    NOT NULL,
    created_by TEXT,
    created_ms INTEGER NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0
);
