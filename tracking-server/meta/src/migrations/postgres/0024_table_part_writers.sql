-- PostgreSQL version of ../0024_table_part_writers.sql: INTEGER -> BIGINT.
--
-- A table part sent with a writer (a token one process of a run makes for itself) keeps the
-- writer and the writer's own number of the part. The part takes the next free index at its
-- step the first time it arrives and the same index whenever it is sent again (a retry after a
-- lost answer), so a resumed process never replaces a part an earlier process appended.
ALTER TABLE media_items ADD COLUMN writer TEXT;
ALTER TABLE media_items ADD COLUMN writer_idx BIGINT;
CREATE UNIQUE INDEX media_items_by_writer ON media_items (run_id, key, step, writer, writer_idx);
