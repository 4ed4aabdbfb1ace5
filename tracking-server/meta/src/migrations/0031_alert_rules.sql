-- A project's alert rules, kept as people wrote them ("train/loss not finite", "failed"); the
-- server parses them when it loads them. A removed rule keeps its row for the alerts it raised.
CREATE TABLE alert_rules (
    id         INTEGER PRIMARY KEY,
    project_id INTEGER NOT NULL REFERENCES projects(id),
    text       TEXT    NOT NULL,
    created_by TEXT,
    created_ms INTEGER NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX alert_rules_of_project ON alert_rules (project_id) WHERE deleted = 0;
-- The rules on runs' ends read the runs changed since they last looked.
CREATE INDEX runs_by_revision ON runs (revision);
