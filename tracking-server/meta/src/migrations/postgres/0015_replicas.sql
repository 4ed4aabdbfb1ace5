-- Coordination of servers sharing one database.
-- PostgreSQL version of ../0015_replicas.sql: INTEGER -> BIGINT, no WITHOUT ROWID.
--
-- Which server compacts a run now: a run is compacted by one server at a time. A lease past
-- `until_ms` is free again (its holder died or gave up).
CREATE TABLE compaction_leases (
    run_id   TEXT    PRIMARY KEY,
    holder   TEXT    NOT NULL,
    until_ms BIGINT  NOT NULL
);

-- Runs whose summaries count points that a server (its data folder) holds in its buffer and no
-- metric file holds yet. While another server holds some, a server does not replace a run's
-- summaries with ones it recomputed from the files and its own buffer. A row past `until_ms`
-- is a server's that died and never came back.
CREATE TABLE unpersisted_runs (
    run_id    TEXT    NOT NULL,
    folder_id TEXT    NOT NULL,
    until_ms  BIGINT  NOT NULL,
    PRIMARY KEY (run_id, folder_id)
);

-- Moves on with every write of a run's summaries, by any server: summaries read for an earlier
-- answer are used again while it is unchanged. Not one of the columns that move `revision`.
ALTER TABLE runs ADD COLUMN summaries_revision BIGINT NOT NULL DEFAULT 0;

-- 1 when a server folded in points of which some may be steps another server wrote too (their
-- lowest step was not above the stored last step): the counts may be too high until a server
-- recomputes the summary from the points.
ALTER TABLE metric_summaries ADD COLUMN recompute BIGINT NOT NULL DEFAULT 0;
CREATE INDEX metric_summaries_to_recompute ON metric_summaries(run_id) WHERE recompute = 1;
