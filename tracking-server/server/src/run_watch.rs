//! What the server remembers of a watched run between its batches: when it last made a step,
//! when its GPUs were last busy, and each stateful metric rule's window. Kept in memory only
//! for runs of projects whose rules need it; a server that restarts starts the clocks again
//! from the first batch it sees. Pure: no store, no clock but the one it is given.

use std::collections::{HashMap, VecDeque};
use trainlog_meta::report::{gpu_series, GpuSeries};
use trainlog_schema::alert_rule::{AlertRule, MIN_SPIKE_POINTS};
use trainlog_schema::{BatchPoint, PointBatch, COST_PREFIX, SYSTEM_PREFIX};

/// The state of one rule that needs a series' history.
#[derive(Debug, Clone)]
pub enum SeriesState {
    /// The last points (at most the rule's window) with their running mean and squared
    /// deviations.
    Spike { values: VecDeque<f64>, mean: f64, m2: f64 },
    /// The best value so far, its step, and whether the rule fired since.
    Best { value: f64, step: i64, fired: bool },
}

/// A stateful metric rule fired on a point of a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeriesFiring {
    pub step: i64,
    pub value: f64,
    /// A spike's z-score, or the best value and its step for a plateau.
    pub z: f64,
    pub best: Option<(f64, i64)>,
}

impl SeriesState {
    pub fn new(rule: &AlertRule) -> Option<Self> {
        match rule {
            AlertRule::Spike { window, .. } => {
                Some(SeriesState::Spike { values: VecDeque::with_capacity(*window), mean: 0.0, m2: 0.0 })
            }
            AlertRule::NoImprovement { .. } => Some(SeriesState::Best { value: f64::NAN, step: 0, fired: false }),
            _ => None,
        }
    }

