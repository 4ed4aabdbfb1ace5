-- Descriptive JSON documents recorded with a run, one per section: `environment` (OS, CPU,
-- GPUs, Python, packages, command line), `code` (git commit, branch, remote, dirty diff), ...
CREATE TABLE run_metadata (
    run_id     TEXT    NOT NULL,
    section    TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, section)
) WITHOUT ROWID;
