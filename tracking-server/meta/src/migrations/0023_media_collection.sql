-- When each media blob's bytes were last sent (its first upload, or a later upload of the same
-- bytes): a blob that no item names any more is collected only once this is older than the
-- collector's minimum age, so an upload whose items are not recorded yet keeps its blob.
--
-- From this version, a row of media_unreferenced is also a deletion in progress: while it is
-- there, no row of media_blobs is written for the blob (an upload is answered 503 and sent
-- again), so the object deleted is never one uploaded since.
ALTER TABLE media_blobs ADD COLUMN stored_ms INTEGER NOT NULL DEFAULT 0;
UPDATE media_blobs SET stored_ms = created_ms;