    /// Takes in one point; answers whether it fires the rule.
    pub fn push(&mut self, rule: &AlertRule, point: &BatchPoint) -> Option<SeriesFiring> {
        let v = point.value;
        if !v.is_finite() {
            return None;
        }
        match (self, rule) {
            (SeriesState::Spike { values, mean, m2 }, AlertRule::Spike { z, window, .. }) => {
                let n = values.len();
                let mut fired = None;
                if n >= MIN_SPIKE_POINTS.min(*window) {
                    // Squared, so the common case takes no square root.
                    let variance = *m2 / (n as f64 - 1.0);
                    let delta = v - *mean;
                    if variance > 0.0 && delta * delta > *z * *z * variance {
                        fired =
                            Some(SeriesFiring { step: point.step, value: v, z: delta / variance.sqrt(), best: None });
                    }
                }
                // A sliding Welford update: in with v, out with the oldest once the window is full.
                if n == *window {
                    let old = values.pop_front().unwrap_or(v);
                    let new_mean = *mean + (v - old) / n as f64;
                    *m2 += (v - old) * (v - new_mean + old - *mean);
                    *mean = new_mean;
                } else {
                    let delta = v - *mean;
                    *mean += delta / (n + 1) as f64;
                    *m2 += delta * (v - *mean);
                }
                values.push_back(v);
                fired
            }
            (SeriesState::Best { value, step, fired }, AlertRule::NoImprovement { steps, higher_is_better, .. }) => {
                let better = value.is_nan() || if *higher_is_better { v > *value } else { v < *value };
                if better {
                    (*value, *step, *fired) = (v, point.step, false);
                    None
                } else if !*fired && point.step - *step >= *steps {
                    *fired = true;
                    Some(SeriesFiring { step: point.step, value: v, z: 0.0, best: Some((*value, *step)) })
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

/// One GPU threshold of the project's idle rules and when the run's GPUs were last above it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    pub pct: f64,
    /// By NVML's utilization, and by SM active where the GPUs measure it.
    pub util_ms: Option<i64>,
    pub sm_ms: Option<i64>,
}

/// A watched run.
#[derive(Debug, Clone)]
pub struct RunWatch {
    pub project_id: i64,
    /// When its last batch arrived.
    pub seen_ms: i64,
    /// The step of its last point of its own metrics, and when a point at another step arrived.
    pub step: Option<i64>,
    pub step_ms: i64,
    /// When its first and last GPU samples arrived.
    pub gpu_first_ms: Option<i64>,
    pub gpu_last_ms: Option<i64>,
    /// Whether its GPUs report SM active (then idleness is read from it, not utilization).
    pub sm_seen: bool,
    pub busy: Vec<Busy>,
    /// Each stateful metric rule's state, by the rule's text.
    pub series: HashMap<String, SeriesState>,
    /// The activity rules that fired since the run last made a step or had busy GPUs: each
    /// fires once an episode.
    pub fired: Vec<Episode>,
}

/// An activity rule that fired for a run, until what it watches moves again.
#[derive(Debug, Clone, PartialEq)]
pub enum Episode {
    Stalled {
        rule: String,
    },
    /// `warning`: the warning before a stop, not the stop.
    Idle {
        rule: String,
        pct: f64,
        warning: bool,
    },
}

impl RunWatch {
    pub fn new(project_id: i64, now: i64) -> Self {
        RunWatch {
            project_id,
            seen_ms: now,
            step: None,
            step_ms: now,
            gpu_first_ms: None,
            gpu_last_ms: None,
            sm_seen: false,
            busy: Vec::new(),
            series: HashMap::new(),
            fired: Vec::new(),
        }
    }

    /// Takes in a batch's steps and GPU samples, for the idle thresholds `thresholds`.
    pub fn note_activity(&mut self, batch: &PointBatch, thresholds: &[f64], now: i64) {
        self.seen_ms = now;
        for pct in thresholds {
            if !self.busy.iter().any(|b| b.pct == *pct) {
                self.busy.push(Busy { pct: *pct, util_ms: None, sm_ms: None });
            }
        }
        let kinds: Vec<Option<GpuSeries>> = batch
            .keys
            .iter()
            .map(|k| {
                let key = k.as_str();
                if key.starts_with(SYSTEM_PREFIX) {
                    gpu_series(key).map(|(_, kind)| kind).or(Some(GpuSeries::EnergyJ))
                } else if key.starts_with(COST_PREFIX) {
                    Some(GpuSeries::EnergyJ)
                } else {
                    None
                }
            })
            .collect();
        let mut stepped = false;
        let mut busy = false;
        for point in &batch.points {
            match kinds.get(point.key as usize).copied().flatten() {
                None => {
                    if self.step != Some(point.step) {
                        self.step = Some(point.step);
                        stepped = true;
                    }
                }
                Some(kind @ (GpuSeries::Util | GpuSeries::SmActive)) => {
                    self.gpu_first_ms.get_or_insert(now);
                    self.gpu_last_ms = Some(now);
                    let sm = kind == GpuSeries::SmActive;
                    self.sm_seen |= sm;
                    for b in &mut self.busy {
                        if point.value >= b.pct {
                            if sm {
                                b.sm_ms = Some(now);
                            } else {
                                b.util_ms = Some(now);
                            }
                            busy = true;
                        }
                    }
                }
                Some(GpuSeries::EnergyJ) => {}
            }
        }
        if stepped {
            self.step_ms = now;
            self.fired.retain(|f| !matches!(f, Episode::Stalled { .. }));
        }
        if busy {
            let busy_now: Vec<f64> = thresholds.iter().copied().filter(|p| self.idle_since(*p) == now).collect();
            self.fired.retain(|f| !matches!(f, Episode::Idle { pct, .. } if busy_now.contains(pct)));
        }
    }

    /// Since when its GPUs have stayed below `pct` (SM active where measured): the last busy
    /// sample's arrival, or the first sample's.
    pub fn idle_since(&self, pct: f64) -> i64 {
        let first = self.gpu_first_ms.unwrap_or(i64::MAX);
        let Some(b) = self.busy.iter().find(|b| b.pct == pct) else { return i64::MAX };
        let last_busy = if self.sm_seen { b.sm_ms } else { b.util_ms };
        last_busy.unwrap_or(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::MetricKey;

    /// Runs a stateful metric rule over the batch's points of its metric, as the rule cache's
    /// check does: the first firing.
    fn check_series(watch: &mut RunWatch, text: &str, rule: &AlertRule, batch: &PointBatch) -> Option<SeriesFiring> {
        let index = batch.keys.iter().position(|k| Some(k) == rule.key())? as u32;
        let state = watch.series.entry(text.to_owned()).or_insert_with(|| SeriesState::new(rule).expect("stateful"));
        let mut first = None;
        for point in batch.points.iter().filter(|p| p.key == index) {
            let fired = state.push(rule, point);
            first = first.or(fired);
        }
        first
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
    fn a_spike_fires_on_the_point_far_from_its_window_and_a_plateau_once_per_best() {
        let spike = AlertRule::parse("loss spike > 4 over 50").expect("rule");
        let mut watch = RunWatch::new(1, 0);
        let calm: Vec<(u32, i64, f64)> = (0..60).map(|i| (0, i, 1.0 + 0.01 * ((i % 7) as f64))).collect();
        assert_eq!(check_series(&mut watch, "s", &spike, &batch(&["loss"], &calm)), None);
        let fired =
            check_series(&mut watch, "s", &spike, &batch(&["loss"], &[(0, 60, 1.02), (0, 61, 9.0), (0, 62, 9.0)]));
        let fired = fired.expect("the jump to 9 is a spike");
        assert_eq!((fired.step, fired.value), (61, 9.0));
        assert!(fired.z > 4.0, "{fired:?}");

        let plateau = AlertRule::parse("eval/loss no improvement for 100 steps").expect("rule");
        let points = [(0, 0, 2.0), (0, 50, 1.5), (0, 100, 1.6), (0, 149, 1.7)];
        assert_eq!(check_series(&mut watch, "p", &plateau, &batch(&["eval/loss"], &points)), None);
        let fired = check_series(&mut watch, "p", &plateau, &batch(&["eval/loss"], &[(0, 150, 1.5), (0, 200, 1.9)]));
        assert_eq!(fired.map(|f| (f.step, f.best)), Some((150, Some((1.5, 50)))), "a tie is no improvement");
        assert_eq!(check_series(&mut watch, "p", &plateau, &batch(&["eval/loss"], &[(0, 300, 1.9)])), None, "once");
        check_series(&mut watch, "p", &plateau, &batch(&["eval/loss"], &[(0, 310, 1.0)]));
        assert!(
            check_series(&mut watch, "p", &plateau, &batch(&["eval/loss"], &[(0, 410, 1.1)])).is_some(),
            "again after a new best"
        );
    }

    #[test]
    fn steps_and_busy_gpus_move_the_clocks_and_sm_active_decides_where_measured() {
        let mut watch = RunWatch::new(1, 0);
        watch.note_activity(&batch(&["loss", "sys/gpu.0.util"], &[(0, 1, 1.0), (1, 1, 95.0)]), &[10.0], 1_000);
        assert_eq!((watch.step, watch.step_ms, watch.idle_since(10.0)), (Some(1), 1_000, 1_000));
        // The same step again is no progress; an idle sample does not move the busy clock.
        watch.fired.push(Episode::Stalled { rule: "stalled 5s".into() });
        watch.note_activity(&batch(&["loss", "sys/gpu.0.util"], &[(0, 1, 1.0), (1, 1, 3.0)]), &[10.0], 5_000);
        assert_eq!((watch.step_ms, watch.idle_since(10.0)), (1_000, 1_000));
        assert_eq!(watch.fired, vec![Episode::Stalled { rule: "stalled 5s".into() }]);
        watch.note_activity(&batch(&["loss"], &[(0, 2, 1.0)]), &[10.0], 6_000);
        assert_eq!((watch.step_ms, watch.fired.len()), (6_000, 0), "a new step ends the stall");
        // Utilization says busy, SM active says idle: SM active decides.
        let keys = ["sys/gpu.0.util", "sys/gpu.0.sm_active"];
        watch.note_activity(&batch(&keys, &[(0, 3, 100.0), (1, 3, 2.0)]), &[10.0], 7_000);
        watch.note_activity(&batch(&keys, &[(0, 4, 100.0), (1, 4, 2.0)]), &[10.0], 9_000);
        assert!(watch.sm_seen);
        assert_eq!(watch.idle_since(10.0), 1_000, "busy by SM active only at the first sample, which had none");
        assert_eq!(watch.gpu_last_ms, Some(9_000));
    }
}
