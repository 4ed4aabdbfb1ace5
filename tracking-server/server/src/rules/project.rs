//! The rules on a project's money and its report (`budget 80% [then stop]`, `utilization < 50%
//! for 6h`, `queue wait > 2h`, `failure rate > 5% over 7d`, `cost spike`), on a timer: each
//! reads the report's own figures for the project over its sliding window, as
//! `GET /report?projects=P&since=6h` shows them, and fires when the condition starts to hold,
//! again once its window passed while it still holds.

use super::{failed, STOPPED_BY};
use crate::report_rows;
use crate::state::{meta, State};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use trainlog_meta::alert_rules::{RuleRow, INSTALLATION};
use trainlog_meta::alerts::NewAlert;
use trainlog_meta::report::{GroupSums, ReportRequest, DEFAULT_THRESHOLD};
use trainlog_meta::search::RunScope;
use trainlog_schema::alert_rule::{duration_words, AlertRule, RuleKind};
use trainlog_schema::RunId;

const HOUR_MS: i64 = 3_600_000;
/// The hours before the last one a cost spike's trailing average is taken over.
const TRAILING_HOURS: i64 = 7 * 24;
/// A cost spike needs the last hour to have cost at least this much.
const SPIKE_FLOOR_USD: f64 = 1.0;
/// A failure rate needs this many ended runs in its window.
const MIN_ENDED_RUNS: i64 = 5;

/// Fires the project rules for the server's whole life, every `every`.
pub(crate) async fn watch_projects(state: State, every: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When each rule last fired on a project while its condition held.
    let mut holding: HashMap<Holding, i64> = HashMap::new();
    loop {
        ticks.tick().await;
        let by_project = match meta(&state, rules_by_project).await {
            Ok(rules) => rules,
            Err(e) => {
                failed("the project rules could not read the rules (tried again)", e);
                continue;
            }
        };
        holding.retain(|h, _| by_project.get(&h.0).is_some_and(|rules| rules.iter().any(|(r, _)| key(h.0, r) == *h)));
        let mut raised = false;
        for (project, rules) in by_project {
            let now = trainlog_meta::now_ms();
            for (row, rule) in rules {
                let held = key(project, &row);
                match check(&state, project, &rule, now).await {
                    Ok(Some(found)) => {
                        let wait_ms = found.wait_ms;
                        if holding.get(&held).is_some_and(|at| now - at < wait_ms) {
                            if let Err(e) = stop_all(&state, project, &row, &rule, &found).await {
                                failed("a budget rule could not stop its project's runs (tried again)", e);
                            }
                            continue;
                        }
                        match fire(&state, project, &row, &rule, &found).await {
                            Ok(new) => {
                                raised |= new;
                                holding.insert(held, now);
                            }
                            Err(e) => failed("a project rule could not record its alert (tried again)", e),
                        }
                    }
                    Ok(None) => {
                        holding.remove(&held);
                    }
                    Err(e) => failed("a project rule could not read its figures (tried again)", e),
                }
            }
        }
        if raised {
            crate::deliver::wake();
        }
    }
}

/// A rule on a project: the project, whether the rule is the installation's, and its id.
type Holding = (i64, bool, i64);

fn key(project: i64, row: &RuleRow) -> Holding {
    (project, row.project_id == INSTALLATION, row.id)
}

/// Each project's rules on money and report figures: its own, and the installation's given to
/// every project.
fn rules_by_project(m: &trainlog_meta::MetaStore) -> trainlog_meta::Result<BTreeMap<i64, Vec<(RuleRow, AlertRule)>>> {
    let parsed = |rows: Vec<RuleRow>| -> Vec<(RuleRow, AlertRule)> {
        rows.into_iter()
            .filter_map(|row| {
                AlertRule::parse(&row.text).ok().filter(|r| r.kind() == RuleKind::Project).map(|r| (row, r))
            })
            .collect()
    };
    let mut by_project: BTreeMap<i64, Vec<(RuleRow, AlertRule)>> = BTreeMap::new();
    for (row, rule) in parsed(m.rules(None)?) {
        by_project.entry(row.project_id).or_default().push((row, rule));
    }
    let installation = parsed(m.installation_rules()?);
    if !installation.is_empty() {
        for (project, _) in m.list_projects()? {
            by_project.entry(project.id).or_default().extend(installation.iter().cloned());
        }
    }
    Ok(by_project)
}

/// What a project rule found when its condition holds.
#[derive(Debug, Clone, PartialEq)]
struct Found {
    title: String,
    text: String,
    /// It is not sent again while it holds within this long.
    wait_ms: i64,
}

async fn fire(
    state: &State,
    project: i64,
    row: &RuleRow,
    rule: &AlertRule,
    found: &Found,
) -> crate::error::Result<bool> {
    let alert = NewAlert {
        run: None,
        rule: row.text.clone(),
        level: rule.level().into(),
        title: found.title.clone(),
        text: found.text.clone(),
        step: None,
        wait_ms: found.wait_ms,
    };
    let (_, new) = meta(state, move |m| m.record_project_alert(project, &alert)).await?;
    stop_all(state, project, row, rule, found).await?;
    Ok(new)
}

