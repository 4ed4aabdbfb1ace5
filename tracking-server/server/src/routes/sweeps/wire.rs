//! The sweeps' wire types: sweeps, trials, and what agents send and get.

use crate::wire::{integer, Float};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSweep {
    /// The sweep file's text (YAML), as `trainlog sweep` reads it.
    #[schema(min_length = 1, max_length = 1048576)]
    pub config: String,
    /// Else the sweep file's `project`.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$"
    )]
    pub project: Option<String>,
    /// Else the sweep file's `name`.
    #[schema(max_length = 476)]
    pub name: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct SweepMetric {
    pub name: String,
    /// "minimize" or "maximize".
    pub goal: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Money {
    pub usd: Option<f64>,
    pub gpu_hours: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct Spent {
    pub usd: f64,
    pub gpu_hours: f64,
}

#[derive(Serialize, ToSchema)]
pub struct BestTrial {
    pub trial: i64,
    pub run_id: String,
    pub value: f64,
    #[schema(value_type = Object)]
    pub params: Value,
}

#[derive(Serialize, ToSchema)]
pub struct BestSoFar {
    /// Trials ended so far.
    pub trials: usize,
    pub trial: i64,
    pub ended_time: Option<i64>,
    pub value: f64,
    pub best: f64,
}

/// A sweep with its state, trial counts by state, best trial, spending and best-so-far curve.
#[derive(Serialize, ToSchema)]
pub struct SweepView {
    pub id: String,
    pub project: String,
    pub name: String,
    /// running, stopped or finished.
    pub state: String,
    /// run_cap, budget, grid_exhausted or stopped; empty while it runs.
    pub ended_reason: String,
    /// grid, random or tpe.
    pub method: &'static str,
    pub metric: SweepMetric,
    pub command: Vec<String>,
    pub run_cap: Option<u64>,
    /// Size of the grid, for grid sweeps.
    pub grid_size: Option<u64>,
    pub budget: Money,
    pub spent: Spent,
    pub trial_count: usize,
    pub counts: BTreeMap<String, u64>,
    pub best: Option<BestTrial>,
    pub best_so_far: Vec<BestSoFar>,
    pub parameters: Vec<String>,
    /// The sweep file as given.
    pub config: String,
    pub created_time: i64,
    pub updated_time: i64,
}

#[derive(Serialize, ToSchema)]
pub struct SweepList {
    pub sweeps: Vec<SweepView>,
}

#[derive(Serialize, ToSchema)]
pub struct TrialView {
    pub index: i64,
    pub run_id: String,
    #[schema(value_type = Object)]
    pub params: Value,
    /// running, finished, failed, pruned or preempted.
    pub state: String,
    pub attempts: i64,
    pub agent: String,
    pub slot: String,
    pub gpus: f64,
    pub bracket: Option<i64>,
    pub exit_code: Option<i64>,
    /// The last lines the trial printed.
    pub output_tail: String,
    pub stop_reason: String,
    pub created_time: i64,
    pub started_time: i64,
    pub ended_time: Option<i64>,
    pub heartbeat_time: i64,
    pub run_seconds: f64,
}

/// A trial with its result so far.
#[derive(Serialize, ToSchema)]
pub struct TrialResult {
    #[serde(flatten)]
    pub trial: TrialView,
    /// The sweep's metric, last value in the trial's run.
    pub metric: Option<Float>,
    pub cost_usd: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct TrialList {
    pub trials: Vec<TrialResult>,
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NextTrialRequest {
    /// The agent's name, `host:pid` by convention.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub agent: String,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub slot: String,
    /// GPUs the trial will hold; a share counts as a fraction.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1024)]
    pub gpus: f64,
}

/// What an agent needs to start a trial.
#[derive(Serialize, ToSchema)]
pub struct Assignment {
    /// Always "trial".
    #[schema(value_type = String)]
    pub status: &'static str,
    pub sweep_id: String,
    pub project: String,
    pub index: i64,
    pub run_id: String,
    #[schema(value_type = Object)]
    pub params: Value,
    pub command: Vec<String>,
    pub attempt: i64,
    /// True when a preempted trial starts again with its run.
    pub resume: bool,
    pub metric: String,
}

/// No trial to start: "done" (the sweep ended) or "wait" (ask again later).
#[derive(Serialize, ToSchema)]
pub struct NoTrial {
    pub status: &'static str,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum NextTrial {
    Trial(Assignment),
    None(NoTrial),
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The attempt the agent runs; a report about another attempt answers stop.
    #[serde(default, deserialize_with = "integer::optional")]
    pub attempt: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct StopAnswer {
    pub state: String,
    /// True when the trial must stop (pruned, stopped sweep, superseded attempt).
    pub stop: bool,
    pub reason: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndTrial {
    pub outcome: TrialOutcome,
    /// The attempt that ended; a late report about an older attempt changes nothing.
    #[serde(default, deserialize_with = "integer::optional")]
    pub attempt: Option<i64>,
    #[serde(default, deserialize_with = "integer::optional")]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub output_tail: String,
}

/// How a trial's attempt ended.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum TrialOutcome {
    Finished,
    Failed,
    Pruned,
    Preempted,
}

impl TrialOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            TrialOutcome::Finished => "finished",
            TrialOutcome::Failed => "failed",
            TrialOutcome::Pruned => "pruned",
            TrialOutcome::Preempted => "preempted",
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct RunTrial {
    pub sweep_id: String,
    pub trial: i64,
    #[schema(value_type = Object)]
    pub params: Value,
    pub state: String,
    pub stop: bool,
    pub reason: Option<String>,
}
