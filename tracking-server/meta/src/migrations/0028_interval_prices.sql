-- Each GPU-second at its own price, time nothing measured, what spot saved, time to result,
-- what measured utilization, energy, useful GPU-hours (MFU), each attempt's last checkpoint as it ended, and a job's
-- cost in its row.
-- `active_usd_T`: what the GPU-seconds above T % cost, each at its attempt's price (the idle
-- dollars are the cost less these); `sampled_s`: the GPU-seconds the samples cover, each sample
-- for at most one sampling interval; `on_demand_usd`: what the run would have cost at the
-- catalog's on-demand prices (NULL where a spot node's instance has none); `time_to_result_ms`:
-- from submission (or the first start) to the end of a finished run. Every row is computed again.
ALTER TABLE run_usage ADD COLUMN active_usd_0 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_5 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_10 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_15 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_20 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_25 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_30 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_35 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_40 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_45 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_50 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_55 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_60 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_65 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_70 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_75 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_80 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_85 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_90 REAL;
ALTER TABLE run_usage ADD COLUMN active_usd_95 REAL;
ALTER TABLE run_usage ADD COLUMN sampled_s REAL;
ALTER TABLE run_usage ADD COLUMN on_demand_usd REAL;
ALTER TABLE run_usage ADD COLUMN time_to_result_ms INTEGER;
-- What measured its active GPU-seconds (sm_active where the GPUs had GPM, util, mixed), and the
-- kilowatt-hours its GPUs used (their energy counters).
ALTER TABLE run_usage ADD COLUMN utilization_source TEXT;
ALTER TABLE run_usage ADD COLUMN energy_kwh REAL;
-- Useful GPU-hours: the FLOPs its model did / its GPU model's peak dense FLOPS (MFU × GPU-hours).
ALTER TABLE run_usage ADD COLUMN useful_gpu_hours REAL;
-- The days' sums of the same, after the columns they have.
ALTER TABLE usage_rollup ADD COLUMN sampled_s REAL;
ALTER TABLE usage_rollup ADD COLUMN spot_savings_usd REAL;
ALTER TABLE usage_rollup ADD COLUMN spot_savings_runs INTEGER;
ALTER TABLE usage_rollup ADD COLUMN spot_unknown_runs INTEGER;
ALTER TABLE usage_rollup ADD COLUMN sm_active_runs INTEGER;
ALTER TABLE usage_rollup ADD COLUMN energy_kwh REAL;
ALTER TABLE usage_rollup ADD COLUMN energy_runs INTEGER;
ALTER TABLE usage_rollup ADD COLUMN useful_gpu_hours REAL;
ALTER TABLE usage_rollup ADD COLUMN flops_gpu_hours REAL;
ALTER TABLE usage_rollup ADD COLUMN flops_runs INTEGER;
-- A node's on-demand price from the catalog, beside the spot price it paid.
ALTER TABLE run_nodes ADD COLUMN on_demand_usd_per_hour REAL;
-- Nodes priced before: on demand, what they paid is their on-demand price.
UPDATE run_nodes SET on_demand_usd_per_hour = usd_per_hour WHERE NOT EXISTS (
    SELECT 1 FROM run_attempts a WHERE a.run_id = run_nodes.run_id AND a.number = run_nodes.attempt AND a.spot = 1);
-- The last checkpoint an attempt had when it ended, kept then: its lost work stays what it was
-- when checkpoint retention later deletes that checkpoint. `checkpoint_fixed` is 1 once kept.
ALTER TABLE run_attempts ADD COLUMN checkpoint_fixed INTEGER;
ALTER TABLE run_attempts ADD COLUMN checkpoint_step INTEGER;
ALTER TABLE run_attempts ADD COLUMN checkpoint_ms INTEGER;
-- A job's cost in its row, as lists show it: what it cost when the row was written and what its
-- running attempt costs an hour, so the runs table shows the job's own figure.
ALTER TABLE run_jobs ADD COLUMN cost_usd REAL;
ALTER TABLE run_jobs ADD COLUMN usd_per_hour REAL;
ALTER TABLE run_jobs ADD COLUMN cost_at_ms INTEGER;
ALTER TABLE run_jobs ADD COLUMN unpriced_nodes INTEGER;
UPDATE runs SET usage_revision = NULL;