/// With `budget N% then stop`: asks every running run of the project to stop.
async fn stop_all(
    state: &State,
    project: i64,
    row: &RuleRow,
    rule: &AlertRule,
    found: &Found,
) -> crate::error::Result<()> {
    if !matches!(rule, AlertRule::Budget { stop: true, .. }) {
        return Ok(());
    }
    let reason = format!("`{}`: {}", row.text, found.title);
    meta(state, move |m| {
        for id in m.running_runs(project)? {
            let Ok(run) = RunId::parse("run", &id) else { continue };
            match m.request_stop(&run, STOPPED_BY, &reason) {
                Ok(_) | Err(trainlog_meta::Error::Conflict { .. }) | Err(trainlog_meta::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
    .await
}

/// The project's report total over the runs that started in [since, until).
async fn sums(state: &State, project: i64, since: i64, until: i64, now: i64) -> crate::error::Result<GroupSums> {
    let request = ReportRequest {
        scope: RunScope::Project(project),
        filter: String::new(),
        since_ms: Some(since),
        until_ms: Some(until),
        by: Vec::new(),
        threshold: DEFAULT_THRESHOLD,
        now_ms: now,
        rollup: false,
    };
    report_rows::refresh(state, &request).await?;
    let report = meta(state, move |m| m.report(&request)).await?;
    Ok(report.total.sums)
}

fn money(usd: f64) -> String {
    format!("${usd:.2}")
}

/// Whether the rule's condition holds for the project now, and what it found.
async fn check(state: &State, project: i64, rule: &AlertRule, now: i64) -> crate::error::Result<Option<Found>> {
    let found = |title: String, text: String, wait_ms: i64| Some(Found { title, text, wait_ms: wait_ms.max(HOUR_MS) });
    Ok(match *rule {
        AlertRule::Budget { pct, .. } => {
            let spend = report_rows::budget_spend(state, RunScope::Project(project), now).await?;
            let Some(mut b) = spend.into_iter().next() else { return Ok(None) };
            let (month_start, _, _) = trainlog_meta::report::month_of(now);
            b.spent_usd += meta(state, move |m| m.running_spend_since_rows(project, month_start, now)).await?;
            let used = if b.monthly_usd > 0.0 { b.spent_usd / b.monthly_usd * 100.0 } else { f64::INFINITY };
            (b.spent_usd > 0.0 && used >= pct).then(|| {
                let title = format!("budget {pct}% spent in {}", b.month);
                let text = format!(
                    "{} of the {} monthly budget spent in {} ({used:.0}%)",
                    money(b.spent_usd),
                    money(b.monthly_usd),
                    b.month
                );
                // Once a month: the title names the month.
                Found { title, text, wait_ms: 32 * 86_400_000 }
            })
        }
        AlertRule::Utilization { below_pct, window_ms } => {
            let s = sums(state, project, now - window_ms, now, now).await?;
            let figures = trainlog_meta::report::figures(&s, 1.0);
            match figures.gpu_utilization_rate {
                Some(rate) if rate * 100.0 < below_pct => found(
                    rule.title(0.0),
                    format!(
                        "{:.0}% of the GPU-hours of the {} run(s) with a GPU series that started in the last {} were active ({:.1} of {:.1} GPU-hours)",
                        rate * 100.0,
                        s.sampled_runs,
                        duration_words(window_ms),
                        s.active_gpu_hours,
                        s.sampled_gpu_hours
                    ),
                    window_ms,
                ),
                _ => None,
            }
        }
        AlertRule::QueueWait { above_ms, window_ms } => {
            let s = sums(state, project, now - window_ms, now, now).await?;
            match s.queue_wait_ms_max {
                Some(longest) if longest > above_ms => found(
                    rule.title(0.0),
                    format!(
                        "a run that started in the last {} queued for {} (the mean of {} queued run(s): {})",
                        duration_words(window_ms),
                        duration_words(longest),
                        s.queued_runs,
                        duration_words(s.queue_wait_ms_sum / s.queued_runs.max(1))
                    ),
                    window_ms,
                ),
                _ => None,
            }
        }
        AlertRule::FailureRate { above_pct, window_ms } => {
            let s = sums(state, project, now - window_ms, now, now).await?;
            let failures = s.code_failures + s.infra_failures;
            let ended = s.finished + failures;
            let rate = failures as f64 / ended.max(1) as f64 * 100.0;
            (ended >= MIN_ENDED_RUNS && rate > above_pct)
                .then(|| {
                    found(
                        rule.title(0.0),
                        format!(
                            "{failures} of the {ended} run(s) that started in the last {} and ended failed ({rate:.0}%: {} in their code, {} in the infrastructure)",
                            duration_words(window_ms),
                            s.code_failures,
                            s.infra_failures
                        ),
                        window_ms,
                    )
                })
                .flatten()
        }
        AlertRule::CostSpike { factor } => {
            let last = sums(state, project, now - HOUR_MS, now, now).await?;
            let trailing = sums(state, project, now - (TRAILING_HOURS + 1) * HOUR_MS, now - HOUR_MS, now).await?;
            let average = trailing.cost_usd / TRAILING_HOURS as f64;
            (last.cost_usd >= SPIKE_FLOOR_USD && average > 0.0 && last.cost_usd >= factor * average)
                .then(|| {
                    found(
                        rule.title(0.0),
                        format!(
                            "the runs that started in the last hour cost {}, {:.1}x the hourly average of the 7 days before ({}/h)",
                            money(last.cost_usd),
                            last.cost_usd / average,
                            money(average)
                        ),
                        HOUR_MS,
                    )
                })
                .flatten()
        }
        _ => None,
    })
}
