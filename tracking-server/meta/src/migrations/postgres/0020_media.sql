-- PostgreSQL version of ../0020_media.sql: INTEGER -> BIGINT, no WITHOUT ROWID.
-- Media logged with runs (images, audio, video, text, files). The bytes live in the object
-- store, content-addressed per project at projects/{project_id}/media/sha256/{first two hex
-- digits}/{sha256}; a blob is written before its row here, and an item names only blobs that
-- have a row.
CREATE TABLE media_blobs (
    project_id BIGINT  NOT NULL,
    sha256     TEXT    NOT NULL,
    size       BIGINT  NOT NULL,
    mime       TEXT    NOT NULL,
    created_ms BIGINT  NOT NULL,
    PRIMARY KEY (project_id, sha256)
);

-- The idx-th item logged under key at step. `detail` is JSON: boxes, masks and class labels.
CREATE TABLE media_items (
    run_id       TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    step         BIGINT  NOT NULL,
    idx          BIGINT  NOT NULL,
    kind         TEXT    NOT NULL,
    blob         TEXT    NOT NULL,
    thumbnail    TEXT,
    mime         TEXT    NOT NULL,
    size         BIGINT  NOT NULL,
    width        BIGINT,
    height       BIGINT,
    caption      TEXT,
    detail       TEXT    NOT NULL,
    timestamp_ms BIGINT  NOT NULL,
    PRIMARY KEY (run_id, key, step, idx)
);

-- The blobs a run's items name (bytes, thumbnails, masks), so a run may read them and a blob
-- no run names can be found.
CREATE TABLE media_refs (
    run_id     TEXT    NOT NULL,
    sha256     TEXT    NOT NULL,
    project_id BIGINT  NOT NULL,
    PRIMARY KEY (run_id, sha256)
);
CREATE INDEX media_refs_by_blob ON media_refs (project_id, sha256);

-- Runs whose Parquet index of media (projects/{project_id}/media/runs/{run_id}/index.parquet)
-- is behind their rows: since when, and how many changes since (an index written from rows read
-- before a later change leaves the run dirty).
CREATE TABLE media_index_dirty (
    run_id     TEXT    NOT NULL PRIMARY KEY,
    project_id BIGINT  NOT NULL,
    since_ms   BIGINT  NOT NULL,
    changes    BIGINT  NOT NULL
);

-- Blobs that no run names any more since a run was deleted for good: their rows are gone, their
-- objects are still to be deleted.
CREATE TABLE media_unreferenced (
    project_id BIGINT  NOT NULL,
    sha256     TEXT    NOT NULL,
    PRIMARY KEY (project_id, sha256)
);
