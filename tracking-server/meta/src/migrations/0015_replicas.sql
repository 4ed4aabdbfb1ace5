-- Coordination of servers sharing one database.
--
-- Which server compacts a run now: a run is compacted by one server at a time. A lease past
-- `until_ms` is free again (its holder died or gave up).
CREATE TABLE compaction_leases (
    run_id   TEXT    PRIMARY KEY,
    holder   TEXT    NOT NULL,
    until_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Runs whose summaries count points that a server (its data folder) holds in its buffer and no
-- metric file holds yet. While another server holds some, a server does not replace a run's
-- summaries with ones it recomputed from the files and its own buffer. A row past `until_ms`
-- is a server's that died and never came back.
CREATE TABLE unpersisted_runs (
    run_id    TEXT    NOT NULL,
    folder_id TEXT    NOT NULL,
    until_ms  INTEGER NOT NULL,
    PRIMARY KEY (run_id, folder_id)
) WITHOUT ROWID;
