-- Which server compacts a run now: servers sharing a database compact a run one at a time. A
-- lease past `until_ms` is free again (its holder died or gave up).
CREATE TABLE compaction_leases (
    run_id   TEXT    PRIMARY KEY,
    holder   TEXT    NOT NULL,
    until_ms INTEGER NOT NULL
) WITHOUT ROWID;
