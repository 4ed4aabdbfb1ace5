//! Alert rules the server evaluates: metric rules on each ingested batch (a hash lookup for a
//! project without rules; the alert is recorded after the batch is acknowledged, never before
//! it), and rules on runs' ends by a background task that reads the runs changed since it last
//! looked. A rule fires once per run within its fold window; repeats count on the alert.

use crate::state::{meta, State};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use trainlog_meta::alerts::NewAlert;
use trainlog_meta::MetaStore;
use trainlog_schema::alert_rule::AlertRule;
use trainlog_schema::{PointBatch, RunId};

/// A metric rule that fired again within this long of its alert on the same run is folded into it.
const METRIC_FOLD_MS: i64 = 3_600_000;
/// A run's end fires a rule once (within 30 days).
const END_FOLD_MS: i64 = 30 * 86_400_000;
/// How often the rules on runs' ends look.
const END_CHECK: Duration = Duration::from_secs(2);

static FAILURES: AtomicU64 = AtomicU64::new(0);

/// Rounds or raises of rules that failed (each is tried again or counted), for `/metrics`.
pub(crate) fn failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// A rule as loaded: its text and what it means.
#[derive(Debug, Clone)]
pub struct LoadedRule {
    pub text: String,
    pub rule: AlertRule,
}

/// Each project's metric rules, loaded from the store and reloaded when rules change.
#[derive(Debug, Default)]
pub struct RuleCache {
    metric: RwLock<HashMap<i64, Arc<Vec<LoadedRule>>>>,
}

impl RuleCache {
    /// Loads every project's rules (a stored rule this server cannot parse is left out).
    pub fn reload(&self, m: &MetaStore) -> trainlog_meta::Result<()> {
        let mut metric: HashMap<i64, Vec<LoadedRule>> = HashMap::new();
        for row in m.rules(None)? {
            let Ok(rule) = AlertRule::parse(&row.text) else { continue };
            if rule.key().is_some() {
                metric.entry(row.project_id).or_default().push(LoadedRule { text: row.text, rule });
            }
        }
        let loaded = metric.into_iter().map(|(p, rules)| (p, Arc::new(rules))).collect();
        *self.metric.write().unwrap_or_else(std::sync::PoisonError::into_inner) = loaded;
        Ok(())
    }

    /// The alerts `batch` of a run of project `project_id` fires: for each metric rule, the
    /// first point of its metric that breaks it.
    pub fn check(&self, project_id: i64, batch: &PointBatch) -> Vec<NewAlert> {
        let rules = {
            let map = self.metric.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            match map.get(&project_id) {
                Some(rules) => rules.clone(),
                None => return Vec::new(),
            }
        };
        let mut fired = Vec::new();
        for rule in rules.iter() {
            let Some(key) = rule.rule.key() else { continue };
            let Some(index) = batch.keys.iter().position(|k| k == key) else { continue };
            let first = batch.points.iter().find(|p| p.key as usize == index && rule.rule.fires_on(p.value));
            if let Some(point) = first {
                fired.push(NewAlert {
                    run: None,
                    rule: rule.text.clone(),
                    level: rule.rule.level().into(),
                    title: rule.rule.title(point.value),
                    text: format!("{key} was {} at step {} (rule `{}`)", point.value, point.step, rule.text),
                    step: Some(point.step),
                    wait_ms: METRIC_FOLD_MS,
                });
            }
        }
        fired
    }
}

/// Records the alerts a run's batch fired, off the request (its points are already durable).
pub(crate) fn raise(state: State, run: RunId, fired: Vec<NewAlert>) {
    actix_web::rt::spawn(async move {
        for alert in fired {
            let run = run.clone();
            match meta(&state, move |m| m.record_run_alert(&run, &alert)).await {
                Ok((_, true)) => crate::deliver::wake(),
                Ok((_, false)) => {}
                Err(e) => {
                    FAILURES.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("recording an alert a metric rule fired: {e}");
                }
            }
        }
    });
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
            let ended = m.ended_since(after, 500)?;
            if ended.is_empty() {
                return Ok((after, false));
            }
            let rules = m.rules(None)?;
            let mut raised = false;
            for run in &ended {
                for row in rules.iter().filter(|r| r.project_id == run.project_id) {
                    let Ok(rule @ AlertRule::RunEnded { .. }) = AlertRule::parse(&row.text) else { continue };
                    if !matches!(&rule, AlertRule::RunEnded { status } if *status == run.status) {
                        continue;
                    }
                    let Ok(id) = RunId::parse("run", &run.id) else { continue };
                    let alert = NewAlert {
                        run: None,
                        rule: row.text.clone(),
                        level: rule.level().into(),
                        title: rule.title(0.0),
                        text: format!("run {} ended {} (rule `{}`)", run.id, run.status, row.text),
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
            Ok((ended.last().map_or(after, |r| r.revision), raised))
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

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::{BatchPoint, MetricKey};

    #[test]
    fn a_batch_fires_each_metric_rule_on_its_first_breaking_point_and_other_projects_cost_a_lookup() {
        let cache = RuleCache::default();
        let rules = vec![
            LoadedRule { text: "loss not finite".into(), rule: AlertRule::parse("loss not finite").expect("rule") },
            LoadedRule { text: "acc < 0.5".into(), rule: AlertRule::parse("acc < 0.5").expect("rule") },
        ];
        cache.metric.write().expect("lock").insert(7, Arc::new(rules));
        let point = |key: u32, step: i64, value: f64| BatchPoint { key, step, timestamp_ms: 0, value };
        let batch = PointBatch {
            keys: vec![MetricKey::parse("k", "loss").expect("key"), MetricKey::parse("k", "acc").expect("key")],
            points: vec![point(0, 1, 0.5), point(1, 1, 0.9), point(0, 2, f64::NAN), point(0, 3, f64::NAN)],
        };
        let fired = cache.check(7, &batch);
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert_eq!(
            (fired[0].rule.as_str(), fired[0].step, fired[0].level.as_str()),
            ("loss not finite", Some(2), "error")
        );
        assert_eq!(fired[0].title, "loss is NaN");
        assert!(cache.check(8, &batch).is_empty(), "a project without rules");
    }
}
