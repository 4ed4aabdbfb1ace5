-- Descriptive JSON documents recorded with a run, one per section: `environment` (OS, CPU,
-- GPUs, Python, packages, command line), `code` (git commit, branch, remote, dirty diff), ...
-- PostgreSQL version of ../0002_run_metadata.sql: INTEGER -> BIGINT, no WITHOUT ROWID.
CREATE TABLE run_metadata (
    run_id     TEXT    NOT NULL,
    section    TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    updated_ms BIGINT  NOT NULL,
    PRIMARY KEY (run_id, section)
);
