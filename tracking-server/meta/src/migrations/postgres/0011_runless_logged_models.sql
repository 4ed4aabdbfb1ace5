-- A model logged outside any run gets a run of its own to hold its files (so every model file
-- still belongs to a run, with its lineage); MLflow's view shows such a model without a run.
-- PostgreSQL version of ../0011_runless_logged_models.sql: INTEGER -> BIGINT.
ALTER TABLE logged_models ADD COLUMN own_run BIGINT NOT NULL DEFAULT 0;
