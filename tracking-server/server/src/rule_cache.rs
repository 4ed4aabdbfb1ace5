//! Each project's metric rules, loaded from the store, and the check of an ingested batch
//! against them: a hash lookup for a project without rules. Pure: no store access but the load.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use trainlog_meta::alerts::NewAlert;
use trainlog_meta::MetaStore;
use trainlog_schema::alert_rule::AlertRule;
use trainlog_schema::PointBatch;

/// A metric rule that fired again within this long of its alert on the same run is folded into it.
const METRIC_FOLD_MS: i64 = 3_600_000;

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
