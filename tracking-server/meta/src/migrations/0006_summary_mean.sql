-- Sum of a series' non-NaN values and how many there are, for its mean. Rows written before
-- this migration have no sum (NULL) and so no mean until the series is summarised again.
ALTER TABLE metric_summaries ADD COLUMN sum REAL;
ALTER TABLE metric_summaries ADD COLUMN sum_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE metric_summaries ADD COLUMN mean REAL GENERATED ALWAYS AS (sum / NULLIF(sum_count, 0)) VIRTUAL;
