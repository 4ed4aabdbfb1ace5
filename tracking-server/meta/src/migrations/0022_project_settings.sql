-- Project settings a project admin changes: whether the runs of the project keep the
-- uncommitted git diff their clients record (1, the default) or have it dropped on ingest (0).
ALTER TABLE projects ADD COLUMN capture_diff INTEGER NOT NULL DEFAULT 1;
