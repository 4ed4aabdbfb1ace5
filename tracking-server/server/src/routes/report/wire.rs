//! The report's wire types: each group with its figures under their names, why a figure is null,
//! how many runs each covers and the inputs it was computed from; the runs behind the figures.

use serde::Serialize;
use std::collections::BTreeMap;
use trainlog_meta::report::{Report, ReportGroup, RunBrief};
use utoipa::ToSchema;

/// The training report.
#[derive(Serialize, ToSchema)]
pub struct ReportView {
    /// The runs it covers started in [since, until), ms since the Unix epoch.
    pub since: i64,
    pub until: i64,
    /// What the groups are: all, or one or two (comma-separated) of project, user, group,
    /// tag:KEY, gpu, provider, pricing, week, day.
    pub by: String,
    /// A GPU-second counts as active above this utilization, percent.
    pub active_above: u32,
    /// How each figure is defined.
    pub definitions: BTreeMap<String, String>,
    /// Every run of the report in one group: archived runs, and runs deleted for good (see
    /// `deleted_for_good`), included.
    pub total: GroupView,
    /// Runs deleted for good whose spend the total still includes (the spend ledger), and what
    /// they spent; `trainlog ledger forget` removes a run from it. None in a filtered report.
    pub deleted_for_good: DeletedForGoodView,
    pub groups: Vec<GroupView>,
    /// Runs whose contribution could not be brought up to date for this answer: they count with
    /// their last computed one, or not at all when they have none yet.
    pub pending_runs: i64,
    /// The runs behind the figures.
    pub runs: RunLists,
    /// The budgets of the projects in the report, with this month's spend.
    pub budgets: Vec<super::budgets::BudgetView>,
}

/// Runs deleted for good that a report's total includes.
#[derive(Serialize, ToSchema)]
pub struct DeletedForGoodView {
    pub runs: i64,
    /// What those of them whose every node had a price cost.
    pub cost_usd: f64,
    pub gpu_hours: f64,
}

/// One group: its runs and its figures. A figure that cannot be computed is null, and `reasons`
/// says why; a figure that leaves runs out says so there too.
#[derive(Serialize, ToSchema)]
pub struct GroupView {
    /// The project, user, group, tag value, GPU model, provider or pricing; for a week or a day,
    /// its first date (YYYY-MM-DD, UTC); with two breakdowns both, joined by " / "; empty for
    /// the total.
    pub group: String,
    /// Each breakdown's value, in the order `by` names them.
    pub keys: Vec<String>,
    pub runs: i64,
    /// Active GPU-hours / provisioned GPU-hours, 0 to 1.
    pub gpu_utilization_rate: Option<f64>,
    pub idle_gpu_hours: Option<f64>,
    /// Mean seconds from submission to start.
    pub queue_wait_s: Option<f64>,
    pub cost_usd: Option<f64>,
    /// Cost per active GPU-hour.
    pub cost_per_gpu_hour_usd: Option<f64>,
    pub cost_per_experiment_usd: Option<f64>,
    /// The scorecard's definition: the share of GPU-hours on spot capacity, 0 to 1 (not dollars
    /// saved: see `spot_savings_usd`).
    pub spot_savings_rate: Option<f64>,
    /// Dollars spot capacity saved: Σ (the catalog's on-demand price − the price paid) × hours.
    pub spot_savings_usd: Option<f64>,
    /// Finished / ended, 0 to 1.
    pub job_success_rate: Option<f64>,
    pub infra_failures: i64,
    pub code_failures: i64,
    pub checkpoint_restore_rate: Option<f64>,
    pub experiments_per_user_week: Option<f64>,
    /// Seconds from submission to the end of a finished run: median and 90th percentile.
    pub time_to_result_median_s: Option<f64>,
    pub time_to_result_p90_s: Option<f64>,
    /// Kilowatt-hours the runs' GPUs used (NVML's energy counters), over the runs that measured it.
    pub energy_kwh: Option<f64>,
    /// Model FLOPs utilization: useful GPU-hours / provisioned GPU-hours, 0 to 1.
    pub mfu: Option<f64>,
    /// Why a figure is null, or which runs it leaves out, by figure name.
    pub reasons: BTreeMap<String, String>,
    /// How many runs each figure is computed from, by figure name.
    pub covers: BTreeMap<String, i64>,
    pub inputs: InputsView,
}

/// What a group's figures are computed from.
#[derive(Serialize, ToSchema)]
pub struct InputsView {
    /// The period its per-week figure counts, ms since the Unix epoch.
    pub since: i64,
    pub until: i64,
    pub users: i64,
    pub finished: i64,
    pub killed: i64,
    pub running: i64,
    pub provisioned_gpu_hours: f64,
    pub spot_gpu_hours: f64,
    pub runs_with_gpus: i64,
    pub runs_with_gpu_series: i64,
    /// Of those, the runs whose active GPU-seconds SM active (GPM) measured on some GPU; NVML's
    /// utilization measured the rest.
    pub runs_measured_by_sm_active: i64,
    /// Provisioned and active GPU-hours of the runs with a GPU series.
    pub sampled_gpu_hours: f64,
    pub active_gpu_hours: f64,
    /// Of `sampled_gpu_hours`, the time no sample measured (a sample counts for at most one
    /// sampling interval): counted as not active.
    pub unmeasured_gpu_hours: f64,
    /// FLOPs the runs' models did / their GPUs' peak dense FLOPS, in hours.
    pub useful_gpu_hours: f64,
    pub priced_runs: i64,
    pub unpriced_runs: i64,
    /// The cost of the idle GPU-hours of the priced runs with a GPU series: their cost less
    /// each active GPU-second at its own attempt's price.
    pub idle_usd: f64,
    pub queued_runs: i64,
    pub queue_wait_max_s: Option<f64>,
    pub checkpoint_restores: i64,
    pub checkpoint_restores_ok: i64,
}

