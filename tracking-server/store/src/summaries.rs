//! Per-series summaries (last, min, max, count, sum) kept current on ingest. A point above the
//! series' last step folds in exactly. Any other point may replace an earlier one: it folds in
//! as a bound (min and max widen, the last value follows a rewritten last step) and marks the
//! summary stale, and a background task recomputes it exactly from the series. Reads never wait
//! for that: they answer the bound at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use trainlog_schema::{MetricKey, MetricSummary, PointBatch, RunId};

/// Points appended to a stale series that a recomputation may not have seen, kept until it
/// settles; past this many, the recomputation's result is dropped and it starts again.
const MAX_APPENDED_WHILE_STALE: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct Entry {
    pub summary: MetricSummary,
    pub stale: bool,
    pub dirty: bool,
    /// Points that replaced or preceded an earlier step, ever: a recomputation settles only if
    /// none arrived since it started.
    pub rewrites: u64,
    /// Points appended (step above the last) while stale, in order, to fold into a recomputation
    /// made from an older snapshot of the series.
    appended_while_stale: Vec<(i64, i64, f64)>,
    /// More points were appended while stale than are kept.
    appended_overflow: bool,
}

impl Entry {
    fn new(summary: MetricSummary, stale: bool, dirty: bool) -> Self {
        Self { summary, stale, dirty, rewrites: 0, appended_while_stale: Vec::new(), appended_overflow: false }
    }
}

#[derive(Debug, Default)]
pub struct RunSummaries {
    pub project_id: i64,
    pub keys: HashMap<MetricKey, Entry>,
}

#[derive(Debug, Default)]
pub struct Summaries {
    pub runs: HashMap<RunId, RunSummaries>,
    /// Runs with a dirty entry, so taking them costs what changed, not every run in memory.
    dirty_runs: HashSet<RunId>,
}

impl Summaries {
    pub fn is_loaded(&self, run: &RunId) -> bool {
        self.runs.contains_key(run)
    }

    /// Installs the summaries stored for a run, unless they are already in memory.
    pub fn load(&mut self, run: &RunId, project_id: i64, stored: BTreeMap<String, MetricSummary>) {
        self.runs.entry(run.clone()).or_insert_with(|| RunSummaries {
            project_id,
            keys: stored
                .into_iter()
                .map(|(k, summary)| {
                    // Rows stored before sums were kept have a NULL sum: recompute them on first read.
                    let stale = summary.sum.is_nan() && summary.sum_count == 0 && summary.count > 0;
                    (MetricKey::from_trusted(k), Entry::new(summary, stale, false))
                })
                .collect(),
        });
    }

    pub fn apply(&mut self, run: &RunId, project_id: i64, batch: &PointBatch) {
        let run_sums =
            self.runs.entry(run.clone()).or_insert_with(|| RunSummaries { project_id, keys: HashMap::new() });
        for key in &batch.keys {
            if !run_sums.keys.contains_key(key) {
                let empty = MetricSummary {
                    last: f64::NAN,
                    last_step: i64::MIN,
                    last_ms: 0,
                    min: f64::NAN,
                    max: f64::NAN,
                    count: 0,
                    sum: 0.0,
                    sum_count: 0,
                };
                run_sums.keys.insert(key.clone(), Entry::new(empty, false, true));
            }
        }
        for p in &batch.points {
            let key = &batch.keys[p.key as usize];
            let Some(e) = run_sums.keys.get_mut(key) else {
                continue;
            };
            if e.summary.count == 0 && e.summary.last_step == i64::MIN {
                e.summary = MetricSummary::first(p.step, p.timestamp_ms, p.value);
            } else if p.step > e.summary.last_step {
                e.summary.push_newer(p.step, p.timestamp_ms, p.value);
                if e.stale {
                    if e.appended_while_stale.len() < MAX_APPENDED_WHILE_STALE {
                        e.appended_while_stale.push((p.step, p.timestamp_ms, p.value));
                    } else {
                        e.appended_overflow = true;
                    }
                }
            } else {
                let s = &mut e.summary;
                if p.step == s.last_step {
                    s.last = p.value;
                    s.last_ms = p.timestamp_ms;
                }
                if !p.value.is_nan() {
                    s.min = if s.min.is_nan() { p.value } else { s.min.min(p.value) };
                    s.max = if s.max.is_nan() { p.value } else { s.max.max(p.value) };
                }
                e.stale = true;
                e.rewrites += 1;
            }
            e.dirty = true;
        }
        if !batch.points.is_empty() || !batch.keys.is_empty() {
            self.dirty_runs.insert(run.clone());
        }
    }

