//! Each project's rules, loaded from the store, and the check of an ingested batch against
//! them: a hash lookup for a project without rules. Runs of projects whose rules need their
//! history (a spike, a plateau, a stall, idle GPUs) are remembered here (`run_watch`), and the
//! activity rules' timer asks which of them are due. Pure: no store access but the load.

use crate::run_watch::{Episode, RunWatch, SeriesFiring, SeriesState};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use trainlog_meta::alert_rules::{RuleRow, INSTALLATION};
use trainlog_meta::alerts::NewAlert;
use trainlog_meta::MetaStore;
use trainlog_schema::alert_rule::{duration_words, AlertRule, RuleKind};
use trainlog_schema::{PointBatch, RunId};

/// A metric rule that fired again within this long of its alert on the same run is folded into it.
pub const METRIC_FOLD_MS: i64 = 3_600_000;
/// Runs remembered at most; past it a new run is not watched (and counted).
const MAX_WATCHED_RUNS: usize = 100_000;
/// A watched run that sent nothing for this long is forgotten.
const FORGET_AFTER_MS: i64 = 86_400_000;
/// GPU samples must have arrived this recently for idle GPUs to be told from a silent run.
const GPU_FRESH_MS: i64 = 120_000;
/// The warning before an idle run is stopped comes this long before the stop, or at half the
/// span for a shorter one.
const STOP_WARNING_MS: i64 = 600_000;

/// A rule as loaded: its text and what it means.
#[derive(Debug, Clone)]
pub struct LoadedRule {
    pub text: String,
    pub rule: AlertRule,
}

/// One project's rules that the ingest path and the activity timer check.
#[derive(Debug, Default)]
struct ProjectRules {
    metric: Vec<LoadedRule>,
    activity: Vec<LoadedRule>,
    idle_thresholds: Vec<f64>,
    /// Whether its runs are remembered between batches.
    watches_runs: bool,
}

/// What one metric of a batch is checked against.
#[derive(Debug, Clone)]
struct Gate {
    /// The lowest threshold of its `>` rules, the highest of its `<` rules.
    above: f64,
    below: f64,
    not_finite: bool,
    /// Its rules that need no history, and those that keep one (indexes into the metric rules).
    simple: Vec<usize>,
    stateful: Vec<usize>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            above: f64::INFINITY,
            below: f64::NEG_INFINITY,
            not_finite: false,
            simple: Vec::new(),
            stateful: Vec::new(),
        }
    }
}

impl ProjectRules {
    /// Takes in one stored rule, where the server checks it.
    fn add(&mut self, row: RuleRow) {
        let Ok(rule) = AlertRule::parse(&row.text) else { return };
        let kind = rule.kind();
        let loaded = LoadedRule { text: row.text, rule };
        match kind {
            RuleKind::Metric => {
                self.watches_runs |= loaded.rule.fires_on(0.0).is_none();
                self.metric.push(loaded);
            }
            RuleKind::Activity => {
                if let AlertRule::Idle { below_pct, .. } = loaded.rule {
                    if !self.idle_thresholds.contains(&below_pct) {
                        self.idle_thresholds.push(below_pct);
                    }
                }
                self.watches_runs = true;
                self.activity.push(loaded);
            }
            RuleKind::RunEnd | RuleKind::Project | RuleKind::Registry => {}
        }
    }
}

/// A project's rules: its own with the installation's, or the installation's alone.
fn of_project(map: &HashMap<i64, Arc<ProjectRules>>, project_id: i64) -> Option<&Arc<ProjectRules>> {
    map.get(&project_id).or_else(|| map.get(&INSTALLATION))
}

/// An alert a rule fired on a run, and the stop it asks for (its reason) with `then stop`.
#[derive(Debug, Clone)]
pub struct Fired {
    pub alert: NewAlert,
    pub stop: Option<String>,
}

/// An activity rule due on a watched run.
#[derive(Debug, Clone)]
pub struct Due {
    pub run: String,
    pub rule: LoadedRule,
    pub episode: Episode,
    /// How long the run has been stalled or idle.
    pub for_ms: i64,
    /// Its last step, for a stall.
    pub step: Option<i64>,
}