/// The runs behind the figures, ten each.
#[derive(Serialize, ToSchema)]
pub struct RunLists {
    pub most_expensive: Vec<RunBriefView>,
    /// By idle GPU-hours.
    pub idlest: Vec<RunBriefView>,
    /// Newest first.
    pub infra_failures: Vec<RunBriefView>,
}

/// A run in one of the report's lists.
#[derive(Serialize, ToSchema)]
pub struct RunBriefView {
    pub id: String,
    pub name: String,
    pub project: String,
    pub user: String,
    /// running, finished, code (failed on its own), infra (preempted, lost, killed by the
    /// system) or killed (by its user).
    pub outcome: String,
    pub start_time: i64,
    pub cost_usd: Option<f64>,
    pub gpu_hours: f64,
    pub idle_gpu_hours: Option<f64>,
    pub failure: Option<String>,
    /// What measured its active GPU-seconds: sm_active (GPM, the share of streaming
    /// multiprocessors at work), util (NVML's share of time any kernel ran), mixed, or empty
    /// without a series.
    pub utilization_source: String,
}

impl From<RunBrief> for RunBriefView {
    fn from(r: RunBrief) -> Self {
        RunBriefView {
            id: r.id,
            name: r.name,
            project: r.project,
            user: r.user,
            outcome: r.outcome,
            start_time: r.start_ms,
            cost_usd: r.cost_usd,
            gpu_hours: r.gpu_hours,
            idle_gpu_hours: r.idle_gpu_hours,
            failure: r.failure,
            utilization_source: r.utilization_source,
        }
    }
}

impl From<ReportGroup> for GroupView {
    fn from(g: ReportGroup) -> Self {
        let (s, f) = (g.sums, g.figures);
        GroupView {
            group: g.group,
            keys: g.keys,
            runs: s.runs,
            gpu_utilization_rate: f.gpu_utilization_rate,
            idle_gpu_hours: f.idle_gpu_hours,
            queue_wait_s: f.queue_wait_s,
            cost_usd: f.cost_usd,
            cost_per_gpu_hour_usd: f.cost_per_gpu_hour_usd,
            cost_per_experiment_usd: f.cost_per_experiment_usd,
            spot_savings_rate: f.spot_savings_rate,
            spot_savings_usd: f.spot_savings_usd,
            job_success_rate: f.job_success_rate,
            infra_failures: f.infra_failures,
            code_failures: f.code_failures,
            checkpoint_restore_rate: f.checkpoint_restore_rate,
            experiments_per_user_week: f.experiments_per_user_week,
            time_to_result_median_s: f.time_to_result_median_s,
            time_to_result_p90_s: f.time_to_result_p90_s,
            energy_kwh: f.energy_kwh,
            mfu: f.mfu,
            reasons: f.reasons.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            covers: f.covers.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            inputs: InputsView {
                since: g.since_ms,
                until: g.until_ms,
                users: s.users,
                finished: s.finished,
                killed: s.killed,
                running: s.running,
                provisioned_gpu_hours: s.gpu_hours,
                spot_gpu_hours: s.spot_gpu_hours,
                runs_with_gpus: s.gpu_runs,
                runs_with_gpu_series: s.sampled_runs,
                runs_measured_by_sm_active: s.sm_active_runs,
                sampled_gpu_hours: s.sampled_gpu_hours,
                active_gpu_hours: s.active_gpu_hours,
                unmeasured_gpu_hours: (s.sampled_gpu_hours - s.covered_gpu_hours).max(0.0),
                useful_gpu_hours: s.useful_gpu_hours,
                priced_runs: s.priced_runs,
                unpriced_runs: s.runs - s.priced_runs,
                idle_usd: s.idle_usd,
                queued_runs: s.queued_runs,
                queue_wait_max_s: s.queue_wait_ms_max.map(|ms| ms as f64 / 1000.0),
                checkpoint_restores: s.restores,
                checkpoint_restores_ok: s.restores_ok,
            },
        }
    }
}

impl ReportView {
    pub fn new(
        report: Report,
        pending_runs: i64,
        by: String,
        active_above: u32,
        budgets: Vec<super::budgets::BudgetView>,
    ) -> Self {
        ReportView {
            since: report.since_ms,
            until: report.until_ms,
            by,
            active_above,
            definitions: trainlog_meta::report::definitions(active_above)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            deleted_for_good: DeletedForGoodView {
                runs: report.deleted_for_good.runs,
                cost_usd: report.deleted_for_good.cost_usd,
                gpu_hours: report.deleted_for_good.gpu_hours,
            },
            total: report.total.into(),
            groups: report.groups.into_iter().map(Into::into).collect(),
            pending_runs,
            runs: RunLists {
                most_expensive: report.most_expensive.into_iter().map(Into::into).collect(),
                idlest: report.idlest.into_iter().map(Into::into).collect(),
                infra_failures: report.infra_failures.into_iter().map(Into::into).collect(),
            },
            budgets,
        }
    }
}