    /// Takes the entries changed since the last call, clearing their dirty flags.
    pub fn take_dirty(&mut self) -> Vec<(RunId, i64, MetricKey, MetricSummary)> {
        let mut out = Vec::new();
        for run in self.dirty_runs.drain() {
            let Some(sums) = self.runs.get_mut(&run) else { continue };
            for (key, e) in &mut sums.keys {
                if e.dirty && e.summary.count > 0 {
                    e.dirty = false;
                    out.push((run.clone(), sums.project_id, key.clone(), e.summary));
                }
            }
        }
        out
    }

    pub fn mark_dirty(&mut self, rows: &[(RunId, i64, MetricKey, MetricSummary)]) {
        for (run, _, key, _) in rows {
            if let Some(e) = self.runs.get_mut(run).and_then(|r| r.keys.get_mut(key)) {
                e.dirty = true;
                self.dirty_runs.insert(run.clone());
            }
        }
    }

    /// Stale keys of a run with their count of rewrites, to recompute.
    pub fn stale_keys(&self, run: &RunId) -> Vec<(MetricKey, u64)> {
        self.runs
            .get(run)
            .map(|r| r.keys.iter().filter(|(_, e)| e.stale).map(|(k, e)| (k.clone(), e.rewrites)).collect())
            .unwrap_or_default()
    }

    /// Runs with a stale key.
    pub fn runs_with_stale(&self) -> Vec<RunId> {
        self.runs.iter().filter(|(_, r)| r.keys.values().any(|e| e.stale)).map(|(id, _)| id.clone()).collect()
    }

    /// Installs a summary recomputed from a snapshot of the series taken after `rewrites` was
    /// read, unless a rewrite came since. Points appended after the snapshot have steps above
    /// its last one: they fold in from the points kept while stale.
    pub fn settle(&mut self, run: &RunId, key: &MetricKey, rewrites: u64, summary: Option<MetricSummary>) {
        let Some(r) = self.runs.get_mut(run) else {
            return;
        };
        let Some(e) = r.keys.get_mut(key) else { return };
        if e.rewrites != rewrites {
            return;
        }
        if e.appended_overflow {
            e.appended_overflow = false;
            e.appended_while_stale = Vec::new();
            return;
        }
        let appended = std::mem::take(&mut e.appended_while_stale);
        let Some(mut s) = summary else {
            if appended.is_empty() {
                r.keys.remove(key);
            }
            return;
        };
        let snapshot_last_step = s.last_step;
        for (step, timestamp_ms, value) in appended.into_iter().filter(|p| p.0 > snapshot_last_step) {
            s.push_newer(step, timestamp_ms, value);
        }
        e.summary = s;
        e.stale = false;
        e.dirty = true;
        self.dirty_runs.insert(run.clone());
    }

    /// Forgets a run's summaries, written or not: the run is gone.
    pub fn forget(&mut self, run: &RunId) {
        self.runs.remove(run);
        self.dirty_runs.remove(run);
    }

    /// Forgets a run's summaries if they are all written and exact (they load again on use).
    pub fn evict_clean(&mut self, run: &RunId) {
        if self.runs.get(run).is_some_and(|r| r.keys.values().all(|e| !e.dirty && !e.stale)) {
            self.runs.remove(run);
        }
    }

