-- PostgreSQL version of ../0021_media_histograms.sql: INTEGER -> BIGINT, no WITHOUT ROWID.
-- Histograms logged with runs: counts over bin edges per key and step, as JSON arrays of numbers
-- (edges one longer than counts). A table's parts are media items of kind 'table' whose `detail`
-- also names their mode (replace or append) and row count.
CREATE TABLE media_histograms (
    run_id       TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    step         BIGINT  NOT NULL,
    edges        TEXT    NOT NULL,
    counts       TEXT    NOT NULL,
    timestamp_ms BIGINT  NOT NULL,
    PRIMARY KEY (run_id, key, step)
);
