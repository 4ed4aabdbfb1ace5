//! Alert rules the server evaluates: the alerts metric rules fired on an ingested batch
//! (checked by `rule_cache`), recorded after the batch is acknowledged, never before it; rules
//! on runs' ends, by a background task that reads the runs changed since it last looked; rules
//! on a run's activity (`activity`) and on a project's money and report (`project`) on timers.
//! A rule fires once per run within its fold window; repeats count on the alert.

mod activity;
mod project;

use crate::rule_cache::Fired;
use crate::state::{meta, State};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use trainlog_meta::alerts::NewAlert;
use trainlog_schema::alert_rule::AlertRule;
use trainlog_schema::RunId;

/// A run's end fires a rule once (within 30 days).
const END_FOLD_MS: i64 = 30 * 86_400_000;
/// Ended runs one round of the rules on runs' ends reads; the rest wait for the next round.
const END_ROUND: i64 = 500;
/// How often the rules on runs' ends look.
const END_CHECK: Duration = Duration::from_secs(2);

static FAILURES: AtomicU64 = AtomicU64::new(0);

/// Who a rule's stop says stopped the run.
pub(crate) const STOPPED_BY: &str = "rule";

pub(crate) use activity::watch_activity;
pub(crate) use project::watch_projects;

fn failed(what: &str, e: impl std::fmt::Display) {
    FAILURES.fetch_add(1, Ordering::Relaxed);
    tracing::warn!("{what}: {e}");
}

/// Records a fired alert on a run and asks the run to stop when its rule says so (a run that
/// ended meanwhile has nothing to stop); answers whether a new alert is to be sent.
pub(crate) fn record_fired(m: &trainlog_meta::MetaStore, run: &RunId, fired: &Fired) -> trainlog_meta::Result<bool> {
    let (_, new) = m.record_run_alert(run, &fired.alert)?;
    if let Some(reason) = &fired.stop {
        match m.request_stop(run, STOPPED_BY, reason) {
            Ok(_) | Err(trainlog_meta::Error::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(new)
}

/// Rounds or raises of rules that failed (each is tried again or counted), for `/metrics`.
pub(crate) fn failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// Records the alerts a run's batch fired, off the request (its points are already durable).
pub(crate) fn raise(state: State, run: RunId, fired: Vec<Fired>) {
    actix_web::rt::spawn(async move {
        for alert in fired {
            let run = run.clone();
            match meta(&state, move |m| record_fired(m, &run, &alert)).await {
                Ok(true) => crate::deliver::wake(),
                Ok(false) => {}
                Err(e) => failed("recording an alert a metric rule fired", e),
            }
        }
    });
}

/// A model registry event: a version registered, or an alias moved to a version.
pub(crate) enum RegistryEvent<'a> {
    VersionCreated,
    AliasMoved { alias: &'a str },
}

/// Fires the registry rules of the project whose run the version was registered from. Never
/// fails the request that made the event: a failure is counted (`alert_rule_failures`).
pub(crate) async fn registry_event(state: &State, version: &trainlog_meta::VersionRow, event: RegistryEvent<'_>) {
    let (title, want) = match event {
        RegistryEvent::VersionCreated => {
            (format!("{} v{} created", version.model, version.version), AlertRule::VersionCreated)
        }
        RegistryEvent::AliasMoved { alias } => {
            (format!("{}@{alias} moved to v{}", version.model, version.version), AlertRule::AliasMoved)
        }
    };
    let text =
        format!("model {} version {} was registered from run {}", version.model, version.version, version.run_id);
    let run = version.run_id.clone();
    let raised = meta(state, move |m| {
        let Ok(id) = RunId::parse("run", &run) else { return Ok(false) };
        let project = match m.run_head(&id) {
            Ok(head) => head.project_id,
            Err(trainlog_meta::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut raised = false;
        for row in m.rules_for(project)? {
            if AlertRule::parse(&row.text).ok().as_ref() != Some(&want) {
                continue;
            }
            let alert = NewAlert {
                run: None,
                rule: row.text.clone(),
                level: want.level().into(),
                title: title.clone(),
                text: text.clone(),
                step: None,
                wait_ms: 0,
            };
            raised |= m.record_project_alert(project, &alert)?.1;
        }
        Ok(raised)
    })
    .await;
    match raised {
        Ok(true) => crate::deliver::wake(),
        Ok(false) => {}
        Err(e) => failed("a registry rule could not record its alert", e),
    }
}

/// Fires the rules on runs' ends, for the server's whole life: every END_CHECK, the runs that
/// ended and changed since the last look, against their project's rules.
pub(crate) async fn watch_ends(state: State) {
    let mut after = match meta(&state, |m| m.latest_revision()).await {
        Ok(r) => r,
        Err(e) => {
            FAILURES.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("the rules on runs' ends start from nothing: {e}");
            0
        }
    };
    let mut every = tokio::time::interval(END_CHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let round = meta(&state, move |m| {
            // The watermark moves past every run changed meanwhile, ended or not, so each round
            // reads only what changed since the last one.
            let latest = m.latest_revision()?;
            let ended = m.ended_since(after, latest, END_ROUND)?;
            let next =
                if ended.len() as i64 == END_ROUND { ended.last().map_or(latest, |r| r.revision) } else { latest };
            if ended.is_empty() {
                return Ok((next, false));
            }
            let rules = m.rules(None)?;
            let installation = m.installation_rules()?;
            let mut raised = false;
            for run in &ended {
                for row in rules.iter().filter(|r| r.project_id == run.project_id).chain(&installation) {
                    let Ok(rule @ AlertRule::RunEnded { .. }) = AlertRule::parse(&row.text) else { continue };
                    if !matches!(&rule, AlertRule::RunEnded { status } if *status == run.status) {
                        continue;
                    }
                    let Ok(id) = RunId::parse("run", &run.id) else { continue };
                    let job = m.job_rows(&[run.id.as_str()])?.remove(&run.id);
                    let lost = match job {
                        Some(j) if run.status == "preempted" || run.status == "lost" => format!(
                            " in attempt {}; ${:.2} of GPU time lost to interruptions so far ({:.1} GPU-hours)",
                            j.attempts, j.lost_usd, j.lost_gpu_hours
                        ),
                        _ => String::new(),
                    };
                    let alert = NewAlert {
                        run: None,
                        rule: row.text.clone(),
                        level: rule.level().into(),
                        title: rule.title(0.0),
                        text: format!("run {} ended {}{lost} (rule `{}`)", run.id, run.status, row.text),
                        step: None,
                        wait_ms: END_FOLD_MS,
                    };
                    match m.record_run_alert(&id, &alert) {
                        Ok((_, new)) => raised |= new,
                        // Archived or deleted meanwhile: nothing to say.
                        Err(trainlog_meta::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Ok((next, raised))
        })
        .await;
        match round {
            Ok((latest, raised)) => {
                after = latest;
                if raised {
                    crate::deliver::wake();
                }
            }
            Err(e) => {
                FAILURES.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("the rules on runs' ends failed a round (tried again): {e}");
            }
        }
    }
}