    pub fn current(&self, run: &RunId) -> Option<BTreeMap<String, MetricSummary>> {
        self.runs.get(run).map(|_| self.current_of(run, |_| true))
    }

    /// `current` with only the keys `keep` accepts; empty for a run not in memory.
    pub fn current_of(&self, run: &RunId, keep: impl Fn(&str) -> bool) -> BTreeMap<String, MetricSummary> {
        let Some(r) = self.runs.get(run) else { return BTreeMap::new() };
        r.keys
            .iter()
            .filter(|(k, e)| e.summary.count > 0 && keep(k.as_str()))
            .map(|(k, e)| (k.to_string(), e.summary))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::BatchPoint;

    fn batch(points: &[(i64, f64)]) -> PointBatch {
        PointBatch {
            keys: vec![MetricKey::from_trusted("loss".into())],
            points: points
                .iter()
                .map(|&(step, value)| BatchPoint { key: 0, step, timestamp_ms: step * 10, value })
                .collect(),
        }
    }

    #[test]
    fn in_order_points_fold_in_exactly_and_rewrites_mark_stale() {
        let run = RunId::from_trusted("r".into());
        let mut s = Summaries::default();
        s.apply(&run, 1, &batch(&[(0, 3.0), (1, f64::NAN), (2, 1.0), (3, 2.0)]));
        let cur = s.current(&run).unwrap()["loss"];
        assert_eq!((cur.last, cur.min, cur.max, cur.count, cur.last_step), (2.0, 1.0, 3.0, 4, 3));
        assert!(s.stale_keys(&run).is_empty());
        s.take_dirty();
        s.apply(&run, 1, &batch(&[(2, 9.0)]));
        assert_eq!(s.stale_keys(&run).len(), 1);
        // Answered at once as a bound: the max widens, count and last stay.
        let bound = s.current(&run).unwrap()["loss"];
        assert_eq!((bound.last, bound.min, bound.max, bound.count), (2.0, 1.0, 9.0, 4));
        assert_eq!(s.take_dirty().len(), 1, "the bound is written so search sees the new value");
    }

    #[test]
    fn a_recomputation_folds_in_points_appended_after_its_snapshot_and_yields_to_later_rewrites() {
        let run = RunId::from_trusted("r".into());
        let key = MetricKey::from_trusted("loss".into());
        let mut s = Summaries::default();
        s.apply(&run, 1, &batch(&[(0, 5.0), (1, 4.0), (2, 3.0)]));
        s.apply(&run, 1, &batch(&[(0, 1.0)]));
        let (_, rewrites) = s.stale_keys(&run)[0].clone();
        // The recomputation's snapshot holds steps 0..=2 with step 0 rewritten to 1.0; steps 3
        // and 4 arrive while it runs.
        s.apply(&run, 1, &batch(&[(3, 2.0), (4, 6.0)]));
        let snapshot = MetricSummary::of_sorted(&[0, 1, 2], &[0, 10, 20], &[1.0, 4.0, 3.0]);
        s.settle(&run, &key, rewrites, snapshot);
        assert!(s.stale_keys(&run).is_empty());
        let exact = s.current(&run).unwrap()["loss"];
        assert_eq!((exact.last, exact.min, exact.max, exact.count, exact.last_step), (6.0, 1.0, 6.0, 5, 4));
        assert_eq!(exact.sum, 16.0);

        // A rewrite that comes while a recomputation runs makes its result stale on arrival.
        s.apply(&run, 1, &batch(&[(1, 0.5)]));
        let (_, rewrites) = s.stale_keys(&run)[0].clone();
        s.apply(&run, 1, &batch(&[(2, 0.25)]));
        s.settle(&run, &key, rewrites, MetricSummary::of_sorted(&[0], &[0], &[1.0]));
        assert_eq!(s.stale_keys(&run).len(), 1);
    }
}