/// Each project's rules, loaded from the store and reloaded when rules change, and the runs
/// they watch.
#[derive(Debug, Default)]
pub struct RuleCache {
    projects: RwLock<HashMap<i64, Arc<ProjectRules>>>,
    /// Each watched run under a lock of its own: batches of different runs never wait on each other.
    runs: Mutex<HashMap<String, Arc<Mutex<RunWatch>>>>,
    unwatched: AtomicU64,
}

impl RuleCache {
    /// Loads every project's rules, each with the installation's (a stored rule this server
    /// cannot parse is left out). The installation's alone stand under [`INSTALLATION`] for the
    /// projects with none of their own.
    pub fn reload(&self, m: &MetaStore) -> trainlog_meta::Result<()> {
        let installation = m.installation_rules()?;
        let mut projects: HashMap<i64, ProjectRules> = HashMap::new();
        for row in m.rules(None)?.into_iter().chain(installation.iter().cloned()) {
            projects.entry(row.project_id).or_default().add(row);
        }
        for (_, rules) in projects.iter_mut().filter(|(p, _)| **p != INSTALLATION) {
            for row in &installation {
                rules.add(row.clone());
            }
        }
        projects.retain(|_, p| !p.metric.is_empty() || !p.activity.is_empty());
        let loaded: HashMap<i64, Arc<ProjectRules>> = projects.into_iter().map(|(p, r)| (p, Arc::new(r))).collect();
        self.runs().retain(|_, w| of_project(&loaded, lock(w).project_id).is_some_and(|p| p.watches_runs));
        *self.projects.write().unwrap_or_else(PoisonError::into_inner) = loaded;
        Ok(())
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Mutex<RunWatch>>>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs not watched because the server watched as many as it keeps.
    pub fn unwatched_runs(&self) -> u64 {
        self.unwatched.load(Ordering::Relaxed)
    }

    /// Runs watched now.
    pub fn watched_runs(&self) -> usize {
        self.runs().len()
    }

    /// The alerts `batch` of `run` (of project `project_id`) fires, arriving at `now`: for each
    /// metric rule, the first point of its metric that breaks it. One pass over the points,
    /// each looking only at the rules on its own metric.
    pub fn check(&self, project_id: i64, run: &RunId, batch: &PointBatch, now: i64) -> Vec<Fired> {
        let rules = {
            let map = self.projects.read().unwrap_or_else(PoisonError::into_inner);
            match of_project(&map, project_id) {
                Some(rules) => rules.clone(),
                None => return Vec::new(),
            }
        };
        let watched = if rules.watches_runs { self.watch(project_id, run, now) } else { None };
        let mut guard = watched.as_deref().map(lock);
        let mut watch = guard.as_deref_mut();
        if let Some(w) = watch.as_deref_mut() {
            if !rules.activity.is_empty() {
                w.note_activity(batch, &rules.idle_thresholds, now);
            }
        }
        // Per metric of the batch: a gate its points pass only when they may break one of its
        // rules that need no history (the lowest threshold above, the highest below, whether a
        // non-finite value matters), and the rules that keep a history.
        let mut gates: Vec<Gate> = vec![Gate::default(); batch.keys.len()];
        let mut states: Vec<Option<SeriesState>> = Vec::with_capacity(rules.metric.len());
        for (r, rule) in rules.metric.iter().enumerate() {
            let index = rule.rule.key().and_then(|key| batch.keys.iter().position(|k| k == key));
            let mut state = None;
            if let Some(gate) = index.and_then(|i| gates.get_mut(i)) {
                match rule.rule {
                    AlertRule::NotFinite { .. } => gate.not_finite = true,
                    AlertRule::Above { threshold, .. } => gate.above = gate.above.min(threshold),
                    AlertRule::Below { threshold, .. } => gate.below = gate.below.max(threshold),
                    _ => {
                        if let Some(w) = watch.as_deref_mut() {
                            state = w.series.remove(&rule.text).or_else(|| SeriesState::new(&rule.rule));
                        }
                    }
                }
                if state.is_some() {
                    gate.stateful.push(r);
                } else if rule.rule.fires_on(0.0).is_some() {
                    gate.simple.push(r);
                }
            }
            states.push(state);
        }
        let mut first: Vec<Option<SeriesFiring>> = vec![None; rules.metric.len()];
        for point in &batch.points {
            let Some(gate) = gates.get(point.key as usize) else { continue };
            let v = point.value;
            if v > gate.above || v < gate.below || (gate.not_finite && !v.is_finite()) {
                for &r in &gate.simple {
                    if first[r].is_none() && rules.metric[r].rule.fires_on(v) == Some(true) {
                        first[r] = Some(SeriesFiring { step: point.step, value: v, z: 0.0, best: None });
                    }
                }
            }
            for &r in &gate.stateful {
                if let Some(state) = &mut states[r] {
                    let hit = state.push(&rules.metric[r].rule, point);
                    if first[r].is_none() {
                        first[r] = hit;
                    }
                }
            }
        }
        if let Some(w) = watch {
            for (rule, state) in rules.metric.iter().zip(states) {
                if let Some(state) = state {
                    w.series.insert(rule.text.clone(), state);
                }
            }
        }
        drop(guard);
        let mut fired = Vec::new();
        for (rule, hit) in rules.metric.iter().zip(first) {
            let (Some(hit), Some(key)) = (hit, rule.rule.key()) else { continue };
            let text = match (hit.best, rule.rule.fires_on(0.0).is_some()) {
                (_, true) => format!("{key} was {} at step {} (rule `{}`)", hit.value, hit.step, rule.text),
                (Some((best, at)), _) => format!(
                    "{key} was {} at step {}: no better than {best} (step {at}) for {} steps (rule `{}`)",
                    hit.value,
                    hit.step,
                    hit.step - at,
                    rule.text
                ),
                (None, _) => format!(
                    "{key} was {} at step {}, {:.1} standard deviations from its recent mean (rule `{}`)",
                    hit.value, hit.step, hit.z, rule.text
                ),
            };
            fired.push(fire(rule, rule.rule.title(hit.value), text, Some(hit.step)));
        }
        fired
    }

    /// The run's watch, made on its first batch (None past the runs the server keeps).
    fn watch(&self, project_id: i64, run: &RunId, now: i64) -> Option<Arc<Mutex<RunWatch>>> {
        let mut runs = self.runs();
        if let Some(w) = runs.get(run.as_str()) {
            return Some(w.clone());
        }
        if runs.len() >= MAX_WATCHED_RUNS {
            self.unwatched.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let w = Arc::new(Mutex::new(RunWatch::new(project_id, now)));
        runs.insert(run.as_str().to_owned(), w.clone());
        Some(w)
    }

    /// The activity rules due at `now` on the runs watched, each once an episode (a stall ends
    /// with a new step, idleness with a busy sample); runs silent for a day are forgotten.
    pub fn due(&self, now: i64) -> Vec<Due> {
        let projects = self.projects.read().unwrap_or_else(PoisonError::into_inner).clone();
        let mut runs = self.runs();
        runs.retain(|_, w| now - lock(w).seen_ms < FORGET_AFTER_MS);
        let mut due = Vec::new();
        for (run, w) in runs.iter() {
            let w = lock(w);
            let Some(rules) = of_project(&projects, w.project_id) else { continue };
            for rule in &rules.activity {
                let mut push = |episode: Episode, for_ms: i64| {
                    if !w.fired.contains(&episode) {
                        due.push(Due { run: run.clone(), rule: rule.clone(), episode, for_ms, step: w.step });
                    }
                };
                match rule.rule {
                    AlertRule::Stalled { after_ms, .. } if now - w.step_ms >= after_ms => {
                        push(Episode::Stalled { rule: rule.text.clone() }, now - w.step_ms);
                    }
                    AlertRule::Idle { below_pct, for_ms, stop } => {
                        let since = w.idle_since(below_pct);
                        if since == i64::MAX || w.gpu_last_ms.is_none_or(|t| now - t > GPU_FRESH_MS) {
                            continue;
                        }
                        let idle = now - since;
                        let episode = |warning| Episode::Idle { rule: rule.text.clone(), pct: below_pct, warning };
                        // A stop comes only after its warning, however long the idleness was.
                        let warned = !stop || w.fired.contains(&episode(true));
                        if !warned && idle >= for_ms - STOP_WARNING_MS.min(for_ms / 2) {
                            push(episode(true), idle);
                        } else if warned && idle >= for_ms {
                            push(episode(false), idle);
                        }
                    }
                    _ => {}
                }
            }
        }
        due
    }

    /// Notes that an activity rule fired on a run, so it fires once this episode.
    pub fn mark(&self, run: &str, episode: Episode) {
        if let Some(w) = self.runs().get(run) {
            lock(w).fired.push(episode);
        }
    }

    /// Forgets a run (it ended).
    pub fn forget(&self, run: &str) {
        self.runs().remove(run);
    }
}

fn lock(w: &Mutex<RunWatch>) -> std::sync::MutexGuard<'_, RunWatch> {
    w.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The alert a rule fires, folded with its repeats within the hour, and its stop.
fn fire(rule: &LoadedRule, title: String, text: String, step: Option<i64>) -> Fired {
    let stop = rule.rule.stops().then(|| format!("`{}`: {title}", rule.text));
    Fired {
        alert: NewAlert {
            run: None,
            rule: rule.text.clone(),
            level: rule.rule.level().into(),
            title,
            text,
            step,
            wait_ms: METRIC_FOLD_MS,
        },
        stop,
    }
}

/// The alert of an activity rule that is due, and its stop.
pub fn due_alert(due: &Due, usd_per_hour: Option<(f64, i64)>) -> Fired {
    let rule = &due.rule;
    let spent = |ms: i64| duration_words(ms);
    let dollars = match usd_per_hour {
        Some((usd, gpus)) if usd > 0.0 => format!("${usd:.2}/h of {gpus} GPU(s)"),
        Some((_, gpus)) => format!("{gpus} GPU(s), no price"),
        None => "its GPUs".to_owned(),
    };
    match (&rule.rule, &due.episode) {
        (AlertRule::Idle { below_pct, for_ms, .. }, Episode::Idle { warning: true, .. }) => {
            let title = format!("GPUs idle for {}: stopping at {}", spent(due.for_ms), spent(*for_ms));
            let text = format!(
                "{dollars} below {below_pct}% for {}; the run will be stopped when they have been idle for {} (rule `{}`)",
                spent(due.for_ms),
                spent(*for_ms),
                rule.text
            );
            let mut warning = fire(rule, title, text, due.step);
            warning.alert.level = "warn".into();
            warning.stop = None;
            warning
        }
        (AlertRule::Idle { below_pct, .. }, _) => {
            let text = format!("{dollars} below {below_pct}% for {} (rule `{}`)", spent(due.for_ms), rule.text);
            fire(rule, format!("{dollars} idle for {}", spent(due.for_ms)), text, due.step)
        }
        _ => {
            let last = due.step.map_or("no step yet".to_owned(), |s| format!("last step {s}"));
            let text = format!("no new step for {} ({last}) (rule `{}`)", spent(due.for_ms), rule.text);
            fire(rule, rule.rule.title(0.0), text, due.step)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::{BatchPoint, MetricKey};

    fn cache_with(project: i64, texts: &[&str]) -> RuleCache {
        let cache = RuleCache::default();
        let mut rules = ProjectRules::default();
        for text in texts {
            rules.add(RuleRow { id: 1, project_id: project, text: (*text).into(), created_by: None, created_ms: 0 });
        }
        cache.projects.write().expect("lock").insert(project, Arc::new(rules));
        cache
    }

    fn batch(keys: &[&str], points: &[(u32, i64, f64)]) -> PointBatch {
        PointBatch {
            keys: keys.iter().map(|k| MetricKey::parse("k", k).expect("key")).collect(),
            points: points
                .iter()
                .map(|(key, step, value)| BatchPoint { key: *key, step: *step, timestamp_ms: 0, value: *value })
                .collect(),
        }
    }

    #[test]
    fn a_batch_fires_each_metric_rule_on_its_first_breaking_point_and_other_projects_cost_a_lookup() {
        let cache = cache_with(7, &["loss not finite then stop", "acc < 0.5"]);
        let run = RunId::parse("id", "r1").expect("id");
        let b = batch(&["loss", "acc"], &[(0, 1, 0.5), (1, 1, 0.9), (0, 2, f64::NAN), (0, 3, f64::NAN)]);
        let fired = cache.check(7, &run, &b, 0);
        assert_eq!(fired.len(), 1, "{fired:?}");
        let alert = &fired[0].alert;
        assert_eq!(
            (alert.rule.as_str(), alert.step, alert.level.as_str()),
            ("loss not finite then stop", Some(2), "error")
        );
        assert_eq!(alert.title, "loss is NaN");
        assert_eq!(fired[0].stop.as_deref(), Some("`loss not finite then stop`: loss is NaN"));
        assert!(cache.check(8, &run, &b, 0).is_empty(), "a project without rules");
        assert_eq!(cache.watched_runs(), 0, "stateless rules remember no run");
    }

    #[test]
    fn a_stall_and_idle_gpus_are_due_once_an_episode_with_a_warning_before_a_stop() {
        let cache = cache_with(3, &["stalled 10s", "idle < 10% for 20s then stop"]);
        let run = RunId::parse("id", "r2").expect("id");
        let keys = ["loss", "sys/gpu.0.util"];
        cache.check(3, &run, &batch(&keys, &[(0, 1, 1.0), (1, 1, 90.0)]), 0);
        for t in (1..=25).map(|s| s * 1_000) {
            cache.check(3, &run, &batch(&keys[1..], &[(0, 1, 2.0)]), t);
        }
        let mut due = cache.due(25_000);
        due.sort_by_key(|d| matches!(d.episode, Episode::Idle { .. }));
        let names: Vec<(String, i64)> = due.iter().map(|d| (format!("{:?}", d.episode), d.for_ms)).collect();
        assert_eq!(due.len(), 2, "{names:?}");
        assert!(matches!(due[0].episode, Episode::Stalled { .. }) && due[0].for_ms == 25_000, "{names:?}");
        assert!(matches!(due[1].episode, Episode::Idle { warning: true, .. }), "the warning first: {names:?}");
        cache.mark("r2", due[1].episode.clone());
        let due = vec![due[0].clone(), cache.due(25_000).pop().expect("the stop, after its warning")];
        assert!(matches!(due[1].episode, Episode::Idle { warning: false, .. }) && due[1].for_ms == 25_000);
        let stop = due_alert(&due[1], Some((6.88, 2)));
        assert_eq!(stop.alert.title, "$6.88/h of 2 GPU(s) idle for 25 s");
        assert!(stop.stop.is_some());
        for d in due {
            cache.mark(&d.run, d.episode);
        }
        assert!(cache.due(26_000).is_empty(), "once an episode");
        // Between the warning (at 10 s: half of a span shorter than 20 min) and the stop.
        cache.forget("r2");
        cache.check(3, &run, &batch(&keys, &[(0, 5, 1.0), (1, 5, 2.0)]), 100_000);
        cache.check(3, &run, &batch(&keys, &[(0, 6, 1.0), (1, 6, 2.0)]), 112_000);
        let due = cache.due(112_000);
        assert_eq!(due.len(), 1);
        assert!(matches!(due[0].episode, Episode::Idle { warning: true, .. }));
        assert_eq!(due_alert(&due[0], None).alert.title, "GPUs idle for 12 s: stopping at 20 s");
        assert!(due_alert(&due[0], None).stop.is_none());
        // A busy sample ends the episode.
        cache.mark("r2", due[0].episode.clone());
        cache.check(3, &run, &batch(&keys[1..], &[(0, 7, 50.0)]), 113_000);
        assert!(cache.due(114_000).is_empty());
    }
}
