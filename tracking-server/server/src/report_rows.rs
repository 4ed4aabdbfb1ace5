//! The report's rows of runs (`run_usage`), brought up to date from the stores: a run's job,
//! its sweep trial and its GPU series from the metrics store. The report's answers, the budget
//! gauges and the rules on money and the fleet read them.

use crate::error::Result;
use crate::state::{meta, State};
use futures::{StreamExt, TryStreamExt};
use trainlog_meta::report::{BudgetSpend, ReportRequest, DEFAULT_THRESHOLD};
use trainlog_meta::search::RunScope;
use trainlog_schema::{MetricKey, RunId};
use trainlog_store::StepRange;

/// Runs computed again for one answer, at most.
pub const REFRESH_LIMIT: i64 = 5_000;

/// Days added up again for one answer, at most (and per background round, [`DAYS_PER_ROUND`]).
pub const DAYS_LIMIT: i64 = 2_000;
const DAYS_PER_ROUND: i64 = 100_000;

/// Runs computed at once.
const REFRESH_CONCURRENCY: usize = 8;

/// Every run of `scope` that started from `since_ms`, in one group.
pub fn month_request(scope: RunScope, since_ms: i64, now: i64) -> ReportRequest {
    ReportRequest {
        scope,
        filter: String::new(),
        since_ms: Some(since_ms),
        until_ms: None,
        by: Vec::new(),
        threshold: DEFAULT_THRESHOLD,
        now_ms: now,
        rollup: false,
    }
}

/// Rows brought up to date in the background failed (each is tried again on the next round).
static REFRESH_FAILURES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many background rounds of bringing the report's rows up to date failed.
pub fn refresh_failures() -> u64 {
    REFRESH_FAILURES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Brings the report's rows up to date every 30 seconds, up to [`REFRESH_LIMIT`] runs a round,
/// and adds up again the days they changed, so reports and the budget gauges of `/metrics` find
/// them fresh.
pub async fn keep_fresh(state: State) {
    // The first round an interval after start-up, not during it; reports refresh their own scope.
    let period = std::time::Duration::from_secs(30);
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        every.tick().await;
        let now = trainlog_meta::now_ms();
        let round = async {
            refresh(&state, &month_request(RunScope::All, i64::MIN, now)).await?;
            meta(&state, |m| m.refresh_rollup(&RunScope::All, DAYS_PER_ROUND)).await
        };
        if let Err(e) = round.await {
            REFRESH_FAILURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!("bringing the report's rows up to date failed (tried again in 30 s): {e}");
        }
    }
}

/// Computes again the rows of the runs in the report's scope that are missing or out of date,
/// up to [`REFRESH_LIMIT`]; answers how many are left out of date.
pub async fn refresh(state: &State, request: &ReportRequest) -> Result<i64> {
    // A run's row is as new as its stored summaries: write this server's first.
    state.store.sync_summaries().await?;
    let scope = request.clone();
    let (stale, count) = meta(state, move |m| m.report_stale(&scope, REFRESH_LIMIT)).await?;
    let now = request.now_ms;
    let refreshed = stale.len() as i64;
    futures::stream::iter(stale)
        .map(|id| refresh_run(state, id, now))
        .buffer_unordered(REFRESH_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    Ok((count - refreshed).max(0))
}

/// Computes one run's row of the report from its job, its sweep trial and its GPU series.
pub async fn refresh_run(state: &State, id: String, now: i64) -> Result<()> {
    let inputs = meta(state, move |m| m.usage_inputs(&id, now)).await?;
    let Some(inputs) = inputs else { return Ok(()) };
    let run = RunId::parse("run_id", &inputs.run)?;
    let mut series = Vec::with_capacity(inputs.gpu_keys.len());
    for key in &inputs.gpu_keys {
        let key = MetricKey::parse("key", key)?;
        let s = state.store.series(&run, &key, StepRange::default()).await?;
        let mut samples: Vec<(i64, f64)> =
            s.timestamps.into_iter().zip(s.values).filter(|(_, v)| v.is_finite()).collect();
        samples.sort_by_key(|(t, _)| *t);
        series.push((key.to_string(), samples));
    }
    let (busy, source) = trainlog_meta::report::busy_series(series);
    let usage = trainlog_meta::report::usage(&inputs.basics, inputs.job.as_ref(), (&busy, source));
    meta(state, move |m| m.write_usage(&inputs, &usage, now)).await
}

/// What the projects in `scope` with a budget spent this month (the month holding `now`),
/// their rows first brought up to date; empty when none has a budget.
pub async fn budget_spend(state: &State, scope: RunScope, now: i64) -> Result<Vec<BudgetSpend>> {
    let listed = scope.clone();
    if !meta(state, move |m| m.has_budgets(&listed)).await? {
        return Ok(Vec::new());
    }
    let (month_start, _, _) = trainlog_meta::report::month_of(now);
    refresh(state, &month_request(scope.clone(), month_start, now)).await?;
    meta(state, move |m| m.budgets(&scope, now)).await
}
