//! The training report: what the runs in a scope cost, how busy their GPUs were, how long they
//! waited and how often they failed for reasons that were not their code, in groups.
//!
//! Each run's contribution is a row of `run_usage` (`usage.rs`, pure), computed by the caller
//! from [`UsageInputs`] and the run's GPU series and written back with the revisions it was
//! computed at; the report adds the rows up in one SQL statement per question and turns the
//! sums into figures (`figures.rs`, pure).

mod budgets;
mod figures;
mod sums;
mod time_to_result;
mod usage;

pub use budgets::{month_of, BudgetSpend};
pub use figures::{definitions, figures, GroupFigures, GroupSums, FIGURES};
pub use usage::{
    activity, busy_series, spans, usage, Activity, RunBasics, RunUsage, Samples, Span, DEFAULT_THRESHOLD, THRESHOLDS,
};

use crate::db::{vals, Db, Dialect, Row, Value};
use crate::jobs::{AttemptFigures, JobFigures};
use crate::search::{self, Lifecycle, RunScope};
use crate::{not_found, Error, MetaStore, Result};
pub(crate) use sums::{day_of as day_of_sql, DAY_MS};
use sums::{in_scope, SUMS};

const WEEK_MS: i64 = 7 * DAY_MS;

/// What the report's groups are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Breakdown {
    Project,
    User,
    Group,
    Tag(String),
    Gpu,
    Provider,
    Pricing,
    Week,
    Day,
}

impl Breakdown {
    /// `project`, `user`, `group`, `tag:KEY`, `gpu`, `provider`, `pricing` (spot or on-demand),
    /// `week` or `day`.
    pub fn parse(text: &str) -> Result<Breakdown> {
        Ok(match text.trim() {
            "project" => Breakdown::Project,
            "user" => Breakdown::User,
            "group" => Breakdown::Group,
            "gpu" => Breakdown::Gpu,
            "provider" => Breakdown::Provider,
            "pricing" | "spot" => Breakdown::Pricing,
            "week" => Breakdown::Week,
            "day" => Breakdown::Day,
            other => match other.strip_prefix("tag:") {
                Some(key) if !key.is_empty() => Breakdown::Tag(key.to_owned()),
                _ => {
                    return Err(Error::Invalid {
                        field: "by".into(),
                        reason: format!(
                            "expected all, or one or two of project, user, group, tag:KEY, gpu, provider, pricing, week, day separated by a comma, got {other:?}"
                        ),
                    })
                }
            },
        })
    }

    /// The breakdown as `parse` reads it.
    pub fn name(&self) -> String {
        match self {
            Breakdown::Project => "project".into(),
            Breakdown::User => "user".into(),
            Breakdown::Group => "group".into(),
            Breakdown::Tag(key) => format!("tag:{key}"),
            Breakdown::Gpu => "gpu".into(),
            Breakdown::Provider => "provider".into(),
            Breakdown::Pricing => "pricing".into(),
            Breakdown::Week => "week".into(),
            Breakdown::Day => "day".into(),
        }
    }

    /// `by`: one or two breakdowns separated by a comma (`project,week`); empty or `all` for
    /// one group of everything.
    pub fn parse_list(text: &str) -> Result<Vec<Breakdown>> {
        let text = text.trim();
        if text.is_empty() || text == "all" {
            return Ok(Vec::new());
        }
        let list = text.split(',').map(Breakdown::parse).collect::<Result<Vec<_>>>()?;
        let invalid = |reason: &str| Err(Error::Invalid { field: "by".into(), reason: reason.into() });
        if list.len() > 2 {
            return invalid("at most two breakdowns, e.g. project,week");
        }
        if list.len() == 2 && list[0] == list[1] {
            return invalid("two different breakdowns");
        }
        Ok(list)
    }

    /// The breakdowns as `parse_list` reads them.
    pub fn list_name(by: &[Breakdown]) -> String {
        if by.is_empty() {
            "all".into()
        } else {
            by.iter().map(Breakdown::name).collect::<Vec<_>>().join(",")
        }
    }

    fn period_ms(&self) -> Option<i64> {
        match self {
            Breakdown::Week => Some(WEEK_MS),
            Breakdown::Day => Some(DAY_MS),
            _ => None,
        }
    }
}

