-- Sum of a series' non-NaN values and how many there are, for its mean. Rows written before
-- this migration have no sum (NULL) and so no mean until the series is summarised again.
-- PostgreSQL version of ../0006_summary_mean.sql: REAL -> DOUBLE PRECISION, INTEGER -> BIGINT;
-- `mean` is a STORED generated column (PostgreSQL 15 has no VIRTUAL ones; it reads the same).
ALTER TABLE metric_summaries ADD COLUMN sum DOUBLE PRECISION;
ALTER TABLE metric_summaries ADD COLUMN sum_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE metric_summaries ADD COLUMN mean DOUBLE PRECISION GENERATED ALWAYS AS (sum / NULLIF(sum_count, 0)) STORED;
