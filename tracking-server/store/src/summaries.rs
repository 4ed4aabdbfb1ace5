//! Per-series summaries (last, min, max, count) kept current on ingest. A point above the
//! series' last step folds in exactly; any other point may replace an earlier one, so it
//! marks the summary stale and the summary is recomputed from the series when next read.

use std::collections::{BTreeMap, HashMap};
use trainlog_schema::{MetricKey, MetricSummary, PointBatch, RunId};

#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub summary: MetricSummary,
    pub stale: bool,
    pub dirty: bool,
    /// Bumped on every change, so a recomputation started earlier does not overwrite a newer state.
    pub generation: u64,
}

#[derive(Debug, Default)]
pub struct RunSummaries {
    pub project_id: i64,
    pub keys: HashMap<MetricKey, Entry>,
}

#[derive(Debug, Default)]
pub struct Summaries {
    pub runs: HashMap<RunId, RunSummaries>,
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
                    (MetricKey::from_trusted(k), Entry { summary, stale, dirty: false, generation: 0 })
                })
                .collect(),
        });
    }

    pub fn apply(&mut self, run: &RunId, project_id: i64, batch: &PointBatch) {
        let run_sums =
            self.runs.entry(run.clone()).or_insert_with(|| RunSummaries { project_id, keys: HashMap::new() });
        for key in &batch.keys {
            if !run_sums.keys.contains_key(key) {
                run_sums.keys.insert(
                    key.clone(),
                    Entry {
                        summary: MetricSummary {
                            last: f64::NAN,
                            last_step: i64::MIN,
                            last_ms: 0,
                            min: f64::NAN,
                            max: f64::NAN,
                            count: 0,
                            sum: 0.0,
                            sum_count: 0,
                        },
                        stale: false,
                        dirty: true,
                        generation: 0,
                    },
                );
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
            } else {
                e.stale = true;
            }
            e.dirty = true;
            e.generation += 1;
        }
    }

    /// Takes the entries changed since the last call, clearing their dirty flags.
    pub fn take_dirty(&mut self) -> Vec<(RunId, i64, MetricKey, MetricSummary)> {
        let mut out = Vec::new();
        for (run, sums) in &mut self.runs {
            for (key, e) in &mut sums.keys {
                if e.dirty && !e.stale && e.summary.count > 0 {
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
            }
        }
    }

    /// Stale keys of a run with their generation, to recompute.
    pub fn stale_keys(&self, run: &RunId) -> Vec<(MetricKey, u64)> {
        self.runs
            .get(run)
            .map(|r| r.keys.iter().filter(|(_, e)| e.stale).map(|(k, e)| (k.clone(), e.generation)).collect())
            .unwrap_or_default()
    }

    /// Runs with a stale key.
    pub fn runs_with_stale(&self) -> Vec<RunId> {
        self.runs.iter().filter(|(_, r)| r.keys.values().any(|e| e.stale)).map(|(id, _)| id.clone()).collect()
    }

    /// Installs a recomputed summary if nothing changed the series since `generation`.
    pub fn settle(&mut self, run: &RunId, key: &MetricKey, generation: u64, summary: Option<MetricSummary>) {
        let Some(r) = self.runs.get_mut(run) else {
            return;
        };
        let Some(e) = r.keys.get_mut(key) else { return };
        if e.generation != generation {
            return;
        }
        match summary {
            Some(s) => {
                e.summary = s;
                e.stale = false;
                e.dirty = true;
            }
            None => {
                r.keys.remove(key);
            }
        }
    }

    /// Forgets a run's summaries if they are all written and exact (they load again on use).
    pub fn evict_clean(&mut self, run: &RunId) {
        if self.runs.get(run).is_some_and(|r| r.keys.values().all(|e| !e.dirty && !e.stale)) {
            self.runs.remove(run);
        }
    }

    pub fn current(&self, run: &RunId) -> Option<BTreeMap<String, MetricSummary>> {
        let r = self.runs.get(run)?;
        Some(r.keys.iter().filter(|(_, e)| e.summary.count > 0).map(|(k, e)| (k.to_string(), e.summary)).collect())
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
        s.apply(&run, 1, &batch(&[(2, 9.0)]));
        assert_eq!(s.stale_keys(&run).len(), 1);
        assert!(s.take_dirty().is_empty(), "stale summaries are not written");
    }
}