/// Which runs a report covers and how it groups them.
#[derive(Debug, Clone)]
pub struct ReportRequest {
    /// The projects the caller may read (and asked for).
    pub scope: RunScope,
    /// A run-search filter (the search grammar); empty for none.
    pub filter: String,
    /// Runs that started in [since, until), ms since the epoch.
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// What the groups are (none: one group of everything).
    pub by: Vec<Breakdown>,
    /// A GPU-second is active above this utilization, percent: one of [`THRESHOLDS`].
    pub threshold: u32,
    pub now_ms: i64,
    /// Whether the sums may be read from the days added up in advance: the caller brought the
    /// scope's days up to date (`refresh_rollup`). A filter or a tag breakdown reads the runs.
    pub rollup: bool,
}

/// One group of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportGroup {
    /// The project, user, tag value, GPU model… it groups by; a week or day as its first date;
    /// with two breakdowns, both joined by " / ".
    pub group: String,
    /// Each breakdown's value, in the order asked.
    pub keys: Vec<String>,
    /// The period its figures per week count: the report's range, or the group's week or day in it.
    pub since_ms: i64,
    pub until_ms: i64,
    pub sums: GroupSums,
    pub figures: GroupFigures,
}

/// A run as the report's lists show it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunBrief {
    pub id: String,
    pub name: String,
    pub project: String,
    pub user: String,
    pub outcome: String,
    pub start_ms: i64,
    /// None when not every node had a price.
    pub cost_usd: Option<f64>,
    pub gpu_hours: f64,
    /// None without a GPU utilization series.
    pub idle_gpu_hours: Option<f64>,
    pub failure: Option<String>,
    /// What measured its active GPU-seconds: sm_active, util, mixed, or empty.
    pub utilization_source: String,
}

/// What runs deleted for good spent, which the report's sums include (the spend ledger).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeletedSpend {
    pub runs: i64,
    /// Of its runs whose every node had a price.
    pub cost_usd: f64,
    pub gpu_hours: f64,
}

/// The spend ledger's part of the report's total (none in a filtered report: a filter matches
/// runs by what they hold, and these hold nothing any more).
fn deleted_for_good(db: &dyn Db, req: &ReportRequest) -> Result<DeletedSpend> {
    if !req.filter.trim().is_empty() {
        return Ok(DeletedSpend::default());
    }
    let mut scoped = Scoped { with: String::new(), params: Vec::new(), filtered: false };
    let condition = format!("{} AND {}", scoped.in_scope(&req.scope, "l.project_id"), scoped.range(req, "l.start_ms"));
    let row = db.row(
        &format!(
            "SELECT CAST(COUNT(*) AS BIGINT),
                    CAST(SUM(CASE WHEN u.priced = 1 THEN u.cost_usd ELSE 0 END) AS DOUBLE PRECISION),
                    CAST(SUM(u.gpu_hours) AS DOUBLE PRECISION)
             FROM purged_runs l JOIN run_usage u ON u.run_id = l.run_id WHERE l.start_ms IS NOT NULL AND {condition}"
        ),
        &scoped.params,
    )?;
    let Some(row) = row else { return Ok(DeletedSpend::default()) };
    Ok(DeletedSpend {
        runs: row.get(0)?,
        cost_usd: row.get::<Option<f64>>(1)?.unwrap_or_default(),
        gpu_hours: row.get::<Option<f64>>(2)?.unwrap_or_default(),
    })
}

/// The whole report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub since_ms: i64,
    pub until_ms: i64,
    /// The spend ledger's part of `total`.
    pub deleted_for_good: DeletedSpend,
    pub total: ReportGroup,
    pub groups: Vec<ReportGroup>,
    pub most_expensive: Vec<RunBrief>,
    pub idlest: Vec<RunBrief>,
    pub infra_failures: Vec<RunBrief>,
}

/// What a run's row of the report is computed from, besides its GPU series (which the caller
/// reads from the metrics store: `gpu_keys`).
#[derive(Debug, Clone)]
pub struct UsageInputs {
    pub run: String,
    pub basics: RunBasics,
    pub job: Option<(JobFigures, Vec<AttemptFigures>)>,
    /// Its GPU utilization series (`sys/gpu.{i}.util` and `sys/node/{n}/gpu.{i}.util`) and
    /// SM-active series (`….sm_active`, where the GPU has GPM).
    pub gpu_keys: Vec<String>,
    revision: i64,
    summaries_revision: i64,
}

/// What one GPU series of the SDK's sampler measures, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSeries {
    /// `…gpu.{i}.util`: NVML's share of time any kernel ran.
    Util,
    /// `…gpu.{i}.sm_active`: the share of streaming multiprocessors that were busy (GPM).
    SmActive,
    /// `…gpu.{i}.energy_j`: joules used since the sampler opened.
    EnergyJ,
}

/// Which GPU (`sys/gpu.{i}` or `sys/node/{n}/gpu.{i}`) a key of the SDK's sampler is a series
/// of, and what the series measures; None for any other key.
pub fn gpu_series(key: &str) -> Option<(&str, GpuSeries)> {
    let rest = key.strip_prefix("sys/")?;
    let rest = match rest.strip_prefix("node/") {
        Some(node) => match node.split_once('/') {
            Some((n, rest)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => rest,
            _ => return None,
        },
        None => rest,
    };
    let (index, kind) = rest.strip_prefix("gpu.")?.split_once('.')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let kind = match kind {
        "util" => GpuSeries::Util,
        "sm_active" => GpuSeries::SmActive,
        "energy_j" => GpuSeries::EnergyJ,
        _ => return None,
    };
    Some((&key[..key.len() - rest.len() + 4 + index.len()], kind))
}

/// Whether a metric key is a GPU utilization series of the SDK's sampler.
pub fn is_gpu_utilization_key(key: &str) -> bool {
    gpu_series(key).is_some_and(|(_, kind)| kind == GpuSeries::Util)
}

fn threshold_column(threshold: u32) -> Result<String> {
    if THRESHOLDS.contains(&threshold) {
        Ok(format!("u.active_s_{threshold}"))
    } else {
        Err(Error::Invalid {
            field: "active_above".into(),
            reason: format!("the threshold is a multiple of 5 from 0 to 95 (percent), got {threshold}"),
        })
    }
}

/// Which runs a report reads, as SQL: a `WITH` clause of the runs a search filter selects, when
/// there is one, and the parameters of everything written so far (each condition binds its
/// values when it is written, so a statement binds only what it uses).
struct Scoped {
    with: String,
    params: Vec<Value>,
    filtered: bool,
}

impl Scoped {
    fn new(db: &dyn Db, req: &ReportRequest) -> Result<Scoped> {
        if req.filter.trim().is_empty() {
            return Ok(Scoped { with: String::new(), params: Vec::new(), filtered: false });
        }
        let query = search::build_ids_in(db.dialect(), req.scope.clone(), Lifecycle::All, &req.filter)
            .map_err(|e| Error::Invalid { field: e.field.to_owned(), reason: e.reason })?;
        Ok(Scoped { with: format!("WITH scope AS ({})", query.sql), params: query.params, filtered: true })
    }

    /// The run `r` is in the scope (in one of its projects, past its filter). Archived runs are:
    /// what they spent was spent.
    fn runs(&mut self, req: &ReportRequest) -> String {
        if self.filtered {
            "r.id IN (SELECT id FROM scope)".into()
        } else {
            self.in_scope(&req.scope, "r.project_id")
        }
    }

    /// `{column}` is in the report's period.
    fn range(&mut self, req: &ReportRequest, column: &str) -> String {
        let since = self.bind(req.since_ms.unwrap_or(i64::MIN));
        let until = self.bind(req.until_ms.unwrap_or(i64::MAX));
        format!("{column} >= {since} AND {column} < {until}")
    }

    /// Adds a parameter; answers its placeholder.
    fn bind(&mut self, value: impl Into<Value>) -> String {
        self.params.push(value.into());
        format!("?{}", self.params.len())
    }

    /// `column` is one of the scope's projects.
    fn in_scope(&mut self, scope: &RunScope, column: &str) -> String {
        in_scope(scope, column, &mut |v| self.bind(v))
    }

    /// The rows of sums the report groups (as `x`): each run's, or, when the request allows it,
    /// the whole days' added up in advance and the runs of the period's partial first and last day.
    fn source(&mut self, req: &ReportRequest) -> String {
        let t = req.threshold;
        let by_tag = req.by.iter().any(|b| matches!(b, Breakdown::Tag(_)));
        let first_day = req.since_ms.map(|s| s.div_euclid(DAY_MS) + i64::from(s.rem_euclid(DAY_MS) != 0));
        let end_day = req.until_ms.map(|u| u.div_euclid(DAY_MS));
        let whole_days = first_day.zip(end_day).is_none_or(|(first, end)| first < end);
        if !req.rollup || self.filtered || by_tag || !whole_days {
            let condition = format!("{} AND {}", self.runs(req), self.range(req, "r.start_ms"));
            return sums::runs_source(&condition, t);
        }
        let mut days = vec![self.in_scope(&req.scope, "x.project_id")];
        let mut edges = Vec::new();
        if let (Some(since), Some(first)) = (req.since_ms, first_day) {
            days.push(format!("x.day >= {}", self.bind(first)));
            let first_ms = first.saturating_mul(DAY_MS);
            if since < first_ms {
                edges.push(format!("(r.start_ms >= {} AND r.start_ms < {})", self.bind(since), self.bind(first_ms)));
            }
        }
        if let (Some(until), Some(end)) = (req.until_ms, end_day) {
            days.push(format!("x.day < {}", self.bind(end)));
            let end_ms = end.saturating_mul(DAY_MS);
            if end_ms < until {
                edges.push(format!("(r.start_ms >= {} AND r.start_ms < {})", self.bind(end_ms), self.bind(until)));
            }
        }
        let mut source = sums::days_source(&days.join(" AND "), t);
        if !edges.is_empty() {
            let runs = sums::runs_source(&format!("{} AND ({})", self.runs(req), edges.join(" OR ")), t);
            source = format!("{source} UNION ALL {runs}");
        }
        source
    }
}

/// The rows of sums joined with their project.
const FROM_SOURCE: &str = "x JOIN projects p ON p.id = x.project_id";

fn group_expression(by: &Breakdown, scoped: &mut Scoped) -> String {
    match by {
        Breakdown::Project => "p.name".into(),
        Breakdown::User => "x.\"user\"".into(),
        Breakdown::Group => "x.group_name".into(),
        Breakdown::Tag(key) => {
            let key = scoped.bind(key.as_str());
            format!("COALESCE((SELECT t.value FROM tags t WHERE t.run_id = x.run_id AND t.key = {key}), '')")
        }
        Breakdown::Gpu => "x.gpu_model".into(),
        Breakdown::Provider => "x.provider".into(),
        Breakdown::Pricing => "x.pricing".into(),
        // 1970-01-01 was a Thursday: a week starts on the Monday 3 days before day 0's weekday.
        Breakdown::Week => "(x.day - ((x.day + 3) % 7))".into(),
        Breakdown::Day => "x.day".into(),
    }
}

/// Reads the sums from columns `first..`.
fn sums_from(r: &Row, first: usize) -> Result<GroupSums> {
    let f = |i: usize| r.get::<Option<f64>>(first + i).map(Option::unwrap_or_default);
    let n = |i: usize| r.get::<Option<i64>>(first + i).map(Option::unwrap_or_default);
    Ok(GroupSums {
        runs: n(0)?,
        users: n(1)?,
        first_start_ms: r.get(first + 2)?,
        last_start_ms: r.get(first + 3)?,
        finished: n(4)?,
        code_failures: n(5)?,
        infra_failures: n(6)?,
        killed: n(7)?,
        running: n(8)?,
        gpu_hours: f(9)?,
        spot_gpu_hours: f(10)?,
        gpu_runs: n(11)?,
        sampled_runs: n(12)?,
        sampled_gpu_hours: f(13)?,
        active_gpu_hours: f(14)?,
        priced_runs: n(15)?,
        cost_usd: f(16)?,
        priced_sampled_runs: n(17)?,
        priced_sampled_cost_usd: f(18)?,
        priced_active_gpu_hours: f(19)?,
        idle_usd: f(20)?,
        queued_runs: n(21)?,
        queue_wait_ms_sum: n(22)?,
        queue_wait_ms_max: r.get(first + 23)?,
        restores: n(24)?,
        restores_ok: n(25)?,
        covered_gpu_hours: f(26)?,
        spot_savings_usd: f(27)?,
        spot_savings_runs: n(28)?,
        spot_unknown_runs: n(29)?,
        sm_active_runs: n(30)?,
        energy_kwh: f(31)?,
        energy_runs: n(32)?,
        useful_gpu_hours: f(33)?,
        flops_gpu_hours: f(34)?,
        flops_runs: n(35)?,
    })
}

/// A day number (days since 1970-01-01) as its date.
pub fn day_text(day: i64) -> String {
    let julian = day + 2_440_588;
    i32::try_from(julian)
        .ok()
        .and_then(|j| time::Date::from_julian_day(j).ok())
        .map_or_else(|| format!("day {day}"), |d| d.to_string())
}

fn weeks(since: i64, until: i64) -> f64 {
    (until - since).max(0) as f64 / WEEK_MS as f64
}

impl MetaStore {
    /// Runs in the report's scope whose row is missing or older than the run (and running runs
    /// not computed in the last minute), newest first, at most `limit`; and how many there are.
    pub fn report_stale(&self, req: &ReportRequest, limit: i64) -> Result<(Vec<String>, i64)> {
        self.read(|db| {
            let mut scoped = Scoped::new(db, req)?;
            let stale = stale_condition(&mut scoped, req.now_ms);
            let (runs, range) = (scoped.runs(req), scoped.range(req, "r.start_ms"));
            let limit = scoped.bind(limit);
            let rows = db.rows(
                &format!(
                    "{} SELECT r.id, COUNT(*) OVER () FROM runs r LEFT JOIN run_usage u ON u.run_id = r.id
                     WHERE r.usage_stale AND ({stale}) AND {runs} AND {range}
                     ORDER BY r.start_ms DESC, r.id LIMIT {limit}",
                    scoped.with
                ),
                &scoped.params,
            )?;
            let count = rows.first().map(|r| r.get::<i64>(1)).transpose()?.unwrap_or(0);
            let ids = rows.iter().map(|r| r.get(0)).collect::<Result<Vec<String>>>()?;
            Ok((ids, count))
        })
    }

    /// What run `run`'s row of the report is computed from; None when the run does not exist.
    pub fn usage_inputs(&self, run: &str, now_ms: i64) -> Result<Option<UsageInputs>> {
        self.snapshot(|db| {
            let Some(head) = db.row(
                "SELECT status, start_ms, revision, summaries_revision, end_ms FROM runs WHERE id = ?1",
                vals![run],
            )?
            else {
                return Ok(None);
            };
            let job = crate::jobs::job_in(db, run, now_ms)?;
            let cost_series_usd: Option<f64> = db
                .row("SELECT last FROM metric_summaries WHERE run_id = ?1 AND key = 'cost/usd'", vals![run])?
                .map(|r| r.get::<Option<f64>>(0))
                .transpose()?
                .flatten();
            let trial = db.row("SELECT created_ms, started_ms FROM sweep_trials WHERE run_id = ?1", vals![run])?;
            let flops: Option<f64> = db
                .row(
                    "SELECT last FROM metric_summaries WHERE run_id = ?1 AND key IN ('flops', 'train/total_flos')
                     ORDER BY CASE WHEN key = 'flops' THEN 0 ELSE 1 END LIMIT 1",
                    vals![run],
                )?
                .map(|r| r.get::<Option<f64>>(0))
                .transpose()?
                .flatten();
            let mut gpu_keys = Vec::new();
            let mut energy_j: Option<f64> = None;
            for r in
                db.rows("SELECT key, last FROM metric_summaries WHERE run_id = ?1 AND key LIKE 'sys/%'", vals![run])?
            {
                let key: String = r.get(0)?;
                match gpu_series(&key).map(|(_, kind)| kind) {
                    Some(GpuSeries::Util | GpuSeries::SmActive) => gpu_keys.push(key),
                    Some(GpuSeries::EnergyJ) => {
                        if let Some(last) = r.get::<Option<f64>>(1)?.filter(|j| j.is_finite() && *j >= 0.0) {
                            energy_j = Some(energy_j.unwrap_or(0.0) + last);
                        }
                    }
                    None => {}
                }
            }
            Ok(Some(UsageInputs {
                run: run.to_owned(),
                basics: RunBasics {
                    status: head.get(0)?,
                    start_ms: head.get(1)?,
                    end_ms: head.get(4)?,
                    energy_j,
                    flops,
                    cost_series_usd,
                    trial_created_ms: trial.as_ref().map(|t| t.get(0)).transpose()?,
                    trial_started_ms: trial.as_ref().map(|t| t.get(1)).transpose()?,
                },
                job,
                gpu_keys,
                revision: head.get(2)?,
                summaries_revision: head.get(3)?,
            }))
        })
    }

    /// Writes a run's row of the report, marked with the revisions its inputs were read at (a
    /// run changed since is computed again by the next report).
    pub fn write_usage(&self, inputs: &UsageInputs, u: &RunUsage, now_ms: i64) -> Result<()> {
        let mut columns: Vec<(String, Value)> = [
            ("run_id", inputs.run.as_str().into()),
            ("revision", inputs.revision.into()),
            ("summaries_revision", inputs.summaries_revision.into()),
            ("computed_ms", now_ms.into()),
            ("outcome", u.outcome.into()),
            ("failure", u.failure.as_deref().into()),
            ("gpus", u.gpus.into()),
            ("gpu_model", u.gpu_model.as_str().into()),
            ("provider", u.provider.as_str().into()),
            ("pricing", u.pricing.into()),
            ("gpu_hours", u.gpu_hours.into()),
            ("spot_gpu_hours", u.spot_gpu_hours.into()),
            ("priced", u.priced.into()),
            ("cost_usd", u.cost_usd.into()),
            ("gpu_series", u.gpu_series.into()),
            ("queue_wait_ms", u.queue_wait_ms.into()),
            ("queue_source", u.queue_source.into()),
            ("sampled_s", u.sampled_s.into()),
            ("on_demand_usd", u.on_demand_usd.into()),
            ("time_to_result_ms", u.time_to_result_ms.into()),
            ("utilization_source", u.utilization_source.into()),
            ("energy_kwh", u.energy_kwh.into()),
            ("useful_gpu_hours", u.useful_gpu_hours.into()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
        for (slot, t) in THRESHOLDS.iter().enumerate() {
            columns.push((format!("active_s_{t}"), Value::Real(u.active_s[slot])));
            columns.push((format!("active_usd_{t}"), Value::Real(u.active_usd[slot])));
        }
        let names: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
        let slots: Vec<String> = (1..=columns.len() + 2).map(|i| format!("?{i}")).collect();
        let sql =
            format!("INSERT INTO run_usage ({}, project_id, start_ms) VALUES ({})", names.join(", "), slots.join(", "));
        let params: Vec<Value> = columns.into_iter().map(|(_, value)| value).collect();
        self.write(|tx| {
            let run = inputs.run.as_str();
            let Some(head) = tx.row("SELECT project_id, start_ms FROM runs WHERE id = ?1", vals![run])? else {
                return Ok(());
            };
            let mut params = params.clone();
            params.extend([head.get::<i64>(0)?.into(), head.get::<i64>(1)?.into()]);
            tx.exec("DELETE FROM run_usage WHERE run_id = ?1", vals![run])?;
            tx.exec(&sql, &params)?;
            tx.exec(
                "UPDATE runs SET usage_revision = ?2, usage_summaries_revision = ?3 WHERE id = ?1",
                vals![run, inputs.revision, inputs.summaries_revision],
            )?;
            Ok(())
        })
    }

    /// The report: every group's sums and figures, the total, and the runs behind the figures.
    pub fn report(&self, req: &ReportRequest) -> Result<Report> {
        let active = threshold_column(req.threshold)?;
        self.snapshot(|db| {
            let sums = sums::sums_sql();
            let mut scoped = Scoped::new(db, req)?;
            let source = scoped.source(req);
            let groups_sql: Vec<String> = req.by.iter().map(|b| group_expression(b, &mut scoped)).collect();
            let positions: Vec<String> = (1..=groups_sql.len()).map(|i| i.to_string()).collect();
            // PostgreSQL adds the groups and the total up in one pass (the total is the row
            // GROUPING marks); SQLite, which has no grouping sets, in two statements.
            let one_pass = !groups_sql.is_empty() && db.dialect() == Dialect::Postgres;
            let mut grouped = if groups_sql.is_empty() {
                Vec::new()
            } else if one_pass {
                let keys = groups_sql.join(", ");
                db.rows(
                    &format!(
                        "{} SELECT {keys}, {sums}, GROUPING({keys}) FROM ({source}) {FROM_SOURCE}
                         GROUP BY GROUPING SETS (({keys}), ()) ORDER BY {}",
                        scoped.with,
                        positions.join(", ")
                    ),
                    &scoped.params,
                )?
            } else {
                db.rows(
                    &format!(
                        "{} SELECT {}, {sums} FROM ({source}) {FROM_SOURCE} GROUP BY {} ORDER BY {}",
                        scoped.with,
                        groups_sql.join(", "),
                        positions.join(", "),
                        positions.join(", ")
                    ),
                    &scoped.params,
                )?
            };
            let grouping_column = req.by.len() + SUMS;
            let total_row = if one_pass {
                let at = grouped.iter().position(|r| r.get::<i64>(grouping_column).is_ok_and(|g| g != 0));
                at.map(|i| grouped.remove(i))
            } else {
                let mut scoped = Scoped::new(db, req)?;
                let source = scoped.source(req);
                db.row(&format!("{} SELECT {sums} FROM ({source}) {FROM_SOURCE}", scoped.with), &scoped.params)?
            };
            let first_sum = if one_pass { req.by.len() } else { 0 };
            let total_sums = total_row.map(|r| sums_from(&r, first_sum)).transpose()?.unwrap_or_default();
            let since = req.since_ms.or(total_sums.first_start_ms).unwrap_or(req.now_ms);
            let until = req.until_ms.unwrap_or(req.now_ms).max(since);
            let mut total = ReportGroup {
                group: String::new(),
                keys: Vec::new(),
                since_ms: since,
                until_ms: until,
                figures: figures(&total_sums, weeks(since, until)),
                sums: total_sums,
            };
            let mut groups = Vec::with_capacity(grouped.len());
            for r in &grouped {
                let sums = sums_from(r, req.by.len())?;
                let (mut from, mut to) = (since, until);
                let mut keys = Vec::with_capacity(req.by.len());
                for (i, by) in req.by.iter().enumerate() {
                    match by.period_ms() {
                        Some(period) => {
                            let day: i64 = r.get(i)?;
                            let start = day * DAY_MS;
                            (from, to) = (from.max(start), to.min(start + period));
                            keys.push(day_text(day));
                        }
                        None => keys.push(r.get::<Option<String>>(i)?.unwrap_or_default()),
                    }
                }
                let to = to.max(from);
                groups.push(ReportGroup {
                    group: keys.join(" / "),
                    keys,
                    since_ms: from,
                    until_ms: to,
                    figures: figures(&sums, weeks(from, to)),
                    sums,
                });
            }
            time_to_result::fill(db, req, &mut total, &mut groups)?;
            if req.by.is_empty() && total.sums.runs > 0 {
                groups.push(total.clone());
            }
            Ok(Report {
                since_ms: since,
                until_ms: until,
                deleted_for_good: deleted_for_good(db, req)?,
                total,
                groups,
                most_expensive: top_runs(db, req, &active, "u.priced = 1", "u.cost_usd DESC")?,
                idlest: top_runs(
                    db,
                    req,
                    &active,
                    "u.gpu_series > 0 AND u.gpu_hours > 0",
                    &format!("(u.gpu_hours - {active} / 3600.0) DESC"),
                )?,
                infra_failures: top_runs(db, req, &active, "u.outcome = 'infra'", "u.start_ms DESC")?,
            })
        })
    }

    /// Records one restore of checkpoint `name` of run `run`: whether it worked, and why not.
    pub fn record_restore(
        &self,
        run: &str,
        name: &str,
        ok: bool,
        error: Option<&str>,
        restored_by: Option<&str>,
        at_ms: i64,
    ) -> Result<()> {
        self.write(|tx| {
            if !tx.exists("SELECT 1 FROM checkpoints WHERE run_id = ?1 AND name = ?2", vals![run, name])? {
                return Err(not_found(format!("checkpoint {name:?} of run {run}")));
            }
            let seq: i64 = tx
                .row(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM checkpoint_restores WHERE run_id = ?1 AND name = ?2 AND at_ms = ?3",
                    vals![run, name, at_ms],
                )?
                .map(|r| r.get(0))
                .transpose()?
                .unwrap_or(1);
            tx.exec(
                "INSERT INTO checkpoint_restores (run_id, name, at_ms, seq, ok, error, restored_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                vals![run, name, at_ms, seq, ok, error, restored_by],
            )?;
            Ok(())
        })
    }
}

/// A run's row is stale when missing, older than the run, or a running run's older than a minute
/// (`runs.usage_stale`, which an index keeps, holds for every such run and every running run).
fn stale_condition(scoped: &mut Scoped, now_ms: i64) -> String {
    let fresh_before = scoped.bind(now_ms - 60_000);
    format!(
        "r.usage_revision IS NULL OR r.usage_revision <> r.revision
         OR r.usage_summaries_revision <> r.summaries_revision OR u.run_id IS NULL
         OR (r.status = 'running' AND u.computed_ms < {fresh_before})"
    )
}

/// The first ten runs of the scope whose row meets `condition`, in `order` (an order an index of
/// `run_usage` keeps, read through the project and start the row copies from its run).
fn top_runs(db: &dyn Db, req: &ReportRequest, active: &str, condition: &str, order: &str) -> Result<Vec<RunBrief>> {
    let mut scoped = Scoped::new(db, req)?;
    let projects = scoped.in_scope(&req.scope, "u.project_id");
    let copied_range = scoped.range(req, "u.start_ms");
    let (runs, range) = (scoped.runs(req), scoped.range(req, "r.start_ms"));
    let rows = db.rows(
        &format!(
            "{} SELECT r.id, r.name, p.name, r.\"user\", u.outcome, r.start_ms, u.priced, u.cost_usd, u.gpu_hours,
                u.gpu_series, {active}, u.failure, u.utilization_source
             FROM run_usage u JOIN runs r ON r.id = u.run_id JOIN projects p ON p.id = r.project_id
             WHERE {condition} AND {projects} AND {copied_range} AND {runs} AND {range}
             ORDER BY {order}, u.run_id LIMIT 10",
            scoped.with
        ),
        &scoped.params,
    )?;
    rows.iter()
        .map(|r| {
            let (priced, cost, gpu_hours, series, active_s): (bool, f64, f64, i64, f64) =
                (r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?, r.get(10)?);
            Ok(RunBrief {
                id: r.get(0)?,
                name: r.get(1)?,
                project: r.get(2)?,
                user: r.get(3)?,
                outcome: r.get(4)?,
                start_ms: r.get(5)?,
                cost_usd: priced.then_some(cost),
                gpu_hours,
                idle_gpu_hours: (series > 0 && gpu_hours > 0.0).then(|| (gpu_hours - active_s / 3600.0).max(0.0)),
                failure: r.get(11)?,
                utilization_source: r.get::<Option<String>>(12)?.unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_series_keys_name_their_gpu() {
        assert_eq!(gpu_series("sys/gpu.0.util"), Some(("sys/gpu.0", GpuSeries::Util)));
        assert_eq!(gpu_series("sys/node/3/gpu.12.sm_active"), Some(("sys/node/3/gpu.12", GpuSeries::SmActive)));
        assert_eq!(gpu_series("sys/gpu.1.energy_j"), Some(("sys/gpu.1", GpuSeries::EnergyJ)));
        assert_eq!(gpu_series("sys/gpu.1.sm_occupancy"), None);
        assert_eq!(gpu_series("sys/gpu.x.util"), None);
    }

    #[test]
    fn gpu_utilization_keys() {
        for key in ["sys/gpu.0.util", "sys/gpu.12.util", "sys/node/3/gpu.1.util"] {
            assert!(is_gpu_utilization_key(key), "{key}");
        }
        for key in ["sys/gpu.0.power_w", "sys/gpu..util", "gpu.0.util", "sys/node/x/gpu.0.util", "sys/node//gpu.0.util"]
        {
            assert!(!is_gpu_utilization_key(key), "{key}");
        }
    }

    #[test]
    fn breakdowns_parse_and_name_themselves() {
        for text in ["project", "user", "group", "tag:team", "gpu", "provider", "pricing", "week", "day"] {
            assert_eq!(Breakdown::parse(text).unwrap().name(), text);
        }
        for text in ["all", "project,week", "tag:team,day", "user"] {
            assert_eq!(Breakdown::list_name(&Breakdown::parse_list(text).unwrap()), text);
        }
        assert_eq!(Breakdown::parse_list("").unwrap(), vec![]);
        for text in ["tag:", "month", "week,week", "project,user,week", "all,week"] {
            assert!(Breakdown::parse_list(text).is_err(), "{text}");
        }
    }

    #[test]
    fn the_sums_select_as_many_columns_as_they_read() {
        assert_eq!(sums::sums_sql().split(",\n").count(), SUMS);
    }

    #[test]
    fn days_read_as_dates() {
        assert_eq!(day_text(0), "1970-01-01");
        assert_eq!(day_text(20_780), "2026-11-23");
    }
}
